"""The GRPO run: its config from a profile, checks before anything loads, and crash-safe resumes.

trl is imported inside the functions: `import unsloth` must come first (the notebooks do that),
so that on a GPU `trl.GRPOConfig` is unsloth's patched one.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from helpers.hardware import Hardware, choose_precision
from helpers.memory import ARCHITECTURES, estimate
from helpers.paths import (
    RunFolderError,
    adapter_problem,
    check_writable,
    file_problem,
    shown,
    storage_failure,
    swap_in,
    whole_folder,
    write_json_atomic,
)
from helpers.profiles import SMOKE_MODEL, Profile
from helpers.session import SEED

if TYPE_CHECKING:
    from trl import GRPOConfig

KNOWN_MODELS = frozenset(ARCHITECTURES)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


# One line per knob: what it does and what it costs in memory or time.
KNOB_NOTES = {
    "num_generations": "completions per prompt (a group); memory: KV cache x G, time: x G",
    "per_device_train_batch_size": "completions per forward/backward pass; main activation cost",
    "gradient_accumulation_steps": "passes summed per optimizer step: bigger batch, no memory",
    "max_prompt_length": "prompt tokens kept (cut from the left); GSM8K fits in 256",
    "max_completion_length": "answer budget; memory and time grow with it; too short truncates",
    "learning_rate": "LoRA step size: ~5e-6 on real models; the tiny smoke model needs more",
    "lr_scheduler_type": "decay after warm-up; free",
    "warmup_ratio": "first 10% of steps ramp the learning rate up: avoids early blow-ups",
    "optim": "Adam: 8 bytes/trained param (fp32), 2 with adamw_8bit; LoRA: MBs, not GBs",
    "weight_decay": "none: set so unsloth's GPU config (default 0.001) trains the same",
    "max_grad_norm": "clip each update's size; 0.1 keeps RL steps small and stable",
    "max_steps": "optimizer steps; time grows linearly (the expected time is printed below)",
    "beta": "KL penalty weight; 0 = no reference model: one model less in memory",
    "loss_type": "dapo: average over all tokens of the step; no length bias",
    "scale_rewards": "group: advantages divided by the group's reward std",
    "epsilon": "clip the new/old probability ratio to [1-eps, 1+eps]",
    "epsilon_high": "upper clip; = epsilon, or unsloth would apply DAPO's 0.28",
    "mask_truncated_completions": "False: cut-off answers still count (unsloth's dapo: True)",
    "num_iterations": "updates per batch of completions; 1: ratio = 1, loss reads ~0",
    "temperature": "sampling randomness; 1.0 keeps a group diverse (needed for spread)",
    "bf16": "bfloat16 mixed precision: Ampere (8.0+) only",
    "fp16": "float16 mixed precision: the T4's; both False = no autocast (CPU)",
    "use_cpu": "train on the CPU (smoke profile)",
    "save_steps": "checkpoint every N steps: a disconnect costs at most N steps",
    "save_total_limit": "checkpoints kept; each holds LoRA weights + optimizer state",
    "logging_steps": "log every step, for the live plot",
    "reward_weights": "weight of each reward function in the total reward",
    "report_to": "no wandb/tensorboard account needed",
    "push_to_hub": "nothing is uploaded",
}


def explain_config(config: Any) -> str:
    """One line per course knob: `name = value  # what it costs`."""
    lines = []
    for name, note in KNOB_NOTES.items():
        value = getattr(config, name, None)
        value = getattr(value, "value", value)  # enums (optim, scheduler) print as their string
        if isinstance(value, list) and name == "report_to":
            value = value or "none"
        lines.append(f"{name:<28} = {value!s:<12} # {note}")
    return "\n".join(lines)


class TrainingConfigError(ValueError):
    """A training setting that would fail later; the message names the fix."""


def checkpoint_every(max_steps: int) -> int:
    """Save about three times a run, and at least every 25 steps (minutes apart on a T4)."""
    return max(1, min(25, max_steps // 3))


def heldout_every(max_steps: int) -> int:
    """Score held-out accuracy about four times a run (and before the first step)."""
    return max(1, max_steps // 4)


def grpo_settings(profile: Profile, hw: Hardware, output_dir: str | Path, **overrides: Any) -> dict:
    """The GRPOConfig keyword arguments for `profile` on `hw`: the same for every caller."""
    precision = choose_precision(hw)
    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        # Batch sizes count completions: 1 x 4 = one prompt's group of 4 per optimizer step.
        "num_generations": profile.num_generations,
        "per_device_train_batch_size": profile.per_device_train_batch_size,
        "gradient_accumulation_steps": profile.gradient_accumulation_steps,
        "max_prompt_length": profile.max_prompt_length,
        "max_completion_length": profile.max_completion_length,
        "learning_rate": profile.learning_rate,
        "lr_scheduler_type": "cosine",
        "warmup_ratio": 0.1,
        "optim": profile.optim,
        "max_grad_norm": profile.max_grad_norm,
        "max_steps": profile.max_steps,
        "beta": 0.0,  # no KL term and no reference model: the loss reads ~0 (see notebook 05)
        # The loss, set explicitly (all four are trl 0.22.2's defaults), so CPU and GPU agree.
        "loss_type": "dapo",  # mean over all completion tokens of the step (DAPO)
        "scale_rewards": "group",  # advantage = (reward - group mean) / group std
        "epsilon": 0.2,  # PPO clip range of the probability ratio: [0.8, 1.2]
        # unsloth's GRPOConfig turns an explicit loss_type="dapo" into the DAPO paper's recipe
        # (epsilon_high=0.28, mask_truncated_completions=True) unless these two are given.
        "epsilon_high": 0.2,
        "mask_truncated_completions": False,
        "num_iterations": 1,  # one update per batch of completions: the ratio is exactly 1
        "weight_decay": 0.0,  # trl's default; unsloth's GRPOConfig would otherwise use 0.001
        "temperature": 1.0,
        "bf16": precision == "bf16",
        "fp16": precision == "fp16",
        "use_cpu": not hw.cuda,
        "logging_steps": 1,
        # Rotation runs after a save is whole, so one would do; two keep a spare if Drive loses
        # part of the newest (and a resume passes over an incomplete one: helpers.training).
        "save_total_limit": 2,
        "report_to": "none",
        "push_to_hub": False,
        "log_completions": False,  # we keep our own completion table (helpers.plotting)
        "seed": SEED,
    }
    settings.update(_reward_weights())
    settings.update(overrides)
    settings.setdefault("save_steps", checkpoint_every(settings["max_steps"]))
    return settings


def _reward_weights() -> dict[str, list[float]]:
    from helpers.rewards import REWARD_WEIGHTS

    return {"reward_weights": list(REWARD_WEIGHTS)}


def check_model_name(name: str) -> None:
    """A known hub id, the smoke model, or a local folder; no network is used to decide."""
    if name == SMOKE_MODEL or name in KNOWN_MODELS or Path(name).is_dir():
        return
    known = ", ".join(sorted(KNOWN_MODELS - {SMOKE_MODEL}))
    if not _HUB_ID.match(name):
        raise TrainingConfigError(
            f"{name!r} is neither a folder on this machine nor a hub id like 'owner/name': "
            f"fix the spelling, or use one of {known}."
        )
    raise TrainingConfigError(
        f"Unknown model {name!r}: use one of {known}, or add its config.json numbers to "
        "helpers.memory.ARCHITECTURES so the memory check can size it."
    )


def batch_arithmetic(
    per_device_train_batch_size: int, gradient_accumulation_steps: int, world_size: int,
    num_generations: int,
) -> dict[str, int]:
    """Completions and prompts per optimizer step, per process and in all (trl 0.22's rule)."""
    per_process = per_device_train_batch_size * gradient_accumulation_steps
    total = per_process * world_size  # trl's generation_batch_size
    if total % num_generations:
        raise ValueError(
            f"{per_device_train_batch_size} x {gradient_accumulation_steps} x {world_size} = "
            f"{total} completions per step is not divisible by num_generations="
            f"{num_generations}: change gradient_accumulation_steps or the number of processes."
        )
    return {
        "completions_per_process": per_process,
        "completions_per_step": total,
        "prompts_per_step": total // num_generations,
    }


def describe_batch(config: GRPOConfig, world_size: int) -> str:
    """One line: how the config's batch sizes add up across processes."""
    b = batch_arithmetic(
        config.per_device_train_batch_size, config.gradient_accumulation_steps, world_size,
        config.num_generations,
    )
    return (
        f"Batch: {config.per_device_train_batch_size} x {config.gradient_accumulation_steps} "
        f"x {world_size} process(es) = {b['completions_per_step']} completions per step "
        f"= {b['prompts_per_step']} prompt(s) x {config.num_generations} generations"
    )


def effective_profile(profile: Profile, settings: dict[str, Any]) -> Profile:
    """The profile with any overridden knob (num_generations, ...) replaced, for checks."""
    names = {f.name for f in fields(Profile)}
    return replace(profile, **{k: v for k, v in settings.items() if k in names})


def validate(profile: Profile, hw: Hardware, settings: dict[str, Any]) -> None:
    """Stop before loading or training, with one sentence that names the fix."""
    effective = effective_profile(profile, settings)
    generations = settings["num_generations"]
    batch = settings["per_device_train_batch_size"] * settings["gradient_accumulation_steps"]
    if generations < 2:
        raise TrainingConfigError(
            f"num_generations={generations}: GRPO compares completions within a group, so it "
            "needs at least 2; set num_generations=4."
        )
    if batch % generations:
        accum = -(-generations // settings["per_device_train_batch_size"])
        while (settings["per_device_train_batch_size"] * accum) % generations:
            accum += 1
        raise TrainingConfigError(
            f"per_device_train_batch_size x gradient_accumulation_steps = {batch} completions, "
            f"which is not divisible by num_generations={generations}: set "
            f"gradient_accumulation_steps={accum} (or num_generations to a divisor of {batch})."
        )
    if settings.get("bf16") and choose_precision(hw) != "bf16":
        where = hw.gpu_name or "a CPU"
        raise TrainingConfigError(
            f"bf16=True, but {where} has no bf16 (it needs compute capability 8.0+): remove the "
            "bf16 override; make_grpo_config picks fp16 on a T4 for you."
        )
    if settings.get("fp16") and not hw.cuda:
        raise TrainingConfigError("fp16=True needs a CUDA GPU: remove the fp16 override on CPU.")
    check_model_name(effective.model_name)
    if hw.cuda and effective.model_name in ARCHITECTURES:
        est = estimate(effective, hw)
        if est.verdict == "won't fit":
            raise TrainingConfigError(f"This run won't fit: {est.summary()}")


def make_grpo_config(
    profile: Profile, hw: Hardware, output_dir: str | Path, **overrides: Any
) -> GRPOConfig:
    """trl's GRPOConfig for `profile` on `hw`, checked first; `overrides` win over the profile."""
    settings = grpo_settings(profile, hw, output_dir, **overrides)
    validate(profile, hw, settings)
    from trl import GRPOConfig

    config = GRPOConfig(**settings)
    # On GPU, unsloth's patched GRPOConfig may silently reset the batch size to num_generations.
    if config.per_device_train_batch_size != settings["per_device_train_batch_size"]:
        raise TrainingConfigError(
            f"unsloth changed per_device_train_batch_size from "
            f"{settings['per_device_train_batch_size']} to {config.per_device_train_batch_size} "
            "(see its message above): make it a multiple of num_generations."
        )
    return config


# GRPOConfig fields two identical configs may still differ in (the creation time, in a path).
PER_INSTANCE_FIELDS = frozenset({"logging_dir"})


def config_differences(config: Any, reference: Any) -> list[str]:
    """'field: value (the script: value)' for every field where two GRPOConfigs differ."""
    ours, theirs = config.to_dict(), reference.to_dict()
    return [
        f"{name}={ours.get(name)!r} (the script: {theirs.get(name)!r})"
        for name in sorted((set(ours) | set(theirs)) - PER_INSTANCE_FIELDS)
        if ours.get(name) != theirs.get(name)
    ]


def check_config(
    config: GRPOConfig, profile: Profile, hw: Hardware, output_dir: str | Path, **overrides: Any
) -> None:
    """Stop unless `config` equals make_grpo_config's (what scripts/train_grpo.py trains)."""
    reference = make_grpo_config(profile, hw, output_dir, **overrides)
    differences = config_differences(config, reference)
    if differences:
        raise TrainingConfigError(
            f"This GRPOConfig is not the one scripts/train_grpo.py trains for the "
            f"{profile.name} profile: {'; '.join(differences)}. Set those fields back; to change "
            "one on purpose, pass the same value to check_config (e.g. check_config(config, "
            "profile, hw, output_dir, beta=0.04)) and to the script, or change grpo_settings "
            "in helpers/training.py."
        )


def checkpoint_dir(run_dir: Path) -> Path:
    """Where the trainer saves checkpoints: inside the run folder (on Drive on Colab)."""
    return run_dir / "checkpoints"


# What transformers 4.56.2's Trainer._save_checkpoint writes into checkpoint-N, in this order,
# none of it atomically: the model (adapter_model.safetensors, adapter_config.json, the tokenizer,
# training_args.bin), optimizer.pt, scheduler.pt, rng_state.pth (rng_state_<rank>.pth with
# several processes), then trainer_state.json; only then does it delete checkpoints beyond
# save_total_limit. A kill, or a full disk, can stop it anywhere in between.
CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")  # transformers' PREFIX_CHECKPOINT_DIR
CHECKPOINT_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt")
WEIGHT_FILES = ("adapter_model.safetensors", "model.safetensors", "model.safetensors.index.json")
CHECKED_SUFFIXES = (".json", ".safetensors", ".pt", ".pth", ".bin")


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why `checkpoint` is not a whole checkpoint (what a resume would trip over), or None.

    Every file the trainer writes must be there and whole (see CHECKPOINT_FILES), and
    trainer_state.json, written last, must name the folder's own step. A DeepSpeed checkpoint
    keeps its weights and optimizer in the global_step folder that its `latest` file names.
    """
    state_problem = file_problem(checkpoint / "trainer_state.json")
    if state_problem:
        return f"its trainer_state.json {state_problem}"
    step = json.loads((checkpoint / "trainer_state.json").read_text()).get("global_step")
    number = CHECKPOINT_NAME.match(checkpoint.name)
    if number and step != int(number[1]):
        return f"its trainer_state.json is for step {step}, not {number[1]}"
    names = set(CHECKPOINT_FILES) | {p.name for p in checkpoint.iterdir()
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
    for name in sorted(names):
        problem = file_problem(checkpoint / name)
        if problem:
            return f"its {name} {problem}"
    return None


def checkpoint_folders(folder: Path) -> list[Path]:
    """The checkpoint-N folders in `folder`, oldest step first."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and CHECKPOINT_NAME.match(p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def incomplete_checkpoints(folder: Path) -> list[tuple[Path, str]]:
    """Each checkpoint in `folder` that is not whole, with the reason."""
    found = [(p, checkpoint_problem(p)) for p in checkpoint_folders(folder)]
    return [(p, problem) for p, problem in found if problem]


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest complete `checkpoint-N` folder, or None (incomplete ones are passed over)."""
    complete = [p for p in checkpoint_folders(folder) if checkpoint_problem(p) is None]
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
        earlier = [name for name in ("adapter/", LOG_FILE) if (folder.parent / name).exists()]
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
FINGERPRINT_FILE = "run_fingerprint.json"


def run_fingerprint(trainer: Any) -> dict[str, Any]:
    """What a resumed run must match: the base model and the settings in RESUME_KEYS."""
    args = trainer.args
    values = {key: getattr(args, key) for key in RESUME_KEYS}
    settings = {key: getattr(value, "value", value) for key, value in values.items()}  # enums
    return {"model": str(getattr(trainer.model.config, "_name_or_path", "")), **settings}


def check_resumable(folder: Path, fingerprint: dict[str, Any]) -> None:
    """Refuse to resume checkpoints made by a different model or different settings."""
    path = folder / FINGERPRINT_FILE
    if file_problem(path):  # none yet, or cut off mid-write: it is written again below
        return
    saved = json.loads(path.read_text())
    changed = [
        f"{key}: {saved.get(key)!r} -> {value!r}"
        for key, value in fingerprint.items()
        if saved.get(key) != value
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


def prepare_resume(folder: Path, max_steps: int, every: int) -> tuple[Path | None, list[str]]:
    """Delete incomplete checkpoints, then return the newest complete one and what to print."""
    lines = []
    for checkpoint, problem in incomplete_checkpoints(folder):
        fallback = latest_checkpoint(folder)
        lines.append(describe_skipped(checkpoint, problem, fallback))
        shutil.rmtree(checkpoint)
    checkpoint = latest_checkpoint(folder)
    return checkpoint, [*lines, describe_resume(checkpoint, max_steps, every, folder)]


def train_or_resume(trainer: Any) -> Any:
    """Train, resuming from the newest complete checkpoint in output_dir, and say which.

    Incomplete checkpoints (a kill during a save) are named and deleted first, by the main
    process; a failed write to the run folder (a full Drive, say) ends in one sentence.
    """
    args, accelerator = trainer.args, trainer.accelerator
    folder = Path(args.output_dir)
    if accelerator.is_main_process:
        check_writable(folder)
        _, lines = prepare_resume(folder, args.max_steps, args.save_steps)
        print("\n".join(lines))
    accelerator.wait_for_everyone()
    checkpoint = latest_checkpoint(folder)
    fingerprint = run_fingerprint(trainer)
    if checkpoint is not None:
        check_resumable(folder, fingerprint)
    if accelerator.is_main_process:
        write_json_atomic(folder / FINGERPRINT_FILE, fingerprint)
    if args.world_size > 1 and args.device.type == "cpu":
        allow_indexed_cpu_locations()
    if checkpoint is not None and checkpoint_step(checkpoint) >= args.max_steps:
        return load_finished_run(trainer, checkpoint)
    try:
        return trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except Exception as error:
        newest = latest_checkpoint(folder)
        resumes = f"from {newest.name}" if newest else "at step 1"
        run = folder.parent if folder.name == "checkpoints" else folder  # adapter, log: there too
        failure = storage_failure(error, run, resumes)
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


LOG_FILE = "log_history.json"


def save_log_history(log_history: list[dict], run_dir: Path) -> Path:
    """Write trainer.state.log_history to run_dir/log_history.json (atomically)."""
    step = max((int(entry.get("step", 0)) for entry in log_history), default=0)
    return write_json_atomic(run_dir / LOG_FILE, log_history, point="log-history", step=step)


def load_log_history(run_dir: Path) -> list[dict]:
    """The saved log history of a run; if that file is broken, the newest checkpoint's copy."""
    path = run_dir / LOG_FILE
    problem = file_problem(path)
    if problem is None:
        return json.loads(path.read_text())
    checkpoint = latest_checkpoint(checkpoint_dir(run_dir))
    if problem == "is missing" and checkpoint is None:
        raise FileNotFoundError(
            f"No {path.name} in {run_dir.name}/: run notebook 05 (training) first."
        )
    if checkpoint is None:
        raise RunFolderError(
            f"{shown(path)} {problem} and no complete checkpoint holds a copy: rerun notebook 05 "
            "with this run folder to write it again, or delete it."
        )
    print(f"{shown(path)} {problem}: using the log saved in {checkpoint.name}, which ends at "
          f"step {checkpoint_step(checkpoint)} (rerun notebook 05 to rewrite {path.name}).")
    return json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]


ADAPTER_STEP_FILE = "training_step.json"


def save_adapter(
    model: Any, tokenizer: Any, run_dir: Path, step: int | None = None, max_steps: int | None = None
) -> Path:
    """The LoRA adapter and tokenizer, to run_dir/adapter (notebooks 06-07 load it).

    Written to adapter.partial/, checked whole, then swapped in (helpers.paths.swap_in), so a
    disconnect at any moment leaves a whole adapter: adapter/, or adapter.old/ mid-swap.
    """
    partial = run_dir / "adapter.partial"
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
    return swap_in(partial, run_dir / "adapter", point="adapter-swap", step=step)


def saved_adapter_step(run_dir: Path) -> int | None:
    """The training step of the whole adapter in `run_dir` (None: none, or no step note)."""
    adapter = whole_folder(run_dir / "adapter", adapter_problem)
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


def format_eta(step: int, max_steps: int, seconds_per_step: float) -> str:
    """'step 12/150: 14.2 s/step, about 33 min left' (the ETA a step timer prints)."""
    left = max(0, max_steps - step) * seconds_per_step
    eta = f"{left / 60:.0f} min" if left >= 90 else f"{left:.0f} s"
    return f"step {step}/{max_steps}: {seconds_per_step:.1f} s/step, about {eta} left"
