"""`make gpu-check`: run the t4 path's GPU-only calls once on a real CUDA GPU, each one timed.

    python -m scripts.gpu_check                               # every phase; the t4 profile's model
    python -m scripts.gpu_check --precision fp16              # the T4's fp16 path on any GPU
    python -m scripts.gpu_check --phase train                 # one phase as its own command
    python -m scripts.gpu_check --dry-run --precision fp16    # the plan and each phase's budget
    python -m scripts.gpu_check --model /models/qwen2.5-1.5b  # offline: a local 16-bit model folder
    python -m scripts.gpu_check --fill-readme runs/gpu-check/tesla-t4.json   # README's T4 slot

Run from the course's root. CPU CI never runs these calls: unsloth takes a CPU backend there,
and tests/test_gpu_contracts.py only checks their signatures. So before tagging a release, a
publisher runs this on a Colab T4. It runs five fresh processes, as a learner's notebooks would:

    train : 4-bit load with vLLM (fast_inference=True; its first start is timed), LoRA, and
            notebook 05's run (helpers.grpo_run.build_trainer with the standard callbacks:
            held-out accuracy through vLLM, live figure, adapter checkpoints, step timer,
            samples) on unsloth's patched GRPOTrainer, stopped right after its first checkpoint
    resume: a fresh process that loads again and resumes that run to its end through
            train_or_resume, saves the adapter, generates with it, and runs notebook 06's
            evaluation twice (the second pass must reuse every saved answer)
    reload: the saved adapter in a fresh process (vLLM again), fast_generate with it (notebook 06)
    merge : the adapter on its base without vLLM, merged to 16-bit (notebook 07)
    plain : the merged model with plain transformers, in a process that never imports unsloth

`--phase NAME` runs one of them as its own command (train first: it clears the scratch folder;
each later one needs the phases before it to have passed in the same --work folder), so no
command runs much longer than its phase's budget (Phase.budget_s, printed by --dry-run).

A data-centre GPU trains in bf16 (helpers.hardware's Hardware.precision): no GradScaler, no
scaler.pt. `--precision fp16` loads the model in float16 and trains with fp16=True, as a T4
does, so any GPU checks the T4's precision path; what it still cannot show is the T4's own
kernels (FlashInfer's sm75 build), memory and speed. FlashInfer's JIT build (1-3 min of a cold
vLLM start) runs on a T4, where it is the path under test; elsewhere it would build kernels for
another GPU, so it is switched off (UNSLOTH_VLLM_NO_FLASHINFER=1) unless --flashinfer.

Training uses GSM8K-format synthetic problems, so only the model needs the hub. It prints a
pass/fail table with each step's seconds and peak GPU memory and each phase against its budget,
writes runs/gpu-check/<gpu>.json, and on a T4 fills README's T4 slot from that JSON once every
phase has run. With no CUDA GPU it refuses in one line (--dry-run and --fill-readme need none).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from helpers.hardware import Hardware
from helpers.paths import ROOT
from helpers.run_folder import RunFolder  # no torch: the refusal stays instant

OUT_DIR = ROOT / "runs" / "gpu-check"
README = ROOT / "README.md"
DEFAULT_PROFILE = "t4"
DEFAULT_GRPO_STEPS = 2  # step 1 trained and checkpointed, step 2 trained after the resume
REFUSAL = (
    "gpu_check needs a CUDA GPU and this machine has none: run `make gpu-check` on a Colab T4 "
    "(or any NVIDIA GPU, with --precision fp16 for the T4's path) after "
    "`python3 -m scripts.install_stack venv`."
)
PRECISIONS = ("auto", "fp16")  # auto: the GPU's own (bf16 on compute capability 8.0+, else fp16)
NO_FLASHINFER = "UNSLOTH_VLLM_NO_FLASHINFER"  # unsloth_zoo vllm_utils.py:4664
QUESTIONS = (  # GSM8K-style: the answers only need to be non-empty, not right
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
    "May. How many clips did Natalia sell altogether in April and May?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
    "How much did she earn?",
)
MAX_NEW_TOKENS = 64
SLOT_START = re.compile(r"<!-- T4 RESULTS:.*?-->\n", re.S)
SLOT_END = "<!-- /T4 RESULTS -->"


@dataclass(frozen=True)
class Phase:
    """One fresh process: its steps in order (PhaseSteps' method of the same name builds them),
    its budget in seconds, and the steps it needs to have passed in an earlier process."""

    name: str
    steps: tuple[str, ...]
    budget_s: int
    needs: tuple[str, ...] = ()


# The phases in order. Each budget is the phase's time, cold, on a data-centre GPU with 16 CPU
# cores and a fast network: estimated from what each process runs, not yet measured (a run
# reports every phase against it). A vLLM start is torch inductor's compile (1-1.5 min cold,
# cached for later processes), FlashInfer's JIT build (1-3 min cold: a T4 only, see above) and
# the CUDA-graph capture (0.5-1 min, every start); each process imports unsloth and loads its
# compiled trainer (0.5-1 min, cached).
PHASES: dict[str, Phase] = {phase.name: phase for phase in (
    # imports 0.75 + cold vLLM start 2.25 + one step, two held-out scores, a save
    Phase("train", ("load_4bit_vllm", "lora", "grpo_until_checkpoint", "generate_base"),
          budget_s=210),
    # imports 0.5 + warm vLLM start 1 + one step and score, save, evaluation x2
    Phase("resume", ("reload_base", "relora", "resume_grpo", "save_adapter", "generate_adapter",
                     "evaluate_cache"), budget_s=120, needs=("grpo_until_checkpoint",)),
    # imports 0.5 + warm vLLM start 1 + one generate
    Phase("reload", ("reload_adapter", "generate_reloaded"), budget_s=90,
          needs=("save_adapter",)),
    # imports 0.5 + 4-bit load + the 16-bit base's download (3 GB) and the merge
    Phase("merge", ("load_16bit_merge", "merge_16bit"), budget_s=105, needs=("save_adapter",)),
    # transformers alone: load the merged model, answer two questions
    Phase("plain", ("plain_transformers",), budget_s=30, needs=("merge_16bit",)),
)}


class CheckFailed(RuntimeError):
    """A GPU step ran but did not do what the course relies on."""


# ---- The step runner: pure, tested on CPU with fake steps ------------------------------------

@dataclass(frozen=True)
class Step:
    """One timed check: `run` returns details to report, or raises to fail."""

    name: str
    run: Callable[[], dict[str, Any] | None]
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepResult:
    """What one step did: pass, fail or skip, how long, and its peak GPU memory."""

    name: str
    status: str  # "pass", "fail" or "skip"
    seconds: float = 0.0
    peak_gpu_gib: float | None = None
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Meter:
    """How steps are measured: a clock, and torch's peak-memory counter (fakes in tests)."""

    clock: Callable[[], float] = time.perf_counter
    reset_peak: Callable[[], None] = lambda: None
    peak_gib: Callable[[], float | None] = lambda: None


def describe(data: dict[str, Any]) -> str:
    """'key=value, ...' with floats rounded, for the table's detail column."""
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in data.items())


