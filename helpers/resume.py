"""Crash-safe training: whole checkpoints, resuming from the newest, and the run's saved outputs.

A kill can stop the trainer in the middle of a checkpoint, so a resume passes over (and deletes)
an incomplete one; the adapter and the log that notebooks 06-07 read are swapped in whole.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from helpers.loading import abort_unfinished
from helpers.paths import shown
from helpers.profiles import TrainingConfigError
from helpers.run_folder import ADAPTER_STEP_FILE, FINGERPRINT_FILE, RunFolder, as_run
from helpers.storage import (
    RunFolderError,
    adapter_problem,
    check_writable,
    file_problem,
    first_problem,
    storage_failure,
    swap_in,
    whole_folder,
    write_json_atomic,
)

# What transformers 4.56.2's Trainer._save_checkpoint writes into checkpoint-N, in this order,
# none of it atomically: the model (adapter_model.safetensors, adapter_config.json, the tokenizer,
# training_args.bin), optimizer.pt, scheduler.pt, rng_state.pth (rng_state_<rank>.pth with
# several processes), then trainer_state.json; only then does it delete checkpoints beyond
# save_total_limit. A kill, or a full disk, can stop it anywhere in between.
CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")  # transformers' PREFIX_CHECKPOINT_DIR
CHECKPOINT_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt")
WEIGHT_FILES = ("adapter_model.safetensors", "model.safetensors", "model.safetensors.index.json")
CHECKED_SUFFIXES = (".json", ".safetensors", ".pt", ".pth", ".bin")


def checkpoint_problem(checkpoint: Path, expected: tuple[str, ...] = ()) -> str | None:
    """Why `checkpoint` is not a whole checkpoint (what a resume would trip over), or None.

    Every file the trainer writes must be there and whole (see CHECKPOINT_FILES, and `expected`:
    the files only some runs write, `scaler_files`), and trainer_state.json, written last, must
    name the folder's own step. A DeepSpeed checkpoint keeps its weights and optimizer in the
    global_step folder that its `latest` file names.
    """
    state_problem = file_problem(checkpoint / "trainer_state.json")
    if state_problem:
        return f"its trainer_state.json {state_problem}"
    step = json.loads((checkpoint / "trainer_state.json").read_text()).get("global_step")
    number = CHECKPOINT_NAME.match(checkpoint.name)
    if number and step != int(number[1]):
        return f"its trainer_state.json is for step {step}, not {number[1]}"
    names = set(CHECKPOINT_FILES) | set(expected) | {p.name for p in checkpoint.iterdir()
                                                     if p.suffix in CHECKED_SUFFIXES}
    if (checkpoint / "latest").is_file():  # DeepSpeed
        engine = checkpoint / (checkpoint / "latest").read_text().strip()
        if not engine.is_dir() or not any(engine.iterdir()):
            return f"its DeepSpeed folder {engine.name}/ is missing or empty"
        names -= {"optimizer.pt", "scheduler.pt"}
    elif not any((checkpoint / name).is_file() for name in WEIGHT_FILES):
        return "it has no model weights (adapter_model.safetensors)"
    rng = sorted(p.name for p in checkpoint.glob("rng_state*.pth"))
    if not rng:
        return "its rng_state.pth is missing"
    ranks = sorted(int(n[10:-4]) for n in rng if n != "rng_state.pth")
    if ranks and ranks != list(range(len(ranks))):
        return f"its per-process RNG files are incomplete ({', '.join(rng)})"
    if (checkpoint / "adapter_model.safetensors").is_file():
        names.add("adapter_config.json")
    return first_problem(checkpoint, sorted(names))


def checkpoint_folders(folder: Path) -> list[Path]:
    """The checkpoint-N folders in `folder`, oldest step first."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and CHECKPOINT_NAME.match(p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def incomplete_checkpoints(folder: Path, expected: tuple[str, ...] = ()) -> list[tuple[Path, str]]:
    """Each checkpoint in `folder` that is not whole, with the reason."""
    found = [(p, checkpoint_problem(p, expected)) for p in checkpoint_folders(folder)]
    return [(p, problem) for p, problem in found if problem]


def latest_checkpoint(folder: Path, expected: tuple[str, ...] = ()) -> Path | None:
    """The newest complete `checkpoint-N` folder, or None (incomplete ones are passed over)."""
    complete = [p for p in checkpoint_folders(folder) if checkpoint_problem(p, expected) is None]
    return complete[-1] if complete else None


