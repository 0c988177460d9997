"""`python -m scripts.offline_gpu_check`: the training path on a GPU machine with no network.

    python -m scripts.offline_gpu_check --prepare    # where PyPI is reachable: the carried wheels
    python -m scripts.offline_gpu_check --dry-run    # the phases and the carry list, sizes included
    python -m scripts.offline_gpu_check              # install them offline, run every phase
    python -m scripts.offline_gpu_check --device cpu # the phases a CPU can run (CI)

For a GPU box that has Python 3.12, torch, numpy, pandas, pyarrow and matplotlib but no network,
no vLLM, unsloth, trl, bitsandbytes or datasets, and onto which little can be carried (BUDGET_MIB,
this tree included). `--prepare` downloads the wheels of CARRIED (cp312, manylinux x86_64) into
WHEEL_DIR, keeps of bitsandbytes only its Python files and its CUDA 13.0 and CPU libraries, and
refuses when the total would not fit. The check installs them with `pip install --no-index
--no-deps --target` and runs each phase in a fresh process through the course's own code (the
peft path of helpers.launch.plan_run, make_grpo_config, build_trainer, train_or_resume) on the
committed smoke model: on a GPU in fp16 with accelerate's GradScaler, an NF4 base and
`adamw_8bit`, with gradient accumulation 4 as on the t4 profile. What each phase checks is in
PHASES; docs/offline-gpu-check.md says what this proves and what it cannot. It writes one JSON
and one log (--out). On a CPU the phases that need CUDA are reported as skipped, with why.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from helpers.paths import ROOT

MIB = 1024**2
BUDGET_MIB = 64  # what may be carried onto the machine, this tree included
GOAL_MIB = 40
WHEEL_DIR = ROOT / ".cache" / "offline-wheels"
OUT_DIR = ROOT / "runs" / "offline-gpu-check"
LOCK = ROOT / "locks" / "t4.txt"  # every carried version is the T4 lock's
PLATFORMS = ("manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# bitsandbytes' wheel holds a library per CUDA version (43 MB in all); torch 2.11+cu130 loads
# the 13.0 one, and the CPU one serves a CPU run.
BNB_KEEP = ("libbitsandbytes_cuda130.so", "libbitsandbytes_cpu.so")
PHASE_TIMEOUT_S = 420  # under the 8 minutes one command may run there


@dataclass(frozen=True)
class Wheel:
    """One carried wheel: its name and version (the T4 lock's), its size, and why it travels."""

    name: str
    version: str
    bytes: int  # the downloaded wheel's size (bitsandbytes: trimmed), checked by --prepare
    why: str


CARRIED: tuple[Wheel, ...] = (
    Wheel("transformers", "4.56.2", 11_608_055, "trl 0.22.2 fails on transformers 5 "
          "(warmup_ratio is gone, its vLLM probe misfires)"),
    Wheel("tokenizers", "0.22.2", 3_274_982, "transformers 4.56.2 refuses tokenizers > 0.23.0"),
    Wheel("huggingface-hub", "0.36.2", 566_395, "transformers 4.56.2 refuses hub 1.x"),
    Wheel("trl", "0.22.2", 544_789, "GRPOTrainer"),
    Wheel("peft", "0.21.2", 835_427, "LoRA, the lock's version"),
    Wheel("accelerate", "1.16.0", 389_390, "the GradScaler, the lock's version"),
    Wheel("datasets", "3.6.0", 491_546, "trl and helpers.data"),
    Wheel("dill", "0.3.8", 116_252, "datasets"),
    Wheel("multiprocess", "0.70.16", 146_741, "datasets"),
    Wheel("fsspec", "2025.3.0", 193_615, "datasets"),
    Wheel("math-verify", "0.9.0", 29_967, "helpers.rewards"),
    Wheel("latex2sympy2-extended", "1.11.0", 209_050, "math-verify"),
    Wheel("antlr4-python3-runtime", "4.13.2", 144_462, "latex2sympy2-extended"),
    Wheel("bitsandbytes", "0.50.2", 3_593_119, "NF4 and adamw_8bit, trimmed to BNB_KEEP"),
)


@dataclass(frozen=True)
class Phase:
    """One fresh process: what it checks, what it needs to have passed, and why a CPU skips it."""

    name: str
    checks: str
    needs: tuple[str, ...] = ()
    cuda_only: str = ""


PHASES: tuple[Phase, ...] = (
    Phase("room", "the 75%-free rule against torch.cuda.mem_get_info: none fresh, the sentence "
          "with 40% of the GPU held", cuda_only="it reads torch.cuda.mem_get_info"),
    Phase("train", "run a: trained and stopped right after checkpoint-1 (scaler.pt on fp16, "
          "the optimizer's state, the fingerprint's precision, fp32 LoRA)"),
    Phase("resume", "run a resumed in a new process to its last step (the saved loss scale "
          "restored, the optimizer's state loaded)", ("train",)),
    Phase("straight", "run s, the same run unbroken: its adapter and losses against run a's",
          ("resume",)),
    Phase("cross", "run a's fp16 checkpoints resumed in bf16, and a bf16 run's in fp16: refused, "
          "nothing deleted", ("train",),
          cuda_only="a CPU trains in fp32 only (helpers.hardware refuses bf16 and fp16 there)"),
    Phase("rerun", "run r stopped inside its last step, then rerun on the same trainer "
          "(Exercise 3): a fresh generation batch, and the unbroken run's adapter",
          ("straight",)),
    Phase("export", "run a's adapter on a 16-bit base: evaluated twice with the answer store, "
          "merged, and answered by python -m helpers.export without unsloth", ("train",)),
)
PHASE_NAMES = tuple(p.name for p in PHASES)
STEPS, STOP_AT = 2, 1  # two steps, a checkpoint after each; run a stops after the first
QUESTIONS = ("Tom has 3 apples and buys 4 more. How many apples does he have?",)


class CheckFailed(RuntimeError):
    """A phase ran but did not do what the course relies on."""


# ---- The carry list, its size and --prepare -------------------------------------------------

def lock_pins(lock: Path = LOCK) -> dict[str, str]:
    """{normalized name: version} of a lock file's `name==version` lines."""
    pins = {}
    for line in lock.read_text().splitlines():
        requirement = line.split("#")[0].strip()
        if "==" in requirement:
            name, version = requirement.split("==")
            pins[normalized(name)] = version.strip()
    return pins


def normalized(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return name.lower().replace("_", "-").replace(".", "-")


def tracked_bytes(root: Path = ROOT) -> int:
    """The size of the tracked tree (`git ls-files`): it is carried with the wheels."""
    done = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True)
    paths = (root / name for name in done.stdout.decode().split("\0") if name)
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink())