def run_steps(steps: Sequence[Step], meter: Meter = Meter(),
              done: Sequence[StepResult] = ()) -> list[StepResult]:
    """Run steps in order; a step whose needs did not pass is skipped, not run."""
    passed = {r.name for r in done if r.status == "pass"}
    results: list[StepResult] = []
    for step in steps:
        missing = [n for n in step.needs if n not in passed]
        if missing:
            results.append(StepResult(step.name, "skip", detail=f"needs {', '.join(missing)}"))
            continue
        meter.reset_peak()
        start = meter.clock()
        try:
            data = step.run() or {}
        except Exception as error:  # any failure is a result to report, not a crash
            traceback.print_exc()
            text = str(error).strip()
            message = type(error).__name__ + (f": {text.splitlines()[0][:300]}" if text else "")
            results.append(StepResult(step.name, "fail", meter.clock() - start,
                                      meter.peak_gib(), message))
            continue
        results.append(StepResult(step.name, "pass", meter.clock() - start, meter.peak_gib(),
                                  describe(data), data))
        passed.add(step.name)
    return results


def skipped(names: Sequence[str], why: str) -> list[StepResult]:
    """Results for steps that never ran."""
    return [StepResult(name, "skip", detail=why) for name in names]


def render_table(results: Sequence[StepResult]) -> str:
    """The pass/fail table, as markdown."""
    rows = ["| step | result | seconds | peak GPU GiB | detail |", "|---|---|---|---|---|"]
    for r in results:
        peak = "-" if r.peak_gpu_gib is None else f"{r.peak_gpu_gib:.2f}"
        seconds = "-" if r.status == "skip" else f"{r.seconds:.1f}"
        rows.append(f"| {r.name} | {r.status.upper()} | {seconds} | {peak} | {r.detail} |")
    return "\n".join(rows)


def build_report(results: Sequence[StepResult], gpu: dict[str, Any], settings: dict[str, Any],
                 versions: dict[str, str], now: datetime, wall_seconds: float) -> dict[str, Any]:
    """The JSON report: the machine, the settings, the versions and every step's result."""
    peaks = [r.peak_gpu_gib for r in results if r.peak_gpu_gib is not None]
    grpo = next((r for r in results if r.name == "resume_grpo" and r.status == "pass"), None)
    return {
        "date": now.strftime("%Y-%m-%d"),
        "gpu": gpu,
        "settings": settings,
        "versions": versions,
        "passed": bool(results) and all(r.status == "pass" for r in results),
        "wall_seconds": round(wall_seconds, 1),  # with each process's start and imports
        "steps_seconds": round(sum(r.seconds for r in results), 1),
        "peak_gpu_gib": round(max(peaks), 2) if peaks else None,
        "seconds_per_grpo_step": grpo.data.get("seconds_per_step") if grpo else None,
        # vLLM's first start in a fresh process (with the model load): helpers.journey reads it
        "vllm_first_start_seconds": next((round(r.seconds, 1) for r in results
                                          if r.name == "load_4bit_vllm" and r.status == "pass"),
                                         None),
        "steps": [asdict(r) for r in results],
    }


