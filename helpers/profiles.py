"""Profiles: one named set of sizes and knobs per class of hardware.

The notebooks' code is the same everywhere; only the numbers in the chosen profile change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from helpers.hardware import Hardware

SMOKE_MODEL = "local:smoke"  # built offline by helpers.smoke_model, see resolve_model_name()


class ProfileError(ValueError):
    """A profile that does not exist, or cannot run on this hardware."""


@dataclass(frozen=True)
class Profile:
    """Everything that differs between a CPU smoke run and a real GPU run."""

    name: str
    summary: str
    model_name: str
    min_vram_gb: float  # 0 means: runs on CPU
    # Sequence budget (tokens).
    max_prompt_length: int
    max_completion_length: int
    # LoRA and vLLM.
    lora_rank: int
    fast_inference: bool
    gpu_memory_utilization: float
    # GRPO knobs. Batch sizes count completions, not prompts.
    num_generations: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    learning_rate: float
    max_steps: int
    optim: str
    max_grad_norm: float
    # Data sizes: how many problems to train and evaluate on.
    num_train_problems: int
    num_eval_problems: int
    synthetic_data: bool  # True: the offline generator stands in for GSM8K

    @property
    def max_seq_length(self) -> int:
        return self.max_prompt_length + self.max_completion_length


# CPU and CI: the tiny offline model, short answers, and a lr big enough to move it.
SMOKE = Profile(
    name="smoke",
    summary="CPU/offline: a tiny model built locally and synthetic GSM8K-format problems",
    model_name=SMOKE_MODEL,
    min_vram_gb=0,
    max_prompt_length=160,
    max_completion_length=64,
    lora_rank=8,
    fast_inference=False,
    gpu_memory_utilization=0.5,
    num_generations=4,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=1,
    learning_rate=5e-3,
    max_steps=30,
    optim="adamw_torch",
    max_grad_norm=1.0,
    num_train_problems=256,
    num_eval_problems=32,
    synthetic_data=True,
)

# The seeds' T4 choice: a math-tuned 7B in 4-bit, with the design card's GRPO defaults.
T4 = Profile(
    name="t4",
    summary="free Colab T4 (16 GB): Qwen2.5-Math-7B-Instruct in 4-bit with LoRA and vLLM",
    model_name="unsloth/Qwen2.5-Math-7B-Instruct-bnb-4bit",
    min_vram_gb=14,
    max_prompt_length=256,
    max_completion_length=256,
    lora_rank=16,
    fast_inference=True,
    gpu_memory_utilization=0.6,
    num_generations=4,
    per_device_train_batch_size=1,
    gradient_accumulation_steps=4,
    learning_rate=5e-6,
    max_steps=250,
    optim="adamw_8bit",
    max_grad_norm=0.1,
    num_train_problems=7473,
    num_eval_problems=200,
    synthetic_data=False,
)

# The T4 fallback: a smaller model, so faster steps and more memory headroom.
T4_SMALL = replace(
    T4,
    name="t4-1.5b",
    summary="T4 fallback: Qwen2.5-1.5B-Instruct, faster steps and more memory headroom",
    model_name="unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit",
    lora_rank=32,
    gpu_memory_utilization=0.5,
)

# Ampere or newer with 24 GB: an 8B model, longer answers, bigger groups.
LARGE = replace(
    T4,
    name="large",
    summary="24 GB+ Ampere or newer (L4, A10, A100): Llama-3.1-8B-Instruct, longer answers",
    model_name="unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit",
    min_vram_gb=22,
    max_completion_length=512,
    lora_rank=32,
    num_generations=8,
    gradient_accumulation_steps=8,
    max_steps=500,
    num_eval_problems=500,
)

PROFILES: dict[str, Profile] = {p.name: p for p in [SMOKE, T4, T4_SMALL, LARGE]}


def default_profile_name(hw: Hardware) -> str:
    """The profile the hardware calls for when nobody asks for one."""
    if not hw.cuda:
        return "smoke"
    if hw.vram_gb >= PROFILES["large"].min_vram_gb and (hw.compute_capability or (0, 0)) >= (8, 0):
        return "large"
    return "t4"


def check_fits(profile: Profile, hw: Hardware) -> None:
    """Raise a one-line ProfileError if `profile` cannot run on `hw`."""
    if profile.min_vram_gb == 0:
        return
    if not hw.cuda:
        raise ProfileError(
            f"Profile '{profile.name}' needs a CUDA GPU and none was found: on Colab choose "
            "Runtime > Change runtime type > T4 GPU, or set GRPO_PROFILE=smoke to run on CPU."
        )
    if hw.vram_gb < profile.min_vram_gb:
        fallback = default_profile_name(hw)
        raise ProfileError(
            f"Profile '{profile.name}' needs {profile.min_vram_gb:g} GB of GPU memory but "
            f"{hw.gpu_name} has {hw.vram_gb:.1f} GB: set GRPO_PROFILE={fallback} (or smoke)."
        )


def select_profile(hw: Hardware, requested: str | None = None) -> Profile:
    """Pick the profile: `requested`, else $GRPO_PROFILE, else what the hardware calls for."""
    name = requested or os.environ.get("GRPO_PROFILE") or default_profile_name(hw)
    if name not in PROFILES:
        raise ProfileError(
            f"Unknown profile '{name}': choose one of {', '.join(PROFILES)} "
            "(set GRPO_PROFILE or the notebook's PROFILE parameter)."
        )
    profile = PROFILES[name]
    check_fits(profile, hw)
    return profile


def explain_choice(hw: Hardware, requested: str | None = None) -> str:
    """Why this profile: for the setup notebook."""
    if requested:
        return f"asked for by the notebook's PROFILE parameter ({requested!r})"
    if os.environ.get("GRPO_PROFILE"):
        return f"asked for by GRPO_PROFILE={os.environ['GRPO_PROFILE']!r}"
    return f"the default for this hardware ({hw.describe()})"


def profiles_table(profiles) -> str:
    """A fixed-width comparison of profiles, one per line."""
    header = f"{'profile':<8} {'model':<42} {'GPU GB':>6} {'tokens':>8} {'r':>3} {'G':>2}"
    header += f" {'batch':>6}"
    rows = [header + f" {'lr':>7} {'steps':>5} vLLM"]
    for p in profiles:
        model = "tiny Qwen2, built offline" if p.model_name == SMOKE_MODEL else p.model_name
        model = model.removeprefix("unsloth/")
        tokens = f"{p.max_prompt_length}+{p.max_completion_length}"
        batch = f"{p.per_device_train_batch_size}x{p.gradient_accumulation_steps}"
        rows.append(
            f"{p.name:<8} {model:<42} {p.min_vram_gb or '-':>6} {tokens:>8} {p.lora_rank:>3} "
            f"{p.num_generations:>2} {batch:>6} {p.learning_rate:>7.0e} {p.max_steps:>5} "
            f"{'yes' if p.fast_inference else 'no'}"
        )
    return "\n".join(rows)
