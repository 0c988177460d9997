"""`make gpu-check`: run the t4 path's GPU-only calls once on a real CUDA GPU, each one timed.

    python scripts/gpu_check.py                               # the t4 profile's model, from the hub
    python scripts/gpu_check.py --model /models/qwen2.5-1.5b  # offline: a local 16-bit model folder
    python scripts/gpu_check.py --fill-readme runs/gpu-check/tesla-t4.json   # README's T4 slot

CPU CI never runs these calls: unsloth takes a CPU backend there, and tests/test_gpu_contracts.py
only checks their signatures. So before tagging a release, a publisher runs this on a Colab T4.
It runs four fresh processes, as a learner's notebooks would:

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

Training uses GSM8K-format synthetic problems, so only the model needs the hub. It prints a
pass/fail table with each step's seconds and peak GPU memory, writes runs/gpu-check/<gpu>.json,
and on a T4 fills README's T4 slot from that JSON. With no CUDA GPU it refuses in one line.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `helpers` without installing the course

from helpers.run_folder import RunFolder  # noqa: E402  (no torch: the refusal stays instant)

OUT_DIR = ROOT / "runs" / "gpu-check"
README = ROOT / "README.md"
DEFAULT_PROFILE = "t4"
REFUSAL = (
    "gpu_check.py needs a CUDA GPU and this machine has none: run `make gpu-check` on a Colab T4 "
    "(or any NVIDIA GPU) after `python3 scripts/install_stack.py venv`."
)
# The steps of each process, in order, and the steps a process needs to have passed before it.
PHASES: dict[str, tuple[str, ...]] = {
    "train": ("load_4bit_vllm", "lora", "grpo_until_checkpoint", "generate_base"),
    "resume": ("reload_base", "relora", "resume_grpo", "save_adapter", "generate_adapter",
               "evaluate_cache"),
    "reload": ("reload_adapter", "generate_reloaded"),
    "merge": ("load_16bit_merge", "merge_16bit"),
    "plain": ("plain_transformers",),
}
PHASE_NEEDS: dict[str, tuple[str, ...]] = {
    "train": (), "resume": ("grpo_until_checkpoint",), "reload": ("save_adapter",),
    "merge": ("save_adapter",), "plain": ("merge_16bit",),
}
QUESTIONS = (  # GSM8K-style: the answers only need to be non-empty, not right
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
    "May. How many clips did Natalia sell altogether in April and May?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
    "How much did she earn?",
)
MAX_NEW_TOKENS = 64
SLOT_START = re.compile(r"<!-- T4 RESULTS:.*?-->\n", re.S)
SLOT_END = "<!-- /T4 RESULTS -->"


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


def grpo_overrides(grpo_steps: int) -> dict[str, int]:
    """make_grpo_config overrides: a few steps, a checkpoint after each (the first is resumed)."""
    return {"max_steps": grpo_steps, "save_steps": 1}


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


def phase_steps(phase: str, args: argparse.Namespace, gpu: bool = True) -> list[Step]:
    """The steps of one process; nothing is imported until a step runs.

    `gpu=False` runs the same steps on a CPU with the smoke profile, without the vLLM checks
    (tests/test_gpu_check.py): notebook 05's trainer, stopped and resumed, with no GPU.
    """
    work = Path(args.work)
    run = RunFolder(work / "run")
    merged = work / "merged_16bit"
    profile = check_profile(args.profile, args.model, args.grpo_steps)
    state: dict[str, Any] = {}

    def settings() -> Any:
        from helpers.evaluation import build_prompts, decoding_settings

        prompts = build_prompts(state["tokenizer"], QUESTIONS)
        return prompts, decoding_settings(profile, max_new_tokens=MAX_NEW_TOKENS)

    def generate(side: str, key: str) -> dict[str, Any]:
        from helpers.evaluation import generate_side

        if gpu and getattr(state["model"], "vllm_engine", None) is None:
            raise CheckFailed("the model has no vLLM engine: fast_inference did not start vLLM")
        prompts, decoding = settings()
        outs = generate_side(state["model"], state["tokenizer"], prompts, decoding, side,
                             run.adapter)
        texts = [group[0].text for group in outs]
        if gpu and not all(t.strip() for t in texts):
            raise CheckFailed(f"an empty completion from fast_generate ({side}): {texts!r}")
        (work / f"{key}.json").write_text(json.dumps(texts))
        return {"completions": len(texts), "tokens": sum(g[0].num_tokens for g in outs)}

    def load_4bit_vllm() -> dict[str, Any]:
        """The first vLLM start of a runtime: on a T4 it compiles (FlashInfer, CUDA graphs)."""
        from unsloth import FastLanguageModel

        from helpers.loading import load_kwargs

        state["model"], state["tokenizer"] = FastLanguageModel.from_pretrained(
            **load_kwargs(profile)
        )
        if gpu and getattr(state["model"], "vllm_engine", None) is None:
            raise CheckFailed("from_pretrained(fast_inference=True) returned no vLLM engine")
        return {"model": profile.model_name}

    def lora() -> dict[str, Any]:
        from unsloth import FastLanguageModel

        from helpers.loading import lora_kwargs

        state["model"] = FastLanguageModel.get_peft_model(state["model"], **lora_kwargs(profile))
        trainable = sum(p.numel() for p in state["model"].parameters() if p.requires_grad)
        return {"trainable_params": trainable}

    def trainer(*extra: Any) -> Any:
        """Notebook 05's run: build_trainer with the standard callbacks (helpers.grpo_run)."""
        from helpers.grpo_config import make_grpo_config
        from helpers.grpo_run import build_trainer, standard_callbacks
        from helpers.hardware import detect_hardware

        config = make_grpo_config(profile, detect_hardware(), run.checkpoints,
                                  **grpo_overrides(args.grpo_steps))
        callbacks = [*standard_callbacks(run, state["tokenizer"], profile, config), *extra]
        built = build_trainer(state["model"], state["tokenizer"], config, profile, run,
                              callbacks=callbacks)
        if gpu and not type(built).__name__.startswith("Unsloth"):
            raise CheckFailed(f"{type(built).__name__} ran, not unsloth's patched trainer: "
                              "import unsloth before trl")
        if gpu and not built.args.use_vllm:
            raise CheckFailed("the trainer generates without vLLM (args.use_vllm is False)")
        return built

    def grpo_until_checkpoint() -> dict[str, Any]:
        from helpers.logs import HELDOUT_KEY
        from helpers.resume import saved_adapter_step, train_or_resume

        built = trainer(stop_after_first_checkpoint())
        start = time.perf_counter()
        try:
            train_or_resume(built)
        except StopAfterCheckpoint:
            pass
        else:
            raise CheckFailed("training ended without saving a checkpoint at step 1")
        step = built.state.global_step
        if saved_adapter_step(run) != step:
            raise CheckFailed(f"AdapterCheckpoint did not save the adapter of step {step}")
        if not any(HELDOUT_KEY in e for e in built.state.log_history):
            raise CheckFailed("HeldOutAccuracy did not score the held-out problems before step 1")
        return {"trainer": type(built).__name__, "stopped_at_step": step,
                "seconds": time.perf_counter() - start}

    def resume() -> dict[str, Any]:
        from helpers.logs import HELDOUT_KEY
        from helpers.resume import train_or_resume

        built = trainer()
        out = train_or_resume(built)  # prints "RESUMING from checkpoint-1 ..."
        log = built.state.log_history
        if built.state.global_step != args.grpo_steps:
            raise CheckFailed(f"the resumed run ended at step {built.state.global_step}")
        if not run.figure.is_file():
            raise CheckFailed("LivePlot saved no figure into the run folder")
        heldout = [e["step"] for e in log if HELDOUT_KEY in e]
        rewards = [e["reward"] for e in log if "reward" in e]
        steps_run = args.grpo_steps - 1
        return {"resumed_from": 1, "heldout_steps": ",".join(map(str, heldout)),
                "seconds_per_step": out.metrics["train_runtime"] / steps_run,
                "last_reward": float(rewards[-1]) if rewards else float("nan")}

    def save_adapter() -> dict[str, Any]:
        from helpers.resume import save_adapter as save

        folder = save(state["model"], state["tokenizer"], run, args.grpo_steps, args.grpo_steps)
        return {"files": len(list(folder.iterdir()))}

    def evaluate_cache() -> dict[str, Any]:
        """Notebook 06's evaluation with its answer store: a second pass reuses every answer."""
        from helpers.data import load_gsm8k
        from helpers.evaluation import decoding_settings, evaluate

        rows = list(load_gsm8k("test", profile, limit=8))
        decoding = decoding_settings(profile, max_new_tokens=MAX_NEW_TOKENS)
        first = evaluate(state["model"], state["tokenizer"], rows, decoding, run.adapter,
                         store=run.answers)

        def refuse(*_: Any) -> Any:
            raise CheckFailed("the second evaluation generated again instead of reusing answers")

        again = evaluate(state["model"], state["tokenizer"], rows, decoding, run.adapter,
                         generate=refuse, store=run.answers)
        if again["scores"] != first["scores"]:
            raise CheckFailed("the reused answers scored differently")
        return {"problems": len(rows)}

    def reload_adapter() -> dict[str, Any]:
        from helpers.loading import load_trained

        state["model"], state["tokenizer"] = load_trained(profile, run.adapter)
        return {"fast_inference": profile.fast_inference}

    def generate_reloaded() -> dict[str, Any]:
        data = generate("trained", "reloaded")
        before = work / "adapter.json"  # written by generate_adapter, if it passed
        if not before.exists():
            return data
        after = json.loads((work / "reloaded.json").read_text())
        return {**data, "same_as_before_save": json.loads(before.read_text()) == after}

    def load_16bit_merge() -> dict[str, Any]:
        from helpers.loading import load_trained

        state["model"], state["tokenizer"] = load_trained(profile, run.adapter,
                                                          fast_inference=False)
        return {}

    def merge_16bit() -> dict[str, Any]:
        from helpers.export import merge_to_16bit
        from helpers.hardware import detect_hardware

        folder = merge_to_16bit(state["model"], state["tokenizer"], run.adapter, merged, profile,
                                detect_hardware())
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        return {"gb_written": size / 1e9}

    def plain_transformers() -> dict[str, Any]:
        from helpers.export import transformers_generate

        texts = transformers_generate(merged, QUESTIONS, MAX_NEW_TOKENS)
        if "unsloth" in sys.modules:
            raise CheckFailed("unsloth was imported: the merged model must load without it")
        if not all(t.strip() for t in texts):
            raise CheckFailed(f"an empty answer from plain transformers: {texts!r}")
        return {"answers": len(texts)}

    loaded = ("load_4bit_vllm",)
    steps = {
        "train": [Step("load_4bit_vllm", load_4bit_vllm), Step("lora", lora, loaded),
                  Step("grpo_until_checkpoint", grpo_until_checkpoint, ("lora",)),
                  Step("generate_base", lambda: generate("base", "base"), ("lora",))],
        "resume": [Step("reload_base", load_4bit_vllm), Step("relora", lora, ("reload_base",)),
                   Step("resume_grpo", resume, ("relora",)),
                   Step("save_adapter", save_adapter, ("resume_grpo",)),
                   Step("generate_adapter", lambda: generate("trained", "adapter"),
                        ("save_adapter",)),
                   Step("evaluate_cache", evaluate_cache, ("save_adapter",))],
        "reload": [Step("reload_adapter", reload_adapter),
                   Step("generate_reloaded", generate_reloaded, ("reload_adapter",))],
        "merge": [Step("load_16bit_merge", load_16bit_merge),
                  Step("merge_16bit", merge_16bit, ("load_16bit_merge",))],
        "plain": [Step("plain_transformers", plain_transformers)],
    }
    return steps[phase]


