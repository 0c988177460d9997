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
    assert 50_000 < sum(p.numel() for p in loaded.parameters()) < 300_000


def test_warm_start_teaches_the_format_not_the_arithmetic(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.data import extract_gold_answer
    from helpers.synthetic import synthetic_split

    tokenizer = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built).eval()
    rows = synthetic_split("test", 8)
    well_formed = right = 0
    for row in rows:
        inputs = tokenizer.apply_chat_template(
            make_prompt(row["question"]),
            add_generation_prompt=True,
            return_dict=True,
            return_tensors="pt",
        )
        out = model.generate(**inputs, max_new_tokens=64, do_sample=False)
        text = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        well_formed += text.startswith("<reasoning>") and text.rstrip().endswith("</answer>")
        right += f"<answer>\n{extract_gold_answer(row['answer'])}\n</answer>" in text
    assert well_formed >= 6  # the shape of an answer...
    assert right <= 2  # ...but not arithmetic: GRPO has something to improve


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
