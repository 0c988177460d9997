"""Plots for the data and reward notebooks (02, 03): prompt lengths, and one group's advantages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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