def report_path(gpu_name: str, folder: Path = OUT_DIR) -> Path:
    """runs/gpu-check/<gpu name as a file name>.json, e.g. tesla-t4.json."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "gpu"
    return folder / f"{slug}.json"


def write_report(report: dict[str, Any], path: Path) -> Path:
    """Write the JSON report (through a temporary file, so a crash leaves no half file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(report, indent=1) + "\n")
    partial.replace(path)
    return path


def results_from(report: dict[str, Any]) -> list[StepResult]:
    """The step results stored in a report."""
    return [StepResult(**step) for step in report["steps"]]


# ---- README's T4 slot ----------------------------------------------------------------------

def render_slot(report: dict[str, Any]) -> str:
    """The README text for the T4 slot, from a report: one sentence and the step table."""
    gpu, settings, versions = report["gpu"], report["settings"], report["versions"]
    steps = report["steps"]
    passed = sum(s["status"] == "pass" for s in steps)
    verdict = (f"all {len(steps)} steps passed" if report["passed"]
               else f"{passed} of {len(steps)} steps passed")
    facts = [f"{verdict} in {report['wall_seconds'] / 60:.1f} min"]
    if report["seconds_per_grpo_step"] is not None:
        facts.append(f"{report['seconds_per_grpo_step']:.1f} s per GRPO step "
                     f"({settings['grpo_steps']} steps, synthetic problems)")
    if report["peak_gpu_gib"] is not None:
        facts.append(f"peak GPU memory {report['peak_gpu_gib']:.1f} GiB")
    stack = ", ".join(f"{name} {version}" for name, version in versions.items())
    return (
        f"`make gpu-check` on a {gpu['name']} ({gpu['memory_gib']:.1f} GiB, compute capability "
        f"{gpu['compute_capability']}) on {report['date']}, profile `{settings['profile']}` "
        f"(`{settings['model']}`), with {stack}: {'; '.join(facts)}.\n\n"
        f"{render_table(results_from(report))}\n"
    )


def fill_slot(readme: str, slot: str) -> str:
    """README with the text between the T4 RESULTS markers replaced by `slot`."""
    start = SLOT_START.search(readme)
    if start is None:
        raise ValueError("README has no `<!-- T4 RESULTS: ... -->` marker: add it where the T4 "
                         "results belong.")
    end = readme.find(SLOT_END, start.end())
    if end < 0:
        raise ValueError(f"README has no `{SLOT_END}` end marker: add it on its own line after "
                         "the T4 slot's text.")
    return readme[: start.end()] + slot.rstrip("\n") + "\n" + readme[end:]


def is_t4(report: dict[str, Any]) -> bool:
    """True for a report made on a Tesla T4."""
    return "T4" in report["gpu"]["name"].split()


def fill_readme(report: dict[str, Any], readme: Path | None = None) -> None:
    """Write a T4 report into README's T4 slot; any other GPU is refused."""
    readme = readme or README
    if not is_t4(report):
        raise ValueError(f"README's T4 slot takes a T4 run only; this report is from a "
                         f"{report['gpu']['name']}.")
    readme.write_text(fill_slot(readme.read_text(), render_slot(report)))


# ---- The settings every process shares ------------------------------------------------------

def check_profile(name: str, model: str | None, grpo_steps: int) -> Any:
    """The profile under check: its model (or --model), synthetic data, a few GRPO steps."""
    from helpers.profiles import PROFILES

    profile = PROFILES[name]
    if model is not None:
        profile = replace(profile, model_name=model)
    # Synthetic GSM8K-format problems: the check needs no dataset download, only the model.
    return replace(profile, synthetic_data=True, num_train_problems=16 * grpo_steps,
                   max_steps=grpo_steps, heldout_during_training=16)


def grpo_overrides(grpo_steps: int) -> dict[str, Any]:
    """make_grpo_config overrides: a few steps, a checkpoint after each (the first is resumed)."""
    return {"max_steps": grpo_steps, "save_steps": 1}


def run_hardware(precision: str, hw: Hardware) -> Hardware:
    """The GPU as the run sees it: under --precision fp16 it runs the T4's mixed precision
    whatever it is (Hardware.precision, which every config and load reads; unsloth accepts fp16
    on a float16 model on Ampere+ too: unsloth/models/rl.py's mixed-precision block)."""
    return replace(hw, precision="fp16") if precision == "fp16" else hw


def flashinfer_off(compute_capability: tuple[int, int] | None, keep: bool) -> bool:
    """True where gpu-check switches FlashInfer off: any GPU but a T4's sm75, unless kept."""
    return not keep and compute_capability != (7, 5)


