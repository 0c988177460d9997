"""Numbers that notebook prose quotes from a notebook's own stored outputs, read from those outputs.

A markdown cell writes such a number as `<!-- fig:nb05.heldout_start -->38.5%<!-- /fig -->`: the
key's first part names the notebook (nb05: notebooks/05_*.ipynb), the rest names a `Quote` below,
which says which code cell printed it and how to find it in that cell's stored text output. After
`make execute-notebooks`, `make figures` rewrites every quoted VALUE, and tests/test_figures.py
fails when a stored output no longer says what the sentence quotes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Quote:
    """A value printed by one code cell: `cell` is a line only that cell's source contains, and
    `pattern` a regular expression on its stored text output whose first group is the value."""

    cell: str
    pattern: str


# notebook 06's sampled-accuracy cell
SAMPLED_CELL = ("sampled = sampled_accuracy(model, tokenizer, problems, "
                "sampled_settings(settings), adapter_dir)")

# By notebook (the file name's number), by name. Keep each name short and saying what it is.
QUOTES: dict[str, dict[str, Quote]] = {
    "02": {  # Solution 2: prompt budgets on the smoke prompts' few lengths
        "budgets": Quote("distinct = len(set(budgets.values()))",
                         r"(\d+) different budgets for 3 shares"),
        "lengths": Quote("distinct = len(set(budgets.values()))",
                         r"; (\d+) different prompt lengths"),
    },
    "04": {  # the table's reading, Solution 2's reading, and the closing loop
        "fell_most": Quote("wrong = [i for i, right in enumerate(group.correct) if not right]",
                           r"fell most: completion \d+ .*; (the same one|not the worst one)"),
        "nobaseline_right": Quote("no_baseline = one_update(fresh, group.batch, group.rewards, "
                                  "lr=LR)", r"without: (more|less) without"),
        "loop_steps": Quote("STEPS = 30", r"right after (\d+) steps"),
        "loop_start": Quote("STEPS = 30", r"right before: (\d+%)"),
        "loop_end": Quote("STEPS = 30", r"right after \d+ steps: (\d+%)"),
    },
    "05": {  # the health check's held-out line
        "heldout_start": Quote("findings = health_check(trainer.state.log_history)",
                               r"Held-out greedy accuracy went ([\d.]+%)"),
        "heldout_end": Quote("findings = health_check(trainer.state.log_history)",
                             r"Held-out greedy accuracy went [\d.]+%(?: \[[^\]]*\])? -> ([\d.]+%)"),
        # the trainer cell: how many problems the held-out curve scores on t4, and its noise
        "heldout_n_t4": Quote('n_t4 = PROFILES["t4"].heldout_during_training',
                              r"held-out during training: \d+ problems here; on t4 (\d+),"),
        "heldout_pm_t4": Quote('n_t4 = PROFILES["t4"].heldout_during_training',
                               r"on t4 \d+, where 40% means .*?\(about ±(\d+) points\)"),
        "eval_n_t4": Quote('n_t4 = PROFILES["t4"].heldout_during_training',
                           r"points\); notebook 06 scores (\d+)"),
        # section 11: what adamw_8bit saves on t4, quoted in section 2
        "adamw8bit_t4": Quote(
            'saved_per_param = optimizer_bytes_per_param("adamw_torch") - '
            'optimizer_bytes_per_param("adamw_8bit")',
            r"t4\s+LoRA r=\d+\s+[\d.]+M trained params: adamw_8bit saves\s+(\d+ MiB)"),
    },
    "06": {  # section 9: greedy and sampled accuracy, base and trained, on the same problems
        **{name: Quote(SAMPLED_CELL, pattern) for name, pattern in {
            "sampled_n": r"(\d+) problems, strict",
            "greedy_base": r"greedy, 1 answer\s+([\d.]+%)",
            "greedy_trained": r"greedy, 1 answer\s+[\d.]+%\s+([\d.]+%)",
            "greedy_gain": r"greedy, 1 answer\s+[\d.]+%\s+[\d.]+%\s+([+-][\d.]+) points",
            "sampled_base": r"sampled, T=1, \d+ answers\s+([\d.]+%)",
            "sampled_trained": r"sampled, T=1, \d+ answers\s+[\d.]+%\s+([\d.]+%)",
            "sampled_gain": r"sampled, T=1, \d+ answers\s+[\d.]+%\s+[\d.]+%\s+([+-][\d.]+)",
            "sampled_low": r"paired 95% interval ([+-][\d.]+) to",
            "sampled_high": r"paired 95% interval [+-][\d.]+ to ([+-][\d.]+)",
            "sampled_moved": r"The sampled accuracy (rose|fell|did not move) beyond its noise",
            "maj_base": r"maj@\d+, T=1\s+([\d.]+%)",
            "maj_trained": r"maj@\d+, T=1\s+[\d.]+%\s+([\d.]+%)",
            "pass_base": r"pass@\d+, T=1\s+([\d.]+%)",
            "pass_trained": r"pass@\d+, T=1\s+[\d.]+%\s+([\d.]+%)",
            "pass_gain": r"pass@\d+, T=1\s+[\d.]+%\s+[\d.]+%\s+([+-][\d.]+)",
            "sharpening": r"paired by problem: ([+-][\d.]+) points",
            "sharpening_reading": (r"paired by problem: .+\): (training sharpened|"
                                   r"the samples gained|the two gains cannot be told apart)"),
        }.items()},
    },
    "09": {  # the page's GRPO run, set beside the benchmark's longer one
        "rl_steps": Quote("history = toy_r1.run_grpo(grpo_model, tokenizer, train, SEED, recipe, "
                          "on_step=measure)", r"(\d+) GRPO updates: held-out"),
        "acc_grpo": Quote("history = toy_r1.run_grpo(grpo_model, tokenizer, train, SEED, recipe, "
                          "on_step=measure)", r"held-out accuracy [\d.]+% -> ([\d.]+%)"),
    },
}


def stored_text(cell: dict[str, Any]) -> str:
    """A code cell's stored text output: its printed streams and plain-text results, in order."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append("".join(output.get("text", "")))
        elif "text/plain" in output.get("data", {}):
            parts.append("".join(output["data"]["text/plain"]))
    return "".join(parts)


def quoted_cell(notebook: dict[str, Any], quote: Quote, key: str) -> str:
    """The stored output of the one code cell `quote` names, or a ValueError naming the fix."""
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"
             and quote.cell in "".join(c["source"]).splitlines()]
    if len(cells) != 1:
        raise ValueError(
            f"fig:{key}: {len(cells)} code cells contain the line {quote.cell!r} (one must): "
            "fix the Quote in tools/output_quotes.py to name the cell that prints it.")
    return stored_text(cells[0])


def quote_figures(number: str) -> Callable[[dict[str, Any]], dict[str, str]]:
    """The figures function for notebook `number`'s quotes, as tools/cited_numbers.py takes it."""

    def figures(notebook: dict[str, Any]) -> dict[str, str]:
        found = {}
        for name, quote in QUOTES[number].items():
            key = f"nb{number}.{name}"
            match = re.search(quote.pattern, quoted_cell(notebook, quote, key))
            if match is None:
                raise ValueError(
                    f"fig:{key}: the stored output of the cell with {quote.cell!r} no longer "
                    f"matches {quote.pattern!r}: re-read the prose that quotes it, then fix the "
                    "cell or the Quote, and run `make execute-notebooks`.")
            found[key] = match[1]
        return found

    return figures
