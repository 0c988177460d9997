"""The lab's evaluation set: every sum of the smoke task, once per wording of its sign."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from helpers.data import extract_gold_answer
from helpers.synthetic import census_split


def lab_problems() -> list[dict[str, str]]:
    """The lab's evaluation set: every sum of the smoke task, once per template of its sign."""
    return census_split()


def fact_of(row: dict[str, str]) -> str:
    """The sum a problem asks for ("12+3"), read from its gold reasoning."""
    return row["answer"].split("<<", 1)[1].split("=", 1)[0]


def coverage(rows: Sequence[dict[str, str]]) -> dict[str, Any]:
    """How a problem set covers the 100 sums: distinct sums, the most repeats of one, the
    effective number of equally weighted sums (1 / sum of squared shares), distinct answers."""
    counts = Counter(fact_of(r) for r in rows)
    shares = [c / len(rows) for c in counts.values()]
    return {"problems": len(rows), "facts": len(counts), "most_repeats": max(counts.values()),
            "effective_facts": 1 / sum(s * s for s in shares),
            "answers": len({extract_gold_answer(r["answer"]) for r in rows})}
