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


GIB = 1024**3
T4_TOTAL = int(14.74 * GIB)  # what a Colab T4 reports (helpers.hardware.TESLA_T4)


@pytest.fixture
def t4_memory(monkeypatch):
    """torch.cuda.mem_get_info stood in: the (free, total) bytes a T4 reports, set by the test.
    A fresh process holds its CUDA context; after a fast_inference load on the t4 profile, vLLM
    keeps 0.5 x free of the memory (unsloth_zoo vllm_utils.py:2585-2587) and the model more."""
    import torch

    memory = {"free": T4_TOTAL - int(0.4 * GIB)}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (memory["free"], T4_TOTAL))
    return memory


def test_vllm_first_start_is_announced_on_a_cuda_t4_only(capsys, t4_memory):
    """A T4 load with fast_inference says what compiles, for how long, and the fallback; the
    smoke profile, or a GPU profile on a CPU, says nothing."""
    from helpers.hardware import CPU_ONLY, TESLA_T4
    from helpers.loading import vllm_start_announced, vllm_start_note

    note = vllm_start_note(PROFILES["t4"], TESLA_T4, environ={})
    for words in ("FlashInfer", "sm75", "unsloth_compiled_cache", "inductor", "CUDA-graph",
                  "3-10 min", "estimate", "once per runtime", 'UNSLOTH_VLLM_NO_FLASHINFER"] = "1"'):
        assert words in note, words
    assert "\n" not in note
    assert vllm_start_note(PROFILES["smoke"], TESLA_T4) is None
    assert vllm_start_note(PROFILES["t4"], CPU_ONLY) is None
    triton = vllm_start_note(PROFILES["t4"], TESLA_T4, environ={"UNSLOTH_VLLM_NO_FLASHINFER": "1"})
    assert "FlashInfer's" not in triton and "Triton" in triton

    import time

    with vllm_start_announced(PROFILES["t4"], TESLA_T4, every=0.05):
        time.sleep(0.18)  # the blocking load
    said = capsys.readouterr().out.splitlines()
    assert said[0] == vllm_start_note(PROFILES["t4"], TESLA_T4)
    assert said[1].startswith("... vLLM still starting: 0 min 00 s so far")  # the ticker
    assert said[-1] == "vLLM started in 0.0 min." and len(said) >= 3
    for profile, hw in ((PROFILES["smoke"], TESLA_T4), (PROFILES["t4"], CPU_ONLY)):
        with vllm_start_announced(profile, hw, every=0.01):
            time.sleep(0.05)
        assert capsys.readouterr().out == ""


def test_a_second_vllm_start_in_one_session_stops_with_one_sentence(capsys, t4_memory):
    """Rerunning notebook 05's load cell (or Run all after an error) without a restart: the first
    engine and model still hold about half the T4, so unsloth would size the second engine from
    what is left. Before, nothing stopped it: the load went on squeezed, and ran out of memory
    later with no hint."""
    from helpers.hardware import TESLA_T4
    from helpers.loading import vllm_start_announced

    loaded = []
    with vllm_start_announced(PROFILES["t4"], TESLA_T4):  # a fresh runtime: 14.3 GiB free
        loaded.append("first")
    t4_memory["free"] = int(6.9 * GIB)  # vLLM's 7.4 GiB pool and the CUDA context still held
    capsys.readouterr()
    with pytest.raises(RuntimeError) as caught, vllm_start_announced(PROFILES["t4"], TESLA_T4):
        loaded.append("second")
    assert loaded == ["first"]  # the second load never started
    assert type(caught.value).__name__ == "GpuInUseError"
    sentence = str(caught.value)
    assert sentence.count(". ") == 0 and "\n" not in sentence
    assert sentence.startswith("7.8 of this GPU's 14.7 GiB are already in use")
    assert "vLLM in 3.4 GiB instead of the 7.4 GiB" in sentence
    # device-wide free memory: another process (a workstation's second kernel) is named too
    assert "by this process or another one" in sentence and "nvidia-smi" in sentence
    assert sentence.endswith("Runtime → Restart session, then Run all; elsewhere, stop the other "
                             "process or restart Python, then run again.")
    assert "vLLM's first start" not in capsys.readouterr().out  # refused before announcing
