"""Reward functions for GRPO on GSM8K, and the answer checks that evaluation shares with them.

Each reward is one `Reward` record in `REWARDS` (function, weight, scores, rule); the rest is
derived from it: notebook 03's table (`reward_table_markdown()`) and what trl takes,
`REWARD_FUNCS` and `REWARD_WEIGHTS`. Each function returns an unweighted score, mostly in [0, 1],
so trl's log line `rewards/<name>/mean` reads directly: `rewards/correctness_reward/mean` is
the training-batch accuracy. trl multiplies by `REWARD_WEIGHTS` (pass them as
`GRPOConfig(reward_weights=REWARD_WEIGHTS)`) and sums, which gives the `reward` column.

The functions are pure: no printing, no global state, no I/O. They never raise on a completion
(empty, None content, megabytes of text, unicode digits, nested or repeated tags) and always
return one finite float per completion. Text beyond `MAX_SCAN_CHARS` is ignored, so a runaway
completion costs no more than a long one.
"""

from __future__ import annotations

import html
import inspect
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from math_verify import parse, verify

from helpers.data import ANSWER_END, ANSWER_START, FORMAT_TAGS, REASONING_END, REASONING_START

Mode = Literal["strict", "lenient"]
RewardFunc = Callable[..., list[float]]

# Far above any profile's completion budget (512 tokens is about 2,500 characters).
MAX_SCAN_CHARS = 20_000
# Longer answer spans are not a final number; it also keeps math-verify's work small.
MAX_ANSWER_CHARS = 100

# Scores, before weighting.
CORRECT_SCORE = 1.0
NUMERIC_SCORE = 1.0
STRICT_FORMAT_SCORE = 1.0
SOFT_FORMAT_SCORE = 1.0
TAG_ONCE_SCORE = 0.25  # per tag that appears exactly once: the four tags give 1.0
TAG_REPEAT_PENALTY = 0.25  # per tag that appears more than once (tag spam)
TRAILING_PENALTY_PER_CHAR = 0.001  # per non-space character after the last </answer> ...
TRAILING_PENALTY_CAP = 0.25  # ... capped, so the penalty can never swallow the other rewards

# ASCII digits only: "٧٢" and "７２" are not numbers in the taught format.
_NUMBER = r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
_NUMBER_RE = re.compile(_NUMBER, re.ASCII)
_ANSWER_SPAN_RE = re.compile(r"<answer>((?:(?!</?answer>).)*)</answer>", re.DOTALL)
_STRICT_RE = re.compile(r"\s*<reasoning>(.*)</reasoning>\s*<answer>(.*)</answer>\s*", re.DOTALL)
_BOXED_RE = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
_ANSWER_IS_RE = re.compile(
    r"answer\s*(?:is|:|=)\s*:?\s*\$?\s*(" + _NUMBER + ")", re.ASCII | re.IGNORECASE
)
# What math-verify may see. It runs without its signal timeout (trl may call rewards from a
# worker thread), so only short spans without powers, factorials or exotic LaTeX reach it:
# `9^9^9` would make sympy compute forever.
_SAFE_SPAN_RE = re.compile(r"[0-9A-Za-z \t\n.,$%+\-/=:(){}\\]*", re.ASCII)
_LATEX_COMMAND_RE = re.compile(r"\\([A-Za-z]+)")
_SAFE_LATEX = frozenset({"boxed", "frac", "dfrac", "tfrac", "text", "mathrm", "textbf"})


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that its timeout is off; here the span whitelist bounds its work."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())


def completion_text(completion: Any) -> str:
    """A trl completion (plain string, or chat messages) as text; '' for anything unusable."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        return "".join(
            _content_text(m.get("content")) if isinstance(m, dict) else _content_text(m)
            for m in completion
        )
    return ""


def _content_text(content: Any) -> str:
    """A message's content: a string, None, or a list of {'type': 'text', 'text': ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _clip(completion: Any) -> str:
    """The text of a completion, cut at MAX_SCAN_CHARS (beyond that it counts as truncated)."""
    return completion_text(completion)[:MAX_SCAN_CHARS]


def extract_answer(text: str) -> str | None:
    """The stripped text in the last <answer>...</answer> pair (innermost if nested), or None."""
    spans = _ANSWER_SPAN_RE.findall(_clip(text))
    return spans[-1].strip() if spans else None


def _single_answer(text: str) -> str | None:
    """The answer span when the text holds exactly one <answer> and one </answer>, else None."""
    if text.count(ANSWER_START) != 1 or text.count(ANSWER_END) != 1:
        return None
    spans = _ANSWER_SPAN_RE.findall(text)
    return spans[0].strip() if spans else None


def _lenient_candidate(text: str) -> str | None:
    """The first of: last answer span, last \\boxed{}, last 'the answer is N', last number."""
    span = extract_answer(text)
    if span is not None:
        return span
    for pattern in (_BOXED_RE, _ANSWER_IS_RE, _NUMBER_RE):
        matches = pattern.findall(text)
        if matches:
            return matches[-1]
    return None


