"""The grid's figures: gains per seed coloured by verdict, held-out curves, dead groups.
matplotlib is imported where a figure is drawn: the tables and summaries do without it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from helpers.lab.arms import ARMS, COURSE, KNOBS
from helpers.lab.groups import dead_group_points, dead_group_share
from helpers.profiles import PROFILES


def mean_curve(rows: Sequence[dict[str, Any]], name: str,
               kernel_path: str = "native") -> list[tuple[int, float]]:
    """An arm's held-out gain at each scored step, averaged over its runs."""
    by_step: dict[int, list[float]] = {}
    for r in rows:
        if r["arm"] == name and r.get("kernel_path", "native") == kernel_path and r.get("curve"):
            for step, accuracy in r["curve"]:
                by_step.setdefault(int(step), []).append(accuracy - r["base"])
    return sorted((s, statistics.fmean(v)) for s, v in by_step.items())


def generations_per_step(rows: Sequence[dict[str, Any]], name: str) -> float:
    """Completions an arm generates per optimizer step, on average over its runs: the smoke
    batch, times one plus the batches dynamic sampling drew again, over the updates each batch
    feeds (num_iterations)."""
    smoke = PROFILES["smoke"]
    batch = smoke.per_device_train_batch_size * smoke.gradient_accumulation_steps
    chosen = ARMS.get(name)
    iterations = chosen.overrides.get("num_iterations", 1) if chosen else 1
    extra = [r["signals"].get("extra_generations", 0.0) for r in rows
             if r["arm"] == name and "signals" in r]
    return batch * (1 + (statistics.fmean(extra) if extra else 0.0)) / iterations


def plot_curves(rows: Sequence[dict[str, Any]], names: Sequence[str], ax: Any = None) -> Any:
    """Held-out gain, averaged over seeds, against the completions generated so far: arms that
    generate more per step (dynamic sampling) or less (two updates per batch) sit where their
    compute puts them."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 3.6))[1]
    for k, name in enumerate(names):
        points, per_step = mean_curve(rows, name), generations_per_step(rows, name)
        ax.plot([s * per_step / 1000 for s, _ in points], [100 * g for _, g in points], "o-",
                color=f"C{k}", label=name, markersize=4)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("completions generated (thousands)")
    ax.set_ylabel("held-out gain (points)")
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax


VERDICT_COLORS = {"helps": "tab:green", "hurts": "tab:red", "equivalent": "tab:blue",
                  "inconclusive": "tab:gray"}


def plot_ablation(summary: dict[str, Any], ax: Any = None) -> Any:
    """Each arm's gain on every seed (dots) and its mean (a bar), coloured by its verdict after
    Holm's adjustment; the course's arm first, with its mean as a line across the plot."""
    import matplotlib.pyplot as plt

    names = [COURSE] + [a.name for arms in KNOBS.values() for a in arms.values()
                        if a.name in summary]
    ax = ax or plt.subplots(figsize=(10, 4))[1]
    course = summary.get(COURSE)
    if course:
        ax.axhline(100 * course["mean"], color="black", linestyle="--", linewidth=0.8,
                   label="course's mean")
    for i, name in enumerate(names):
        s = summary[name]
        said = s["verdict"] or {}
        color = "black" if name == COURSE else \
            VERDICT_COLORS.get(said.get("holm", said.get("verdict")), "tab:gray")
        ax.bar(i, 100 * s["mean"], width=0.6, color=color, alpha=0.35)
        ax.plot([i] * len(s["gains"]), [100 * g for g in s["gains"]], "o", color=color,
                markersize=3.5)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)), names, rotation=50, ha="right", fontsize=7)
    ax.set_ylabel("held-out gain (points)")
    ax.set_title("Gain per seed, coloured by the verdict after Holm: green helps, red hurts, "
                 "blue equivalent, grey inconclusive", fontsize=9)
    ax.legend(fontsize=8, loc="lower left")
    ax.figure.tight_layout()
    return ax


def plot_dead_groups(rows: Sequence[dict[str, Any]], spread: float,
                     group_sizes: Sequence[int] = (2, 4, 8), ax: Any = None) -> Any:
    """The dead-group calculator against the grid: for each G, p^G + (1-p)^G (solid) and the
    two-parameter curve with the fitted spread (dashed) against the pass rate p; each run a dot
    at its mean training pass rate and its measured share of groups with no correctness spread,
    the very quantity both curves give."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 3.8))[1]
    grid = [i / 200 for i in range(1, 200)]
    points = dead_group_points(rows)
    for k, g in enumerate(group_sizes):
        color = f"C{k}"
        ax.plot(grid, [100 * dead_group_share(p, g) for p in grid], color=color,
                label=f"G = {g}: p^G + (1-p)^G")
        ax.plot(grid, [100 * dead_group_share(p, g, spread) for p in grid], "--", color=color,
                label=f"G = {g}: spread {spread:.2f}")
        mine = [(p, m) for _, size, p, m in points if size == g]
        if mine:
            ax.plot([p for p, _ in mine], [100 * m for _, m in mine], "o", color=color,
                    markeredgecolor="black", markersize=5)
    ax.set_xlabel("pass rate p (share of training answers that are right)")
    ax.set_ylabel("groups with no correctness spread (%)")
    ax.set_xlim(0.2, 0.6)
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, ncols=3)
    ax.figure.tight_layout()
    return ax
