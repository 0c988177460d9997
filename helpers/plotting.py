"""Pictures of a GRPO run from `trainer.state.log_history`, live and after the fact.

Every function accepts any subset of trl's logged keys: a panel whose metric was never logged
is left out, so partial logs (a crash at step 3, an older trl, beta=0 without `kl`) still plot.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from helpers.logs import (
    HELDOUT_KEY,
    KEY_REWARD,
    REWARD_PREFIX,
    LogHistory,
    reward_names,
    series,
    training_entries,
)
from helpers.stats import SIDES, wilson_interval

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Panel:
    """One subplot: a title, a y label, and how to draw it from the log."""

    title: str
    ylabel: str
    keys: tuple[str, ...]  # drawn if any of these is logged
    draw: Callable[[Any, LogHistory], None]


def _line(ax: Any, log: LogHistory, key: str, label: str | None = None, **style: Any) -> None:
    steps, values = series(log, key)
    if steps:
        ax.plot(steps, values, marker="." if len(steps) < 40 else None, label=label, **style)


def _by_step(log: LogHistory, key: str) -> dict[int, float]:
    steps, values = series(log, key)
    return dict(zip(steps, values, strict=True))


def _band(ax: Any, log: LogHistory, low_key: str, high_key: str, **style: Any) -> None:
    lows, highs = _by_step(log, low_key), _by_step(log, high_key)
    steps = sorted(set(lows) & set(highs))
    if steps:
        ax.fill_between(steps, [lows[s] for s in steps], [highs[s] for s in steps], **style)


def _legend_above(ax: Any) -> None:
    """A legend in headroom added above the data, so that it covers no line."""
    handles, _ = ax.get_legend_handles_labels()
    if not handles:
        return
    ncol = min(3, len(handles))
    rows = math.ceil(len(handles) / ncol)
    low, high = ax.get_ylim()
    span = (high - low) or 1.0
    ax.set_ylim(low, high + span * 0.22 * rows)  # each legend row takes about a sixth of the axes
    ax.legend(fontsize=6, framealpha=0.8, loc="upper center", ncol=ncol, borderaxespad=0.2,
              handlelength=1.2, columnspacing=0.8)


def _draw_reward(ax: Any, log: LogHistory) -> None:
    means, stds = _by_step(log, "reward"), _by_step(log, "reward_std")
    steps = sorted(set(means) & set(stds))
    if steps:
        low = [means[s] - stds[s] for s in steps]
        high = [means[s] + stds[s] for s in steps]
        ax.fill_between(steps, low, high, alpha=0.25, label="± spread within groups")
    _line(ax, log, "reward", label="mean reward")
    steps, values = series(log, "reward")
    if len(values) >= 2 * ROLLING_STEPS:  # one step's batch is noisy: a trend shows in the mean
        ax.plot(steps, rolling_mean(values, ROLLING_STEPS), color="black", lw=1.5,
                label=f"mean of the last {ROLLING_STEPS} steps")
    _legend_above(ax)


ROLLING_STEPS = 10


def rolling_mean(values: Sequence[float], window: int) -> list[float]:
    """The mean of each value and the `window - 1` before it (fewer at the start)."""
    return [sum(values[max(0, i + 1 - window) : i + 1]) / min(window, i + 1)
            for i in range(len(values))]


def _draw_components(ax: Any, log: LogHistory) -> None:
    for name in reward_names(log):
        _line(ax, log, f"{REWARD_PREFIX}{name}/mean", label=name.removesuffix("_reward"))
    steps, values = series(log, f"{REWARD_PREFIX}{KEY_REWARD}/mean")
    if len(values) >= 2 * ROLLING_STEPS:  # the answers, not the format: its own smoothed line
        ax.plot(steps, rolling_mean(values, ROLLING_STEPS), color="black", lw=1.5,
                label=f"correctness, mean of the last {ROLLING_STEPS} steps")
    _legend_above(ax)


def _draw_length(ax: Any, log: LogHistory) -> None:
    _band(ax, log, "completions/min_length", "completions/max_length", alpha=0.2, label="min-max")
    _line(ax, log, "completions/mean_length", label="mean")
    # trl logs 0 for "finished" lengths when nothing finished: plot only steps where some did.
    finished = [e for e in log if e.get("completions/clipped_ratio", 0.0) < 1.0]
    _line(ax, finished, "completions/mean_terminated_length", label="mean of finished", ls="--")
    _legend_above(ax)


def _draw_single(key: str) -> Callable[[Any, LogHistory], None]:
    def draw(ax: Any, log: LogHistory) -> None:
        _line(ax, log, key)

    return draw


def _reward_keys(log: LogHistory) -> tuple[str, ...]:
    return tuple(f"{REWARD_PREFIX}{n}/mean" for n in reward_names(log))


PANELS = [
    Panel("Total reward (weighted sum)", "reward", ("reward",), _draw_reward),
    Panel(  # beside the reward: what the model would answer now
        "Held-out accuracy (greedy, strict)",
        "fraction right",
        (HELDOUT_KEY,),
        _draw_single(HELDOUT_KEY),
    ),
    Panel("Reward components", "mean reward", (), _draw_components),  # keys: see panels_for
    Panel("Completion length", "tokens", ("completions/mean_length",), _draw_length),
    Panel(
        "Truncated completions",
        "fraction clipped",
        ("completions/clipped_ratio",),
        _draw_single("completions/clipped_ratio"),
    ),
    Panel(
        "Groups with zero reward spread",
        "fraction (nothing learned)",
        ("frac_reward_zero_std",),
        _draw_single("frac_reward_zero_std"),
    ),
    Panel(  # a crash towards 0 means every sample is the same answer: nothing left to compare
        "Entropy of the next token", "nats", ("entropy",), _draw_single("entropy")),
    Panel(  # before clipping at max_grad_norm; NaN (a gap) means a precision problem
        "Gradient norm", "grad_norm", ("grad_norm",), _draw_single("grad_norm")),
    Panel("KL to the reference model", "kl", ("kl",), _draw_single("kl")),
    Panel("Learning rate", "lr", ("learning_rate",), _draw_single("learning_rate")),
]


def panels_for(log_history: LogHistory) -> list[Panel]:
    """The panels whose metrics appear in this log."""
    present = {key for entry in training_entries(log_history) for key in entry}
    chosen = []
    for panel in PANELS:
        keys = panel.keys or _reward_keys(log_history)
        if any(k in present for k in keys):
            chosen.append(panel)
    return chosen


def grid_shape(count: int) -> tuple[int, int]:
    """(columns, rows) for `count` panels: 3 columns where they fill the grid, else the column
    count (3, 2 or 4) that leaves the fewest empty slots."""
    if count <= 4:
        cols = max(1, min(2, count))
    else:
        cols = min((3, 2, 4), key=lambda c: -count % c)  # ties keep the first: 3, then 2
    return cols, max(1, math.ceil(count / cols))


def plot_training(log_history: LogHistory, fig: Figure | None = None) -> Figure:
    """A grid of the panels this log supports; draws into `fig` if given (live updates)."""
    from matplotlib.figure import Figure

    panels = panels_for(log_history)
    cols, rows = grid_shape(len(panels))
    if fig is None:
        fig = Figure(figsize=(4.2 * cols, 2.9 * rows))
    fig.clear()
    fig.set_size_inches(4.2 * cols, 2.9 * rows)
    if not panels:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "No training steps logged yet", ha="center", va="center")
        ax.set_axis_off()
        return fig
    for index, panel in enumerate(panels, start=1):
        ax = fig.add_subplot(rows, cols, index)
        panel.draw(ax, log_history)
        ax.set_title(panel.title, fontsize=9)
        ax.set_ylabel(panel.ylabel, fontsize=8)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


COMPARED = (HELDOUT_KEY, "reward", "entropy")  # what tells a run that went wrong from its fix


def plot_runs(logs: dict[str, LogHistory]) -> Figure:
    """Runs side by side, a line each: held-out accuracy, the reward (the mean of the last
    ROLLING_STEPS steps) and the entropy."""
    import matplotlib.pyplot as plt

    panels = {panel.keys[0]: panel for panel in PANELS if panel.keys}
    fig, axes = plt.subplots(1, len(COMPARED), figsize=(4.2 * len(COMPARED), 2.9))
    for ax, key in zip(axes, COMPARED, strict=True):
        title = panels[key].title
        for name, log in logs.items():
            steps, values = series(log, key)
            if key == "reward":
                values = rolling_mean(values, ROLLING_STEPS)
            ax.plot(steps, values, marker="o" if len(steps) < 10 else None, label=name)
        if key == "reward":
            title += f", mean of the last {ROLLING_STEPS} steps"
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(panels[key].ylabel, fontsize=8)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def save_figure(log_history: LogHistory, path: Path) -> Path:
    """Plot the log and write it as a PNG (folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plot_training(log_history).savefig(path, dpi=90)
    return path


def completion_table(rows: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame of sampled completions, whole and unshortened, rewards rounded: the
    total and the advantage right after the completion, each reward after them."""
    import pandas as pd

    table = pd.DataFrame(rows)
    if table.empty:
        return table
    first = [c for c in ("step", "question", "completion", "total", "advantage") if c in table]
    return table[first + [c for c in table.columns if c not in first]].round(3)


def completion_html(rows: list[dict[str, Any]]) -> Any:
    """The completion table as HTML with every text whole, line breaks kept, nothing cut off.

    pandas cuts each cell at `display.max_colwidth` (50 characters) when it renders a table; the
    end of a completion, where its <answer> is, would be lost. So render once, with no limit.
    """
    import pandas as pd
    from IPython.display import HTML

    table = completion_table(rows)
    if table.empty:
        return HTML("<p>No completions were sampled.</p>")
    for column in ("question", "completion"):  # escaped by hand, so that line breaks survive
        table[column] = table[column].map(lambda text: html.escape(str(text)).replace("\n", "<br>"))
    with pd.option_context("display.max_colwidth", None):
        body = table.to_html(index=False, escape=False, justify="left")
    return HTML(body)


def plot_prompt_lengths(lengths: Sequence[int], budget: int, ax: Any = None) -> Figure:
    """Histogram of prompt lengths in tokens, with the prompt budget as a red line."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    over = sum(n > budget for n in lengths)
    ax.hist(lengths, bins=min(40, max(5, len(set(lengths)))), color="tab:blue", alpha=0.8)
    ax.axvline(budget, color="tab:red", linestyle="--", label=f"budget {budget} ({over} over)")
    ax.set_xlabel("prompt length (tokens, chat template included)")
    ax.set_ylabel("prompts")
    ax.legend()
    ax.figure.tight_layout()
    return ax.figure


def plot_group_advantages(
    labels: Sequence[str], rewards: Sequence[float], advantages: Sequence[float], ax: Any = None
) -> Figure:
    """Side-by-side bars: each completion's reward and its group-relative advantage."""
    import matplotlib.pyplot as plt

    if not len(labels) == len(rewards) == len(advantages):
        raise ValueError("labels, rewards and advantages must have one entry per completion.")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], rewards, width=0.4, label="reward", color="tab:blue")
    colors = ["tab:green" if a > 0 else "tab:red" for a in advantages]
    ax.bar([i + 0.2 for i in x], advantages, width=0.4, label="advantage", color=colors)
    mean = sum(rewards) / len(rewards)
    ax.axhline(mean, color="tab:blue", linestyle=":", label=f"group mean reward {mean:.2f}")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(list(x), labels, rotation=20, ha="right")
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax.figure


