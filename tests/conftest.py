"""Shared test set-up. unsloth patches transformers, trl and peft on import, so it comes first in
every process that runs tests."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Import unsloth before any test module is collected, except in pytest-xdist's controller:
    it collects and runs nothing, and its import (about 4 s) would hold back the workers' start."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return
    import unsloth  # noqa: F401


@pytest.fixture(scope="session")
def random_lora_smoke_model():
    """Build the smoke model with LoRA whose B matrices are random (not zero), so the adapter
    visibly changes the answers; returns (model, tokenizer) ready for generation."""
    from unsloth import FastLanguageModel

    import torch

    from helpers.loading import load_kwargs, lora_kwargs
    from helpers.profiles import PROFILES

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
