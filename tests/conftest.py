"""Shared test set-up. unsloth patches transformers, trl and peft on import, so it comes first."""

from unsloth import FastLanguageModel

import pytest
import torch

from helpers.loading import load_kwargs, lora_kwargs
from helpers.profiles import PROFILES


@pytest.fixture(scope="session")
def random_lora_smoke_model():
    """Build the smoke model with LoRA whose B matrices are random (not zero), so the adapter
    visibly changes the answers; returns (model, tokenizer) ready for generation."""

    def build(seed: int):
        profile = PROFILES["smoke"]
        model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(profile))
        model = FastLanguageModel.get_peft_model(model, **lora_kwargs(profile))
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
        FastLanguageModel.for_inference(model)
        return model, tokenizer

    return build
