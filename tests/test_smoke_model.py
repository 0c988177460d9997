"""The offline tiny model: built once, tags are plain tokens, and it survives save and load."""

import pytest
import torch

from helpers.data import FORMAT_TAGS, make_prompt
from helpers.smoke_model import RECIPE, ensure_smoke_model, smoke_model_dir


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    return root, ensure_smoke_model(root)


def test_build_is_cached(built):
    root, folder = built
    stamp = (folder / "config.json").stat().st_mtime_ns
    assert ensure_smoke_model(root) == folder
    assert (folder / "config.json").stat().st_mtime_ns == stamp
    assert not list(root.glob("*.partial*"))


def test_recipe_change_means_a_new_folder(tmp_path, monkeypatch):
    before = smoke_model_dir(tmp_path)
    monkeypatch.setitem(RECIPE, "hidden_size", 32)
    assert smoke_model_dir(tmp_path) != before


def test_round_trip_gives_identical_logits(built):
    from transformers import AutoModelForCausalLM

    from helpers.smoke_model import build_model, build_tokenizer

    _, folder = built
    fresh = build_model(build_tokenizer()).eval()
    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, loaded(ids).logits)
    assert 50_000 < sum(p.numel() for p in loaded.parameters()) < 300_000


def test_format_tags_are_single_non_special_tokens(built):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built[1])
    for tag in FORMAT_TAGS:
        ids = tokenizer.encode(tag, add_special_tokens=False)
        assert len(ids) == 1, tag
        # skip_special_tokens=True (how trl decodes completions) must keep the tag.
        assert tokenizer.decode(ids, skip_special_tokens=True) == tag


def test_chat_template_and_inputs_generate_accepts(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built[1])
    model = AutoModelForCausalLM.from_pretrained(built[1])
    inputs = tokenizer.apply_chat_template(
        make_prompt("What is 2+2?"),
        add_generation_prompt=True,
        return_dict=True,
        return_tensors="pt",
    )
    assert set(inputs) == {"input_ids", "attention_mask"}  # no token_type_ids
    text = tokenizer.decode(inputs["input_ids"][0])
    assert text.endswith("<|im_start|>assistant\n") and "What is 2+2?" in text
    out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4 or tokenizer.eos_token_id in out[0]