def child_environment(compute_capability: tuple[int, int] | None, keep_flashinfer: bool,
                      environ: dict[str, str] | None = None) -> dict[str, str]:
    """The phases' environment: ours, with FlashInfer off where flashinfer_off says (a value
    already set is left alone)."""
    env = dict(os.environ if environ is None else environ)
    if flashinfer_off(compute_capability, keep_flashinfer):
        env.setdefault(NO_FLASHINFER, "1")
    return env


def phase_command(phase: str, args: argparse.Namespace) -> str:
    """The command that runs `phase` alone with these settings (what --dry-run lists)."""
    extra = [f"--{name.replace('_', '-')} {value}" for name, value, default in (
        ("profile", args.profile, DEFAULT_PROFILE), ("model", args.model, None),
        ("grpo_steps", args.grpo_steps, DEFAULT_GRPO_STEPS),
        ("precision", args.precision, "auto")) if value != default]
    flags = " --flashinfer" if args.flashinfer else ""
    return " ".join(["python -m scripts.gpu_check", f"--phase {phase}", *extra]) + flags


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def render_plan(args: argparse.Namespace) -> str:
    """What a run does, before it runs (--dry-run, no GPU needed): the precision path, FlashInfer,
    and each phase with its command, steps and budget."""
    profile = check_profile(args.profile, args.model, args.grpo_steps)
    if args.precision == "fp16":
        precision = ("fp16 everywhere: the model loads with dtype=torch.float16 and trains with "
                     "GRPOConfig(fp16=True, bf16=False), so accelerate's GradScaler runs and "
                     "checkpoint-1 must hold scaler.pt, the T4's path on any GPU")
    else:
        precision = ("auto: the GPU's own (bf16 on compute capability 8.0+, no GradScaler and no "
                     "scaler.pt; fp16 on a T4); --precision fp16 checks the T4's path anywhere")
    flashinfer = ("JIT-built by unsloth on every GPU (--flashinfer)" if args.flashinfer
                  else f"JIT-built by unsloth on a T4 (sm75) only, the path under test; "
                       f"elsewhere off ({NO_FLASHINFER}=1; --flashinfer keeps it, 1-3 min more "
                       "cold)")
    rows = ["| phase | its own command | steps | budget (cold) |", "|---|---|---|---|"]
    for phase in PHASES.values():
        rows.append(f"| {phase.name} | `{phase_command(phase.name, args)}` | "
                    f"{', '.join(phase.steps)} | {minutes(phase.budget_s)} |")
    total = sum(phase.budget_s for phase in PHASES.values())
    every = phase_command("train", args).replace(" --phase train", "")
    steps = sum(len(phase.steps) for phase in PHASES.values())
    rows.append(f"| all | `{every}` | {steps} steps in {len(PHASES)} processes | "
                f"{minutes(total)} |")
    return "\n".join([
        f"gpu-check plan: profile {profile.name} ({profile.model_name}), {args.grpo_steps} GRPO "
        f"steps, synthetic problems.",
        f"Precision: {precision}.",
        f"FlashInfer: {flashinfer}.",
        "",
        *rows,
        "",
        f"Budgets: cold, on a data-centre GPU with 16 CPU cores, estimated from what each process "
        f"runs, not measured ({minutes(total)} in all); a run reports each phase against its "
        "budget. A T4 is slower: its first vLLM start alone is 3-10 min.",
    ])


# ---- The GPU seam: everything below runs only on a CUDA machine ------------------------------

def cuda_meter() -> Meter:
    """Peak GPU memory: the larger of torch's peak allocation in the step and the device's used
    memory at its end (vLLM's memory pool may be allocated outside torch's counter)."""
    import torch

    torch.cuda.init()

    def peak() -> float:
        free, total = torch.cuda.mem_get_info()
        return max(torch.cuda.max_memory_allocated(), total - free) / 1024**3

    return Meter(reset_peak=torch.cuda.reset_peak_memory_stats, peak_gib=peak)


class StopAfterCheckpoint(Exception):
    """Raised right after the first checkpoint, as a disconnect would stop the run there."""


