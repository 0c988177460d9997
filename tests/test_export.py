"""Export: the adapter survives a save and a fresh process; the merged model needs no unsloth."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import export
from helpers.evaluation import DecodingSettings, build_prompts, generate_side
from helpers.export import (
    HUB_TOKEN_NAMES,
    DiskSpaceError,
    disk_need_gb,
    export_adapter,
    free_disk_gb,
    gguf_skip_reason,
    hub_token,
    merge_to_16bit,
    merged_dtype,
    preflight_disk,
    remove_gguf_intermediates,
    run_plain_transformers,
)
from helpers.hardware import A100_40GB, CPU_ONLY, TESLA_T4
from helpers.loading import check_base_exists, shorten_paths
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
from helpers.loading import load_trained
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
    files = export_adapter(model, tokenizer, adapter)
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

    from helpers.loading import resolve_model_name

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
    scale = SMOKE.lora_rank / SMOKE.lora_rank  # lora_alpha = r in helpers.loading.lora_kwargs
    expected = base.float() + scale * b @ a
    assert torch.allclose(got, expected, atol=0.02, rtol=0.02)
    assert not torch.allclose(got, base.float(), atol=0.02)

    # The CLI exits with an error if unsloth was imported in its process.
    completions = run_plain_transformers(merged, QUESTIONS[:2], max_new_tokens=8)
    assert len(completions) == 2 and all(isinstance(c, str) for c in completions)


def test_shorten_paths_keeps_only_the_course_relative_part():
    text = "/tmp/x/runs/smoke/adapter: its base /home/a/b/.cache/m, or /c/models/smoke."
    assert shorten_paths(text) == "runs/smoke/adapter: its base .cache/m, or models/smoke."


def test_an_adapter_whose_local_base_is_gone_names_the_fix(tmp_path):
    config = {"base_model_name_or_path": str(tmp_path / ".cache" / "smoke-model-old")}
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(FileNotFoundError, match="run notebook 05 again"):
        check_base_exists(tmp_path)


def test_gguf_is_opt_in_on_every_profile_and_needs_a_gpu_profile():
    for name, profile in PROFILES.items():
        off = gguf_skip_reason(profile, TESLA_T4, asked=False)
        assert off.startswith("GGUF export is off (EXPORT_GGUF = False") and "set it to True" in off
        assert "\n" not in off and off.count(". ") == 0, name  # one sentence: how, and the cost
    assert "about 7 GB of free disk" in gguf_skip_reason(PROFILES["t4"], TESLA_T4, asked=False)
    assert "llama.cpp" in gguf_skip_reason(SMOKE, CPU_ONLY, asked=True)
    assert "GPU profile only" in gguf_skip_reason(PROFILES["t4"], CPU_ONLY, asked=True)
    for name in ("t4", "t4-7b", "large"):  # asked for on a GPU: it runs (the disk check follows)
        assert gguf_skip_reason(PROFILES[name], A100_40GB, asked=True) is None


def notebook_07_gguf_cell() -> str:
    cells = json.loads((ROOT / "notebooks" / "07_save_and_use.ipynb").read_text())["cells"]
    return next("".join(c["source"]) for c in cells
                if c["cell_type"] == "code" and "export_gguf(" in "".join(c["source"]))


def test_07s_gguf_flag_is_at_the_top_of_its_cell_and_off():
    """The flag is the cell's first assignment (a Colab checkbox), False, and not a parameter."""
    first = next(line for line in notebook_07_gguf_cell().splitlines()
                 if not line.startswith("#"))
    assert first == 'EXPORT_GGUF = False  #@param {type:"boolean"}'
    params = json.loads((ROOT / "notebooks" / "07_save_and_use.ipynb").read_text())["cells"][2]
    assert "EXPORT_GGUF" not in "".join(params["source"])


def test_disk_need_follows_the_model_size():
    # Qwen2.5-Math-7B: 7.6B parameters, 15.2 GB in 16-bit; a merge downloads and writes one each.
    assert disk_need_gb(PROFILES["t4-7b"], "merge") == pytest.approx(30.5, abs=0.1)
    assert disk_need_gb(PROFILES["t4-7b"], "gguf") == pytest.approx(35.0, abs=0.1)
    assert disk_need_gb(PROFILES["t4-7b"], "gguf", "q8_0") > disk_need_gb(PROFILES["t4-7b"], "gguf")
    assert disk_need_gb(PROFILES["t4"], "merge") < 7
    with pytest.raises(ValueError, match="'merge' or 'gguf'"):
        disk_need_gb(SMOKE, "zip")