def plot_before_after(results: dict[str, Any], ax: Any = None) -> Any:
    """Grouped bars, base vs trained: strict, lenient and format rates, with 95% Wilson bars."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 3.8))[1]
    labels = ["strict\n(right number,\ntaught format)", "lenient\n(right number\nanywhere)",
              "format\n(an <answer>\nspan at all)"]
    width = 0.38
    for offset, side in ((-width / 2, "base"), (width / 2, "trained")):
        s = results["scores"][side]
        hits = [s["strict"]["correct"], s["lenient"]["correct"], round(s["format_rate"] * s["n"])]
        rates = [100 * h / s["n"] for h in hits]
        bounds = [wilson_interval(h, s["n"]) for h in hits]
        err = [[r - 100 * lo for r, (lo, _) in zip(rates, bounds, strict=True)],
               [100 * hi - r for r, (_, hi) in zip(rates, bounds, strict=True)]]
        bars = ax.bar([i + offset for i in range(3)], rates, width, yerr=err, capsize=4, label=side)
        ax.bar_label(bars, fmt="%.1f%%", padding=2, fontsize=8)  # as the table prints them
    ax.set_xticks(range(3), labels)
    ax.set_ylabel("% of problems")
    ax.set_ylim(0, 105)
    ax.set_title(f"Held-out problems, n = {results['scores']['base']['n']} (95% Wilson intervals)")
    ax.legend()
    return ax


def plot_lengths(results: dict[str, Any], ax: Any = None) -> Any:
    """Histogram of completion lengths per model, with the token limit where truncation starts."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 3))[1]
    limit = results["settings"]["max_new_tokens"]
    bins = range(0, limit + 2, max(1, limit // 16))
    for side in SIDES:
        lengths = [row[f"{side}_tokens"] for row in results["problems"]]
        ax.hist(lengths, bins=bins, alpha=0.55, label=side)
    ax.axvline(limit, color="black", linestyle="--", label="token limit: truncated")
    ax.set_xlabel("completion length (tokens)")
    ax.set_ylabel("problems")
    ax.legend()
    return ax
