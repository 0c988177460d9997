"""The reward functions on hand-written completions, in a thread, and inside trl's GRPOTrainer.

The specification is two tables: CASES, each a completion, its gold answer and strict/lenient
correctness, and EXPECTED, each reward's unweighted score on every case, keyed by reward name.
Cases named `peer-bug:` are inputs on which a widely copied GSM8K reward gives the wrong value (see
notebook 03 for the buggy code).
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from math_verify import parse, verify

from helpers.rewards import (
    MAX_SCAN_CHARS,
    REWARD_FUNCS,
    REWARD_WEIGHTS,
    REWARDS,
    TAG_REPEAT_PENALTY,
    TRAILING_PENALTY_CAP,
    Reward,
    completion_text,
    correctness_reward,
    extract_answer,
    is_correct,
    reward_named,
    reward_table_markdown,
    score_table,
    tag_count_reward,
)

REASONING = (
    "<reasoning>\nNatalia sold 48/2 = 24 clips in May.\nIn total 48 + 24 = 72.\n</reasoning>\n"
)
GOOD = REASONING + "<answer>\n72\n</answer>"


def with_answer(span: str) -> str:
    """The taught layout around an answer span."""
    return f"{REASONING}<answer>{span}</answer>"


@dataclass(frozen=True)
class Case:
    """A completion, its gold answer, and whether strict and lenient correctness accept it."""

    completion: object
    gold: str | int
    strict_ok: bool
    lenient_ok: bool


CASES: dict[str, Case] = {
    "good-multiline": Case(GOOD, "72", True, True),
    "good-one-line": Case("<reasoning>48+24=72</reasoning><answer>72</answer>", "72", True, True),
    "peer-bug:dotall-multiline-reasoning": Case(
        "<reasoning>\nStep 1: 48/2 = 24.\n\nStep 2: 48 + 24 = 72.\n</reasoning>\n"
        "<answer>72</answer>", "72", True, True),
    "peer-bug:no-newline-after-answer": Case(GOOD, "72", True, True),
    "trailing-newlines": Case(GOOD + "\n\n", "72", True, True),
    "extra-blank-lines": Case(REASONING + "\n\n<answer>72</answer>\n", "72", True, True),
    "windows-newlines": Case(GOOD.replace("\n", "\r\n"), "72", True, True),
    "wrong-answer": Case(with_answer("71"), "72", False, False),
    "peer-bug:isdigit-negative": Case(with_answer("-3"), "-3", True, True),
    "peer-bug:isdigit-decimal": Case(with_answer("2.5"), "2.5", True, True),
    "peer-bug:isdigit-thousands": Case(with_answer("1,000"), "1000", True, True),
    "peer-bug:exact-match-72.0": Case(with_answer("72.0"), "72", True, True),
    "trailing-zeros": Case(with_answer("72.00"), "72", True, True),
    "leading-plus": Case(with_answer("+72"), "72", True, True),
    "bare-decimal-point": Case(with_answer(".5"), "0.5", True, True),
    "spaces-in-span": Case(with_answer("  72  "), "72", True, True),
    "dollar-sign": Case(with_answer("$72"), "72", True, True),
    "units": Case(with_answer("72 clips"), "72", True, True),
    "fraction-equals-decimal": Case(with_answer("5/2"), "2.5", True, True),
    "near-miss-decimal": Case(with_answer("72.001"), "72", False, False),
    "sign-matters": Case(with_answer("3"), "-3", False, False),
    "integer-gold": Case(with_answer("72"), 72, True, True),
    "hedge-inside-span": Case(with_answer("71 or 73"), "72", False, False),
    "answer-only": Case("<answer>72</answer>", "72", True, True),
    "reasoning-only": Case("<reasoning>48 + 24 = 72</reasoning>", "72", False, True),
    "truncated-no-close": Case(REASONING + "<answer>72", "72", False, True),
    "wrong-order": Case("<answer>72</answer><reasoning>x</reasoning>", "72", True, True),
    "text-before-reasoning": Case("Sure! " + GOOD, "72", True, True),
    "blank-reasoning": Case("<reasoning>  </reasoning><answer>72</answer>", "72", True, True),
    "short-trailing-text": Case(GOOD + "\nHope this helps!", "72", True, True),
    "peer-bug:xmlcount-swallows-reward": Case(GOOD + "\n" + "x" * 5000, "72", True, True),
    "empty": Case("", "72", False, False),
    "none": Case(None, "72", False, False),
    "chat-message": Case([{"role": "assistant", "content": GOOD}], "72", True, True),
    "chat-none-content": Case([{"role": "assistant", "content": None}], "72", False, False),
    "chat-content-parts": Case(
        [{"role": "assistant", "content": [{"type": "text", "text": GOOD}]}], "72", True, True),
    "unicode-arabic-digits": Case(with_answer("٧٢"), "72", False, False),
    "unicode-fullwidth-digits": Case(with_answer("７２"), "72", False, False),
    "uppercase-tags": Case("<ANSWER>72</ANSWER>", "72", False, True),
    "nested-answer-tags": Case("<reasoning>x</reasoning><answer><answer>72</answer></answer>",
                               "72", False, True),
    "hedge-two-answers": Case("<reasoning>x</reasoning><answer>71</answer><answer>72</answer>",
                              "72", False, True),
    "answer-spam": Case("<answer>72</answer>" * 50, "72", False, True),
    "hack:empty-tag-soup": Case("<reasoning></reasoning><answer></answer>", "72", False, False),
    "hack:power-tower": Case(with_answer("9^9^9^9"), "72", False, False),
    "hack:factorial": Case(with_answer("100000!"), "72", False, False),
    "hack:binomial-latex": Case(with_answer(r"\binom{99999999}{9999999}"), "72", False, False),
    "long-span": Case(with_answer("The number of clips is " + "very " * 30 + "72"), "72",
                      False, False),
    "lenient-boxed": Case(r"So the total is \boxed{72}.", "72", False, True),
    "lenient-boxed-frac": Case(r"\boxed{\frac{5}{2}}", "2.5", False, True),
    "lenient-answer-is": Case("The answer is 72.", "72", False, True),
    "lenient-answer-colon": Case("Answer: 1,000", "1000", False, True),
    "lenient-last-number": Case("48 + 24 = 72", "72", False, True),
    "lenient-last-number-wrong": Case("72 clips, and 5 left over", "72", False, False),
    "beyond-scan-cap": Case("x" * MAX_SCAN_CHARS + GOOD, "72", False, False),
    "megabytes-of-digits": Case("9" * 3_000_000, "72", False, False),
    "megabytes-of-answer-tags": Case("<answer>" * 300_000, "72", False, False),
}

# Completions with no tag any reward of the course reads: each pays 0 unless its row says otherwise.
UNTAGGED = ("empty", "none", "chat-none-content", "uppercase-tags", "lenient-boxed",
            "lenient-boxed-frac", "lenient-answer-is", "lenient-answer-colon",
            "lenient-last-number", "lenient-last-number-wrong", "beyond-scan-cap",
            "megabytes-of-digits")
# Completions without exactly one <answer> span holding a plain number.
NO_NUMBER = ("hedge-inside-span", "reasoning-only", "truncated-no-close", "unicode-arabic-digits",
             "unicode-fullwidth-digits", "nested-answer-tags", "hedge-two-answers", "answer-spam",
             "hack:empty-tag-soup", "hack:power-tower", "hack:factorial", "hack:binomial-latex",
             "long-span", "megabytes-of-answer-tags")


def pays(usual: float, otherwise: dict[str, float] | None = None) -> dict[str, float]:
    """A reward's score on every case: what `otherwise` says, else 0 on UNTAGGED, else `usual`."""
    otherwise = dict.fromkeys(UNTAGGED, 0.0) | (otherwise or {})
    unknown = sorted(set(otherwise) - set(CASES))
    if unknown:
        raise KeyError(f"no case named {unknown}: fix the name, or add the case to CASES")
    return {name: float(otherwise.get(name, usual)) for name in CASES}


