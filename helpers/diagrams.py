"""Concept diagrams, drawn by code so that tests can check them and one style restyles them all.

Each function returns a matplotlib `Figure` built without pyplot (no global state, nothing shown
by accident); `show_diagram` puts one on a notebook page, and `write_all` saves every diagram as
a PNG under docs/figures/ (`python -m helpers.diagrams`). Numbers drawn in a diagram come from
the course's own code: the advantages from `group_advantages`, the clipped objective from
`clipped_surrogate`, the Drive folder from `helpers.paths`.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from helpers.paths import ROOT

FIGURES_DIR = ROOT / "docs" / "figures"
DPI = 110


@dataclass(frozen=True)
class Style:
    """The one look every diagram shares."""

    box: str = "#eaf1fb"  # a step or an object
    edge: str = "#2f4f7f"
    frozen: str = "#d9d9d9"  # weights that do not train
    trained: str = "#f6d7a7"  # weights that train
    good: str = "#2e7d32"  # positive advantage, the objective
    bad: str = "#c62828"  # negative advantage
    muted: str = "#7a7a7a"
    text: str = "#1b1b1b"
    font: float = 10.5
    title: float = 12.5


STYLE = Style()


def _canvas(width: float, height: float, xlim: float = 10, ylim: float = 6) -> tuple[Figure, Any]:
    """A figure with one invisible axes in box coordinates (0..xlim, 0..ylim)."""
    fig = Figure(figsize=(width, height), dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, xlim)
    ax.set_ylim(0, ylim)
    ax.axis("off")
    return fig, ax


def _box(ax: Any, x: float, y: float, w: float, h: float, label: str, *, fill: str | None = None,
         dashed: bool = False, size: float | None = None, weight: str = "normal",
         color: str | None = None) -> None:
    """A rounded box with centred text; (x, y) is its lower-left corner."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                facecolor=fill or STYLE.box, edgecolor=STYLE.edge, linewidth=1.3,
                                linestyle="--" if dashed else "-"))
    ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=size or STYLE.font,
            color=color or STYLE.text, weight=weight)