def run_phase_here(args: argparse.Namespace) -> int:
    """Inside a child process: run one phase's steps and write their results as JSON."""
    if args.phase != "plain":
        import unsloth  # noqa: F401  (first: it patches transformers, trl and peft)
    results = run_steps(phase_steps(args.phase, args), cuda_meter())
    out = Path(args.work) / f"phase-{args.phase}.json"
    out.write_text(json.dumps([asdict(r) for r in results], indent=1))
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

def run_child(phase: str, args: argparse.Namespace) -> list[StepResult]:
    """Run one phase in a fresh Python process and read back its results."""
    command = [sys.executable, str(Path(__file__).resolve()), "--phase", phase,
               "--work", str(args.work), "--profile", args.profile,
               "--grpo-steps", str(args.grpo_steps)]
    if args.model is not None:
        command += ["--model", args.model]
    out = Path(args.work) / f"phase-{phase}.json"
    out.unlink(missing_ok=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, timeout=args.phase_timeout)
        why = f"the {phase} process exited with status {done.returncode}"
    except subprocess.TimeoutExpired:
        why = f"the {phase} process ran past --phase-timeout {args.phase_timeout} s"
    if out.exists():
        return [StepResult(**r) for r in json.loads(out.read_text())]
    first, *rest = PHASES[phase]
    return [StepResult(first, "fail", time.perf_counter() - start, None, why),
            *skipped(rest, f"{phase} process failed")]