def zero(*names: str) -> dict[str, float]:
    """Score 0 on these cases."""
    return dict.fromkeys(names, 0.0)


# The specification, keyed by reward name: a new reward in helpers.rewards.REWARDS is one more row.
EXPECTED: dict[str, dict[str, float]] = {
    # 1 exactly where strict correctness accepts the answer.
    "correctness_reward": {name: float(case.strict_ok) for name, case in CASES.items()},
    "numeric_reward": pays(1, zero(*NO_NUMBER, "dollar-sign", "units", "fraction-equals-decimal")),
    "strict_format_reward": pays(1, zero(
        "answer-only", "reasoning-only", "truncated-no-close", "wrong-order",
        "text-before-reasoning", "blank-reasoning", "short-trailing-text",
        "peer-bug:xmlcount-swallows-reward", "nested-answer-tags", "hedge-two-answers",
        "answer-spam", "hack:empty-tag-soup", "megabytes-of-answer-tags")),
    "soft_format_reward": pays(1, zero("answer-only", "reasoning-only", "truncated-no-close",
                                       "wrong-order", "answer-spam", "megabytes-of-answer-tags")),
    "tag_count_reward": pays(1, zero("nested-answer-tags", "hedge-two-answers") | {
        "answer-only": 0.5, "reasoning-only": 0.5, "truncated-no-close": 0.75,
        "wrong-order": 1 - 0.024, "short-trailing-text": 1 - 0.016,
        "peer-bug:xmlcount-swallows-reward": 0.75, "answer-spam": -0.5,
        "megabytes-of-answer-tags": -0.25}),
}


