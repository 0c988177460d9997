"""Property-based tests: arbitrary and adversarial completions never break a reward function.

Each test runs a fixed number of hypothesis examples, counts them, and checks the count, so a
run reports how many cases it covered (`pytest -s` prints them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.rewards import (
    MAX_SCAN_CHARS,
    REWARD_FUNCS,
    TAG_ONCE_SCORE,
    TAG_REPEAT_PENALTY,
    TRAILING_PENALTY_CAP,
    extract_answer,
    is_correct,
)

# The documented range of each unweighted score.
BOUNDS = {
    "correctness_reward": (0.0, 1.0),
    "numeric_reward": (0.0, 1.0),
    "strict_format_reward": (0.0, 1.0),
    "soft_format_reward": (0.0, 1.0),
    "tag_count_reward": (-4 * TAG_REPEAT_PENALTY - TRAILING_PENALTY_CAP, 4 * TAG_ONCE_SCORE),
}
TAGS = ["<reasoning>", "</reasoning>", "<answer>", "</answer>"]

# Pieces a model (or an attacker) might string together.
pieces = st.one_of(
    st.sampled_from(TAGS),
    st.sampled_from(["<answer", "answer>", "</", "<ANSWER>", "<answer >", "\\boxed{", "}", "{"]),
    st.sampled_from(["The answer is ", "Answer: ", "####", "^", "**", "!", "\\frac{1}{2}",
                     "\\binom{99}{9}", "$", "%", ",", ".", "-", "+", " ", "\n", "\r\n", "\t"]),
    st.sampled_from(["٧٢", "７２", "²", "⅔", "Ⅻ", "\u200b", "\x00", "\ufeff", "🙂"]),
    st.integers(-10**12, 10**12).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str),
    st.text(max_size=12),
)
adversarial_text = st.lists(pieces, max_size=60).map("".join)
repeated_text = st.builds(lambda unit, n: unit * n, adversarial_text, st.integers(1, 5_000))
any_text = st.one_of(st.text(max_size=400), adversarial_text, repeated_text)
completions = st.one_of(
    any_text,
    any_text.map(lambda t: [{"role": "assistant", "content": t}]),
    any_text.map(lambda t: [{"role": "assistant", "content": [{"type": "text", "text": t}]}]),
    st.sampled_from([None, [], [{"role": "assistant", "content": None}], [{}], 0, b"<answer>"]),
)
golds = st.one_of(
    st.integers(-10**9, 10**9).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=2).map(str),
    st.integers(0, 10**6),
    st.text(max_size=8),
    st.none(),
)
PROPERTY = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def run_counted(check: Callable[[], None], counter: list[int], minimum: int, name: str) -> None:
    """Run a @given check and require that it really saw `minimum` examples."""
    check()
    assert len(counter) >= minimum, f"{name}: only {len(counter)} cases ran"
    print(f"\n{name}: {len(counter)} cases")


def test_every_reward_returns_one_finite_float_per_completion():
    seen: list[int] = []
    scored: list[int] = []

    @PROPERTY
    @given(st.lists(st.tuples(completions, golds), min_size=1, max_size=6))
    def check(batch):
        seen.append(1)
        scored.append(len(batch))
        items, answers = [c for c, _ in batch], [g for _, g in batch]
        for func in REWARD_FUNCS:
            scores = func(items, answer=answers, prompts=[""] * len(items), trainer_state=None)
            assert len(scores) == len(items)
            low, high = BOUNDS[func.__name__]
            for score in scores:
                assert type(score) is float and math.isfinite(score)
                assert low - 1e-9 <= score <= high + 1e-9, (func.__name__, score)

    run_counted(check, seen, 300, "batches of arbitrary and adversarial completions")
    print(f"{sum(scored)} completions, each scored by all {len(REWARD_FUNCS)} reward functions")


def test_scores_are_per_completion_deterministic_and_format_independent():
    seen: list[int] = []

    @PROPERTY
    @given(any_text, any_text, golds)
    def check(first, second, gold):
        seen.append(1)
        chat = [{"role": "assistant", "content": first}]
        for func in REWARD_FUNCS:
            pair = func([first, second], answer=[gold, gold])
            assert pair[0] == func([first], answer=[gold])[0] == func([chat], answer=[gold])[0]
            assert pair[1] == func([second], answer=[gold])[0]

    run_counted(check, seen, 300, "batch independence, determinism, chat == plain")


def test_logical_relations_between_rewards():
    seen: list[int] = []

    @PROPERTY
    @given(any_text, golds)
    def check(text, gold):
        seen.append(1)
        scores = {f.__name__: f([text], answer=[gold])[0] for f in REWARD_FUNCS}
        if scores["strict_format_reward"]:
            assert scores["soft_format_reward"] == 1.0 and scores["tag_count_reward"] == 1.0
        if scores["correctness_reward"]:
            assert extract_answer(text) is not None
        if gold is not None and is_correct(text, str(gold), "strict"):
            assert is_correct(text, str(gold), "lenient")
        # Nothing past the scan cap can change a score.
        if len(text) > MAX_SCAN_CHARS:
            for func in REWARD_FUNCS:
                assert func([text], answer=[gold]) == func([text[:MAX_SCAN_CHARS]], answer=[gold])

    run_counted(check, seen, 300, "strict implies soft, strict implies lenient, scan cap")


def test_any_number_written_any_usual_way_is_correct():
    seen: list[int] = []
    number = st.one_of(
        st.integers(-10**9, 10**9).map(Decimal),
        st.decimals(min_value=-10**6, max_value=10**6, places=2, allow_nan=False),
    )

    @PROPERTY
    @given(number, st.sampled_from(["plain", "commas", "trailing-zero", "dollar"]),
           st.sampled_from(["", "\n", "  "]))
    def check(value, style, pad):
        seen.append(1)
        gold = format(value.normalize(), "f")
        written = {
            "plain": format(value, "f"),
            "commas": format(value, ","),
            "trailing-zero": format(value, "f") + ("0" if "." in format(value, "f") else ".0"),
            "dollar": "$" + format(value, "f") if value >= 0 else format(value, "f"),
        }[style]
        text = f"<reasoning>\nwork\n</reasoning>\n<answer>{pad}{written}{pad}</answer>{pad}"
        scores = {f.__name__: f([text], answer=[gold])[0] for f in REWARD_FUNCS}
        assert scores["correctness_reward"] == 1.0, (gold, written)
        assert scores["strict_format_reward"] == 1.0
        assert scores["numeric_reward"] == (0.0 if written.startswith("$") else 1.0)
        off_by_one = f"<reasoning>w</reasoning><answer>{value + 1}</answer>"
        assert not is_correct(off_by_one, gold, "strict")

    run_counted(check, seen, 300, "numbers in every usual notation")
