"""The first code cell after the parameters: which machine, which profile, and why."""

from __future__ import annotations

import os
import textwrap

from helpers.course import COLAB_GPU, needs_gpu
from helpers.hardware import Hardware, detect_hardware, use_one_cpu_thread
from helpers.paths import on_colab
from helpers.profiles import SEED, Profile, explain_choice, select_profile

NOTEBOOK_ENV = "GRPO_NOTEBOOK"  # set by each notebook's bootstrap cell: its helpers/course.py key
BOX_WIDTH = 76


def seed_everything(seed: int) -> None:
    """Python, NumPy and torch RNGs (without importing transformers before unsloth)."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def start(requested_profile: str | None = None, seed: int = SEED) -> tuple[Hardware, Profile]:
    """Detect the hardware, pick and check the profile, seed everything, and say so.

    On CPU, torch gets one thread: the smoke model's matrices are too small to split.
    """
    hw = detect_hardware()
    profile = select_profile(hw, requested_profile)
    seed_everything(seed)
    use_one_cpu_thread(hw)
    if warns_no_gpu(hw, requested_profile, on_colab(), os.environ.get(NOTEBOOK_ENV, "")):
        print(no_gpu_warning(profile.name))
    print(f"Hardware : {hw.describe()}")
    print(f"Profile  : {profile.name}, {explain_choice(hw, requested_profile)}")
    print(f"           {profile.summary}")
    print(f"Precision: {describe_precision(hw)}")
    print(f"Run      : {describe_run(seed)}")
    return hw, profile


STACK = ("torch", "transformers", "trl", "peft")  # what the outputs depend on most


def stack_versions() -> dict[str, str]:
    """The installed version of each STACK package ("not installed" where missing)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "not installed"

    return {package: installed(package) for package in STACK}


def describe_run(seed: int) -> str:
    """Today's date, the Python and the stack's versions, and the seed: where this notebook's
    outputs come from (the web book repeats it under the page's title)."""
    import platform
    from datetime import UTC, datetime

    stack = ", ".join(f"{name} {found}" for name, found in stack_versions().items())
    return (f"{datetime.now(UTC):%Y-%m-%d}, Python {platform.python_version()}, {stack}; "
            f"seed {seed}")


def describe_precision(hw: Hardware) -> str:
    """The trainer's precision flags; the weights' own dtype is a separate choice (notebook 00)."""
    flags = f"bf16={hw.precision == 'bf16'}, fp16={hw.precision == 'fp16'}"
    return f"trainer {hw.precision} ({flags}); the weights' dtype is unsloth's choice at load"


def warns_no_gpu(hw: Hardware, requested_profile: str | None, colab: bool, notebook: str) -> bool:
    """True on Colab without a GPU, for a notebook that needs one (or an unknown one), unless a
    profile was chosen on purpose (PROFILE, or $GRPO_PROFILE)."""
    if hw.cuda or not colab or requested_profile or os.environ.get("GRPO_PROFILE"):
        return False
    try:
        return not notebook or needs_gpu(notebook)
    except KeyError:
        return True


def boxed(paragraphs: list[str], width: int = BOX_WIDTH) -> str:
    """Paragraphs wrapped inside a box drawn with box-drawing characters."""
    inner = width - 4
    lines = [line for p in paragraphs for line in [*textwrap.wrap(p, inner), ""]][:-1]
    return "\n".join([f"╔{'═' * (width - 2)}╗", *(f"║ {line:<{inner}} ║" for line in lines),
                      f"╚{'═' * (width - 2)}╝"])


def no_gpu_warning(profile_name: str) -> str:
    """The loud warning for a GPU notebook on a Colab runtime without a GPU."""
    return boxed([
        "NO GPU IN THIS COLAB RUNTIME.",
        f"This notebook is meant for a GPU, so the course switched to the tiny CPU model (profile "
        f"'{profile_name}'). That only checks that the code runs: it is not the real run, and "
        "its numbers say nothing about GSM8K.",
        f"Fix: Runtime → Change runtime type → {COLAB_GPU} GPU → Save, then Runtime → Run all.",
        f'To run the CPU check on purpose, set PROFILE = "{profile_name}" in the parameters cell.',
    ])


def solution_runs(profile: Profile, cost: str, run_anyway: bool = False) -> bool:
    """Whether a costly solution runs now: always on the CPU smoke profile (CI runs every one),
    on a GPU profile only when asked, so that Run all spends no quota on work nobody asked for.

    `cost` says what it does, e.g. "trains two more steps (about a minute on a T4)".
    """
    if profile.name == "smoke" or run_anyway:
        return True
    print(f"Skipped on the {profile.name} profile: this solution {cost}. To run it, set "
          "run_anyway=True in the line above and run this cell again.")
    return False
