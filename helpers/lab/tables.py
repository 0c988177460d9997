"""The grid's tables for notebook 11 and docs/results.md: the verdicts, the design's lines, the
training signals of a knob's arms and the held-out curves' means."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helpers.lab.arms import ARMS, COURSE, KNOBS, NO_OPS, knob_arms
from helpers.lab.verdicts import family
from helpers.profiles import PROFILES, expected_t4_minutes
from helpers.stats import EQUIVALENCE_MARGIN


def _points(value: float) -> str:
    return f"{100 * value:+.1f}"


def _p(value: float) -> str:
    return "<0.001" if value < 0.001 else f"{value:.3f}"


# The verdict is Holm's (the grid tests many arms at once); raw and BH are shown beside it.
# "MDE": the smallest difference the arm's comparison finds 80% of the time; "up to": the largest
# one its 95% interval leaves possible. Both in points, both from the arm's own seed spread.
GRID_COLUMNS = ("arm", "seeds", "mean", "range", "difference [95%]", "MDE", "up to", "p",
                "verdict (Holm)", "raw", "BH")


def grid_rows(summary: dict[str, Any]) -> list[list[str]]:
    """Knob by knob: each arm's mean gain, its range over seeds, the difference from its
    reference with Welch's 95% interval, the comparison's MDE and the largest difference the
    interval allows, the p-value, and the verdict after Holm over the grid's
    family of tests, then raw and after Benjamini-Hochberg; one list of GRID_COLUMNS' cells per arm,
    the reference first (a retired no-op's stored row left out)."""
    course = summary[COURSE]
    rows = [[COURSE, str(course["seeds"]), _points(course["mean"]),
             f"{_points(course['low'])} to {_points(course['high'])}", "(the reference)",
             "", "", "", "", "", ""]]
    names = [a.name for arms in KNOBS.values() for a in arms.values()]
    names += [n for n in summary if n != COURSE and n not in ARMS | NO_OPS]  # a learner's
    for name in names:
        s = summary.get(name)
        if s is None:
            continue
        shown = name if s["reference"] in (None, COURSE) else f"{name} (vs {s['reference']})"
        cells = [shown, str(s["seeds"]), _points(s["mean"]),
                 f"{_points(s['low'])} to {_points(s['high'])}"]
        said = s["verdict"]
        if said is None:
            rows.append([*cells, "(too few seeds for a verdict)", *[""] * 6])
            continue
        against = f"{_points(said['difference'])} [{_points(said['low'])}, {_points(said['high'])}]"
        rows.append([*cells, against, f"{100 * said['mde']:.1f}", f"{100 * said['largest']:.1f}",
                     _p(said["p"]), said.get("holm", ""), said["verdict"], said.get("bh", "")])
    return rows


def grid_table(summary: dict[str, Any]) -> str:
    """`grid_rows` as aligned text, for a notebook's output."""
    rows = [list(GRID_COLUMNS), *grid_rows(summary)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(GRID_COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def grid_markdown(summary: dict[str, Any]) -> str:
    """`grid_rows` as a markdown table (docs/results.md holds a copy; a test compares them)."""
    lines = ["| " + " | ".join(GRID_COLUMNS) + " |", "|" + "---|" * len(GRID_COLUMNS)]
    for row in grid_rows(summary):
        row = [f"`{row[0]}`", *row[1:]]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def design_lines(summary: dict[str, Any], found: dict[str, Any]) -> str:
    """What the grid can tell apart, printed beside its table: the equivalence margin, the size
    of the family, and the smallest effect it finds 80% of the time, arm by arm and with seeds
    as blocks."""
    tested = family(summary)
    lines = [f"Equivalence margin: ±{100 * EQUIVALENCE_MARGIN:.0f} points (\"equivalent\": the "
             "90% interval lies inside it).",
             f"Family: {len(tested)} arms tested; Holm holds the chance of any false helps or "
             "hurts at 5%, Benjamini-Hochberg the share of false ones among those called at "
             "5%."]
    p, b = found.get("power"), found.get("blocks")
    if p:
        lines.append(f"Smallest effect found 80% of the time: {100 * p['mde']:.1f} points for "
                     f"{p['arm_seeds']} seeds against the course's {p['reference_seeds']} "
                     f"(seed spread {100 * p['sd']:.1f} points, pooled), "
                     f"{100 * p['mde_holm']:.1f} at Holm's strictest level.")
    if b:
        lines.append(f"Seeds as blocks ({len(b['arms'])} arms x {len(b['seeds'])} seeds): the "
                     f"seed effect F = {b['seed_f']:.1f} (p = {b['seed_p']:.3f}); residual "
                     f"spread {100 * b['residual_sd']:.1f} points on {b['residual_df']} df; "
                     f"smallest effect {100 * b['mde']:.1f} points.")
    return "\n".join(lines)


SIGNAL_LABELS = {"zero_std": "dead (trl)", "zero_std_correctness": "dead (corr)",
                 "correctness": "pass rate", "length": "tokens", "truncated": "truncated",
                 "clipped": "clipped", "kl": "KL", "extra_generations": "extra gens"}


def signal_table(summary: dict[str, Any], knob: str | None = None) -> str:
    """The training signals of a knob's arms (means over steps and seeds) beside their gains;
    with no knob, every arm's in one table, knob by knob."""
    arms = knob_arms(knob) if knob else [a for k in KNOBS for a in knob_arms(k)]
    names = list(dict.fromkeys(a.name for a in arms if a.name in summary))
    keys = [k for k in SIGNAL_LABELS if any(k in summary[n]["signals"] for n in names)]
    lines = [f"{'arm':<41}{'gain':>6}" + "".join(f"{SIGNAL_LABELS[k]:>12}" for k in keys)]
    for name in names:
        found = summary[name]["signals"]
        cells = []
        for k in keys:
            value = found.get(k)
            text = "-" if value is None else (
                f"{value:.1f}" if k == "length" else f"{value:.5f}" if k == "kl" else
                f"{value:.2f}" if k == "extra_generations" else f"{value:.1%}")
            cells.append(f"{text:>12}")
        lines.append(f"{name:<41}{_points(summary[name]['mean']):>6}" + "".join(cells))
    return "\n".join(lines)


def curve_table(summary: dict[str, Any], names: Sequence[str]) -> str:
    """For the named arms: the final gain and its verdict after Holm against the arm's reference,
    then the area under the held-out curve (the mean gain over the run) and its verdict (raw)."""
    lines = [f"{'arm':<30}{'steps':>6}{'final':>7}  {'verdict (Holm)':<27}{'mean over run':>13}"
             "  verdict on the mean"]
    for name in names:
        s = summary.get(name)
        if s is None or s["auc"] is None:
            continue
        final, said = s["verdict"], s.get("verdict_auc")
        judged = "(the reference)" if final is None else \
            f"{final.get('holm', final['verdict'])} vs {s['reference']}"
        text = "" if said is None else (
            f"{said['verdict']} ({_points(said['difference'])} "
            f"[{_points(said['low'])}, {_points(said['high'])}])")
        lines.append(f"{name:<30}{s['steps'] or '':>6}{_points(s['mean']):>7}  {judged:<27}"
                     f"{_points(s['auc']):>13}  {text}".rstrip())
    return "\n".join(lines)


def t4_cost(seeds: int = 4, arms: int = 1) -> tuple[int, int]:
    """T4 minutes (low, high) of training for `arms` x `seeds` runs of the `t4` profile, from
    its own estimate of seconds per step (helpers.profiles): the cost of one arm on a GPU."""
    low, high = expected_t4_minutes(PROFILES["t4"]) or (0, 0)
    return low * seeds * arms, high * seeds * arms
