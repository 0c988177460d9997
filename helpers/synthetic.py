"""Synthetic word problems in GSM8K's exact schema, for offline (smoke) runs.

Each row is {"question": str, "answer": str}; the answer holds a reasoning line with GSM8K's
calculator annotation (<<47+8=55>>) and ends in "#### <number>", like the real data set.

The problems are one-step: a number from 10 to 19 plus or minus one from 1 to 5, in a short
story. That is far easier than GSM8K on purpose: the smoke model (about a million parameters)
can learn it, so a CPU run shows GRPO raising held-out accuracy, not just the plumbing running.
Held-out problems are new questions, but their sums are not new: there are only 100 (10 x 5 x 2),
so the test measures whether the model gets the arithmetic right, not whether it saw the words.
"""

from __future__ import annotations

import random
from collections.abc import Callable

NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken", "Alexis", "Tina"]
ITEMS = ["clips", "apples", "books", "stickers", "marbles", "cookies", "pencils", "shells"]

Row = dict[str, str]
# Operand ranges: 100 distinct sums, few enough that 60 GRPO steps of 8 prompts revisit each one;
# with 10-29 and 1-9 (360 sums) GRPO on the smoke model drifted instead of learning (issue 12).
FIRST, SECOND = (10, 19), (1, 5)


def _operands(rng: random.Random) -> tuple[int, int]:
    return rng.randint(*FIRST), rng.randint(*SECOND)


def _row(question: str, subject: str, a: int, op: str, b: int) -> Row:
    value = a + b if op == "+" else a - b
    expr = f"{a}{op}{b}"
    # No item name after the number: a sampled item is a free choice the reward ignores, and
    # its gradient is noise on the digits that the reward is about.
    answer = f"{subject} {expr} = <<{expr}={value}>>{value}.\n#### {value}"
    return {"question": question, "answer": answer}


def _buys_more(rng: random.Random, fact: tuple[int, int] | None = None) -> Row:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = fact or _operands(rng)
    question = f"{name} has {a} {item}. {name} buys {b} more. How many {item} does {name} have now?"
    return _row(question, f"{name} has", a, "+", b)


def _gives_away(rng: random.Random, fact: tuple[int, int] | None = None) -> Row:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = fact or _operands(rng)
    question = f"{name} has {a} {item} and gives {b} to a friend. How many {item} are left?"
    return _row(question, f"{name} has", a, "-", b)


def _box_adds(rng: random.Random, fact: tuple[int, int] | None = None) -> Row:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = fact or _operands(rng)
    question = (f"A box holds {a} {item}. {name} puts {b} more in it. "
                f"How many {item} are in the box?")
    return _row(question, "The box holds", a, "+", b)


def _loses_some(rng: random.Random, fact: tuple[int, int] | None = None) -> Row:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = fact or _operands(rng)
    question = f"{name} collects {a} {item} and loses {b} of them. How many {item} are left?"
    return _row(question, f"{name} has", a, "-", b)


TEMPLATES: list[Callable[..., Row]] = [_buys_more, _gives_away, _box_adds, _loses_some]


def generate_problems(n: int, seed: int = 0) -> list[Row]:
    """`n` GSM8K-schema rows; the same (n, seed) always gives the same rows."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    return [rng.choice(TEMPLATES)(rng) for _ in range(n)]


SPLIT_SEEDS = {"train": 1234, "test": 98765, "validation": 24680}
TRAIN_POOL = 5_000  # no test or validation question is among the first TRAIN_POOL training ones
TEST_POOL = 1_000  # nor is any validation question among the first TEST_POOL test ones


def synthetic_split(split: str, n: int) -> list[Row]:
    """Each split draws from its own seed; test and validation drop questions another split holds.

    Test drops what training could see; validation (the smoke model's warm start stops on it)
    also drops every test question, so choosing when to stop never looks at the test set.
    """
    if split not in SPLIT_SEEDS:
        raise ValueError(f"Unknown split {split!r}: use one of {', '.join(SPLIT_SEEDS)}.")
    if split == "train":
        return generate_problems(n, seed=SPLIT_SEEDS["train"])
    seen = {row["question"] for row in generate_problems(TRAIN_POOL, seed=SPLIT_SEEDS["train"])}
    if split == "validation":
        seen |= {row["question"] for row in synthetic_split("test", TEST_POOL)}
    rows = generate_problems(2 * n + 100, seed=SPLIT_SEEDS[split])  # few collide: ample spare
    return [row for row in rows if row["question"] not in seen][:n]



CENSUS_SEED = 13579


def census_split() -> list[Row]:
    """Every sum once per template of its sign: 100 facts x 2 = 200 rows, none a training question.

    The lab's evaluation set (helpers.lab): a random test set of 200 rows covers only
    about 87 of the 100 sums, some up to five times, so which sums were drawn moves a score as
    much as the training does; here every sum counts the same. Names and items are drawn anew
    for a question that the training pool holds.
    """
    rng = random.Random(CENSUS_SEED)
    seen = {row["question"] for row in generate_problems(TRAIN_POOL, seed=SPLIT_SEEDS["train"])}
    rows = []
    for a in range(FIRST[0], FIRST[1] + 1):
        for b in range(SECOND[0], SECOND[1] + 1):
            for template in TEMPLATES:
                row = template(rng, (a, b))
                while row["question"] in seen:
                    row = template(rng, (a, b))
                rows.append(row)
    return rows