def test_disk_preflight_passes_when_it_fits(tmp_path, monkeypatch):
    assert free_disk_gb(tmp_path / "not" / "made" / "yet") > 0  # measured on the nearest parent
    monkeypatch.setattr(export, "free_disk_gb", lambda folder: 40.0)
    message = preflight_disk(PROFILES["t4-7b"], "gguf", tmp_path)
    assert message == "Disk check: the gguf needs about 35.0 GB, 40.0 GB is free."


def test_disk_preflight_refuses_what_wont_fit_with_the_fix_in_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "free_disk_gb", lambda folder: 20.0)
    with pytest.raises(DiskSpaceError) as error:
        preflight_disk(PROFILES["t4-7b"], "gguf", tmp_path)
    message = str(error.value)
    assert message.startswith("The gguf needs about 35.0 GB of free disk but 20.0 GB is free: ")
    assert "delete the merged_16bit folder" in message and "EXPORT_GGUF = False" in message
    assert "\n" not in message and message.count(". ") == 0
    with pytest.raises(DiskSpaceError, match="the adapter saved above is the whole result"):
        preflight_disk(PROFILES["t4-7b"], "merge", tmp_path)
    preflight_disk(PROFILES["t4"], "merge", tmp_path)  # the 1.5B's 6.2 GB fits in 20


def test_gguf_intermediates_are_removed_and_the_quantized_file_kept(tmp_path):
    merged = tmp_path / "gguf"
    (merged).mkdir()
    (merged / "model.safetensors").write_bytes(b"16-bit merge")
    out = tmp_path / "gguf_gguf"
    out.mkdir()
    for name in ("unsloth.BF16.gguf", "unsloth.Q4_K_M.gguf"):
        (out / name).write_bytes(b"gguf")
    assert remove_gguf_intermediates(merged, "q8_0") == []  # its file is not there: keep all
    assert sorted(remove_gguf_intermediates(merged, "q4_k_m")) == ["gguf/", "unsloth.BF16.gguf"]
    assert [p.name for p in out.iterdir()] == ["unsloth.Q4_K_M.gguf"] and not merged.exists()


def test_a_t4_loads_the_merged_model_in_fp16():
    assert merged_dtype(TESLA_T4) == "float16"
    assert merged_dtype(A100_40GB) == "auto"
    assert merged_dtype(CPU_ONLY) == "auto"


def test_the_evaluate_script_loads_a_merged_model_and_its_base_in_fp16_on_a_t4(monkeypatch):
    """`python -m scripts.evaluate --merged DIR` on a T4: both models in float16, as
    transformers_generate loads them (a bf16 merge cannot run there); elsewhere as saved.
    Before, both were loaded with dtype="auto"."""
    from types import SimpleNamespace

    import transformers

    from scripts import evaluate as ev

    loaded = []
    model = SimpleNamespace(eval=lambda: model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda path: "tokenizer")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda path, **kwargs: loaded.append(kwargs) or model)
    ev.load_merged(PROFILES["t4"], Path("merged"), TESLA_T4)
    assert loaded == [{"dtype": "float16", "device_map": "auto"}] * 2
    loaded.clear()
    ev.load_merged(PROFILES["t4"], Path("merged"), A100_40GB)
    assert loaded == [{"dtype": "auto", "device_map": "auto"}] * 2


def test_hub_token_comes_from_the_environment(monkeypatch):
    for name in HUB_TOKEN_NAMES:
        monkeypatch.delenv(name, raising=False)
    assert hub_token() is None  # no Colab here, no variable: no token, no push
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    assert hub_token() == "hf_not_a_real_token"


# ---- exports go to a staging folder and are renamed into place once finished ----------------


class Killed(BaseException):
    """A kill half-way through an export (nothing may catch it)."""


