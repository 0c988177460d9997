"""Export: the adapter survives a save and a fresh process; the merged model needs no unsloth."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from helpers.evaluation import DecodingSettings, build_prompts, generate_side
from helpers.export import (
    HUB_TOKEN_NAMES,
    check_base_exists,
    gguf_skip_reason,
    hub_token,
    merge_to_16bit,
    run_plain_transformers,
    save_adapter,
    shorten_paths,
)
from helpers.hardware import CPU_ONLY, TESLA_T4
from helpers.paths import ROOT
from helpers.profiles import PROFILES
from helpers.synthetic import synthetic_split

SMOKE = PROFILES["smoke"]
QUESTIONS = [row["question"] for row in synthetic_split("test", 3)]
SETTINGS = DecodingSettings(max_new_tokens=8, batch_size=3)

# Runs in a fresh interpreter: nothing of the test process (weights, caches, patches) carries over.
RELOAD_AND_ANSWER = """
import json, sys
from pathlib import Path
from helpers.evaluation import DecodingSettings, build_prompts, generate_side
from helpers.export import load_trained
from helpers.profiles import PROFILES
adapter, questions = Path(sys.argv[1]), json.loads(sys.argv[2])
settings = DecodingSettings(**json.loads(sys.argv[3]))
model, tokenizer = load_trained(PROFILES["smoke"], adapter)
prompts = build_prompts(tokenizer, questions)
out = generate_side(model, tokenizer, prompts, settings, "trained", adapter)
print(json.dumps([samples[0].text for samples in out]))
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory, random_lora_smoke_model):
    """The smoke model with a random (so clearly non-zero) LoRA adapter, saved to disk."""
    model, tokenizer = random_lora_smoke_model(seed=1)
    adapter = tmp_path_factory.mktemp("export") / "adapter"
    files = save_adapter(model, tokenizer, adapter)
    assert "adapter_model.safetensors" in files and "adapter_config.json" in files
    return model, tokenizer, adapter


def answers(model, tokenizer, side: str, adapter) -> list[str]:
    prompts = build_prompts(tokenizer, QUESTIONS)
    return [s[0].text for s in generate_side(model, tokenizer, prompts, SETTINGS, side, adapter)]


def test_adapter_round_trip_gives_identical_greedy_answers_in_a_fresh_process(trained):
    model, tokenizer, adapter = trained
    before = answers(model, tokenizer, "trained", adapter)
    assert before != answers(model, tokenizer, "base", adapter)  # the adapter changes answers
    done = subprocess.run(
        [sys.executable, "-c", RELOAD_AND_ANSWER, str(adapter), json.dumps(QUESTIONS),
         json.dumps(dataclasses.asdict(SETTINGS))],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    after = json.loads(done.stdout.strip().splitlines()[-1])
    assert after == before


def test_merged_model_holds_the_lora_delta_and_runs_without_unsloth(trained, tmp_path):
    import torch
    from safetensors.torch import load_file

    from helpers.model import resolve_model_name

    model, tokenizer, adapter = trained
    merged = merge_to_16bit(model, tokenizer, adapter, tmp_path / "merged", SMOKE, CPU_ONLY)
    assert not (merged / "adapter_config.json").exists()
    assert "quantization_config" not in json.loads((merged / "config.json").read_text())

    # W_merged = W_base + (alpha / r) * B @ A, within 16-bit rounding.
    name = "model.layers.0.self_attn.q_proj"
    base = load_file(f"{resolve_model_name(SMOKE)}/model.safetensors")[f"{name}.weight"]
    lora = load_file(adapter / "adapter_model.safetensors")
    a = lora[f"base_model.model.{name}.lora_A.weight"].float()
    b = lora[f"base_model.model.{name}.lora_B.weight"].float()
    got = load_file(merged / "model.safetensors")[f"{name}.weight"].float()
    scale = SMOKE.lora_rank / SMOKE.lora_rank  # lora_alpha = r in helpers.model.lora_kwargs
    expected = base.float() + scale * b @ a
    assert torch.allclose(got, expected, atol=0.02, rtol=0.02)
    assert not torch.allclose(got, base.float(), atol=0.02)

    # The CLI exits with an error if unsloth was imported in its process.
    completions = run_plain_transformers(merged, QUESTIONS[:2], max_new_tokens=8)
    assert len(completions) == 2 and all(isinstance(c, str) for c in completions)


def test_shorten_paths_keeps_only_the_course_relative_part():
    text = "/tmp/x/runs/smoke/adapter is an adapter; its base: /home/a/b/.cache/m first."
    assert shorten_paths(text) == "runs/smoke/adapter is an adapter; its base: .cache/m first."


def test_an_adapter_whose_local_base_is_gone_names_the_fix(tmp_path):
    config = {"base_model_name_or_path": str(tmp_path / ".cache" / "smoke-model-old")}
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(FileNotFoundError, match="run notebook 04 again"):
        check_base_exists(tmp_path)


def test_gguf_runs_only_on_gpu_profiles():
    assert "llama.cpp" in gguf_skip_reason(SMOKE, CPU_ONLY)
    assert gguf_skip_reason(PROFILES["t4"], TESLA_T4) is None


def test_hub_token_comes_from_the_environment(monkeypatch):
    for name in HUB_TOKEN_NAMES:
        monkeypatch.delenv(name, raising=False)
    assert hub_token() is None  # no Colab here, no variable: no token, no push
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    assert hub_token() == "hf_not_a_real_token"