def _arrow(ax: Any, start: tuple[float, float], end: tuple[float, float], *,
           color: str | None = None, curve: float = 0.0, label: str = "",
           label_at: tuple[float, float] | None = None) -> None:
    """An arrow from `start` to `end`, optionally bent and labelled."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, linewidth=1.4,
                                 color=color or STYLE.edge,
                                 connectionstyle=f"arc3,rad={curve}"))
    if label:
        x, y = label_at or ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.18)
        ax.text(x, y, label, ha="center", va="bottom", fontsize=STYLE.font - 1.5,
                color=color or STYLE.edge)


def _title(ax: Any, x: float, y: float, text: str) -> None:
    ax.text(x, y, text, ha="left", va="top", fontsize=STYLE.title, weight="bold",
            color=STYLE.text)


# ---- 1. The GRPO step loop -------------------------------------------------------------------

EXAMPLE_COMPLETIONS = ("<answer>12</answer>", "<answer>13</answer>", "<answer>21</answer>",
                       "<answer>12</answer>")
EXAMPLE_REWARDS = (1.0, 0.0, 0.0, 1.0)


def grpo_step_loop(completions: Sequence[str] = EXAMPLE_COMPLETIONS,
                   rewards: Sequence[float] = EXAMPLE_REWARDS) -> Figure:
    """One GRPO step: prompt -> G samples -> rewards -> group advantages -> update, and again."""
    import torch

    from helpers.grpo_scratch import group_advantages

    g = len(completions)
    if g != len(rewards) or g < 2:
        raise ValueError(f"{g} completions and {len(rewards)} rewards: give one reward per "
                         "completion, and at least 2 completions (a group).")
    advantages = group_advantages(torch.tensor(rewards, dtype=torch.float32), g).tolist()
    fig, ax = _canvas(11, 5.4, xlim=11, ylim=5.4)
    _title(ax, 0.2, 5.3, f"One GRPO step (G = {g} samples of one prompt)")
    ax.text(10.85, 5.3, "A_i = (r_i − group mean) / group std: no critic",
            ha="right", va="top", fontsize=STYLE.font - 1.5, color=STYLE.muted)
    mid = 2.95
    _box(ax, 0.2, mid - 0.45, 1.5, 0.9, "prompt q\n\"7 + 5 = ?\"")
    _box(ax, 2.2, mid - 0.45, 1.6, 0.9, "policy π_θ\n(the model)", weight="bold")
    _arrow(ax, (1.7, mid), (2.2, mid))
    row_h, top, bottom = 0.58, 4.25, 1.65
    ys = [top - i * (top - bottom) / (g - 1) for i in range(g)]
    for x, header in ((5.25, f"{g} samples o_i"), (7.05, "rewards r_i"), (8.45, "advantages A_i")):
        ax.text(x, 4.7, header, ha="center", fontsize=STYLE.font, weight="bold")
    for y, text, reward, adv in zip(ys, completions, rewards, advantages, strict=True):
        _arrow(ax, (3.8, mid), (4.35, y), color=STYLE.muted)
        _box(ax, 4.35, y - row_h / 2, 1.8, row_h, text, size=STYLE.font - 1)
        _arrow(ax, (6.15, y), (6.65, y), color=STYLE.muted)
        _box(ax, 6.65, y - row_h / 2, 0.8, row_h, f"{reward:g}")
        _arrow(ax, (7.45, y), (7.9, y), color=STYLE.muted)
        sign = STYLE.good if adv > 0 else STYLE.bad if adv < 0 else STYLE.muted
        _box(ax, 7.9, y - row_h / 2, 1.1, row_h, f"{adv:+.2f}", color=sign, weight="bold")
        _arrow(ax, (9.0, y), (9.45, mid), color=STYLE.muted)
    _box(ax, 9.45, mid - 0.65, 1.4, 1.3, "update θ\nA > 0: more likely\nA < 0: less likely",
         size=STYLE.font - 1.5)
    # The loop back: down from the update, along the bottom, up into the policy.
    ax.plot([10.15, 10.15, 3.0], [mid - 0.65, 0.75, 0.75], color=STYLE.edge, linewidth=1.4)
    _arrow(ax, (3.0, 0.75), (3.0, mid - 0.45))
    ax.text(6.6, 0.45, "next step: sample new completions from the updated policy",
            ha="center", va="center", fontsize=STYLE.font - 1.5, color=STYLE.edge)
    return fig


# ---- 2. LoRA on a 4-bit weight ----------------------------------------------------------------

def lora_on_4bit(hidden: int = 1536, rank: int = 32) -> Figure:
    """A frozen 4-bit weight W (d x d) beside the small trained matrices B (d x r), A (r x d)."""
    if not 0 < rank < hidden:
        raise ValueError(f"rank {rank} must be between 1 and hidden - 1 ({hidden - 1}).")
    frozen, trained = hidden * hidden, 2 * hidden * rank
    fig, ax = _canvas(10, 5, xlim=10, ylim=5)
    _title(ax, 0.2, 4.9, "LoRA on a 4-bit weight: h = W x + B A x")
    side = 3.2
    ax.add_patch(Rectangle((0.4, 0.8), side, side, facecolor=STYLE.frozen, edgecolor=STYLE.edge,
                           linewidth=1.3, hatch="..", alpha=0.9))
    for i in range(1, 8):  # blocks of 64 weights share one scale in NF4: drawn as a grid
        ax.plot([0.4 + i * side / 8] * 2, [0.8, 0.8 + side], color="white", linewidth=0.8)
        ax.plot([0.4, 0.4 + side], [0.8 + i * side / 8] * 2, color="white", linewidth=0.8)
    ax.text(0.4 + side / 2, 0.8 + side / 2, f"W\n{hidden} × {hidden}\nfrozen, 4-bit NF4",
            ha="center", va="center", fontsize=STYLE.font + 0.5, weight="bold",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    ax.text(0.4 + side / 2, 0.45, f"{frozen / 1e6:.2f}M weights, no gradient",
            ha="center", fontsize=STYLE.font - 0.5, color=STYLE.muted)
    ax.text(4.05, 0.8 + side / 2, "+", ha="center", va="center", fontsize=24, color=STYLE.text)
    thin = max(0.18, side * rank / hidden * 4)  # rank drawn thicker than scale, to be visible
    ax.add_patch(Rectangle((4.5, 0.8), thin, side, facecolor=STYLE.trained,
                           edgecolor=STYLE.edge, linewidth=1.3))
    ax.text(4.5 + thin / 2, 0.8 + side + 0.12, f"B\n{hidden} × {rank}", ha="center",
            va="bottom", fontsize=STYLE.font)
    ax.add_patch(Rectangle((5.1, 0.8 + side - thin), side, thin, facecolor=STYLE.trained,
                           edgecolor=STYLE.edge, linewidth=1.3))
    ax.text(5.1 + side / 2, 0.8 + side + 0.12, f"A   {rank} × {hidden}", ha="center",
            va="bottom", fontsize=STYLE.font)
    ax.text(4.8 + thin / 2, 0.8 + side - thin / 2, "×", ha="center", va="center", fontsize=16,
            color=STYLE.text)
    ax.text(5.1 + side / 2, 0.8 + side - thin - 0.5,
            "B starts at 0, so training\nstarts from the base model;\nα = r: the product is\n"
            "added with scale 1", ha="center", va="top", fontsize=STYLE.font - 1,
            color=STYLE.muted)
    ax.text(4.5 + (side + 0.6) / 2, 0.45,
            f"{trained / 1e6:.2f}M weights, trained at full precision "
            f"({100 * trained / frozen:.1f}% of W)", ha="center", fontsize=STYLE.font - 0.5,
            color=STYLE.edge)
    _box(ax, 8.6, 1.6, 1.25, 1.6, "only B and A\nget gradients\nand optimizer\nstate",
         fill=STYLE.trained, size=STYLE.font - 1.5)
    return fig


# ---- 3. The hand-off between notebooks through Google Drive ------------------------------------

NOTEBOOK_ROLES = ("Training notebook", "Evaluation notebook", "Save-and-use notebook")


def drive_handoff(roles: Sequence[str] = NOTEBOOK_ROLES) -> Figure:
    """Each notebook runs in its own Colab runtime; the run folder on Google Drive links them."""
    from helpers.run_folder import DRIVE_RUNS, RUN_NAME

    if len(roles) != 3:
        raise ValueError(f"{len(roles)} roles given: name the training, evaluation and "
                         "save-and-use notebooks, in that order.")
    train, evaluate, save = roles
    fig, ax = _canvas(10.5, 5.2, xlim=10.5, ylim=5.2)
    _title(ax, 0.2, 5.1, "Three notebooks, three Colab runtimes, one run folder on Google Drive")
    columns = ((0.3, train, "trains, checkpoints\nsaves the LoRA adapter"),
               (3.8, evaluate, "loads the adapter\nscores held-out problems"),
               (7.3, save, "loads the adapter\nmerges, exports"))
    for x, role, does in columns:
        _box(ax, x, 2.75, 2.9, 1.85, "", dashed=True, fill="white")
        ax.text(x + 1.45, 4.35, "Colab runtime (its own)", ha="center", fontsize=STYLE.font - 2,
                color=STYLE.muted)
        _box(ax, x + 0.2, 2.95, 2.5, 1.2, f"{role}\n{does}", size=STYLE.font - 1)
    folder = f"{DRIVE_RUNS.as_posix()}/{RUN_NAME}/<profile>/"
    _box(ax, 1.4, 0.25, 7.7, 1.5,
         f"Google Drive: {folder}\nadapter/   checkpoints/   log_history.json   figures/   eval/",
         fill="#fff6d6", size=STYLE.font - 0.5)
    _arrow(ax, (1.75, 2.75), (2.6, 1.75), color=STYLE.good, label="writes",
           label_at=(1.75, 2.05))
    _arrow(ax, (4.6, 1.75), (5.25, 2.75), color=STYLE.edge, label="reads", label_at=(4.55, 2.15))
    _arrow(ax, (5.75, 2.75), (5.9, 1.75), color=STYLE.good, label="writes eval/",
           label_at=(6.55, 2.15))
    _arrow(ax, (7.9, 1.75), (8.75, 2.75), color=STYLE.edge, label="reads", label_at=(8.85, 2.05))
    ax.text(5.25, 0.05,
            "A runtime and its disk vanish when Colab recycles it; Drive keeps the run.",
            ha="center", va="bottom", fontsize=STYLE.font - 1.5, color=STYLE.muted)
    return fig


# ---- 4. PPO/GRPO's clipped objective against the ratio ----------------------------------------

def clipped_objective_values(ratios: Sequence[float], advantage: float, epsilon_low: float,
                             epsilon_high: float) -> list[float]:
    """min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) per ratio, from clipped_surrogate."""
    import torch

    from helpers.grpo_scratch import clipped_surrogate

    logps = torch.tensor([list(ratios)], dtype=torch.float64).log()
    loss = clipped_surrogate(logps, torch.zeros_like(logps),
                             torch.tensor([advantage], dtype=torch.float64),
                             epsilon_low, epsilon_high)
    return (-loss[0]).tolist()  # the objective is minus the per-token loss


def clipped_objective(epsilon_low: float = 0.2, epsilon_high: float = 0.2,
                      max_ratio: float = 2.0) -> Figure:
    """The objective per token against rho = pi_theta / pi_old, for A = +1 and A = -1."""
    ratios = [0.01 + i * (max_ratio - 0.01) / 399 for i in range(400)]
    fig = Figure(figsize=(10, 4), dpi=DPI)
    axes = fig.subplots(1, 2, sharex=True)
    for ax, advantage in zip(axes, (1.0, -1.0), strict=True):
        values = clipped_objective_values(ratios, advantage, epsilon_low, epsilon_high)
        low, high = 1 - epsilon_low, 1 + epsilon_high
        ax.axvspan(low, high, color=STYLE.box, zorder=0,
                   label=f"clip range [{low:g}, {high:g}]")
        ax.plot(ratios, [r * advantage for r in ratios], linestyle="--", color=STYLE.muted,
                label="unclipped ρ·A")
        color = STYLE.good if advantage > 0 else STYLE.bad
        ax.plot(ratios, values, color=color, linewidth=2.4, label="objective min(ρA, clip(ρ)A)")
        flat = (high, max_ratio) if advantage > 0 else (0, low)
        ax.annotate("flat: no gradient", xy=((flat[0] + flat[1]) / 2, high * advantage
                                             if advantage > 0 else low * advantage),
                    xytext=(0, 14 if advantage > 0 else -22), textcoords="offset points",
                    ha="center", fontsize=STYLE.font - 1, color=color)
        ax.axvline(1.0, color=STYLE.text, linewidth=0.8, linestyle=":")
        ax.set_title(f"A = {advantage:+g}: " + ("a better-than-average token" if advantage > 0
                                                else "a worse-than-average token"),
                     fontsize=STYLE.font + 0.5)
        ax.set_xlabel("ratio ρ = π_θ(token) / π_old(token)")
        ax.set_ylabel("objective (the loss is its negative)")
        ax.legend(fontsize=STYLE.font - 2.5, loc="upper left" if advantage > 0 else "lower left")
    fig.suptitle("PPO/GRPO's clipped objective: with one pass per batch ρ = 1, "
                 "and clipping never acts", fontsize=STYLE.title - 1)
    fig.tight_layout()
    return fig


# ---- Showing and saving --------------------------------------------------------------------

DIAGRAMS = {"grpo_step_loop": grpo_step_loop, "lora_on_4bit": lora_on_4bit,
            "drive_handoff": drive_handoff, "clipped_objective": clipped_objective}


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG, without the matplotlib version in its metadata (stable across runs)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def show_diagram(fig: Figure) -> None:
    """Put a diagram on the notebook page as one PNG."""
    from IPython.display import Image, display

    display(Image(data=png_bytes(fig)))


def write_all(folder: Path = FIGURES_DIR) -> list[Path]:
    """Every diagram as folder/<name>.png; returns the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, draw in DIAGRAMS.items():
        path = folder / f"{name}.png"
        path.write_bytes(png_bytes(draw()))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_all():
        print(f"wrote {written.relative_to(ROOT)}")