class WritesLikeUnsloth:
    """Stands in for unsloth's model: its save methods write what unsloth 2026.10.9 writes
    (the merge into the folder given; GGUF files into `<folder>_gguf`), or die half-way."""

    def __init__(self, die: bool = False) -> None:
        self.die = die

    def save_pretrained_merged(self, folder, tokenizer, save_method):
        Path(folder).mkdir(parents=True)
        (Path(folder) / "config.json").write_text("{}")
        if self.die:
            raise Killed
        (Path(folder) / "model.safetensors").write_bytes(b"weights")

    def save_pretrained_gguf(self, folder, tokenizer, quantization_method):
        self.save_pretrained_merged(folder, tokenizer, "merged_16bit")
        gguf = Path(f"{folder}_gguf")
        gguf.mkdir()
        for name in ("unsloth.BF16.gguf", f"unsloth.{quantization_method.upper()}.gguf"):
            (gguf / name).write_bytes(b"gguf")
        return "saved"


def test_a_merge_cut_off_leaves_no_finished_looking_folder_and_a_rerun_redoes_it(tmp_path, capsys):
    from helpers.hardware import TESLA_T4

    out = tmp_path / "export" / "merged_16bit"
    with pytest.raises(Killed):
        merge_to_16bit(WritesLikeUnsloth(die=True), None, tmp_path, out, SMOKE, TESLA_T4)
    assert not out.exists() and (tmp_path / "export" / "merged_16bit.partial").is_dir()
    merge_to_16bit(WritesLikeUnsloth(), None, tmp_path, out, SMOKE, TESLA_T4)
    assert "Removed the unfinished" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["merged_16bit"]


def test_gguf_export_keeps_only_the_quantized_file_in_a_finished_folder(tmp_path, capsys):
    from helpers.export import export_gguf

    out = tmp_path / "export" / "gguf"
    with pytest.raises(Killed):
        export_gguf(WritesLikeUnsloth(die=True), None, out)
    assert not out.exists()
    assert export_gguf(WritesLikeUnsloth(), None, out, "q4_k_m") == out
    assert [p.name for p in out.iterdir()] == ["unsloth.Q4_K_M.gguf"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["gguf"]
    assert "Deleted the intermediate copies: unsloth.BF16.gguf, gguf.partial/" in (
        capsys.readouterr().out)


def test_a_failed_gguf_export_is_one_line_and_notebook_07_goes_on(tmp_path, capsys):
    """Run all must not stop after the work is saved: 07's GGUF cell, run as it is on the page
    with an export that fails as a llama.cpp build does, prints one sentence and returns."""
    source = notebook_07_gguf_cell().replace("EXPORT_GGUF = False", "EXPORT_GGUF = True")

    def failing_export(*args, **kwargs):
        raise RuntimeError("Unsloth: Failed to compile llama.cpp\ncmake: command not found")

    page = {"GGUF_QUANTIZATION": "q4_k_m", "profile": PROFILES["t4"],
            "hw": TESLA_T4, "model": None, "tokenizer": None, "export_dir": tmp_path,
            "preflight_disk": lambda *args: "Disk check: enough room."}
    code = source.replace("from helpers.export import export_gguf, gguf_failure, gguf_skip_reason",
                          "from helpers.export import gguf_failure, gguf_skip_reason")
    exec(compile(code, "07-gguf-cell", "exec"), {**page, "export_gguf": failing_export})
    said = capsys.readouterr().out.strip().splitlines()
    assert said[0] == "Disk check: enough room." and len(said) == 2
    assert said[1].startswith("GGUF export stopped (RuntimeError: Unsloth: Failed to compile")
    assert "merged model above are saved" in said[1] and said[1].count(". ") == 0


def test_07s_gguf_cell_as_committed_exports_nothing_and_says_how_to_turn_it_on(tmp_path, capsys):
    def export_called(*args, **kwargs):
        raise AssertionError("the GGUF export ran although EXPORT_GGUF is False")

    code = notebook_07_gguf_cell().replace(
        "from helpers.export import export_gguf, gguf_failure, gguf_skip_reason",
        "from helpers.export import gguf_failure, gguf_skip_reason")
    page = {"GGUF_QUANTIZATION": "q4_k_m", "profile": PROFILES["t4"], "hw": TESLA_T4,
            "model": None, "tokenizer": None, "export_dir": tmp_path, "export_gguf": export_called,
            "preflight_disk": export_called}
    exec(compile(code, "07-gguf-cell", "exec"), page)
    said = capsys.readouterr().out.strip().splitlines()
    assert said == [gguf_skip_reason(PROFILES["t4"], TESLA_T4, asked=False)]