def checkpoint_step(checkpoint: Path) -> int:
    """The global step a checkpoint was saved at (from its trainer_state.json)."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    return int(state["global_step"])


def describe_skipped(checkpoint: Path, problem: str, fallback: Path | None) -> str:
    """The line a resume prints for an incomplete checkpoint it passes over and deletes."""
    then = (f"resuming from {fallback.name} instead" if fallback is not None
            else "no complete checkpoint is left, so training starts again at step 1")
    return (
        f"Skipping {checkpoint.name} in {shown(checkpoint.parent)}: {problem}, a save that did not "
        f"finish; {then}, and {checkpoint.name} is deleted and saved again when training reaches "
        "it."
    )


def describe_resume(checkpoint: Path | None, max_steps: int, every: int,
                    folder: Path | None = None) -> str:
    """What the training cell is about to do, in one sentence."""
    if checkpoint is None:
        if folder is None or not folder.is_dir():
            return f"Starting a new run of {max_steps} steps; a checkpoint is saved every {every}."
        run = RunFolder.of_checkpoints(folder)
        earlier = [f"{path.name}/" if path.is_dir() else path.name
                   for path in ((run.adapter, run.log) if run else ()) if path.exists()]
        replaced = (f"; the {' and '.join(earlier)} beside it, from an earlier run, are replaced "
                    "at its first save (set RUN_FOLDER to a new folder to keep them)")
        return (f"{shown(folder)} holds no checkpoint, so this is a new run of {max_steps} steps "
                f"with a checkpoint every {every}{replaced if earlier else ''}.")
    step = checkpoint_step(checkpoint)
    if step >= max_steps:
        return (
            f"RESUMING: {checkpoint.name} already holds all {max_steps} steps, so training ends "
            "at once; delete the checkpoints folder to train again from scratch."
        )
    return (
        f"RESUMING from {checkpoint.name}: steps 1-{step} are done and kept (weights, optimizer, "
        f"log); training continues at step {step + 1} of {max_steps}."
    )


# Settings a checkpoint must share with the run that resumes it (max_steps may grow).
RESUME_KEYS = (
    "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
    "max_prompt_length", "max_completion_length", "learning_rate", "optim", "beta", "seed",
)


def run_precision(args: Any) -> str:
    """The precision a run's GRPOConfig trains in, from its own fp16/bf16 fields: "fp16" (a T4:
    accelerate's loss scaler, saved as scaler.pt in every checkpoint), "bf16" or "fp32"."""
    return "fp16" if args.fp16 else "bf16" if args.bf16 else "fp32"


# Where each precision trains, for the sentence that refuses a resume across precisions.
PRECISION_GPUS = {"fp16": "a T4", "bf16": "an Ampere or newer GPU (an L4 or A100 runtime)",
                  "fp32": "a CPU", "bf16 or fp32": "an Ampere or newer GPU, or a CPU"}


def run_fingerprint(trainer: Any) -> dict[str, Any]:
    """What a resumed run must match: the base model, the precision and the RESUME_KEYS."""
    args = trainer.args
    values = {key: getattr(args, key) for key in RESUME_KEYS}
    settings = {key: getattr(value, "value", value) for key, value in values.items()}  # enums
    return {"model": str(getattr(trainer.model.config, "_name_or_path", "")),
            "precision": run_precision(args), **settings}


NOT_FP16 = "bf16 or fp32"  # a fingerprint older than its precision, with no scaler.pt saved


def legacy_precision(folder: Path) -> str:
    """The precision of checkpoints whose fingerprint predates `precision`: "fp16" where any holds
    scaler.pt (only fp16 saves it), else NOT_FP16 (bf16 and fp32 resume into each other)."""
    return "fp16" if any((p / "scaler.pt").is_file() for p in checkpoint_folders(folder)) \
        else NOT_FP16