def listed_bytes(wheels: Sequence[Wheel] = CARRIED) -> int:
    """What the carry list says its wheels weigh."""
    return sum(w.bytes for w in wheels)


def wheel_file(folder: Path, wheel: Wheel) -> Path | None:
    """The downloaded wheel of `wheel` in `folder`, or None."""
    stem = f"{normalized(wheel.name).replace('-', '_')}-{wheel.version}-"
    found = [p for p in folder.glob("*.whl") if p.name.lower().startswith(stem)]
    return found[0] if found else None


def carry_lines(folder: Path = WHEEL_DIR, tree: int | None = None) -> tuple[list[str], int]:
    """The carry list, one line a wheel with its size (downloaded, else listed), and the total
    bytes with the tracked tree."""
    lines, total = [], tracked_bytes() if tree is None else tree
    for wheel in CARRIED:
        path = wheel_file(folder, wheel) if folder.is_dir() else None
        size = path.stat().st_size if path else wheel.bytes
        where = path.name if path else "not downloaded yet: listed size"
        lines.append(f"  {wheel.name}=={wheel.version}  {size / MIB:5.2f} MiB  ({where}; "
                     f"{wheel.why})")
        total += size
    return lines, total


def size_verdict(total: int) -> str | None:
    """Why `total` bytes cannot be carried, or None."""
    if total > BUDGET_MIB * MIB:
        return (f"{total / MIB:.1f} MiB would be carried, over the {BUDGET_MIB} MiB budget: "
                "trim a wheel (as bitsandbytes is) or drop one from CARRIED.")
    return None


def download(folder: Path, wheels: Sequence[Wheel] = CARRIED) -> None:
    """pip download the wheels for CPython 3.12 on manylinux x86_64, without dependencies."""
    folder.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms,
                    "--dest", str(folder), *(f"{w.name}=={w.version}" for w in wheels)],
                   check=True)