def stop_after_first_checkpoint() -> Any:
    """A TrainerCallback that ends training by an exception once the first checkpoint is whole
    (after the course's own on_save callbacks: the adapter and the log are saved too)."""
    from transformers import TrainerCallback

    class Stop(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            raise StopAfterCheckpoint(f"stopped after the checkpoint of step {state.global_step}")

    return Stop()


class PhaseSteps:
    """The steps of each phase's process, one method a phase; nothing GPU-side is imported until
    a step runs, and the steps of one process share its model and tokenizer.

    `gpu=False` runs the same steps on a CPU with the smoke profile, without the vLLM checks
    (tests/test_gpu_check.py): notebook 05's trainer, stopped and resumed, with no GPU.
    """

    def __init__(self, args: argparse.Namespace, gpu: bool = True) -> None:
        self.args, self.gpu = args, gpu
        self.work = Path(args.work)
        self.run = RunFolder(self.work / "run")
        self.merged = self.work / "merged_16bit"
        self.profile = check_profile(args.profile, args.model, args.grpo_steps)
        self.fp16 = getattr(args, "precision", "auto") == "fp16"
        self.model: Any = None
        self.tokenizer: Any = None

    def steps(self, phase: str) -> list[Step]:
        """The steps of `phase`, in order: the method named after it."""
        return getattr(self, PHASES[phase].name)()

    # -- the phases --

    def train(self) -> list[Step]:
        return [Step("load_4bit_vllm", self.load_4bit_vllm),
                Step("lora", self.lora, ("load_4bit_vllm",)),
                Step("grpo_until_checkpoint", self.grpo_until_checkpoint, ("lora",)),
                Step("generate_base", lambda: self.generate("base", "base"), ("lora",))]

    def resume(self) -> list[Step]:
        return [Step("reload_base", self.load_4bit_vllm),
                Step("relora", self.lora, ("reload_base",)),
                Step("resume_grpo", self.resume_grpo, ("relora",)),
                Step("save_adapter", self.save_adapter, ("resume_grpo",)),
                Step("generate_adapter", lambda: self.generate("trained", "adapter"),
                     ("save_adapter",)),
                Step("evaluate_cache", self.evaluate_cache, ("save_adapter",))]

    def reload(self) -> list[Step]:
        return [Step("reload_adapter", self.reload_adapter),
                Step("generate_reloaded", self.generate_reloaded, ("reload_adapter",))]

    def merge(self) -> list[Step]:
        return [Step("load_16bit_merge", self.load_16bit_merge),
                Step("merge_16bit", self.merge_16bit, ("load_16bit_merge",))]

    def plain(self) -> list[Step]:
        return [Step("plain_transformers", self.plain_transformers)]

    # -- what the steps share --

    def dtype(self) -> Any:
        """torch.float16 under --precision fp16; None lets unsloth pick (the GPU's own)."""
        import torch

        return torch.float16 if self.fp16 else None

    def trainer(self, *extra: Any) -> Any:
        """Notebook 05's run: build_trainer with its own callbacks, and `extra` beside them."""
        from helpers.grpo_config import make_grpo_config
        from helpers.grpo_run import Instrument, build_trainer
        from helpers.hardware import detect_hardware

        hw = run_hardware(self.args.precision, detect_hardware())
        config = make_grpo_config(self.profile, hw, self.run.checkpoints,
                                  **grpo_overrides(self.args.grpo_steps))
        built = build_trainer(self.model, self.tokenizer, config, self.profile, self.run,
                              instrument=Instrument(callbacks=extra))
        if self.gpu and not type(built).__name__.startswith("Unsloth"):
            raise CheckFailed(f"{type(built).__name__} ran, not unsloth's patched trainer: "
                              "import unsloth before trl")
        if self.gpu and not built.args.use_vllm:
            raise CheckFailed("the trainer generates without vLLM (args.use_vllm is False)")
        if self.fp16 and not built.args.fp16:
            raise CheckFailed("--precision fp16, but the trainer's config has fp16=False")
        return built

    def generate(self, side: str, key: str) -> dict[str, Any]:
        from helpers.evaluation import build_prompts, decoding_settings, generate_side

        if self.gpu and getattr(self.model, "vllm_engine", None) is None:
            raise CheckFailed("the model has no vLLM engine: fast_inference did not start vLLM")
        prompts = build_prompts(self.tokenizer, QUESTIONS)
        decoding = decoding_settings(self.profile, max_new_tokens=MAX_NEW_TOKENS)
        outs = generate_side(self.model, self.tokenizer, prompts, decoding, side,
                             self.run.adapter)
        texts = [group[0].text for group in outs]
        if self.gpu and not all(t.strip() for t in texts):
            raise CheckFailed(f"an empty completion from fast_generate ({side}): {texts!r}")
        (self.work / f"{key}.json").write_text(json.dumps(texts))
        return {"completions": len(texts), "tokens": sum(g[0].num_tokens for g in outs)}

    # -- the steps --

    def load_4bit_vllm(self) -> dict[str, Any]:
        """The first vLLM start of a runtime: on a T4 it compiles (FlashInfer, CUDA graphs)."""
        from unsloth import FastLanguageModel

        from helpers.loading import load_kwargs, vllm_start_announced

        kwargs = load_kwargs(self.profile)
        if self.fp16:
            kwargs["dtype"] = self.dtype()
        with vllm_start_announced(self.profile):  # refuses a second engine; ticks while it starts
            self.model, self.tokenizer = FastLanguageModel.from_pretrained(**kwargs)
        if self.gpu and getattr(self.model, "vllm_engine", None) is None:
            raise CheckFailed("from_pretrained(fast_inference=True) returned no vLLM engine")
        return {"model": self.profile.model_name, "dtype": str(self.model.dtype)}

    def lora(self) -> dict[str, Any]:
        from unsloth import FastLanguageModel

        from helpers.loading import lora_kwargs

        self.model = FastLanguageModel.get_peft_model(self.model, **lora_kwargs(self.profile))
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        return {"trainable_params": trainable}

    def grpo_until_checkpoint(self) -> dict[str, Any]:
        from helpers.logs import HELDOUT_KEY
        from helpers.resume import latest_checkpoint, saved_adapter_step, train_or_resume

        built = self.trainer(stop_after_first_checkpoint())
        start = time.perf_counter()
        try:
            train_or_resume(built)
        except StopAfterCheckpoint:
            pass
        else:
            raise CheckFailed("training ended without saving a checkpoint at step 1")
        step = built.state.global_step
        if saved_adapter_step(self.run) != step:
            raise CheckFailed(f"AdapterCheckpoint did not save the adapter of step {step}")
        if not any(HELDOUT_KEY in e for e in built.state.log_history):
            raise CheckFailed("HeldOutAccuracy did not score the held-out problems before step 1")
        scaler = self.check_scaler(built, latest_checkpoint(self.run.checkpoints))
        return {"trainer": type(built).__name__, "stopped_at_step": step, "scaler_pt": scaler,
                "seconds": time.perf_counter() - start}

    def check_scaler(self, built: Any, checkpoint: Path | None) -> bool:
        """Whether `checkpoint` holds scaler.pt; on a GPU an fp16 run (a T4 under --precision
        auto too: the run's own precision, not the flag) must have saved it."""
        from helpers.resume import run_precision

        scaler = checkpoint is not None and (checkpoint / "scaler.pt").is_file()
        if self.gpu and run_precision(built.args) == "fp16" and not scaler:
            raise CheckFailed("fp16 training saved no scaler.pt: no GradScaler ran")
        return scaler

    def resume_grpo(self) -> dict[str, Any]:
        from helpers.logs import HELDOUT_KEY
        from helpers.resume import train_or_resume

        built = self.trainer()
        out = train_or_resume(built)  # prints "RESUMING from checkpoint-1 ..."
        log, steps = built.state.log_history, self.args.grpo_steps
        if built.state.global_step != steps:
            raise CheckFailed(f"the resumed run ended at step {built.state.global_step}")
        if not self.run.figure.is_file():
            raise CheckFailed("LivePlot saved no figure into the run folder")
        heldout = [e["step"] for e in log if HELDOUT_KEY in e]
        rewards = [e["reward"] for e in log if "reward" in e]
        return {"resumed_from": 1, "heldout_steps": ",".join(map(str, heldout)),
                "seconds_per_step": out.metrics["train_runtime"] / (steps - 1),
                "last_reward": float(rewards[-1]) if rewards else float("nan")}

    def save_adapter(self) -> dict[str, Any]:
        from helpers.resume import save_adapter

        steps = self.args.grpo_steps
        folder = save_adapter(self.model, self.tokenizer, self.run, steps, steps)
        return {"files": len(list(folder.iterdir()))}

    def evaluate_cache(self) -> dict[str, Any]:
        """Notebook 06's evaluation with its answer store: a second pass reuses every answer."""
        from helpers.data import load_gsm8k
        from helpers.evaluation import decoding_settings, evaluate

        rows = list(load_gsm8k("test", self.profile, limit=8))
        decoding = decoding_settings(self.profile, max_new_tokens=MAX_NEW_TOKENS)
        first = evaluate(self.model, self.tokenizer, rows, decoding, self.run.adapter,
                         store=self.run.answers)

        def refuse(*_: Any) -> Any:
            raise CheckFailed("the second evaluation generated again instead of reusing answers")

        again = evaluate(self.model, self.tokenizer, rows, decoding, self.run.adapter,
                         generate=refuse, store=self.run.answers)
        if again["scores"] != first["scores"]:
            raise CheckFailed("the reused answers scored differently")
        return {"problems": len(rows)}

    def reload_adapter(self) -> dict[str, Any]:
        from helpers.loading import load_trained

        self.model, self.tokenizer = load_trained(self.profile, self.run.adapter,
                                                  dtype=self.dtype())
        return {"fast_inference": self.profile.fast_inference}

    def generate_reloaded(self) -> dict[str, Any]:
        data = self.generate("trained", "reloaded")
        before = self.work / "adapter.json"  # written by generate_adapter, if it passed
        if not before.exists():
            return data
        after = json.loads((self.work / "reloaded.json").read_text())
        return {**data, "same_as_before_save": json.loads(before.read_text()) == after}

    def load_16bit_merge(self) -> dict[str, Any]:
        from helpers.loading import load_trained

        self.model, self.tokenizer = load_trained(self.profile, self.run.adapter,
                                                  fast_inference=False, dtype=self.dtype())
        return {}

    def merge_16bit(self) -> dict[str, Any]:
        from helpers.export import merge_to_16bit
        from helpers.hardware import detect_hardware

        folder = merge_to_16bit(self.model, self.tokenizer, self.run.adapter, self.merged,
                                self.profile, detect_hardware())
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        return {"gb_written": size / 1e9}

    def plain_transformers(self) -> dict[str, Any]:
        from helpers.export import transformers_generate

        texts = transformers_generate(self.merged, QUESTIONS, MAX_NEW_TOKENS)
        if "unsloth" in sys.modules:
            raise CheckFailed("unsloth was imported: the merged model must load without it")
        if not all(t.strip() for t in texts):
            raise CheckFailed(f"an empty answer from plain transformers: {texts!r}")
        return {"answers": len(texts)}


def run_phase_here(args: argparse.Namespace) -> int:
    """Inside a child process: run one phase's steps and write their results as JSON."""
    if args.phase != "plain":
        import unsloth  # noqa: F401  (first: it patches transformers, trl and peft)
    results = run_steps(PhaseSteps(args).steps(args.phase), cuda_meter())
    results_path(Path(args.work), args.phase).write_text(
        json.dumps([asdict(r) for r in results], indent=1))
    return 0


def gpu_facts() -> dict[str, Any]:
    """The GPU's name, memory and compute capability."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_gib": round(props.total_memory / 1024**3, 2),
            "compute_capability": f"{props.major}.{props.minor}"}


def versions() -> dict[str, str]:
    """The Python and the installed versions of the stack that matters here (the locks are
    checked for CPython 3.13 and 3.12: the report says which one ran)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("unsloth", "unsloth_zoo", "vllm", "torch", "transformers", "trl", "peft",
                 "bitsandbytes"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


# ---- The parent process: one child per phase --------------------------------------------------

def results_path(work: Path, phase: str) -> Path:
    return work / f"phase-{phase}.json"


def seconds_path(work: Path) -> Path:
    return work / "phase-seconds.json"


def saved_results(work: Path, phases: Sequence[str]) -> list[StepResult]:
    """The step results earlier commands left in `work` for `phases` (none for a missing one)."""
    found: list[StepResult] = []
    for phase in phases:
        path = results_path(work, phase)
        if path.is_file():
            found += [StepResult(**r) for r in json.loads(path.read_text())]
    return found


def saved_seconds(work: Path) -> dict[str, float]:
    """{phase: wall seconds} of the phases run so far in `work`."""
    path = seconds_path(work)
    return json.loads(path.read_text()) if path.is_file() else {}


def run_child(phase: str, args: argparse.Namespace) -> list[StepResult]:
    """Run one phase in a fresh Python process (`python -m scripts.gpu_check --child`) and read
    back its results."""
    command = [sys.executable, "-m", "scripts.gpu_check", "--child", "--phase", phase,
               "--work", str(args.work), "--profile", args.profile,
               "--grpo-steps", str(args.grpo_steps), "--precision", args.precision]
    if args.model is not None:
        command += ["--model", args.model]
    out = results_path(Path(args.work), phase)
    out.unlink(missing_ok=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, timeout=args.phase_timeout,
                              env=getattr(args, "child_env", None))
        why = f"the {phase} process exited with status {done.returncode}"
    except subprocess.TimeoutExpired:
        why = f"the {phase} process ran past --phase-timeout {args.phase_timeout} s"
    if out.exists():
        return [StepResult(**r) for r in json.loads(out.read_text())]
    first, *rest = PHASES[phase].steps
    return [StepResult(first, "fail", time.perf_counter() - start, None, why),
            *skipped(rest, f"{phase} process failed")]


def run_all(args: argparse.Namespace,
            child: Callable[[str, argparse.Namespace], list[StepResult]] = run_child,
            phases: Sequence[str] = tuple(PHASES), clock: Callable[[], float] = time.perf_counter,
            ) -> tuple[list[StepResult], dict[str, float]]:
    """`phases` in order (consecutive, as PHASES orders them), after the phases before them that
    earlier commands ran in --work: their results count for the needs, and a phase whose needs
    did not pass is skipped. Returns the results of every phase run so far and each one's wall
    seconds (saved in --work; a phase run again drops what the phases after it left)."""
    work = Path(args.work)
    before = list(PHASES)[: list(PHASES).index(phases[0])]
    seconds = {p: s for p, s in saved_seconds(work).items() if p in before}
    results = saved_results(work, [p for p in before if p in seconds])
    for phase in phases:
        passed = {r.name for r in results if r.status == "pass"}
        missing = [n for n in PHASES[phase].needs if n not in passed]
        if missing:
            results += skipped(PHASES[phase].steps, f"needs {', '.join(missing)}")
            continue
        start = clock()
        results += child(phase, args)
        seconds[phase] = round(clock() - start, 1)
        work.mkdir(parents=True, exist_ok=True)
        seconds_path(work).write_text(json.dumps(seconds))
        print(budget_line(phase, seconds[phase]), flush=True)
    return results, seconds


def budget_line(phase: str, seconds: float) -> str:
    """'phase train: 3.1 min of its 3.5 min budget' (OVER BUDGET when it is)."""
    budget = PHASES[phase].budget_s
    over = " OVER BUDGET" if seconds > budget else ""
    return f"phase {phase}: {minutes(seconds)} of its {minutes(budget)} budget{over}"


def clear_work(work: Path) -> None:
    """Remove what an earlier check left in the scratch folder (only the files it writes)."""
    for folder in (work / "run", work / "merged_16bit"):
        shutil.rmtree(folder, ignore_errors=True)
    for stale in work.glob("*.json"):
        stale.unlink()
    work.mkdir(parents=True, exist_ok=True)


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m scripts.gpu_check",
        description="Run the t4 path's GPU-only calls once, timed, phase by phase.")
    parser.add_argument("--profile", default=DEFAULT_PROFILE,
                        help=f"the profile whose calls and sizes to check ({DEFAULT_PROFILE})")
    parser.add_argument("--model", default=None,
                        help="a hub id or a local model folder instead of the profile's model; "
                        "offline, use a 16-bit folder (merging a -bnb-4bit one downloads its base)")
    parser.add_argument("--grpo-steps", type=int, default=DEFAULT_GRPO_STEPS,
                        help=f"GRPO steps: the first is checkpointed, the rest resumed "
                        f"({DEFAULT_GRPO_STEPS})")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto",
                        help="auto: the GPU's own (bf16 on Ampere+); fp16: the T4's path "
                        "(fp16 load, fp16=True, GradScaler, scaler.pt) on any GPU")
    parser.add_argument("--flashinfer", action="store_true",
                        help="build FlashInfer off a T4 too (1-3 min more, cold)")
    parser.add_argument("--phase", choices=list(PHASES),
                        help="run this phase only (train clears --work; later ones need the "
                        "phases before them to have passed there)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the phases, their commands and budgets; run nothing")
    parser.add_argument("--work", type=Path, default=OUT_DIR / "work",
                        help="scratch folder: adapter, merged model, phase results")
    parser.add_argument("--phase-timeout", type=int, default=1800, help="seconds per process")
    parser.add_argument("--out", type=Path, default=None,
                        help="the report's path; default runs/gpu-check/<gpu-name>.json")
    parser.add_argument("--no-readme", action="store_true", help="do not fill README's T4 slot")
    parser.add_argument("--fill-readme", type=Path, default=None, metavar="JSON",
                        help="only fill README's T4 slot from a saved T4 report, then exit")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser


