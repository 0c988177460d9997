"""Profiles: one named set of sizes and knobs per class of hardware.

The notebooks' code is the same everywhere; only the numbers in the chosen profile change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from helpers.hardware import Hardware

SEED = 3407  # the course's seed: data order, sampling, LoRA init (a lab run uses its own)
SMOKE_MODEL = "local:smoke"  # built offline by helpers.smoke_model, see resolve_model_name()


class ProfileError(ValueError):
    """A profile that does not exist, or cannot run on this hardware."""


class TrainingConfigError(ValueError):
    """A training setting that would fail later; the message names the fix."""


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
    # Held-out problems the training notebook scores during training (HeldOutAccuracy): on the
    # smoke profile the evaluation notebook's own set, so its first and last scores match.
    heldout_during_training: int
    synthetic_data: bool  # True: the offline generator stands in for GSM8K
    # For the learner: what the profile is for, and its T4 time per step (low, high) with a source.
    purpose: str = ""
    t4_seconds_per_step: tuple[float, float] | None = None  # None: not a T4 profile
    # The completion budget (tokens) those seconds were estimated at. Every T4 time scales them by
    # max_completion_length / t4_step_tokens (t4_step_seconds), so a new budget moves them all.
    t4_step_tokens: int | None = None
    time_source: str = ""

    def __post_init__(self) -> None:
        if (self.t4_seconds_per_step is None) != (self.t4_step_tokens is None):
            raise ValueError(
                f"Profile '{self.name}': set t4_seconds_per_step and t4_step_tokens together (the "
                "seconds, and the completion tokens they were estimated at), or neither.")

    @property
    def max_seq_length(self) -> int:
        return self.max_prompt_length + self.max_completion_length


# CPU and CI: the tiny offline model on one-step synthetic problems. Groups of 8 (4 prompts a
# step) give correctness a spread; 60 steps at lr 1e-3 raise held-out strict accuracy by 10+ points
# (README: the spread over seeds; tests/test_smoke_promise.py and notebook 06 assert it).
SMOKE = Profile(
    name="smoke",
    summary="CPU/offline: a tiny model built locally, one-step synthetic GSM8K-format problems",
    model_name=SMOKE_MODEL,
    min_vram_gb=0,
    max_prompt_length=96,
    max_completion_length=48,
    lora_rank=16,
    fast_inference=False,
    gpu_memory_utilization=0.5,
    num_generations=8,
    per_device_train_batch_size=32,
    gradient_accumulation_steps=1,
    learning_rate=1e-3,
    max_steps=60,
    optim="adamw_torch",
    max_grad_norm=1.0,
    num_train_problems=2000,
    num_eval_problems=200,
    heldout_during_training=200,
    synthetic_data=True,
)

# Published T4 step times that the estimates below are based on (vLLM, 4-bit, LoRA).
# Qwen2.5-3B-Instruct: G=8, 200 tokens; Llama-3.1-8B-Instruct: G=6, 768 tokens (peers-2026 notes).
_T4_3B_RUN = "unsloth's Qwen2.5-3B GRPO notebook on a T4, 24.2 s/step"
_T4_8B_RUN = "unsloth's Llama-3.1-8B GRPO notebook on a T4, 55.0 s/step"

# The free-Colab default: a small instruct model whose strict GSM8K accuracy starts low (peers saw
# 1.7%), so there is something to learn, with a step count that fits one free session.
T4 = Profile(
    name="t4",
    summary="free Colab T4 (16 GB): Qwen2.5-1.5B-Instruct in 4-bit with LoRA and vLLM",
    model_name="unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit",
    min_vram_gb=14,
    max_prompt_length=256,
    max_completion_length=256,  # t4-7b sets its own: a change here does not move it
    lora_rank=32,
    fast_inference=True,
    gpu_memory_utilization=0.5,
    num_generations=4,
    per_device_train_batch_size=1,
    gradient_accumulation_steps=4,
    learning_rate=5e-6,
    max_steps=150,
    optim="adamw_8bit",
    max_grad_norm=0.1,
    num_train_problems=7473,
    num_eval_problems=200,
    heldout_during_training=32,  # seconds a measurement with vLLM
    synthetic_data=False,
    purpose="the default on a free T4: finishes in one session, and starts low enough to learn",
    # At 256 tokens the 3B run's 24.2 s (200 tokens) scaled by half the model and half the group
    # is 7.7 s: the range leaves room above it.
    t4_seconds_per_step=(10, 20),
    t4_step_tokens=256,
    time_source=f"estimate, not measured; half the model and group of {_T4_3B_RUN}",
)

# The seeds' T4 choice: a math-tuned 7B. It already scores ~95% on GSM8K, so GRPO mostly
# teaches it the answer tags; its steps are 2-3x slower than the default's.
T4_MATH_7B = replace(
    T4,
    name="t4-7b",
    summary="T4, slower: Qwen2.5-Math-7B-Instruct in 4-bit; already ~95% on GSM8K",
    model_name="unsloth/Qwen2.5-Math-7B-Instruct-bnb-4bit",
    max_completion_length=256,
    lora_rank=16,
    gpu_memory_utilization=0.6,
    max_steps=250,
    purpose="a math-tuned 7B: already ~95% on GSM8K, so the gain is mostly the answer format",
    t4_seconds_per_step=(30, 50),
    t4_step_tokens=256,
    time_source=f"estimate, not measured; between {_T4_3B_RUN} and {_T4_8B_RUN}",
)

# Ampere or newer with 24 GB: an 8B model, longer answers, bigger groups.
LARGE = replace(
    T4_MATH_7B,
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
    heldout_during_training=64,
    purpose="larger GPUs: an 8B general model with longer answers and groups of 8",
    t4_seconds_per_step=None,
    t4_step_tokens=None,
    time_source=f"it needs 22 GB, more than a T4; for scale, {_T4_8B_RUN}",
)

PROFILES: dict[str, Profile] = {p.name: p for p in [SMOKE, T4, T4_MATH_7B, LARGE]}


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


def t4_step_seconds(profile: Profile) -> tuple[float, float] | None:
    """Seconds per T4 step (low, high) at the profile's own completion budget, or None."""
    if profile.t4_seconds_per_step is None or profile.t4_step_tokens is None:
        return None
    # Generation dominates a GRPO step, and its time grows with the tokens generated.
    scale = profile.max_completion_length / profile.t4_step_tokens
    low, high = profile.t4_seconds_per_step
    return low * scale, high * scale


def expected_t4_minutes(profile: Profile, max_steps: int | None = None) -> tuple[int, int] | None:
    """Training minutes on a T4 (low, high) for `max_steps` (default: the profile's), or None."""
    seconds = t4_step_seconds(profile)
    if seconds is None:
        return None
    steps = max_steps or profile.max_steps
    low, high = seconds
    return round(steps * low / 60), round(steps * high / 60)


def describe_expected_time(profile: Profile, max_steps: int | None = None) -> str:
    """One sentence: the expected T4 training time and where the figure comes from."""
    minutes = expected_t4_minutes(profile, max_steps)
    if minutes is None:
        why = profile.time_source or "it runs on CPU"
        return f"No T4 time for the {profile.name} profile: {why}."
    low, high = t4_step_seconds(profile) or (0, 0)
    steps = max_steps or profile.max_steps
    return (
        f"Expected on a T4: {steps} steps x {low:g}-{high:g} s = {minutes[0]}-{minutes[1]} min of "
        f"training ({profile.time_source}); the install and the model's load come on top (the "
        "notebook's Time line counts them)."
    )


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