def trim_wheel(path: Path, keep: Sequence[str] = BNB_KEEP) -> int:
    """Drop every shared library from the wheel at `path` but `keep` (and their RECORD lines, so
    pip installs it as usual); returns the bytes saved. Trimming again changes nothing."""
    before = path.stat().st_size
    trimmed = path.with_suffix(".trimming")
    with zipfile.ZipFile(path) as old, zipfile.ZipFile(trimmed, "w", zipfile.ZIP_DEFLATED) as new:
        dropped = {i.filename for i in old.infolist()
                   if i.filename.endswith(".so") and Path(i.filename).name not in keep}
        for item in old.infolist():
            if item.filename in dropped:
                continue
            data = old.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(x for x in lines if x.split(",")[0] not in dropped).encode()
            new.writestr(item, data)
    trimmed.replace(path)
    return before - path.stat().st_size


def prepare(folder: Path = WHEEL_DIR) -> int:
    """--prepare: download, trim bitsandbytes, drop stale wheels, print the total; 1 above the
    budget."""
    download(folder)
    wanted = {wheel_file(folder, w) for w in CARRIED}
    for stale in set(folder.glob("*.whl")) - wanted:
        stale.unlink()
    bnb = next(w for w in CARRIED if w.name == "bitsandbytes")
    saved = trim_wheel(wheel_file(folder, bnb))
    lines, total = carry_lines(folder)
    print(f"Carried from {folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}"
          f" (bitsandbytes trimmed by {saved / MIB:.1f} MiB to {', '.join(BNB_KEEP)}):")
    print("\n".join(lines))
    tree = tracked_bytes()
    print(f"  the tracked tree (git ls-files)  {tree / MIB:.2f} MiB")
    print(f"Total carried: {total / MIB:.1f} MiB of the {BUDGET_MIB} MiB budget "
          f"(goal {GOAL_MIB} MiB).")
    if problem := size_verdict(total):
        print(problem)
        return 1
    return 0


def install_skip(folder: Path, python: tuple[int, int] = sys.version_info[:2]) -> str | None:
    """Why the carried wheels are not installed here (this Python's packages are used), or None."""
    if not (folder.is_dir() and any(folder.glob("*.whl"))):
        return f"no wheels in {folder}: this Python's own packages are used"
    if python != (3, 12):
        return (f"the carried wheels are for CPython 3.12 and this is {python[0]}.{python[1]}: "
                "this Python's own packages are used")
    return None


def install(folder: Path, site: Path) -> None:
    """Install the carried wheels offline into `site` (put first on PYTHONPATH by the phases)."""
    missing = [w.name for w in CARRIED if wheel_file(folder, w) is None]
    if missing:
        raise CheckFailed(f"{folder} lacks the wheels of {', '.join(missing)}: run "
                          "`python -m scripts.offline_gpu_check --prepare` where PyPI is "
                          "reachable, and carry that folder along.")
    wheels = [str(wheel_file(folder, w)) for w in CARRIED]
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                    "--disable-pip-version-check", "--quiet", "--target", str(site), *wheels],
                   check=True)


# ---- What every phase's process shares ------------------------------------------------------

def check_profile() -> Any:
    """The smoke model at the t4 profile's batch shape (G=4, 1 x 4 with gradient accumulation 4),
    LoRA r=64 (bitsandbytes keeps 8-bit optimizer states only for tensors of 4096+ values),
    adamw_8bit, STEPS steps of synthetic problems, held-out scoring on 2."""
    from helpers.profiles import PROFILES

    t4 = PROFILES["t4"]
    return replace(PROFILES["smoke"], num_generations=t4.num_generations,
                   per_device_train_batch_size=t4.per_device_train_batch_size,
                   gradient_accumulation_steps=t4.gradient_accumulation_steps, lora_rank=64,
                   max_completion_length=16,
                   optim="adamw_8bit", max_steps=STEPS, num_train_problems=32,
                   heldout_during_training=2, num_eval_problems=4)


def run_hardware(precision: str | None = None) -> Any:
    """This machine as the run sees it: a GPU trains in fp16 (the T4's path), or `precision`."""
    from helpers.hardware import detect_hardware

    hw = detect_hardware()
    wanted = precision or ("fp16" if hw.cuda else hw.precision)
    return replace(hw, precision=wanted)


class Stop(Exception):
    """Ends a run where a disconnect would (raised by a callback)."""


