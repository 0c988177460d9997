"""The offline tiny model: built once, tags are plain tokens, and it survives save and load."""

import pytest
import torch

from helpers.data import FORMAT_TAGS, make_prompt
from helpers.smoke_model import RECIPE, ensure_smoke_model, smoke_model_dir


@pytest.fixture(scope="module")
def built():
    return ensure_smoke_model()  # the shared cache: built once per machine


def test_build_is_cached(built):
    stamp = (built / "config.json").stat().st_mtime_ns
    assert ensure_smoke_model() == built
    assert (built / "config.json").stat().st_mtime_ns == stamp
    assert not list(built.parent.glob(f"{built.name}.partial*"))


def test_recipe_change_means_a_new_folder(tmp_path, monkeypatch):
    before = smoke_model_dir(tmp_path)
    monkeypatch.setitem(RECIPE, "hidden_size", 32)
    assert smoke_model_dir(tmp_path) != before


def test_round_trip_gives_identical_logits(built, tmp_path):
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(built).eval()
    loaded.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, reloaded(ids).logits)
    assert 500_000 < sum(p.numel() for p in loaded.parameters()) < 2_000_000


def test_warm_start_lands_in_its_accuracy_band(built):
    """Format learned, and some answers right, some wrong: GRPO's groups need both to learn."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.data import extract_gold_answer
    from helpers.evaluation import DecodingSettings, build_prompts, generate_hf, score
    from helpers.synthetic import synthetic_split

    tokenizer = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built).eval()
    rows = synthetic_split("test", 100)
    prompts = build_prompts(tokenizer, [row["question"] for row in rows])
    settings = DecodingSettings(max_new_tokens=48, batch_size=50)
    generations = generate_hf(model, tokenizer, prompts, settings, "warm start")
    report = score(generations, [extract_gold_answer(row["answer"]) for row in rows])
    assert report["format_rate"] >= 0.95
    assert 0.25 <= report["strict"]["accuracy"] <= 0.55, report["strict"]


def test_numbers_are_one_token_per_digit(built):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built)
    for text in ["47+8 = <<47+8=55>>55", "1234", " 90 apples"]:
        pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode(text, add_special_tokens=False))
        digits = [p for p in pieces if any(ch.isdigit() for ch in p)]
        assert all(len(p) == 1 for p in digits), pieces


def test_format_tags_are_single_non_special_tokens(built):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built)
    for tag in FORMAT_TAGS:
        ids = tokenizer.encode(tag, add_special_tokens=False)
        assert len(ids) == 1, tag
        # skip_special_tokens=True (how trl decodes completions) must keep the tag.
        assert tokenizer.decode(ids, skip_special_tokens=True) == tag


def test_chat_template_and_inputs_generate_accepts(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
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
