"""GSM8K: loading, the gold answer, and the chat prompt the model is trained on."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from helpers.synthetic import synthetic_split

if TYPE_CHECKING:
    from datasets import Dataset

    from helpers.profiles import Profile

REASONING_START, REASONING_END = "<reasoning>", "</reasoning>"
ANSWER_START, ANSWER_END = "<answer>", "</answer>"
FORMAT_TAGS = (REASONING_START, REASONING_END, ANSWER_START, ANSWER_END)

SYSTEM_PROMPT = (
    "Solve the math problem. Think step by step between <reasoning> and </reasoning>, "
    "then give only the final number between <answer> and </answer>."
)

GSM8K_HUB_ID, GSM8K_CONFIG = "openai/gsm8k", "main"

_GOLD = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def normalize_number(text: str) -> str:
    """'1,234' -> '1234', '72.0' -> '72', ' -3.50 ' -> '-3.5'; other text is returned stripped."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    if re.fullmatch(r"[-+]?\d+(\.\d+)?", cleaned):
        if "." in cleaned:
            cleaned = cleaned.rstrip("0").rstrip(".")
        return cleaned.lstrip("+") if cleaned not in {"-0", "+0"} else "0"
    return text.strip()


def extract_gold_answer(answer_text: str) -> str:
    """The number after GSM8K's '####', normalised ('1,000' -> '1000')."""
    match = _GOLD.search(answer_text or "")
    if match is None:
        raise ValueError(
            "No '####' in this answer: GSM8K answers end in '#### <number>'. "
            f"Got: {answer_text[:80]!r}"
        )
    return normalize_number(match.group(1))


def make_prompt(question: str) -> list[dict[str, str]]:
    """The chat messages the model sees: the format instructions, then the question."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]


def to_grpo_example(row: dict[str, str]) -> dict[str, object]:
    """A GSM8K row -> trl's GRPO columns: `prompt` (chat) and `answer` (gold, for the rewards)."""
    return {"prompt": make_prompt(row["question"]), "answer": extract_gold_answer(row["answer"])}


def load_gsm8k(split: str, profile: Profile, limit: int | None = None) -> Dataset:
    """GSM8K's `split` from the hub; in the smoke profile, synthetic rows (and it says so)."""
    from datasets import Dataset, load_dataset

    if split not in {"train", "test"}:
        raise ValueError(f"Unknown split {split!r}: GSM8K has 'train' and 'test'.")
    default = profile.num_train_problems if split == "train" else profile.num_eval_problems
    n = limit if limit is not None else default
    if profile.synthetic_data:
        print(
            f"[{profile.name} profile] Using {n} synthetic GSM8K-format problems ({split}), "
            "not the real GSM8K: no hub access is needed."
        )
        return Dataset.from_list(synthetic_split(split, n))
    data = load_dataset(GSM8K_HUB_ID, GSM8K_CONFIG, split=split)
    return data.select(range(min(n, len(data))))