def test_the_table_is_big_and_covers_every_peer_bug():
    assert len(CASES) >= 40
    for bug in ["dotall", "no-newline-after-answer", "isdigit-negative", "isdigit-decimal",
                "isdigit-thousands", "exact-match-72.0", "xmlcount-swallows-reward"]:
        assert f"peer-bug:{bug}" in " ".join(CASES)


def test_every_reward_has_its_row_of_expectations():
    missing = [r.name for r in REWARDS if r.name not in EXPECTED]
    assert not missing, f"add a row to EXPECTED for {missing}: its score on every case"
    assert set(EXPECTED) == {r.name for r in REWARDS}, "EXPECTED names a reward not in REWARDS"
    with pytest.raises(KeyError, match="no case named"):
        pays(1, {"goood-multiline": 0})


@pytest.mark.parametrize("name", CASES)
def test_hand_written_completion(name):
    case = CASES[name]
    got = {r.name: r.func([case.completion], answer=[case.gold])[0] for r in REWARDS}
    assert got == pytest.approx({reward: EXPECTED[reward][name] for reward in got}), got
    text = completion_text(case.completion)
    assert is_correct(text, str(case.gold), mode="strict") is case.strict_ok
    assert is_correct(text, str(case.gold), mode="lenient") is case.lenient_ok


def weighted(completion: object, gold: str) -> float:
    """The total reward trl computes: sum of weight * score."""
    return sum(w * f([completion], answer=[gold])[0] for f, w in zip(REWARD_FUNCS, REWARD_WEIGHTS,
                                                                        strict=True))


def test_penalties_never_swallow_a_correct_answer():
    junk = GOOD + "\n" + "blah " * 4000  # the peers' xml count would give about -20 here
    assert weighted(junk, "72") > weighted(with_answer("71"), "72") > weighted("", "72")
    worst_tag_count = -4 * TAG_REPEAT_PENALTY - TRAILING_PENALTY_CAP  # every tag repeated, junk
    assert tag_count_reward(["<answer>" * 9 + "</answer>" * 9 + "<reasoning></reasoning>" * 9
                             + "x" * 9999])[0] == worst_tag_count
    assert -worst_tag_count * reward_named("tag_count_reward").weight < reward_named(
        "correctness_reward").weight


def test_megabyte_adversarial_completions_stay_fast():
    nasty = [
        "<reasoning>" + "</reasoning>" * 200_000,
        "<reasoning>a</reasoning><answer>" * 100_000,
        "<answer>" + "<reasoning>a</reasoning>" * 100_000 + "</answer>" * 100_000,
        "<answer>" + "9" * 3_000_000 + "</answer>",
        "answer is " * 300_000 + "\\boxed{" * 300_000,
    ]
    start = time.perf_counter()
    for func in REWARD_FUNCS:
        func(nasty, answer=["72"] * len(nasty))
    for text in nasty:
        is_correct(text, "72", mode="lenient")
    # Typically under 0.1 s here; a quadratic scan of these texts would take minutes.
    assert time.perf_counter() - start < 5


def test_extract_answer():
    assert extract_answer(GOOD) == "72"
    assert extract_answer("<answer>1</answer> then <answer> 2 </answer>") == "2"
    assert extract_answer("<answer><answer>3</answer></answer>") == "3"
    assert extract_answer("<answer>4") is None
    assert extract_answer("") is None
    # math-verify alone finds nothing here: the reason the span is extracted first.
    assert parse("<answer>72</answer>", parsing_timeout=None) == []


def test_completion_text_forms():
    assert completion_text("abc") == "abc"
    assert completion_text([{"role": "assistant", "content": "a"}, {"content": "b"}]) == "ab"
    assert completion_text({"role": "assistant", "content": "a"}) == "a"
    assert completion_text(None) == completion_text(42) == completion_text([None, 3]) == ""


def test_trl_lists_and_the_table_derive_from_the_registry():
    assert [r.name for r in REWARDS] == [f.__name__ for f in REWARD_FUNCS]
    assert REWARD_WEIGHTS == [r.weight for r in REWARDS]
    markdown = reward_table_markdown()
    assert markdown.count("\n") == len(REWARDS) + 1 and "&lt;answer&gt;" in markdown
    assert all(f"| `{r.name}` | {r.scores} | {r.weight:g} |" in markdown for r in REWARDS)
    assert all(reward_named(r.name) is r for r in REWARDS)
    with pytest.raises(KeyError, match="correctness_reward, numeric_reward"):
        reward_named("brevity_reward")