def _is_safe_span(span: str) -> bool:
    """Short, ASCII, and free of anything that can make sympy run for a long time."""
    if len(span) > MAX_ANSWER_CHARS or _SAFE_SPAN_RE.fullmatch(span) is None:
        return False
    return all(cmd in _SAFE_LATEX for cmd in _LATEX_COMMAND_RE.findall(span))


def _same_value(gold: str, span: str) -> bool:
    """math-verify's verdict (gold first), with no signal timeout so any thread may call it."""
    span = span.strip().removeprefix("+")  # math-verify parses "+72" as nothing
    if not span or not _is_safe_span(span) or not _is_safe_span(gold):
        return False
    gold_parsed = parse(gold, parsing_timeout=None)
    pred_parsed = parse(span, parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def final_answer(text: str, mode: Mode = "strict") -> str | None:
    """The span `is_correct` judges, or None.

    strict: only the taught format counts, exactly one <answer>...</answer>.
    lenient: also \\boxed{N}, "The answer is N", or else the last number in the text.
    """
    if mode not in ("strict", "lenient"):
        raise ValueError(f"mode must be 'strict' or 'lenient', got {mode!r}")
    clipped = _clip(text)
    return _single_answer(clipped) if mode == "strict" else _lenient_candidate(clipped)


def same_answer(span: str, gold: str) -> bool:
    """Does an answer span equal `gold`? (math-verify decides: "1,234" and "72.0" count.)"""
    return _same_value(str(gold).strip(), span)


def is_correct(text: str, gold: str, mode: Mode = "strict") -> bool:
    """Does the completion's final answer (`final_answer`) equal `gold`?"""
    span = final_answer(text, mode)
    return span is not None and same_answer(span, gold)


def _golds(kwargs: dict[str, Any], n: int, name: str) -> list[Any]:
    """The `answer` column trl passes through, checked against the number of completions."""
    if kwargs.get("answer") is None:
        raise KeyError(
            f"{name} needs the gold answers: the dataset must have an 'answer' column "
            "(helpers.data.to_grpo_example makes one), which trl passes as answer=[...]."
        )
    golds = list(kwargs["answer"])
    if len(golds) != n:
        raise ValueError(f"{name}: {n} completions but {len(golds)} answers.")
    return golds


def correctness_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 when the single <answer> span equals the gold `answer` (math-verify), else 0.0."""
    golds = _golds(kwargs, len(completions), "correctness_reward")
    return [
        CORRECT_SCORE if gold is not None and is_correct(_clip(c), str(gold)) else 0.0
        for c, gold in zip(completions, golds, strict=True)
    ]


def numeric_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 when the single <answer> span is a plain number (-3, 2.5 and 1,000 all count)."""
    scores = []
    for c in completions:
        span = _single_answer(_clip(c))
        numeric = span is not None and _NUMBER_RE.fullmatch(span) is not None
        scores.append(NUMERIC_SCORE if numeric else 0.0)
    return scores


def _is_strict_format(text: str) -> bool:
    """Only whitespace around <reasoning>...</reasoning> <answer>...</answer>, each tag once."""
    if any(text.count(tag) != 1 for tag in FORMAT_TAGS):
        return False  # also keeps the regex below linear: one candidate per tag
    match = _STRICT_RE.fullmatch(text)
    return match is not None and bool(match.group(1).strip()) and bool(match.group(2).strip())


def strict_format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 for exactly the taught layout (any newlines, multi-line reasoning), else 0.0."""
    return [STRICT_FORMAT_SCORE if _is_strict_format(_clip(c)) else 0.0 for c in completions]


def _tags_in_order(text: str) -> bool:
    """<reasoning>, </reasoning>, <answer>, </answer> occur in this order (str.find: linear)."""
    position = 0
    for tag in (REASONING_START, REASONING_END, ANSWER_START, ANSWER_END):
        position = text.find(tag, position)
        if position < 0:
            return False
        position += len(tag)
    return True


def soft_format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 when the four tags appear in order anywhere, whatever surrounds them, else 0.0."""
    return [SOFT_FORMAT_SCORE if _tags_in_order(_clip(c)) else 0.0 for c in completions]


def _tag_count_score(text: str) -> float:
    """+0.25 per tag seen once, -0.25 per repeated tag, minus a capped trailing-text penalty."""
    score = 0.0
    for tag in FORMAT_TAGS:
        count = text.count(tag)
        score += TAG_ONCE_SCORE if count == 1 else -TAG_REPEAT_PENALTY if count > 1 else 0.0
    end = text.rfind(ANSWER_END)
    if end >= 0:
        trailing = len(text[end + len(ANSWER_END) :].strip())
        score -= min(TRAILING_PENALTY_PER_CHAR * trailing, TRAILING_PENALTY_CAP)
    return score


def tag_count_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """Partial credit per format tag, in [-1.25, 1.0]: shaping that helps before formats match."""
    return [_tag_count_score(_clip(c)) for c in completions]


@dataclass(frozen=True)
class Reward:
    """One training reward: the function trl calls, its weight in the total, and its table row.

    `scores` says what the function returns and `rule` when, in words (notebook 03's table).
    A learner's own reward is one more `Reward(my_reward, weight=1.0)`.
    """

    func: RewardFunc
    weight: float
    scores: str = ""
    rule: str = ""

    def __post_init__(self) -> None:
        if not callable(self.func):
            raise TypeError(f"Reward(func=...) must be a function, got {type(self.func).__name__}.")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) \
                or not math.isfinite(self.weight):
            raise ValueError(f"{self.name}: weight must be a finite number, got {self.weight!r}.")
        kinds = {p.kind for p in inspect.signature(self.func).parameters.values()}
        if inspect.Parameter.VAR_KEYWORD not in kinds:
            raise TypeError(f"{self.name} must accept **kwargs: trl passes every dataset column "
                            "(answer=..., prompts=..., ...) as a keyword.")

    @property
    def name(self) -> str:
        """trl's log name: `rewards/<name>/mean`."""
        return getattr(self.func, "__name__", type(self.func).__name__)