def cuda_available() -> bool:
    """True when torch sees a CUDA GPU."""
    import torch

    return torch.cuda.is_available()


def main(argv: Sequence[str] | None = None, has_cuda: Callable[[], bool] = cuda_available) -> int:
    """Refuse without a GPU; else run the phases asked for, print the table and each phase
    against its budget, and write the report of every phase run so far."""
    args = build_parser().parse_args(argv)
    if args.fill_readme is not None:
        fill_readme(json.loads(args.fill_readme.read_text()))
        print(f"README's T4 slot filled from {args.fill_readme}.")
        return 0
    if args.dry_run:
        print(render_plan(args))
        return 0
    if not has_cuda():
        print(REFUSAL)
        return 1
    if args.child:
        return run_phase_here(args)
    work = Path(args.work)
    phases = [args.phase] if args.phase else list(PHASES)
    if phases[0] == "train":
        clear_work(work)
    gpu = gpu_facts()
    capability = tuple(int(x) for x in gpu["compute_capability"].split("."))
    args.child_env = child_environment(capability, args.flashinfer)
    results, seconds = run_all(args, phases=phases)
    settings = {"profile": args.profile, "model": check_profile(args.profile, args.model,
                                                                args.grpo_steps).model_name,
                "grpo_steps": args.grpo_steps, "precision": args.precision,
                "flashinfer": not flashinfer_off(capability, args.flashinfer),
                "command": " ".join(sys.argv)}
    report = build_report(results, gpu, settings, versions(), datetime.now(UTC),
                          sum(seconds.values()))
    report["phase_seconds"] = seconds
    report["phase_budget_seconds"] = {p: PHASES[p].budget_s for p in seconds}
    path = write_report(report, args.out or report_path(gpu["name"]))
    print(render_table(results))
    ran = [p for p in PHASES if p in seconds]
    budget = sum(PHASES[p].budget_s for p in ran)
    verdict = "PASSED" if report["passed"] else "FAILED"
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"\ngpu-check {verdict} on {gpu['name']} (phases run: {', '.join(ran) or 'none'}) in "
          f"{minutes(sum(seconds.values()))}, against a budget of {minutes(budget)}; "
          f"report: {shown}")
    if is_t4(report) and not args.no_readme and len(ran) == len(PHASES):
        fill_readme(report)
        print("README's T4 slot filled from the report.")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