def run_all(args: argparse.Namespace,
            child: Callable[[str, argparse.Namespace], list[StepResult]] = run_child,
            ) -> list[StepResult]:
    """Every phase in order; a phase whose needs did not pass is skipped."""
    results: list[StepResult] = []
    for phase, names in PHASES.items():
        passed = {r.name for r in results if r.status == "pass"}
        missing = [n for n in PHASE_NEEDS[phase] if n not in passed]
        if missing:
            results += skipped(names, f"needs {', '.join(missing)}")
        else:
            results += child(phase, args)
    return results


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
        prog="gpu_check.py", description="Run the t4 path's GPU-only calls once, timed.")
    parser.add_argument("--profile", default=DEFAULT_PROFILE,
                        help=f"the profile whose calls and sizes to check ({DEFAULT_PROFILE})")
    parser.add_argument("--model", default=None,
                        help="a hub id or a local model folder instead of the profile's model; "
                        "offline, use a 16-bit folder (merging a -bnb-4bit one downloads its base)")
    parser.add_argument("--grpo-steps", type=int, default=3, help="GRPO steps to time (3)")
    parser.add_argument("--work", type=Path, default=OUT_DIR / "work",
                        help="scratch folder: adapter, merged model, phase results")
    parser.add_argument("--phase-timeout", type=int, default=1800, help="seconds per process")
    parser.add_argument("--out", type=Path, default=None,
                        help="the report's path; default runs/gpu-check/<gpu-name>.json")
    parser.add_argument("--no-readme", action="store_true", help="do not fill README's T4 slot")
    parser.add_argument("--fill-readme", type=Path, default=None, metavar="JSON",
                        help="only fill README's T4 slot from a saved T4 report, then exit")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    return parser


