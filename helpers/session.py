"""The first code cell after the parameters: which machine, which profile, and why."""

from __future__ import annotations

from helpers.hardware import Hardware, choose_precision, detect_hardware, use_one_cpu_thread
from helpers.profiles import Profile, explain_choice, select_profile

SEED = 3407


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
    print(f"Hardware : {hw.describe()}")
    print(f"Profile  : {profile.name}, {explain_choice(hw, requested_profile)}")
    print(f"           {profile.summary}")
    print(f"Precision: {describe_precision(hw)}")
    return hw, profile


def describe_precision(hw: Hardware) -> str:
    """The trainer's precision flags; the weights' own dtype is a separate choice (notebook 00)."""
    precision = choose_precision(hw)
    flags = f"bf16={precision == 'bf16'}, fp16={precision == 'fp16'}"
    return f"trainer {precision} ({flags}); the weights' dtype is unsloth's choice at load"
