"""GSM8K: loading, the gold answer, and the chat prompt the model is trained on."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

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
    text = answer_text if isinstance(answer_text, str) else ""
    if "####" not in text:
        raise ValueError(
            "No '####' in this answer: GSM8K answers end in '#### <number>'. "
            f"Got: {answer_text!r:.80}"
        )
    gold = normalize_number(text.rsplit("####", 1)[1])  # the last '####' holds the final answer
    if not gold:
        raise ValueError(f"Nothing after '####' in this answer: {answer_text!r:.80}")
    return gold


def make_prompt(question: str) -> list[dict[str, str]]:
    """The chat messages the model sees: the format instructions, then the question."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]


def build_prompts(tokenizer: Any, questions: Iterable[str],
                  messages: Callable[[str], list[dict[str, str]]] = make_prompt) -> list[str]:
    """The exact prompt strings: the training chat messages through the tokenizer's template
    (`messages` turns a question into them; the lab's prompt arm passes its own)."""
    return [
        tokenizer.apply_chat_template(messages(q), tokenize=False, add_generation_prompt=True)
        for q in questions
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


def to_grpo_dataset(data: Dataset) -> Dataset:
    """GSM8K rows -> a Dataset with only trl's GRPO columns, `prompt` and `answer`."""
    from datasets import Dataset

    return Dataset.from_list([to_grpo_example(row) for row in data])


def prompt_token_count(prompt: list[dict[str, str]], tokenizer: Any) -> int:
    """Tokens the model sees for a chat prompt: as trl builds it (template, then no extra BOS)."""
    text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def prompt_lengths(data: Dataset, tokenizer: Any) -> list[int]:
    """The token count of every `prompt` in a GRPO dataset."""
    if "prompt" not in data.column_names:
        raise ValueError(
            f"No 'prompt' column (columns: {data.column_names}): format the rows first with "
            "to_grpo_dataset(data)."
        )
    return [prompt_token_count(prompt, tokenizer) for prompt in data["prompt"]]


def length_stats(lengths: Sequence[int], budget: int) -> dict[str, float]:
    """Count, min, mean, median, 95th percentile, max, and how many exceed `budget`."""
    if not lengths:
        raise ValueError("No lengths to summarise: the dataset is empty.")
    ordered = sorted(lengths)
    p95 = ordered[math.ceil(0.95 * len(ordered)) - 1]  # nearest rank: always a real length
    return {
        "count": len(ordered),
        "min": ordered[0],
        "mean": statistics.fmean(ordered),
        "median": statistics.median(ordered),
        "p95": p95,
        "max": ordered[-1],
        "budget": budget,
        "over_budget": sum(n > budget for n in ordered),
    }


def filter_long_prompts(
    data: Dataset, tokenizer: Any, max_prompt_length: int, lengths: Sequence[int] | None = None
) -> Dataset:
    """Drop rows whose prompt exceeds `max_prompt_length` tokens.

    trl 0.22 would instead keep only the *last* max_prompt_length tokens, silently cutting the
    system prompt (the format instructions) off the front; newer trl no longer truncates at all.
    """
    if max_prompt_length <= 0:
        raise ValueError(f"max_prompt_length must be positive, got {max_prompt_length}")
    lengths = list(lengths) if lengths is not None else prompt_lengths(data, tokenizer)
    if len(lengths) != len(data):
        raise ValueError(f"{len(lengths)} lengths for {len(data)} rows.")
    keep = [i for i, n in enumerate(lengths) if n <= max_prompt_length]
    if data and not keep:
        raise ValueError(
            f"All {len(data)} prompts exceed max_prompt_length={max_prompt_length} tokens "
            f"(the shortest has {min(lengths)}): raise the profile's max_prompt_length "
            "or shorten SYSTEM_PROMPT."
        )
    return data.select(keep)


def grpo_train_dataset(profile: Profile, tokenizer: Any) -> Dataset:
    """The training set as trl wants it (`prompt`, `answer`), without prompts over the budget."""
    data = to_grpo_dataset(load_gsm8k("train", profile))
    kept = filter_long_prompts(data, tokenizer, profile.max_prompt_length)
    if len(kept) < len(data):
        print(f"Dropped {len(data) - len(kept)} of {len(data)} prompts over "
              f"{profile.max_prompt_length} tokens.")
    return kept
