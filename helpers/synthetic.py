"""Synthetic word problems in GSM8K's exact schema, for offline (smoke) runs.

Each row is {"question": str, "answer": str}; the answer holds reasoning lines with GSM8K's
calculator annotations (<<48/2=24>>) and ends in "#### <number>", like the real data set.
"""

from __future__ import annotations

import random
from collections.abc import Callable

NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken", "Alexis", "Tina"]
ITEMS = ["clips", "apples", "books", "stickers", "marbles", "cookies", "pencils", "shells"]

Row = dict[str, str]


def _line(text: str, expr: str, value: int) -> str:
    return f"{text} {expr} = <<{expr}={value}>>{value}"


def _sold_half(rng: random.Random) -> Row:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    april = 2 * rng.randint(5, 60)
    may = april // 2
    total = april + may
    return {
        "question": f"{name} sold {april} {item} in April, and then half as many {item} in May. "
        f"How many {item} did {name} sell altogether in April and May?",
        "answer": "\n".join(
            [
                _line(f"{name} sold", f"{april}/2", may) + f" {item} in May.",
                _line(f"{name} sold", f"{april}+{may}", total) + f" {item} altogether.",
                f"#### {total}",
            ]
        ),
    }


def _hourly_pay(rng: random.Random) -> Row:
    name = rng.choice(NAMES)
    rate, hours, days = rng.randint(8, 30), rng.randint(2, 8), rng.randint(2, 6)
    per_day = rate * hours
    total = per_day * days
    return {
        "question": f"{name} earns ${rate} an hour. {name} works {hours} hours a day for {days} "
        f"days. How many dollars does {name} earn?",
        "answer": "\n".join(
            [
                _line("Each day pays", f"{rate}*{hours}", per_day) + " dollars.",
                _line("In total that is", f"{per_day}*{days}", total) + " dollars.",
                f"#### {total}",
            ]
        ),
    }


def _give_away(rng: random.Random) -> Row:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    start = rng.randint(20, 120)
    given = rng.randint(1, start // 2)
    bought = rng.randint(1, 40)
    after_gift = start - given
    total = after_gift + bought
    return {
        "question": f"{name} has {start} {item}. {name} gives away {given} {item} and then buys "
        f"{bought} more. How many {item} does {name} have now?",
        "answer": "\n".join(
            [
                _line("After giving some away,", f"{start}-{given}", after_gift)
                + f" {item} are left.",
                _line("After buying more,", f"{after_gift}+{bought}", total) + f" {item}.",
                f"#### {total}",
            ]
        ),
    }


def _share_equally(rng: random.Random) -> Row:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    friends, each, boxes = rng.randint(2, 9), rng.randint(2, 12), rng.randint(2, 6)
    total = friends * each * boxes
    per_box = friends * each
    return {
        "question": f"{name} has {boxes} boxes with {per_box} {item} in each box and shares all "
        f"of them equally among {friends} friends. How many {item} does each friend get?",
        "answer": "\n".join(
            [
                _line(f"{name} has", f"{boxes}*{per_box}", total) + f" {item}.",
                _line("Each friend gets", f"{total}/{friends}", each * boxes) + f" {item}.",
                f"#### {each * boxes}",
            ]
        ),
    }


def _savings(rng: random.Random) -> Row:
    name = rng.choice(NAMES)
    price, saved, weekly = rng.randint(60, 400), rng.randint(5, 50), rng.randint(5, 25)
    need = max(price - saved, 1)
    weeks = -(-need // weekly)  # ceiling division
    return {
        "question": f"{name} wants a bike that costs ${saved + need}. {name} has saved ${saved} "
        f"and saves ${weekly} every week. How many weeks until {name} can buy the bike?",
        "answer": "\n".join(
            [
                _line(f"{name} still needs", f"{saved + need}-{saved}", need) + " dollars.",
                f"At ${weekly} a week that takes {need}/{weekly}, rounded up to {weeks} weeks.",
                f"#### {weeks}",
            ]
        ),
    }


TEMPLATES: list[Callable[[random.Random], Row]] = [
    _sold_half,
    _hourly_pay,
    _give_away,
    _share_equally,
    _savings,
]


def generate_problems(n: int, seed: int = 0) -> list[Row]:
    """`n` GSM8K-schema rows; the same (n, seed) always gives the same rows."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    return [rng.choice(TEMPLATES)(rng) for _ in range(n)]


def synthetic_split(split: str, n: int) -> list[Row]:
    """Train and test draw from different seeds, so test problems are held out."""
    seeds = {"train": 1234, "test": 98765}
    if split not in seeds:
        raise ValueError(f"Unknown split {split!r}: use 'train' or 'test'.")
    return generate_problems(n, seed=seeds[split])