def check_resumable(folder: Path, fingerprint: dict[str, Any]) -> None:
    """Refuse to resume checkpoints made by a different model, precision or settings.

    A key the saved fingerprint lacks (written before the course recorded it) is not compared,
    but precision, whose mismatch would prune the checkpoints, is read from them instead.
    """
    path = folder / FINGERPRINT_FILE
    if file_problem(path):  # none yet, or cut off mid-write: it is written again below
        return
    saved = json.loads(path.read_text())
    was, now = saved.get("precision") or legacy_precision(folder), fingerprint.get("precision")
    if was != now and not (was == NOT_FP16 and now != "fp16"):
        # transformers resumes an fp16 checkpoint by loading scaler.pt into a scaler a bf16 run
        # lacks (trainer.py:3619-3645, an AttributeError); a bf16 one has no scaler.pt for fp16.
        raise TrainingConfigError(
            f"The checkpoints in {shown(folder)} were trained in {was} and this machine trains "
            f"in {now}, so they cannot be resumed here (nothing was deleted): resume them on "
            f"{PRECISION_GPUS.get(was, was)}, or set RUN_FOLDER (--output-dir for the script) "
            "to a new folder to start again."
        )
    changed = [
        f"{key}: {saved[key]!r} -> {value!r}"
        for key, value in fingerprint.items()
        if key in saved and saved[key] != value
    ]
    if changed:
        raise TrainingConfigError(
            f"The checkpoints in {shown(folder)} come from a different run, another profile or "
            f"model ({'; '.join(changed)}): set RUN_FOLDER (--output-dir for the script) to a "
            "new folder, delete that one to start over, or set the old values back to resume."
        )


def _restore_on_indexed_cpu(storage: Any, location: str) -> Any:
    return storage if re.fullmatch(r"cpu:\d+", location) else None


def allow_indexed_cpu_locations() -> None:
    """Let torch.load restore tensors tagged 'cpu:0' (several CPU processes) onto the CPU.

    transformers 4.56.2 resumes a multi-process run's optimizer with map_location=args.device,
    which accelerate sets to torch.device('cpu', rank) on CPU; torch 2.13 knows only the plain
    'cpu' tag and fails with "don't know how to restore data location of
    torch.storage.UntypedStorage (tagged with cpu:0)".
    """
    import torch.serialization as serialization

    if all(fn is not _restore_on_indexed_cpu for _, _, fn in serialization._package_registry):
        serialization.register_package(30, lambda storage: None, _restore_on_indexed_cpu)


def scaler_files(trainer: Any) -> tuple[str, ...]:
    """The files a checkpoint of this run holds beyond CHECKPOINT_FILES: fp16 training on a GPU
    (the T4) saves its loss scaler too, and a resume without it silently starts a new scale."""
    return ("scaler.pt",) if getattr(trainer.accelerator, "scaler", None) is not None else ()


def prepare_resume(folder: Path, max_steps: int, every: int,
                   expected: tuple[str, ...] = ()) -> tuple[Path | None, list[str]]:
    """Delete incomplete checkpoints, then return the newest complete one and what to print."""
    lines = []
    for checkpoint, problem in incomplete_checkpoints(folder, expected):
        fallback = latest_checkpoint(folder, expected)
        lines.append(describe_skipped(checkpoint, problem, fallback))
        shutil.rmtree(checkpoint)
    checkpoint = latest_checkpoint(folder, expected)
    return checkpoint, [*lines, describe_resume(checkpoint, max_steps, every, folder)]


def train_or_resume(trainer: Any) -> Any:
    """Train, resuming from the newest complete checkpoint in output_dir, and say which.

    Incomplete checkpoints (a kill during a save) are named and deleted first, by the main
    process; a failed write to the run folder (a full Drive, say) ends in one sentence. On a GPU
    the requests a stopped cell left in vLLM are aborted first (helpers.loading).
    """
    args, accelerator = trainer.args, trainer.accelerator
    folder, expected = Path(args.output_dir), scaler_files(trainer)
    abort_unfinished(trainer.model)  # a rerun after the stop button: vLLM's leftovers first
    fingerprint = run_fingerprint(trainer)
    if checkpoint_folders(folder):  # before any is deleted: another run's are refused, not pruned
        check_resumable(folder, fingerprint)
    if accelerator.is_main_process:
        check_writable(folder)
        _, lines = prepare_resume(folder, args.max_steps, args.save_steps, expected)
        print("\n".join(lines))
    accelerator.wait_for_everyone()
    checkpoint = latest_checkpoint(folder, expected)
    if accelerator.is_main_process:
        write_json_atomic(folder / FINGERPRINT_FILE, fingerprint)
    if args.world_size > 1 and args.device.type == "cpu":
        allow_indexed_cpu_locations()
    if hasattr(trainer, "_buffered_inputs"):
        # trl sets these in __init__ only and regenerates when _step % generate_every == 0: a
        # rerun of the same trainer after a stop mid-step would train on the stopped step's old
        # completions and straddle two generation batches from then on (Exercise 3).
        trainer._step, trainer._buffered_inputs = 0, None
        trainer._metrics["train"].clear()  # the stopped step's partial metrics
    if checkpoint is not None and checkpoint_step(checkpoint) >= args.max_steps:
        return load_finished_run(trainer, checkpoint)
    try:
        return trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except Exception as error:
        newest = latest_checkpoint(folder, expected)
        resumes = f"from {newest.name}" if newest else "at step 1"
        run = RunFolder.of_checkpoints(folder)  # the adapter and log are written there too
        failure = storage_failure(error, run.root if run else folder, resumes)
        if failure is None:
            raise
        raise failure from None


