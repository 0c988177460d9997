"""The first code cell after the parameters: which machine, which profile, and why."""

from __future__ import annotations

from helpers.hardware import Hardware, choose_precision, detect_hardware
from helpers.profiles import Profile, explain_choice, select_profile

SEED = 3407


def start(requested_profile: str | None = None, seed: int = SEED) -> tuple[Hardware, Profile]:
    """Detect the hardware, pick and check the profile, seed everything, and say so."""
    from transformers import set_seed

    hw = detect_hardware()
    profile = select_profile(hw, requested_profile)
    set_seed(seed)
    print(f"Hardware : {hw.describe()}")
    print(f"Profile  : {profile.name}, {explain_choice(hw, requested_profile)}")
    print(f"           {profile.summary}")
    print(f"Precision: {choose_precision(hw)}")
    return hw, profile
