"""The arguments of unsloth's two loading calls, built from a profile.

The notebooks call `FastLanguageModel.from_pretrained(**load_kwargs(profile))` and
`FastLanguageModel.get_peft_model(model, **lora_kwargs(profile))` on every machine: only the
model name, the sizes and `fast_inference` differ between profiles (a test checks this).
"""

from __future__ import annotations

from helpers.profiles import SMOKE_MODEL, Profile

# All attention and MLP projections, as unsloth's GRPO notebooks do.
LORA_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def resolve_model_name(profile: Profile) -> str:
    """A hub id, or for the smoke profile the folder of the locally built tiny model."""
    if profile.model_name == SMOKE_MODEL:
        from helpers.smoke_model import ensure_smoke_model

        return str(ensure_smoke_model())
    return profile.model_name


def load_kwargs(profile: Profile) -> dict[str, object]:
    """Keyword arguments for `FastLanguageModel.from_pretrained`."""
    return {
        "model_name": resolve_model_name(profile),
        "max_seq_length": profile.max_seq_length,
        "load_in_4bit": True,  # NF4 weights through bitsandbytes (it has CPU kernels too)
        "fast_inference": profile.fast_inference,  # vLLM generation: GPU only
        "max_lora_rank": profile.lora_rank,
        "gpu_memory_utilization": profile.gpu_memory_utilization,
    }


def lora_kwargs(profile: Profile) -> dict[str, object]:
    """Keyword arguments for `FastLanguageModel.get_peft_model`."""
    return {
        "r": profile.lora_rank,
        "lora_alpha": profile.lora_rank,  # alpha = r: a scale of 1, so r can change alone
        "target_modules": LORA_TARGET_MODULES,
        "use_gradient_checkpointing": "unsloth",  # recompute activations: less memory
        "random_state": 3407,
    }
