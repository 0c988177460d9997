"""The GRPO run's config from a profile, and the checks that run before anything loads."""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from helpers.hardware import Hardware
from helpers.memory import ARCHITECTURES, estimate
from helpers.profiles import SEED, SMOKE_MODEL, Profile, TrainingConfigError

if TYPE_CHECKING:
    from trl import GRPOConfig


KNOWN_MODELS = frozenset(ARCHITECTURES)


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


# What each GRPOConfig field the course sets does, or costs: written once, here. Notebook 05's
# config cell carries the same words as comments (tests/test_teaching.py compares them), and
# explain_config prints them beside the values.
KNOB_NOTES = {
    "output_dir": "checkpoints live inside the run folder",
    "num_generations": "G answers per prompt: time and KV cache x G",
    "per_device_train_batch_size": "completions per pass",
    "gradient_accumulation_steps": "passes per update",
    "max_prompt_length": "longer prompts are dropped from the data",
    "max_completion_length": "answer budget: too short truncates",
    "temperature": "sample freely: a group needs different answers to compare",
    "loss_type": "average over every completion token of the step (the DAPO paper)",
    "scale_rewards": "advantage = (reward - group mean) / group std",
    "beta": "no KL penalty: no reference model to hold in memory or run",
    "epsilon": "clip the new/old probability ratio below at 1 - epsilon (0.8)",
    "epsilon_high": "and above at 1 + epsilon_high (1.2; unsloth's dapo would use 1.28)",
    "mask_truncated_completions": "cut-off answers still count (unsloth's dapo: True)",
    "num_iterations": "one update per batch of completions: the ratio is exactly 1",
    "learning_rate": "~5e-6 for real models; the tiny smoke model needs more",
    "lr_scheduler_type": "decay towards 0 after the warm-up",
    "warmup_ratio": "the first 10% of steps ramp up: avoids an early blow-up",
    "optim": "adamw_8bit on GPUs: MBs saved with LoRA (notebook 05, section 2)",
    "weight_decay": "trl's default (unsloth's GPU default is 0.001)",
    "max_grad_norm": "clip each update's size",
    "max_steps": "optimizer steps: time grows linearly",
    "seed": "the same data order and samples on every rerun",
    "bf16": "bfloat16 mixed precision: Ampere or newer",
    "fp16": "float16 mixed precision: the T4's; both False on a CPU",
    "use_cpu": "the smoke profile trains on the CPU",
    "reward_weights": "total reward = weighted sum (notebook 05, section 3)",
    "save_steps": "a disconnect loses at most this many steps",
    "save_total_limit": "the newest checkpoint and one spare",
    "logging_steps": "log every step, for the live plot",
    "log_completions": "the course keeps its own completion table (notebook 05, section 9)",
    "report_to": "no wandb or tensorboard account needed",
    "push_to_hub": "nothing leaves this machine",
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


def checkpoint_every(max_steps: int) -> int:
    """Save about three times a run, and at least every 25 steps (minutes apart on a T4)."""
    return max(1, min(25, max_steps // 3))


def heldout_every(max_steps: int) -> int:
    """Score held-out accuracy about four times a run (and before the first step)."""
    return max(1, max_steps // 4)


def grpo_settings(profile: Profile, hw: Hardware, output_dir: str | Path, **overrides: Any) -> dict:
    """The GRPOConfig keyword arguments for `profile` on `hw`: the same for every caller.

    What each field does is in KNOB_NOTES; the comments here say why a value is set explicitly.
    """
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
        "beta": 0.0,
        # The loss, set explicitly (all four are trl 0.22.2's defaults), so CPU and GPU agree.
        "loss_type": "dapo",
        "scale_rewards": "group",
        "epsilon": 0.2,
        # unsloth's GRPOConfig turns an explicit loss_type="dapo" into the DAPO paper's recipe
        # (epsilon_high=0.28, mask_truncated_completions=True) unless these two are given.
        "epsilon_high": 0.2,
        "mask_truncated_completions": False,
        "num_iterations": 1,
        "weight_decay": 0.0,  # set, or unsloth's GRPOConfig would use 0.001 on a GPU
        "temperature": 1.0,
        "bf16": hw.precision == "bf16",
        "fp16": hw.precision == "fp16",
        "use_cpu": not hw.cuda,
        "logging_steps": 1,
        # Rotation runs after a save is whole, so one would do; two keep a spare if Drive loses
        # part of the newest (and a resume passes over an incomplete one: helpers.resume).
        "save_total_limit": 2,
        "report_to": "none",
        "push_to_hub": False,
        "log_completions": False,
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
    if settings.get("bf16") and hw.precision != "bf16":
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
    """'field=value (course: value)' for every field where two GRPOConfigs differ."""
    ours, theirs = config.to_dict(), reference.to_dict()
    return [
        f"{name}={ours.get(name)!r} (course: {theirs.get(name)!r})"
        for name in sorted((set(ours) | set(theirs)) - PER_INSTANCE_FIELDS)
        if ours.get(name) != theirs.get(name)
    ]


def compare_with_course(
    config: GRPOConfig, profile: Profile, hw: Hardware, output_dir: str | Path, **overrides: Any
) -> str:
    """One line naming each field of `config` that differs from the course's config (the one
    scripts/train_grpo.py trains), after checking that the edited config can run here."""
    page = {name: getattr(config, name) for name in KNOB_NOTES}
    validate(profile, hw, {name: getattr(v, "value", v) for name, v in page.items()})  # enums
    differences = config_differences(config, make_grpo_config(profile, hw, output_dir, **overrides))
    if not differences:
        return f"The course's config for {profile.name}: the one scripts/train_grpo.py trains."
    return f"Your changes to the course's settings: {'; '.join(differences)}"
