"""The reward functions on hand-written completions, in a thread, and inside trl's GRPOTrainer.

The table below is the specification: each row is a completion, its gold answer, the five
unweighted scores, and strict/lenient correctness. Rows named `peer-bug:` are inputs on which a
widely copied GSM8K reward gives the wrong value (see notebook 03 for the buggy code).
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

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
    numeric_reward,
    reward_named,
    reward_table_markdown,
    score_table,
    soft_format_reward,
    strict_format_reward,
    tag_count_reward,
)

NAMES = ["correctness_reward", "numeric_reward", "strict_format_reward", "soft_format_reward",
         "tag_count_reward"]
REASONING = (
    "<reasoning>\nNatalia sold 48/2 = 24 clips in May.\nIn total 48 + 24 = 72.\n</reasoning>\n"
)
GOOD = REASONING + "<answer>\n72\n</answer>"


def with_answer(span: str) -> str:
    """The taught layout around an answer span."""
    return f"{REASONING}<answer>{span}</answer>"


# (id, completion, gold, (correctness, numeric, strict, soft, tag_count), strict_ok, lenient_ok)
CASES = [
    ("good-multiline", GOOD, "72", (1, 1, 1, 1, 1), True, True),
    ("good-one-line", "<reasoning>48+24=72</reasoning><answer>72</answer>", "72",
     (1, 1, 1, 1, 1), True, True),
    ("peer-bug:dotall-multiline-reasoning",
     "<reasoning>\nStep 1: 48/2 = 24.\n\nStep 2: 48 + 24 = 72.\n</reasoning>\n<answer>72</answer>",
     "72", (1, 1, 1, 1, 1), True, True),
    ("peer-bug:no-newline-after-answer", GOOD, "72", (1, 1, 1, 1, 1), True, True),
    ("trailing-newlines", GOOD + "\n\n", "72", (1, 1, 1, 1, 1), True, True),
    ("extra-blank-lines", REASONING + "\n\n<answer>72</answer>\n", "72",
     (1, 1, 1, 1, 1), True, True),
    ("windows-newlines", GOOD.replace("\n", "\r\n"), "72", (1, 1, 1, 1, 1), True, True),
    ("wrong-answer", with_answer("71"), "72", (0, 1, 1, 1, 1), False, False),
    ("peer-bug:isdigit-negative", with_answer("-3"), "-3", (1, 1, 1, 1, 1), True, True),
    ("peer-bug:isdigit-decimal", with_answer("2.5"), "2.5", (1, 1, 1, 1, 1), True, True),
    ("peer-bug:isdigit-thousands", with_answer("1,000"), "1000", (1, 1, 1, 1, 1), True, True),
    ("peer-bug:exact-match-72.0", with_answer("72.0"), "72", (1, 1, 1, 1, 1), True, True),
    ("trailing-zeros", with_answer("72.00"), "72", (1, 1, 1, 1, 1), True, True),
    ("leading-plus", with_answer("+72"), "72", (1, 1, 1, 1, 1), True, True),
    ("bare-decimal-point", with_answer(".5"), "0.5", (1, 1, 1, 1, 1), True, True),
    ("spaces-in-span", with_answer("  72  "), "72", (1, 1, 1, 1, 1), True, True),
    ("dollar-sign", with_answer("$72"), "72", (1, 0, 1, 1, 1), True, True),
    ("units", with_answer("72 clips"), "72", (1, 0, 1, 1, 1), True, True),
    ("fraction-equals-decimal", with_answer("5/2"), "2.5", (1, 0, 1, 1, 1), True, True),
    ("near-miss-decimal", with_answer("72.001"), "72", (0, 1, 1, 1, 1), False, False),
    ("sign-matters", with_answer("3"), "-3", (0, 1, 1, 1, 1), False, False),
    ("integer-gold", with_answer("72"), 72, (1, 1, 1, 1, 1), True, True),
    ("hedge-inside-span", with_answer("71 or 73"), "72", (0, 0, 1, 1, 1), False, False),
    ("answer-only", "<answer>72</answer>", "72", (1, 1, 0, 0, 0.5), True, True),
    ("reasoning-only", "<reasoning>48 + 24 = 72</reasoning>", "72",
     (0, 0, 0, 0, 0.5), False, True),
    ("truncated-no-close", REASONING + "<answer>72", "72", (0, 0, 0, 0, 0.75), False, True),
    ("wrong-order", "<answer>72</answer><reasoning>x</reasoning>", "72",
     (1, 1, 0, 0, 1 - 0.024), True, True),
    ("text-before-reasoning", "Sure! " + GOOD, "72", (1, 1, 0, 1, 1), True, True),
    ("blank-reasoning", "<reasoning>  </reasoning><answer>72</answer>", "72",
     (1, 1, 0, 1, 1), True, True),
    ("short-trailing-text", GOOD + "\nHope this helps!", "72",
     (1, 1, 0, 1, 1 - 0.016), True, True),
    ("peer-bug:xmlcount-swallows-reward", GOOD + "\n" + "x" * 5000, "72",
     (1, 1, 0, 1, 0.75), True, True),
    ("empty", "", "72", (0, 0, 0, 0, 0), False, False),
    ("none", None, "72", (0, 0, 0, 0, 0), False, False),
    ("chat-message", [{"role": "assistant", "content": GOOD}], "72",
     (1, 1, 1, 1, 1), True, True),
    ("chat-none-content", [{"role": "assistant", "content": None}], "72",
     (0, 0, 0, 0, 0), False, False),
    ("chat-content-parts", [{"role": "assistant", "content": [{"type": "text", "text": GOOD}]}],
     "72", (1, 1, 1, 1, 1), True, True),
    ("unicode-arabic-digits", with_answer("٧٢"), "72", (0, 0, 1, 1, 1), False, False),
    ("unicode-fullwidth-digits", with_answer("７２"), "72", (0, 0, 1, 1, 1), False, False),
    ("uppercase-tags", "<ANSWER>72</ANSWER>", "72", (0, 0, 0, 0, 0), False, True),
    ("nested-answer-tags", "<reasoning>x</reasoning><answer><answer>72</answer></answer>", "72",
     (0, 0, 0, 1, 0), False, True),
    ("hedge-two-answers", "<reasoning>x</reasoning><answer>71</answer><answer>72</answer>", "72",
     (0, 0, 0, 1, 0), False, True),
    ("answer-spam", "<answer>72</answer>" * 50, "72", (0, 0, 0, 0, -0.5), False, True),
    ("hack:empty-tag-soup", "<reasoning></reasoning><answer></answer>", "72",
     (0, 0, 0, 1, 1), False, False),
    ("hack:power-tower", with_answer("9^9^9^9"), "72", (0, 0, 1, 1, 1), False, False),
    ("hack:factorial", with_answer("100000!"), "72", (0, 0, 1, 1, 1), False, False),
    ("hack:binomial-latex", with_answer(r"\binom{99999999}{9999999}"), "72",
     (0, 0, 1, 1, 1), False, False),
    ("long-span", with_answer("The number of clips is " + "very " * 30 + "72"), "72",
     (0, 0, 1, 1, 1), False, False),
    ("lenient-boxed", r"So the total is \boxed{72}.", "72", (0, 0, 0, 0, 0), False, True),
    ("lenient-boxed-frac", r"\boxed{\frac{5}{2}}", "2.5", (0, 0, 0, 0, 0), False, True),
    ("lenient-answer-is", "The answer is 72.", "72", (0, 0, 0, 0, 0), False, True),
    ("lenient-answer-colon", "Answer: 1,000", "1000", (0, 0, 0, 0, 0), False, True),
    ("lenient-last-number", "48 + 24 = 72", "72", (0, 0, 0, 0, 0), False, True),
    ("lenient-last-number-wrong", "72 clips, and 5 left over", "72",
     (0, 0, 0, 0, 0), False, False),
    ("beyond-scan-cap", "x" * MAX_SCAN_CHARS + GOOD, "72", (0, 0, 0, 0, 0), False, False),
    ("megabytes-of-digits", "9" * 3_000_000, "72", (0, 0, 0, 0, 0), False, False),
    ("megabytes-of-answer-tags", "<answer>" * 300_000, "72", (0, 0, 0, 0, -0.25), False, False),
]


def test_the_table_is_big_and_covers_every_peer_bug():
    ids = [case[0] for case in CASES]
    assert len(CASES) >= 40 and len(set(ids)) == len(ids)
    for bug in ["dotall", "no-newline-after-answer", "isdigit-negative", "isdigit-decimal",
                "isdigit-thousands", "exact-match-72.0", "xmlcount-swallows-reward"]:
        assert f"peer-bug:{bug}" in " ".join(ids)


@pytest.mark.parametrize(("completion", "gold", "scores", "strict_ok", "lenient_ok"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hand_written_completion(completion, gold, scores, strict_ok, lenient_ok):
    got = [f([completion], answer=[gold])[0] for f in REWARD_FUNCS]
    assert got == pytest.approx([float(s) for s in scores]), dict(zip(NAMES, got, strict=True))
    text = completion_text(completion)
    assert is_correct(text, str(gold), mode="strict") is strict_ok
    assert is_correct(text, str(gold), mode="lenient") is lenient_ok


def test_strict_correctness_agrees_with_the_correctness_reward():
    for *_, scores, strict_ok, _ in CASES:
        assert (scores[0] == 1) is strict_ok


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
    assert -worst_tag_count * REWARD_WEIGHTS[4] < REWARD_WEIGHTS[0]


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
    assert [r.name for r in REWARDS] == NAMES == [f.__name__ for f in REWARD_FUNCS]
    assert REWARD_WEIGHTS == [r.weight for r in REWARDS] == [2.0, 0.5, 0.5, 0.5, 0.5]
    markdown = reward_table_markdown()
    assert markdown.count("\n") == len(REWARDS) + 1 and "&lt;answer&gt;" in markdown
    assert all(f"| `{r.name}` | {r.scores} | {r.weight:g} |" in markdown for r in REWARDS)
    assert reward_named("numeric_reward") is REWARDS[1]
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
    batch = [c[1] for c in CASES]
    golds = [c[2] for c in CASES]
    for f in (correctness_reward, numeric_reward, strict_format_reward, soft_format_reward,
              tag_count_reward):
        scores = f(batch, answer=golds, prompts=[None] * len(batch), trainer_state=None)
        assert len(scores) == len(batch)
        assert all(type(s) is float and math.isfinite(s) for s in scores)


def test_correctness_works_from_worker_threads():
    batch = [c[1] for c in CASES]
    golds = [c[2] for c in CASES]
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
        means = [entry[f"rewards/{name}/mean"] for name in NAMES]
        assert all(math.isfinite(m) for m in means)
        # trl applied our weights: its `reward` is the weighted sum of the per-function means.
        total = sum(w * m for w, m in zip(REWARD_WEIGHTS, means, strict=True))
        assert entry["reward"] == pytest.approx(total, abs=1e-4)


def test_score_table_shows_each_reward_and_the_weighted_total():
    table = score_table({"good": GOOD, "junk": GOOD + "x" * 16, "empty": ""}, "72",
                        weights=REWARD_WEIGHTS)
    header, *rows = table.splitlines()
    assert header.split() == ["completion", "correctness", "numeric", "strict_format",
                              "soft_format", "tag_count", "total"]
    assert rows[0].split() == ["good", "1", "1", "1", "1", "1", "4"]
    assert rows[1].split() == ["junk", "1", "1", "0", "1", "0.984", "3.492"]
    assert rows[2].split()[-1] == "0"
    with pytest.raises(ValueError, match="weights"):
        score_table({"good": GOOD}, "72", weights=[1.0])