# The rewards used for training, in order: trl sums them weighted (GRPOConfig.reward_weights).
REWARDS: tuple[Reward, ...] = (
    Reward(correctness_reward, 2.0, f"{CORRECT_SCORE:g} or 0",
           "exactly one <answer> span, equal to the gold answer by math-verify "
           "(72.0, 1,000, $72 all count)"),
    Reward(numeric_reward, 0.5, f"{NUMERIC_SCORE:g} or 0",
           "exactly one <answer> span, holding a plain number (-3, 2.5, 1,000)"),
    Reward(strict_format_reward, 0.5, f"{STRICT_FORMAT_SCORE:g} or 0",
           "<reasoning>...</reasoning> <answer>...</answer> and only whitespace around them; "
           "each tag once; any newlines"),
    Reward(soft_format_reward, 0.5, f"{SOFT_FORMAT_SCORE:g} or 0",
           "the four tags appear in order, anything around them"),
    Reward(tag_count_reward, 0.5,
           f"{-4 * TAG_REPEAT_PENALTY - TRAILING_PENALTY_CAP:g} to {4 * TAG_ONCE_SCORE:g}",
           f"+{TAG_ONCE_SCORE:g} per tag seen once, -{TAG_REPEAT_PENALTY:g} per repeated tag, "
           f"-{TRAILING_PENALTY_PER_CHAR:g} per character after </answer> "
           f"(at most -{TRAILING_PENALTY_CAP:g})"),
)
# What trl takes: GRPOTrainer(reward_funcs=REWARD_FUNCS), GRPOConfig(reward_weights=REWARD_WEIGHTS).
REWARD_FUNCS: list[RewardFunc] = [r.func for r in REWARDS]
REWARD_WEIGHTS: list[float] = [r.weight for r in REWARDS]


def reward_named(name: str) -> Reward:
    """The course's reward called `name` (its function's name); an unknown name lists the known."""
    for reward in REWARDS:
        if reward.name == name:
            return reward
    raise KeyError(f"No course reward is called {name!r}; the rewards are "
                   f"{', '.join(r.name for r in REWARDS)}.")


def reward_table_markdown(rewards: Sequence[Reward] = REWARDS) -> str:
    """The rewards as a markdown table, for notebooks and docs."""
    lines = ["| reward (trl log name) | scores | weight | rule |", "|---|---|---|---|"]
    for r in rewards:
        rule = html.escape(r.rule)  # else markdown renders <answer> as an HTML tag
        lines.append(f"| `{r.name}` | {r.scores} | {r.weight:g} | {rule} |")
    return "\n".join(lines)


def score_table(
    completions: dict[str, Any],
    gold: str,
    funcs: Sequence[RewardFunc] = tuple(REWARD_FUNCS),
    weights: Sequence[float] | None = None,
) -> str:
    """A text table of labelled completions: one column per reward, plus the weighted total."""
    labels = list(completions)
    columns = {
        f.__name__.removesuffix("_reward"): f(
            list(completions.values()), answer=[gold] * len(labels)
        )
        for f in funcs
    }
    if weights is not None:
        if len(weights) != len(funcs):
            raise ValueError(f"{len(funcs)} reward functions but {len(weights)} weights.")
        scores = list(columns.values())
        columns["total"] = [
            sum(w * s[i] for w, s in zip(weights, scores, strict=True)) for i in range(len(labels))
        ]
    width = max([len("completion"), *(len(label) for label in labels)])
    widths = {name: max(len(name), 6) + 2 for name in columns}
    header = f"{'completion':<{width}}" + "".join(f"{n:>{w}}" for n, w in widths.items())
    rows = [
        f"{label:<{width}}" + "".join(f"{columns[n][i]:>{w}.4g}" for n, w in widths.items())
        for i, label in enumerate(labels)
    ]
    return "\n".join([header, *rows])
