"""The same unsloth calls on every machine: only model name, sizes and fast_inference differ."""

import pytest

from helpers.loading import load_kwargs, lora_kwargs
from helpers.profiles import PROFILES

# What a profile may change. Everything else must be identical across profiles.
LOAD_MAY_DIFFER = {"model_name", "max_seq_length", "max_lora_rank", "fast_inference",
                   "gpu_memory_utilization"}
LORA_MAY_DIFFER = {"r", "lora_alpha"}


@pytest.fixture(scope="module")
def all_kwargs():
    return {n: (load_kwargs(p), lora_kwargs(p)) for n, p in PROFILES.items()}


def test_same_keyword_names_in_every_profile(all_kwargs):
    load_keys = {frozenset(load) for load, _ in all_kwargs.values()}
    lora_keys = {frozenset(lora) for _, lora in all_kwargs.values()}
    assert len(load_keys) == 1 and len(lora_keys) == 1


def test_only_names_sizes_and_fast_inference_differ(all_kwargs):
    reference_load, reference_lora = all_kwargs["t4"]
    for name, (load, lora) in all_kwargs.items():
        load_diff = {k for k in load if load[k] != reference_load[k]}
        lora_diff = {k for k in lora if lora[k] != reference_lora[k]}
        assert load_diff <= LOAD_MAY_DIFFER, (name, load_diff)
        assert lora_diff <= LORA_MAY_DIFFER, (name, lora_diff)


def test_everything_loads_in_4bit(all_kwargs):
    assert all(load["load_in_4bit"] is True for load, _ in all_kwargs.values())


def test_smoke_model_name_is_a_built_local_folder(all_kwargs):
    from pathlib import Path

    folder = Path(all_kwargs["smoke"][0]["model_name"])
    assert (folder / "config.json").exists() and (folder / "tokenizer.json").exists()
    assert not all_kwargs["smoke"][0]["fast_inference"]