def load_finished_run(trainer: Any, checkpoint: Path) -> Any:
    """Load a finished run's LoRA weights and log instead of training.

    transformers 4.56 resumed at global_step == max_steps still trains one extra step, so a
    finished run is loaded, not resumed.
    """
    from transformers.trainer_callback import TrainerState
    from transformers.trainer_utils import TrainOutput

    trainer._load_from_checkpoint(str(checkpoint))  # the adapter weights (LoRA) only
    trainer.state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))
    return TrainOutput(trainer.state.global_step, float("nan"), {})


def save_log_history(log_history: list[dict], run: RunFolder | Path) -> Path:
    """Write trainer.state.log_history into the run folder (atomically)."""
    step = max((int(entry.get("step", 0)) for entry in log_history), default=0)
    return write_json_atomic(as_run(run).log, log_history, point="log-history", step=step)


def load_log_history(run: RunFolder | Path) -> list[dict]:
    """The saved log history of a run; if that file is broken, the newest checkpoint's copy."""
    run = as_run(run)
    path = run.log
    problem = file_problem(path)
    if problem is None:
        return json.loads(path.read_text())
    checkpoint = latest_checkpoint(run.checkpoints)
    if problem == "is missing" and checkpoint is None:
        raise FileNotFoundError(
            f"No {path.name} in {run.name}/: run notebook 05 (training) first."
        )
    if checkpoint is None:
        raise RunFolderError(
            f"{shown(path)} {problem} and no complete checkpoint holds a copy: rerun notebook 05 "
            "with this run folder to write it again, or delete it."
        )
    print(f"{shown(path)} {problem}: using the log saved in {checkpoint.name}, which ends at "
          f"step {checkpoint_step(checkpoint)} (rerun notebook 05 to rewrite {path.name}).")
    return json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]


def save_adapter(
    model: Any, tokenizer: Any, run: RunFolder | Path, step: int | None = None,
    max_steps: int | None = None,
) -> Path:
    """The LoRA adapter and tokenizer, into the run folder's adapter/ (notebooks 06-07 load it).

    Written to adapter.partial/, checked whole, then swapped in (helpers.storage.swap_in), so a
    disconnect at any moment leaves a whole adapter: adapter/, or adapter.old/ mid-swap.
    """
    run = as_run(run)
    partial = run.adapter_staging
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(str(partial))
    tokenizer.save_pretrained(str(partial))
    if step is not None:
        (partial / ADAPTER_STEP_FILE).write_text(json.dumps({"step": step, "max_steps": max_steps}))
    problem = adapter_problem(partial)
    if problem:  # written, yet not whole when read back: the storage lost part of it
        raise RunFolderError(
            f"The adapter just written to {shown(partial)} is not whole ({problem}): check the "
            "free space and that Drive is still mounted, then run again."
        )
    return swap_in(partial, run.adapter, point="adapter-swap", step=step)


def saved_adapter_step(run: RunFolder | Path) -> int | None:
    """The training step of the whole adapter in `run` (None: none, or no step note)."""
    adapter = whole_folder(as_run(run).adapter, adapter_problem)
    note = adapter / ADAPTER_STEP_FILE if adapter else None
    if note is None or file_problem(note):
        return None
    return int(json.loads(note.read_text())["step"])


def describe_adapter(adapter_dir: Path) -> str:
    """Which training step a saved adapter holds, in one line."""
    path = adapter_dir / ADAPTER_STEP_FILE
    if not path.exists():
        return "The adapter was saved at the end of training."
    saved = json.loads(path.read_text())
    step, total = saved["step"], saved["max_steps"]
    if step >= total:
        return f"The adapter holds all {total} training steps."
    return (
        f"The adapter was saved at checkpoint step {step} of {total}: training stopped early "
        "(rerun notebook 05 to resume it)."
    )