def test_a_learners_reward_registers_in_one_record_and_bad_ones_fail_in_one_sentence():
    def brevity_reward(completions, **kwargs):
        return [1.0 / (1 + len(completion_text(c))) for c in completions]

    mine = Reward(brevity_reward, weight=0.25)
    assert mine.name == "brevity_reward" and "brevity_reward" in reward_table_markdown(
        [*REWARDS, mine])
    with pytest.raises(TypeError, match=r"must accept \*\*kwargs"):
        Reward(lambda completions: [0.0] * len(completions), 1.0)
    with pytest.raises(ValueError, match="finite number"):
        Reward(brevity_reward, float("nan"))
    with pytest.raises(ValueError, match="finite number"):
        Reward(brevity_reward, True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a function"):
        Reward("correctness_reward", 1.0)  # type: ignore[arg-type]


def test_mode_and_missing_answer_column_fail_with_a_clear_message():
    with pytest.raises(ValueError, match="strict"):
        is_correct(GOOD, "72", mode="loose")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="'answer' column"):
        correctness_reward([GOOD])
    with pytest.raises(KeyError, match="'answer' column"):
        correctness_reward([GOOD], answer=None)
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        correctness_reward([GOOD, GOOD], answer=["72"])


def test_one_finite_float_per_completion_for_a_mixed_batch():
    batch = [c.completion for c in CASES.values()]
    golds = [c.gold for c in CASES.values()]
    for f in REWARD_FUNCS:
        scores = f(batch, answer=golds, prompts=[None] * len(batch), trainer_state=None)
        assert len(scores) == len(batch)
        assert all(type(s) is float and math.isfinite(s) for s in scores)


def test_correctness_works_from_worker_threads():
    batch = [c.completion for c in CASES.values()]
    golds = [c.gold for c in CASES.values()]
    expected = correctness_reward(batch, answer=golds)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: correctness_reward(batch, answer=golds), range(4)))
    assert results == [expected] * 4
    lenient = []
    worker = threading.Thread(target=lambda: lenient.append(is_correct("Answer: 72", "72",
                                                                       "lenient")))
    worker.start()
    worker.join()
    assert lenient == [True]
    # Without timeout=None, math-verify's signal-based timeout fails in any non-main thread.
    errors = []

    def naive() -> None:
        try:
            verify(parse("72"), parse("72"))
        except ValueError as error:
            errors.append(str(error))

    worker = threading.Thread(target=naive)
    worker.start()
    worker.join()
    assert errors and "threaded" in errors[0]


def test_rewards_run_inside_trls_grpo_trainer(tmp_path):
    from unsloth import FastLanguageModel  # before trl/transformers/peft, as the course requires

    from helpers.data import load_gsm8k, to_grpo_dataset
    from helpers.loading import load_kwargs, lora_kwargs
    from helpers.profiles import PROFILES

    profile = PROFILES["smoke"]
    model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(profile))
    model = FastLanguageModel.get_peft_model(model, **lora_kwargs(profile))
    from trl import GRPOConfig, GRPOTrainer  # after unsloth has patched it

    config = GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, logging_steps=1, report_to="none",
        per_device_train_batch_size=4, gradient_accumulation_steps=1, num_generations=4,
        max_prompt_length=profile.max_prompt_length, max_completion_length=16,
        reward_weights=REWARD_WEIGHTS, use_cpu=True, bf16=False, fp16=False, save_strategy="no",
        learning_rate=profile.learning_rate,
    )
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=REWARD_FUNCS, args=config,
        train_dataset=to_grpo_dataset(load_gsm8k("train", profile, limit=8)),
    )
    trainer.train()
    steps = [e for e in trainer.state.log_history if "reward" in e]
    assert len(steps) == 2
    for entry in steps:
        means = [entry[f"rewards/{r.name}/mean"] for r in REWARDS]
        assert all(math.isfinite(m) for m in means)
        # trl applied our weights: its `reward` is the weighted sum of the per-function means.
        total = sum(w * m for w, m in zip(REWARD_WEIGHTS, means, strict=True))
        assert entry["reward"] == pytest.approx(total, abs=1e-4)


def test_score_table_shows_each_reward_and_the_weighted_total():
    shown = ("good-multiline", "short-trailing-text", "empty")
    table = score_table({name: CASES[name].completion for name in shown}, "72",
                        weights=REWARD_WEIGHTS)
    header, *rows = table.splitlines()
    assert header.split() == ["completion", *(r.name.removesuffix("_reward") for r in REWARDS),
                              "total"]
    for name, row in zip(shown, rows, strict=True):
        scores = [EXPECTED[r.name][name] for r in REWARDS]
        total = sum(r.weight * score for r, score in zip(REWARDS, scores, strict=True))
        assert row.split() == [name, *(f"{x:.4g}" for x in [*scores, total])]
    assert rows[0].split()[-1] == f"{sum(REWARD_WEIGHTS):.4g}"  # every reward paid in full
    with pytest.raises(ValueError, match="weights"):
        score_table({"good": GOOD}, "72", weights=[1.0])
