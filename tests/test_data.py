"""GSM8K data: the gold answer, the GRPO columns, prompt lengths and the overlong-prompt filter."""

from __future__ import annotations

import pytest

from helpers.data import (
    ANSWER_END,
    ANSWER_START,
    SYSTEM_PROMPT,
    extract_gold_answer,
    filter_long_prompts,
    length_stats,
    load_gsm8k,
    normalize_number,
    prompt_lengths,
    prompt_token_count,
    to_grpo_dataset,
    to_grpo_example,
)
from helpers.profiles import PROFILES

SMOKE = PROFILES["smoke"]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from helpers.smoke_model import ensure_smoke_model

    return AutoTokenizer.from_pretrained(ensure_smoke_model())


@pytest.fixture(scope="module")
def dataset():
    return to_grpo_dataset(load_gsm8k("train", SMOKE, limit=64))


@pytest.mark.parametrize(
    ("answer_text", "gold"),
    [
        ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "72"),
        ("#### 1,000", "1000"),
        ("#### 1,234,567", "1234567"),
        ("#### -3", "-3"),
        ("#### 2.50", "2.5"),
        ("#### 0.5", "0.5"),
        ("#### 72.0", "72"),
        ("#### $18", "18"),
        ("####72", "72"),
        ("#### 72\n", "72"),
        ("#### 72.", "72"),
        ("#### +5", "5"),
        ("#### -0.0", "0"),
        ("first #### 3\nthen #### 4", "4"),
    ],
)
def test_extract_gold_answer(answer_text, gold):
    assert extract_gold_answer(answer_text) == gold


@pytest.mark.parametrize("bad", ["72", "", None, "# 72", "the answer is 72"])
def test_extract_gold_answer_without_marker_names_the_format(bad):
    with pytest.raises(ValueError, match="'####'"):
        extract_gold_answer(bad)


@pytest.mark.parametrize("bad", ["#### ", "####", "#### \n  "])
def test_extract_gold_answer_with_nothing_after_the_marker(bad):
    with pytest.raises(ValueError, match="Nothing after"):
        extract_gold_answer(bad)


def test_normalize_number_keeps_non_numbers():
    assert normalize_number(" -3.50 ") == "-3.5"
    assert normalize_number("5 apples") == "5 apples"


def test_grpo_columns(dataset):
    assert dataset.column_names == ["prompt", "answer"]
    row = to_grpo_example({"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"})
    assert row == {
        "prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                   {"role": "user", "content": "What is 2 + 2?"}],
        "answer": "4",
    }
    assert all(a.lstrip("-").replace(".", "").isdigit() for a in dataset["answer"])


def test_prompt_token_count_is_what_the_model_sees(tokenizer, dataset):
    prompt = dataset[0]["prompt"]
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    assert prompt_token_count(prompt, tokenizer) == len(ids)
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n" + SYSTEM_PROMPT)
    assert text.endswith("<|im_start|>assistant\n")


def test_format_tags_survive_decoding_so_rewards_can_fire(tokenizer):
    ids = tokenizer(f"{ANSWER_START}72{ANSWER_END}", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<answer>72</answer>"


def test_length_stats():
    stats = length_stats([10, 20, 30, 40, 200], budget=35)
    assert stats == {"count": 5, "min": 10, "mean": 60.0, "median": 30, "p95": 200, "max": 200,
                     "budget": 35, "over_budget": 2}
    assert length_stats([7], budget=7)["over_budget"] == 0
    with pytest.raises(ValueError, match="empty"):
        length_stats([], budget=1)


def test_filter_drops_exactly_the_overlong_prompts(tokenizer, dataset):
    lengths = prompt_lengths(dataset, tokenizer)
    budget = sorted(lengths)[len(lengths) // 2]
    kept = filter_long_prompts(dataset, tokenizer, budget)
    assert len(kept) == sum(n <= budget for n in lengths) < len(dataset)
    assert max(prompt_lengths(kept, tokenizer)) <= budget
    # Precomputed lengths give the same result without tokenizing again.
    assert kept["answer"] == filter_long_prompts(dataset, None, budget, lengths)["answer"]


def test_every_smoke_prompt_fits_the_smoke_budget(tokenizer, dataset):
    stats = length_stats(prompt_lengths(dataset, tokenizer), SMOKE.max_prompt_length)
    assert stats["over_budget"] == 0
    assert len(filter_long_prompts(dataset, tokenizer, SMOKE.max_prompt_length)) == len(dataset)


def test_filter_errors_name_the_fix(tokenizer, dataset):
    with pytest.raises(ValueError, match="raise the profile's max_prompt_length"):
        filter_long_prompts(dataset, tokenizer, 5)
    with pytest.raises(ValueError, match="positive"):
        filter_long_prompts(dataset, tokenizer, 0)
    with pytest.raises(ValueError, match="lengths for"):
        filter_long_prompts(dataset, tokenizer, 100, lengths=[1, 2])
    with pytest.raises(ValueError, match="to_grpo_dataset"):
        prompt_lengths(load_gsm8k("train", SMOKE, limit=2), tokenizer)


def test_prompt_length_histogram(tokenizer, dataset):
    import matplotlib

    matplotlib.use("Agg")
    from helpers.plotting import plot_prompt_lengths

    lengths = prompt_lengths(dataset, tokenizer)
    fig = plot_prompt_lengths(lengths, budget=min(lengths))
    ax = fig.axes[0]
    assert sum(patch.get_height() for patch in ax.patches) == len(lengths)
    assert f"({sum(n > min(lengths) for n in lengths)} over)" in ax.get_legend().texts[0].get_text()