def stop_callback(event: str, step: int, substep: int = 0) -> Any:
    """A TrainerCallback that raises Stop once, at `event` (on_save, on_substep_end) of `step`
    (for on_substep_end: the step being trained, at its `substep`-th micro-step)."""
    from transformers import TrainerCallback

    class StopOnce(TrainerCallback):
        def __init__(self) -> None:
            self.fired, self.seen = False, 0

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if event == "on_save" and state.global_step == step and not self.fired:
                self.fired = True
                raise Stop(f"stopped after the checkpoint of step {step}")

        def on_substep_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if event != "on_substep_end" or state.global_step != step - 1 or self.fired:
                return
            self.seen += 1
            if self.seen == substep:
                self.fired = True
                raise Stop(f"stopped inside step {step}, after micro-step {substep}")

    return StopOnce()


class Runs:
    """The runs of one work folder, built as notebook 05 builds its own (helpers.grpo_run)."""

    def __init__(self, work: Path) -> None:
        from helpers.run_folder import RunFolder

        self.work, self.profile = work, check_profile()
        self.folder = {name: RunFolder(work / name) for name in ("a", "s", "r", "b")}

    def model(self, hw: Any) -> tuple[Any, Any]:
        """The smoke model with LoRA through plan_run's peft path (no unsloth): NF4 on a GPU.

        On a CPU the base stays 16-bit: bitsandbytes 0.50.2 repacks a 4-bit weight for CPU
        inference at the first generation (`packing_format_for_cpu`), and training's matmul on
        it then fails ("a view of a leaf Variable ... in-place")."""
        from helpers.launch import load_peft

        return load_peft(self.profile, hw, load_in_4bit=hw.cuda)

    def trainer(self, name: str, hw: Any, loaded: tuple[Any, Any], *extra: Any) -> Any:
        """Run `name` (its own run folder) as build_trainer assembles it, plus `extra`."""
        from helpers.grpo_config import make_grpo_config
        from helpers.grpo_run import Instrument, build_trainer
        from helpers.rewards import REWARD_FUNCS, REWARD_WEIGHTS

        run = self.folder[name]
        config = make_grpo_config(self.profile, hw, run.checkpoints, max_steps=STEPS,
                                  save_steps=1, save_total_limit=STEPS,
                                  reward_weights=[*REWARD_WEIGHTS, 1.0])
        return build_trainer(*loaded, config, self.profile, run,
                             reward_funcs=[*REWARD_FUNCS, distinct_characters],
                             instrument=Instrument(callbacks=extra))

    def checkpoint(self, name: str, step: int) -> Path:
        return self.folder[name].checkpoints / f"checkpoint-{step}"


def distinct_characters(completions: list, **kwargs: Any) -> list[float]:
    """A dense reward beside the course's: the untrained smoke model rarely earns those, and with
    no spread in a group the gradient is 0, so "the resumed run equals the unbroken one" would
    hold for weights that never moved."""
    from helpers.rewards import completion_text

    return [len(set(completion_text(c))) / 10 for c in completions]


def losses(checkpoint: Path) -> list[float]:
    """The logged loss of each step in a checkpoint's trainer_state.json."""
    log = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    return [e["loss"] for e in log if "loss" in e]