def cuda_available() -> bool:
    """True when torch sees a CUDA GPU."""
    import torch

    return torch.cuda.is_available()


def main(argv: Sequence[str] | None = None, has_cuda: Callable[[], bool] = cuda_available) -> int:
    """Refuse without a GPU; else run every phase, print the table, write the report."""
    args = build_parser().parse_args(argv)
    if args.fill_readme is not None:
        fill_readme(json.loads(args.fill_readme.read_text()))
        print(f"README's T4 slot filled from {args.fill_readme}.")
        return 0
    if not has_cuda():
        print(REFUSAL)
        return 1
    if args.phase is not None:
        return run_phase_here(args)
    clear_work(Path(args.work))
    start = time.perf_counter()
    results = run_all(args)
    wall = time.perf_counter() - start
    settings = {"profile": args.profile, "model": check_profile(args.profile, args.model,
                                                                args.grpo_steps).model_name,
                "grpo_steps": args.grpo_steps, "command": " ".join(sys.argv)}
    gpu = gpu_facts()
    report = build_report(results, gpu, settings, versions(), datetime.now(timezone.utc), wall)
    path = write_report(report, args.out or report_path(gpu["name"]))
    print(render_table(results))
    verdict = "PASSED" if report["passed"] else "FAILED"
    print(f"\ngpu-check {verdict} on {gpu['name']} in {wall / 60:.1f} min; "
          f"report: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if is_t4(report) and not args.no_readme:
        fill_readme(report)
        print("README's T4 slot filled from the report.")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
