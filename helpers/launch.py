"""How a run is launched: one process with unsloth, or several with transformers + peft.

unsloth trains on one device only, so `plan_run` picks transformers + peft (the same 4-bit base and
LoRA settings) for several processes (DDP, DeepSpeed ZeRO) or a vLLM server; notebook 10 shows it.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from helpers.hardware import Hardware
from helpers.loading import load_unsloth
from helpers.profiles import SEED, Profile, TrainingConfigError

Backend = Literal["unsloth", "peft"]


@dataclass(frozen=True)
class Plan:
    """How this process trains: which library loads the model, and whether the base is 4-bit."""

    backend: Backend
    load_in_4bit: bool
    world_size: int
    why: str

    def import_backend(self) -> None:
        """Import unsloth when the plan names it, before trl, transformers and peft are imported:
        it patches them on import, and does nothing to modules already loaded."""
        if self.backend == "unsloth":
            import unsloth  # noqa: F401


def plan_run(profile: Profile, world_size: int = 1, vllm_server: bool = False) -> Plan:
    """The one place that picks unsloth or transformers + peft, and 4-bit or 16-bit weights.
    The caller then calls `Plan.import_backend` before it imports trl.

    A vLLM server serves the same weights it receives, so a pre-quantized 4-bit model cannot be
    used with one: that is refused here, before anything loads.
    """
    if vllm_server and "bnb-4bit" in profile.model_name:
        raise TrainingConfigError(
            f"--vllm-server-host needs a 16-bit model that vLLM serves too, not "
            f"{profile.model_name}: download the 16-bit one (huggingface-cli download "
            "<id> --local-dir DIR) and pass --model DIR here and to `trl vllm-serve --model`."
        )
    if world_size == 1 and not vllm_server:
        if importlib.util.find_spec("unsloth") is None:
            return Plan("peft", True, 1,
                        "one process without unsloth (Colab's light install): transformers + "
                        "peft load the same 4-bit base and LoRA settings as notebook 05")
        return Plan("unsloth", True, 1, "one process: unsloth, exactly as notebook 05")
    if vllm_server:
        return Plan(
            "peft", False, world_size,
            "vLLM server mode: trl merges LoRA into the base and sends the weights to the "
            "server, which needs 16-bit weights, not packed 4-bit ones; unsloth does not do "
            "server mode, so transformers + peft load a 16-bit base",
        )
    return Plan(
        "peft", True, world_size,
        f"{world_size} processes: unsloth trains on one device only, so transformers + peft "
        "load the same 4-bit base (bitsandbytes NF4, on CPU too) and the same LoRA settings",
    )


def world_size_from_env() -> int:
    """How many processes `accelerate launch` (or torchrun) started; 1 under plain python."""
    return int(os.environ.get("WORLD_SIZE", "1"))


BNB_4BIT_SUFFIXES = ("-unsloth-bnb-4bit", "-bnb-4bit")  # unsloth's pre-quantized repos


def zero3_requested(env: Mapping[str, str]) -> bool:
    """True under `accelerate launch` with DeepSpeed ZeRO stage 3 (by flag or JSON config)."""
    if env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() != "true":
        return False
    if env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE"):
        return env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    config = env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if not config:
        return False
    return json.loads(Path(config).read_text()).get("zero_optimization", {}).get("stage") == 3


def zero3_base(model_name: str) -> str:
    """The 16-bit model that ZeRO-3 quantizes on load: a `-bnb-4bit` id without its suffix.

    For a pre-quantized checkpoint transformers ignores the BitsAndBytesConfig passed in and
    keeps its packed uint8 storage, so `bnb_4bit_quant_storage` (which lets ZeRO-3 shard 4-bit
    weights like the others) applies only to weights quantized on load.
    """
    for suffix in BNB_4BIT_SUFFIXES:
        if model_name.endswith(suffix):
            return model_name.removesuffix(suffix)
    config = Path(model_name) / "config.json"
    if config.is_file() and "quantization_config" in json.loads(config.read_text()):
        raise ValueError(
            f"ZeRO-3 quantizes the model on load, but {model_name} is already quantized: pass "
            "--model with the 16-bit model's folder or hub id instead."
        )
    return model_name


def load_peft(profile: Profile, hw: Hardware, load_in_4bit: bool,
              seed: int = SEED) -> tuple[Any, Any]:
    """The same base and LoRA settings (helpers.loading) through transformers + peft; `seed`
    draws the LoRA init (a lab run passes its own)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    from helpers.loading import load_kwargs, lora_kwargs

    load, lora = load_kwargs(profile), lora_kwargs(profile)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[hw.precision]
    quantization = None
    if load_in_4bit:
        quantization = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=dtype,
            bnb_4bit_quant_storage=dtype,  # lets ZeRO-3 shard the packed weights like others
        )
    name = load["model_name"]
    if load_in_4bit and zero3_requested(os.environ):
        name = zero3_base(name)
        print(f"ZeRO-3: quantizing {name} on load, so that bnb_4bit_quant_storage applies")
    # No device_map: accelerate has already picked this process's GPU (bitsandbytes loads
    # there); DeepSpeed places the weights itself.
    model = AutoModelForCausalLM.from_pretrained(
        name, dtype=dtype, quantization_config=quantization
    )
    tokenizer = AutoTokenizer.from_pretrained(name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(seed)  # the same LoRA init on every rank, as unsloth seeds it
    adapter = LoraConfig(
        r=lora["r"], lora_alpha=lora["lora_alpha"], target_modules=lora["target_modules"],
        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
    )
    return get_peft_model(model, adapter), tokenizer


def load_model(profile: Profile, hw: Hardware, plan: Plan, seed: int = SEED) -> tuple[Any, Any]:
    """Model with LoRA, and tokenizer, through the library the plan names; `seed` draws the LoRA
    init."""
    if plan.backend == "unsloth":
        return load_unsloth(profile, seed)
    return load_peft(profile, hw, plan.load_in_4bit, seed)