def adapter_difference(one: Path, other: Path) -> float:
    """The largest absolute difference between two saved adapters' tensors."""
    from safetensors.torch import load_file

    a, b = (load_file(p / "adapter_model.safetensors") for p in (one, other))
    if a.keys() != b.keys():
        raise CheckFailed(f"{one} and {other} hold different LoRA tensors")
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def tree(folder: Path) -> list[str]:
    """Every path under `folder`, sorted: to show that nothing was deleted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def optimizer_kinds(checkpoint: Path) -> list[str]:
    """The dtypes of the optimizer state saved in a checkpoint (uint8: bitsandbytes' 8-bit)."""
    import torch

    def tensors(value: Any) -> list[Any]:  # bitsandbytes nests its 8-bit state in a tuple
        if torch.is_tensor(value):
            return [value] if value.dim() > 1 else []
        items = value.values() if isinstance(value, dict) else value
        return [t for v in items for t in tensors(v)] if isinstance(value, dict | list | tuple) \
            else []

    state = torch.load(checkpoint / "optimizer.pt", weights_only=True)["state"]
    return sorted({str(t.dtype) for t in tensors(state)})


# ---- The phases, each run in its own process ------------------------------------------------

class PhaseRun:
    """The body of each phase; `self.cuda` says whether this process has a GPU."""

    def __init__(self, work: Path) -> None:
        import torch

        self.runs, self.cuda = Runs(work), torch.cuda.is_available()

    def room(self) -> dict[str, Any]:
        import torch

        from helpers.loading import gpu_memory, vllm_room_problem
        from helpers.profiles import PROFILES

        t4 = PROFILES["t4"]
        free, total = gpu_memory()
        if (problem := vllm_room_problem(t4, free, total)) is not None:
            raise CheckFailed(f"refused in a fresh process: {problem}")
        held = torch.empty(int(0.4 * total), dtype=torch.uint8, device="cuda")
        problem = vllm_room_problem(t4, *gpu_memory())
        del held
        if problem is None or "another" not in problem:
            raise CheckFailed(f"with 40% held the rule gave {problem!r}")
        return {"free_share_fresh": round(free / total, 3)}

    def train(self) -> dict[str, Any]:
        import torch

        from helpers.resume import checkpoint_problem, run_precision, scaler_files

        hw = run_hardware()
        built = self.runs.trainer("a", hw, self.runs.model(hw), stop_callback("on_save", STOP_AT))
        ran = train_to_stop(built)
        checkpoint = self.runs.checkpoint("a", STOP_AT)
        if ran != STOP_AT or (problem := checkpoint_problem(checkpoint, scaler_files(built))):
            raise CheckFailed(f"stopped at step {ran}; checkpoint-1: {problem}")
        precision = run_precision(built.args)
        saved = json.loads(self.runs.folder["a"].fingerprint.read_text())["precision"]
        lora = {str(p.dtype) for n, p in built.model.named_parameters() if "lora_" in n}
        grad_norms = [e["grad_norm"] for e in built.state.log_history if "grad_norm" in e]
        scaler = (checkpoint / "scaler.pt").is_file()
        if saved != precision or lora != {"torch.float32"} or not all(
                map(lambda g: torch.isfinite(torch.tensor(g)), grad_norms)):
            raise CheckFailed(f"fingerprint {saved}, LoRA {lora}, grad norms {grad_norms}")
        if precision == "fp16" and not scaler:
            raise CheckFailed("fp16 training saved no scaler.pt: no GradScaler ran")
        return {"precision": precision, "scaler_pt": scaler,
                "optimizer": getattr(built.args.optim, "value", built.args.optim),
                "optimizer_state": ",".join(optimizer_kinds(checkpoint))}

    def resume(self) -> dict[str, Any]:
        import torch

        from helpers.resume import train_or_resume

        hw = run_hardware()
        probe = scale_probe()
        built = probe.trainer = self.runs.trainer("a", hw, self.runs.model(hw), probe)
        said = io.StringIO()
        with contextlib.redirect_stdout(Tee(said, sys.stdout)):
            train_or_resume(built)
        if "RESUMING from checkpoint-1" not in said.getvalue():
            raise CheckFailed("train_or_resume did not resume from checkpoint-1")
        if built.state.global_step != STEPS:
            raise CheckFailed(f"the resumed run ended at step {built.state.global_step}")
        saved = self.runs.checkpoint("a", STOP_AT) / "scaler.pt"
        if saved.is_file():
            scale = float(torch.load(saved, weights_only=True)["scale"])
            if probe.scale != scale:
                raise CheckFailed(f"the loss scale at the resume is {probe.scale}, "
                                  f"checkpoint-1 saved {scale}")
        return {"resumed_from": STOP_AT, "steps": built.state.global_step,
                "scale_restored": probe.scale,
                "optimizer_state": ",".join(optimizer_kinds(self.runs.checkpoint("a", STEPS)))}

    def straight(self) -> dict[str, Any]:
        from helpers.resume import train_or_resume

        hw = run_hardware()
        built = self.runs.trainer("s", hw, self.runs.model(hw))
        train_or_resume(built)
        return compare_with_unbroken(self.runs, "a", exact=not self.cuda)

    def cross(self) -> dict[str, Any]:
        from helpers.profiles import TrainingConfigError
        from helpers.resume import train_or_resume

        refused = []
        hw = run_hardware("bf16")  # a bf16 run stopped at checkpoint-1, to resume in fp16
        train_to_stop(self.runs.trainer("b", hw, self.runs.model(hw),
                                        stop_callback("on_save", STOP_AT)))
        for name, precision in (("a", "bf16"), ("b", "fp16")):
            folder = self.runs.folder[name].checkpoints
            before = tree(folder)
            hw = run_hardware(precision)
            built = self.runs.trainer(name, hw, self.runs.model(hw))
            try:
                train_or_resume(built)
            except TrainingConfigError as error:
                if "nothing was deleted" not in str(error):
                    raise
            else:
                raise CheckFailed(f"run {name} was resumed in {precision}")
            if tree(folder) != before:
                raise CheckFailed(f"refusing run {name} in {precision} changed its folder")
            refused.append(f"{name}->{precision}")
        return {"refused": ",".join(refused)}

    def rerun(self) -> dict[str, Any]:
        from helpers.resume import train_or_resume

        hw = run_hardware()
        built = self.runs.trainer("r", hw, self.runs.model(hw),
                                  stop_callback("on_substep_end", STOP_AT + 1, 2))
        generated: list[int] = []
        original = built._generate_and_score_completions

        def recorded(*args: Any, **kwargs: Any) -> Any:
            generated.append(built._step)
            return original(*args, **kwargs)

        built._generate_and_score_completions = recorded
        train_to_stop(built)  # stops inside step 2, after step 1's checkpoint
        stopped_at, generated[:] = built._step, []
        train_or_resume(built)  # Exercise 3: the same trainer object, run again
        # A fresh process generates at its first micro-step and every `every` after; a rerun
        # that kept trl's _step would first train on the stopped step's leftover completions.
        every = built.args.steps_per_generation * built.num_iterations
        expected = [every * i for i in range(STEPS - STOP_AT)]
        if generated != expected:
            raise CheckFailed(f"the rerun generated at _step {generated}, not {expected} as a "
                              "fresh process would")
        return {"stopped_at_micro_step": stopped_at, "generated_at": ",".join(map(str, generated)),
                **compare_with_unbroken(self.runs, "r", exact=not self.cuda)}

    def export(self) -> dict[str, Any]:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from helpers.data import load_gsm8k
        from helpers.evaluation import decoding_settings, evaluate
        from helpers.export import run_plain_transformers
        from helpers.loading import load_kwargs

        profile, run = self.runs.profile, self.runs.folder["a"]
        name = load_kwargs(profile)["model_name"]
        dtype = torch.float16 if self.cuda else torch.float32
        base = AutoModelForCausalLM.from_pretrained(name, dtype=dtype,
                                                    device_map="cuda" if self.cuda else None)
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = PeftModel.from_pretrained(base, str(run.adapter))
        rows = list(load_gsm8k("test", profile, limit=4))
        decoding = decoding_settings(profile)
        first = evaluate(model, tokenizer, rows, decoding, run.adapter, store=run.answers)

        def refuse(*_: Any, **__: Any) -> Any:
            raise CheckFailed("the second evaluation generated again instead of reusing answers")

        again = evaluate(model, tokenizer, rows, decoding, run.adapter, generate=refuse,
                         store=run.answers)
        if again["scores"] != first["scores"]:
            raise CheckFailed("the reused answers scored differently")
        merged = self.runs.work / "merged"
        model.merge_and_unload().save_pretrained(merged)
        tokenizer.save_pretrained(merged)
        answers = run_plain_transformers(merged, QUESTIONS, 8)
        return {"problems": len(rows), "dtype": str(dtype), "answers": len(answers)}


def train_to_stop(built: Any) -> int:
    """train_or_resume until a Stop callback ends it; the step it stopped at."""
    from helpers.resume import train_or_resume

    try:
        train_or_resume(built)
    except Stop as stop:
        print(stop)
        return built.state.global_step
    raise CheckFailed("the run ended without reaching its stop")


def compare_with_unbroken(runs: Runs, name: str, exact: bool) -> dict[str, Any]:
    """Run `name`'s last checkpoint against the unbroken run s's: the adapter's largest difference
    and the losses. `exact` (a CPU) requires them equal, bit for bit; a GPU's kernels may differ."""
    mine, unbroken = runs.checkpoint(name, STEPS), runs.checkpoint("s", STEPS)
    difference = adapter_difference(mine, unbroken)
    same_losses = losses(mine) == losses(unbroken)
    if exact and (difference != 0.0 or not same_losses):
        raise CheckFailed(f"run {name} differs from the unbroken run: adapter by {difference}, "
                          f"losses {losses(mine)} against {losses(unbroken)}")
    return {"adapter_max_abs_diff": difference, "same_losses": same_losses}


def scale_probe() -> Any:
    """A TrainerCallback that keeps the loss scale at on_train_begin, after a resume loaded
    scaler.pt (None without a GradScaler); set its `trainer` once the trainer is built."""
    from transformers import TrainerCallback

    class ScaleAtBegin(TrainerCallback):
        trainer: Any = None
        scale: float | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            scaler = self.trainer.accelerator.scaler
            self.scale = float(scaler.get_scale()) if scaler is not None else None

    return ScaleAtBegin()


class Tee(io.TextIOBase):
    """Writes to several streams: the phase's output is both kept and shown."""

    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


# ---- The parent: one process a phase, one JSON and one log ----------------------------------

@dataclass(frozen=True)
class PhaseResult:
    """What one phase did: pass, fail or skip, its wall seconds, and what it reports."""

    name: str
    status: str
    seconds: float = 0.0
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def result_path(work: Path, phase: str) -> Path:
    return work / f"phase-{phase}.json"


def run_phase_here(phase: str, work: Path) -> int:
    """Inside a phase's process: run it and write its result (a failure is a result too)."""
    start = time.perf_counter()
    try:
        data = getattr(PhaseRun(work), phase)()
        result = PhaseResult(phase, "pass", data=data,
                             detail=", ".join(f"{k}={v}" for k, v in data.items()))
    except Exception as error:  # reported, not raised: the parent writes the report
        traceback.print_exc()
        result = PhaseResult(phase, "fail", detail=f"{type(error).__name__}: {error}"[:600])
    result = replace(result, seconds=round(time.perf_counter() - start, 1))
    result_path(work, phase).write_text(json.dumps(asdict(result)))
    return 0 if result.status == "pass" else 1


def phase_environment(site: Path | None, device: str) -> dict[str, str]:
    """A phase's environment: the carried packages first on the path, then this checkout; no
    network; on `--device cpu` no GPU either."""
    env = dict(os.environ)
    paths = [str(site)] if site else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT), *filter(None, [
        os.environ.get("PYTHONPATH")])])
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONHASHSEED="0")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_child(phase: str, work: Path, env: dict[str, str], log: Any,
              timeout: int = PHASE_TIMEOUT_S) -> PhaseResult:
    """Run one phase in a fresh Python process, its output into the log, and read its result."""
    out = result_path(work, phase)
    out.unlink(missing_ok=True)
    start = time.perf_counter()
    log.write(f"\n===== phase {phase} =====\n")
    log.flush()
    try:
        done = subprocess.run([sys.executable, "-m", "scripts.offline_gpu_check", "--child", phase,
                               "--work", str(work)], cwd=ROOT, env=env, timeout=timeout,
                              stdout=log, stderr=subprocess.STDOUT)
        why = f"its process exited with status {done.returncode} and no result (see the log)"
    except subprocess.TimeoutExpired:
        why = f"its process ran past {timeout} s"
    seconds = round(time.perf_counter() - start, 1)
    if out.is_file():
        return replace(PhaseResult(**json.loads(out.read_text())), seconds=seconds)
    return PhaseResult(phase, "fail", seconds, why)


def run_phases(phases: Sequence[str], work: Path, device: str, env: dict[str, str], log: Any,
               child: Callable[..., PhaseResult] = run_child) -> list[PhaseResult]:
    """Each phase in order, in its own process; one that needs CUDA on a CPU, or whose needs did
    not pass, is skipped with why. Wall seconds include each process's start and imports."""
    results: list[PhaseResult] = []
    for phase in (p for p in PHASES if p.name in phases):
        passed = {r.name for r in results if r.status == "pass"}
        missing = [n for n in phase.needs if n not in passed]
        if phase.cuda_only and device == "cpu":
            result = PhaseResult(phase.name, "skip", detail=f"needs CUDA: {phase.cuda_only}")
        elif missing:
            result = PhaseResult(phase.name, "skip", detail=f"needs {', '.join(missing)}")
        else:
            result = child(phase.name, work, env, log)
        results.append(result)
        print(f"phase {phase.name}: {result.status.upper()} in {result.seconds:.1f} s"
              f"{' (' + result.detail + ')' if result.detail else ''}", flush=True)
    return results


def versions(env: dict[str, str]) -> dict[str, str]:
    """The versions a phase's process imports (the carried ones where installed), and torch's
    CUDA."""
    code = ("import json, importlib.metadata as m, platform, torch\n"
            "names = ['torch', 'transformers', 'tokenizers', 'huggingface-hub', 'trl', 'peft',"
            " 'accelerate', 'bitsandbytes', 'datasets']\n"
            "found = {'python': platform.python_version(), 'cuda': str(torch.version.cuda)}\n"
            "for n in names:\n"
            "    try: found[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: found[n] = 'not installed'\n"
            "print(json.dumps(found))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def device_facts(device: str) -> dict[str, Any]:
    """The GPU's name, memory and compute capability, or the CPU's."""
    import torch

    if device == "cpu":
        return {"name": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_gib": round(props.total_memory / 1024**3, 2),
            "compute_capability": f"{props.major}.{props.minor}"}


def clear_work(work: Path) -> None:
    """Remove what an earlier check left in the scratch folder (only what it writes)."""
    for name in ("a", "s", "r", "b", "merged", "site"):
        shutil.rmtree(work / name, ignore_errors=True)
    for stale in work.glob("phase-*.json"):
        stale.unlink()
    work.mkdir(parents=True, exist_ok=True)


def render_plan(folder: Path) -> str:
    """--dry-run: the phases, what each checks, and the carry list with the total."""
    lines, total = carry_lines(folder)
    phases = [f"  {p.name:9} {p.checks}" + (f" [CUDA only: {p.cuda_only}]" if p.cuda_only
                                            else "") + (f" (needs {', '.join(p.needs)})"
                                                        if p.needs else "")
              for p in PHASES]
    return "\n".join([
        f"Phases, each in a fresh process (at most {PHASE_TIMEOUT_S} s each):", *phases, "",
        f"Carried ({folder}), then installed with pip install --no-index --no-deps --target:",
        *lines,
        f"Total with the tracked tree: {total / MIB:.1f} MiB of the {BUDGET_MIB} MiB budget.",
    ])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.offline_gpu_check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare", action="store_true",
                        help="download and trim the carried wheels (needs PyPI), print the size")
    parser.add_argument("--dry-run", action="store_true", help="print the phases and carry list")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="auto: CUDA where torch sees a GPU, else the CPU phases")
    parser.add_argument("--wheels", type=Path, default=WHEEL_DIR,
                        help="the carried wheels; without them this Python's packages are used")
    parser.add_argument("--phase", action="append", choices=PHASE_NAMES,
                        help="run only these phases (repeatable); default all")
    parser.add_argument("--out", type=Path, default=OUT_DIR,
                        help="where offline-gpu-check.json and .log are written")
    parser.add_argument("--work", type=Path, default=None,
                        help="scratch folder (default: a temporary one, removed after)")
    parser.add_argument("--child", choices=PHASE_NAMES, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        return run_phase_here(args.child, args.work)
    if args.prepare:
        return prepare(args.wheels)
    if args.dry_run:
        print(render_plan(args.wheels))
        return 0
    import torch

    device = args.device if args.device != "auto" else (
        "cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("--device cuda, but torch sees no CUDA GPU here: use --device cpu for the CPU "
              "phases.")
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="offline-gpu-check-"))
    clear_work(work)
    started = time.perf_counter()
    with open(args.out / "offline-gpu-check.log", "w") as log:
        why = install_skip(args.wheels)
        site, installed = None, PhaseResult("install", "skip", detail=why or "")
        if why is None:
            site, start = work / "site", time.perf_counter()
            install(args.wheels, site)
            installed = PhaseResult("install", "pass", round(time.perf_counter() - start, 1),
                                    f"{len(CARRIED)} wheels into {site}")
        print(f"install: {installed.status.upper()} ({installed.detail})", flush=True)
        env = phase_environment(site, device)
        results = run_phases(args.phase or PHASE_NAMES, work, device, env, log)
    ran = [r for r in results if r.status != "skip"]
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device_facts(device), "versions": versions(env),
        "command": "python -m scripts.offline_gpu_check " + " ".join(argv or sys.argv[1:]),
        "passed": bool(ran) and all(r.status == "pass" for r in ran),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "phases": [asdict(installed), *map(asdict, results)],
    }
    path = args.out / "offline-gpu-check.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    print(f"offline-gpu-check {'PASSED' if report['passed'] else 'FAILED'} on {device} "
          f"({len(ran)} phases run, {len(results) - len(ran)} skipped) in "
          f"{report['wall_seconds']:.0f} s: {path} and its .log")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
