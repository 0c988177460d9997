"""Pictures of a GRPO run from `trainer.state.log_history`, live and after the fact.

Every function accepts any subset of trl's logged keys: a panel whose metric was never logged
is left out, so partial logs (a crash at step 3, an older trl, beta=0 without `kl`) still plot.
"""

from __future__ import annotations

import html
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LogHistory = list[dict[str, Any]]
REWARD_PREFIX = "rewards/"
HELDOUT_KEY = "heldout/strict"  # greedy strict accuracy on held-out problems (HeldOutAccuracy)


def training_entries(log_history: LogHistory) -> LogHistory:
    """The per-step entries: drops the final summary line (train_runtime, train_loss...)."""
    return [e for e in log_history if "step" in e and "train_runtime" not in e]


def series(log_history: LogHistory, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, skipping entries without it and non-finite values."""
    steps, values = [], []
    for entry in training_entries(log_history):
        value = entry.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            steps.append(int(entry["step"]))
            values.append(float(value))
    return steps, values


def reward_names(log_history: LogHistory) -> list[str]:
    """The reward functions that were logged (`rewards/<name>/mean`), in first-seen order."""
    names: list[str] = []
    for entry in log_history:
        for key in entry:
            if key.startswith(REWARD_PREFIX) and key.endswith("/mean"):
                name = key[len(REWARD_PREFIX) : -len("/mean")]
                if name not in names:
                    names.append(name)
    return names


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


def _draw_reward(ax: Any, log: LogHistory) -> None:
    means, stds = _by_step(log, "reward"), _by_step(log, "reward_std")
    steps = sorted(set(means) & set(stds))
    if steps:
        low = [means[s] - stds[s] for s in steps]
        high = [means[s] + stds[s] for s in steps]
        ax.fill_between(steps, low, high, alpha=0.25, label="± spread within groups")
    _line(ax, log, "reward", label="mean reward")
    ax.legend(fontsize=7, framealpha=0.6)


def _draw_components(ax: Any, log: LogHistory) -> None:
    for name in reward_names(log):
        _line(ax, log, f"{REWARD_PREFIX}{name}/mean", label=name)
    ax.legend(fontsize=7, framealpha=0.6)


def _draw_length(ax: Any, log: LogHistory) -> None:
    _band(ax, log, "completions/min_length", "completions/max_length", alpha=0.2, label="min-max")
    _line(ax, log, "completions/mean_length", label="mean")
    # trl logs 0 for "finished" lengths when nothing finished: plot only steps where some did.
    finished = [e for e in log if e.get("completions/clipped_ratio", 0.0) < 1.0]
    _line(ax, finished, "completions/mean_terminated_length", label="mean of finished", ls="--")
    ax.legend(fontsize=7, framealpha=0.6)


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


def plot_training(log_history: LogHistory, fig: Figure | None = None) -> Figure:
    """A grid of the panels this log supports; draws into `fig` if given (live updates)."""
    from matplotlib.figure import Figure

    panels = panels_for(log_history)
    cols = 3 if len(panels) > 4 else max(1, min(2, len(panels)))
    rows = max(1, math.ceil(len(panels) / cols))
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


def save_figure(log_history: LogHistory, path: Path) -> Path:
    """Plot the log and write it as a PNG (folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plot_training(log_history).savefig(path, dpi=90)
    return path


def notebook_display() -> Callable[..., Any] | None:
    """IPython's `display` inside a Jupyter kernel; None in a script or a test."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return None
    shell = get_ipython()
    return display if shell is not None and hasattr(shell, "kernel") else None


class LivePlot(TrainerCallback):
    """Redraws the training figure every `every` logged steps; saves figure and log on save/end.

    In Jupyter it updates one display in place; headless it only writes files.
    """

    def __init__(self, run_dir: Path, every: int = 1) -> None:
        self.run_dir = Path(run_dir)
        self.every = max(1, every)
        self.figure_path = self.run_dir / "figures" / "training.png"
        self._fig: Figure | None = None
        self._handle: Any = None

    @property
    def displayed(self) -> bool:
        """Whether the figure was drawn in this notebook (not headless, not if nothing trained)."""
        return self._handle is not None

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if state.global_step % self.every == 0 or state.global_step >= state.max_steps:
            self.redraw(state.log_history)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.persist(state.log_history)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.redraw(state.log_history)
        self.persist(state.log_history)

    def redraw(self, log_history: LogHistory) -> None:
        """Update the figure in the notebook (one display, replaced in place); no-op headless."""
        display = notebook_display()
        if display is None:
            return
        from IPython.display import Image

        self._fig = plot_training(log_history, self._fig)
        buffer = io.BytesIO()
        self._fig.savefig(buffer, format="png", dpi=70)
        image = Image(data=buffer.getvalue(), format="png")
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)

    def persist(self, log_history: LogHistory) -> None:
        """Write log_history.json and the figure into the run folder."""
        from helpers.training import save_log_history

        save_log_history(log_history, self.run_dir)
        save_figure(log_history, self.figure_path)


@dataclass(frozen=True)
class Finding:
    """One line of the health check: fine (ok=True) or worth a look."""

    ok: bool
    text: str

    def __str__(self) -> str:
        return f"{'OK  ' if self.ok else 'WARN'} {self.text}"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _thirds(values: list[float]) -> tuple[list[float], list[float]]:
    k = max(1, len(values) // 3)
    return values[:k], values[-k:]


def _slope(values: list[float]) -> float:
    """Least-squares slope of `values` against 0, 1, 2, ... (per step)."""
    n = len(values)
    x_mean, y_mean = (n - 1) / 2, _mean(values)
    num = sum((i - x_mean) * (v - y_mean) for i, v in enumerate(values))
    return num / sum((i - x_mean) ** 2 for i in range(n))


@dataclass(frozen=True)
class Trend:
    """A series' slope, and how often shuffling the same values gave a slope at least as steep."""

    slope: float
    p_value: float  # one-sided permutation p-value for "rising"
    first: float  # mean of the first third
    last: float  # mean of the last third

    @property
    def rose(self) -> bool:
        return self.p_value < TREND_ALPHA and self.slope > 0


TREND_ALPHA = 0.01
TREND_SHUFFLES = 1000


def trend(values: list[float], shuffles: int = TREND_SHUFFLES, seed: int = 0) -> Trend:
    """Did `values` rise? A permutation test of the slope: order matters only if it rose."""
    import random

    if len(values) < 3:
        raise ValueError(f"A trend needs at least 3 logged steps, got {len(values)}.")
    observed, rng, shuffled = _slope(values), random.Random(seed), list(values)
    as_steep = 0
    for _ in range(shuffles):
        rng.shuffle(shuffled)
        as_steep += _slope(shuffled) >= observed
    first, last = (_mean(part) for part in _thirds(values))
    return Trend(observed, (as_steep + 1) / (shuffles + 1), first, last)


def _describe(name: str, t: Trend) -> str:
    return (f"{name} {t.first:.3f} -> {t.last:.3f} (first vs last third), slope {t.slope:+.4f} "
            f"a step, p = {t.p_value:.3f} against shuffled copies of the log")


KEY_REWARD = "correctness_reward"  # the reward that matters; the others shape the format


def _reward_findings(log_history: LogHistory) -> list[Finding]:
    """The total reward's trend, then whether correctness fired and moved with the format."""
    findings = []
    _, rewards = series(log_history, "reward")
    if len(rewards) >= 3:
        t = trend(rewards)
        if t.rose:
            findings.append(Finding(True, "The reward rose: " + _describe("reward", t) + "."))
        else:
            findings.append(Finding(False, (
                "The reward did not rise clearly: " + _describe("reward", t) + ". Train longer, "
                "check the findings above, or change learning_rate."
            )))
    _, correct = series(log_history, f"{REWARD_PREFIX}{KEY_REWARD}/mean")
    if not correct:
        return findings
    if max(correct) == 0:
        findings.append(Finding(False, (
            f"{KEY_REWARD} never fired: no sampled completion was right, so this run could only "
            "learn the format. Use easier problems or a model that gets some right."
        )))
        return findings
    average = _mean(correct)
    fired = f"{KEY_REWARD} averaged {average:.3f} over {len(correct)} steps"
    if len(correct) < 3:
        findings.append(Finding(True, f"{fired}."))
        return findings
    t = trend(correct)
    format_rose = [
        name for name in reward_names(log_history)
        if name != KEY_REWARD and len(series(log_history, f"{REWARD_PREFIX}{name}/mean")[1]) >= 3
        and trend(series(log_history, f"{REWARD_PREFIX}{name}/mean")[1]).rose
    ]
    if t.rose:
        findings.append(Finding(True, f"{fired}, and rose: " + _describe(KEY_REWARD, t) + "."))
    elif format_rose:
        findings.append(Finding(False, (
            f"{fired} and stayed flat while {', '.join(format_rose)} rose: the run learned the "
            f"format, not the answers ({_describe(KEY_REWARD, t)})."
        )))
    else:
        findings.append(Finding(False, (
            f"{fired} but did not rise clearly ({_describe(KEY_REWARD, t)})."
        )))
    return findings


def _heldout_findings(log_history: LogHistory) -> list[Finding]:
    """Greedy held-out accuracy at the first and last measurement, beside sampled correctness."""
    steps, accuracy = series(log_history, HELDOUT_KEY)
    if len(accuracy) < 2:
        return []
    _, correct = series(log_history, f"{REWARD_PREFIX}{KEY_REWARD}/mean")
    sampled = ""
    if len(correct) >= 3:
        first, last = (_mean(part) for part in _thirds(correct))
        sampled = (f"; in the same run, sampled {KEY_REWARD} (temperature 1) went {first:.3f} -> "
                   f"{last:.3f} (first vs last third)")
    change = 100 * (accuracy[-1] - accuracy[0])
    text = (f"Held-out greedy accuracy went {accuracy[0]:.1%} -> {accuracy[-1]:.1%} "
            f"({change:+.1f} points) from step {steps[0]} to step {steps[-1]}{sampled}.")
    return [Finding(change > 0, text)]


def health_check(log_history: LogHistory) -> list[Finding]:
    """Plain-language checks of a finished run: truncation, zero spread, reward trend, loss."""
    if not training_entries(log_history):
        return [Finding(False, "No training steps were logged: did trainer.train() run?")]
    findings = []
    _, clipped = series(log_history, "completions/clipped_ratio")
    if clipped:
        late = _thirds(clipped)[1]
        if _mean(late) >= 0.99:
            findings.append(Finding(False, (
                "Every completion was cut off at max_completion_length (clipped ratio 1.0): "
                "answers never reach </answer>, so correctness rewards stay 0. Raise "
                "max_completion_length, or reward shorter reasoning."
            )))
        else:
            findings.append(Finding(True, (
                f"{1 - _mean(late):.0%} of recent completions finished before the length limit."
            )))
    _, zero_std = series(log_history, "frac_reward_zero_std")
    if zero_std:
        if min(zero_std) >= 0.99:
            findings.append(Finding(False, (
                "Every group had zero reward spread (frac_reward_zero_std = 1): all completions "
                "of a prompt scored the same, so every advantage was 0 and nothing was learned. "
                "Use easier prompts, more generations, or a reward with partial credit."
            )))
        else:
            findings.append(Finding(True, (
                f"{1 - _mean(zero_std):.0%} of groups had a reward spread to learn from."
            )))
    findings += _reward_findings(log_history)
    findings += _heldout_findings(log_history)
    silent = [
        name for name in reward_names(log_history)
        if name != KEY_REWARD  # reported above, with what it means
        and max(map(abs, series(log_history, f"{REWARD_PREFIX}{name}/mean")[1]), default=1) == 0
    ]
    if silent:
        findings.append(Finding(False, (
            f"Never fired (0 at every step): {', '.join(silent)}. Compare their patterns with "
            "real completions in the completion table."
        )))
    n_nan = sum(
        1 for e in training_entries(log_history)
        if isinstance(e.get("grad_norm"), float) and math.isnan(e["grad_norm"])
    )
    if n_nan:
        findings.append(Finding(False, (
            f"grad_norm was NaN at {n_nan} step(s): lower learning_rate, and check fp16 vs bf16."
        )))
    _, losses = series(log_history, "loss")
    typical = _mean([abs(v) for v in losses])
    if losses and not series(log_history, "kl")[0] and abs(_mean(losses)) <= max(1e-3, typical / 2):
        findings.append(Finding(True, (
            f"The loss hovered around 0 (mean {_mean(losses):+.4f}). That is expected with beta=0: "
            "it is minus the average advantage, and advantages are centred within each group; "
            "its gradient is not 0. Watch the reward, not the loss."
        )))
    return findings


def print_health_check(log_history: LogHistory) -> None:
    """Print the health check, one finding a line."""
    for finding in health_check(log_history):
        print(finding)


class CompletionSampler(TrainerCallback):
    """Keeps a few sample completions with their rewards at every `every`-th logged step.

    trl 0.22's GRPOTrainer keeps the last generation batch in `trainer._logs` (prompt,
    completion, per-function rewards, advantages); this copies a slice of it after each log.
    Rows are kept on this object, so there is no global state, and written to
    run_dir/completions.json so they survive a resume.
    """

    def __init__(self, trainer: Any, run_dir: Path, every: int = 10, per_step: int = 4) -> None:
        self.trainer = trainer
        self.path = Path(run_dir) / "completions.json"
        self.every = max(1, every)
        self.per_step = per_step
        self.rows: list[dict[str, Any]] = (
            json.loads(self.path.read_text()) if self.path.exists() else []
        )

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        step = state.global_step
        if step == 0 or "train_runtime" in (logs or {}):
            return
        if step % self.every and step != 1 and step < state.max_steps:
            return
        self.rows = [r for r in self.rows if r["step"] < step] + self.capture(step)
        from helpers.paths import write_json_atomic  # a kill mid-write must not break the resume

        write_json_atomic(self.path, self.rows)

    def capture(self, step: int) -> list[dict[str, Any]]:
        """Rows for the newest generation batch: one group's completions and rewards."""
        logs = getattr(self.trainer, "_logs", None)
        if not logs or not logs.get("completion"):
            return []
        names = list(getattr(self.trainer, "reward_func_names", logs["rewards"].keys()))
        weights = getattr(self.trainer, "reward_weights", None)
        weights = [float(w) for w in weights] if weights is not None else [1.0] * len(names)
        prompts, completions = list(logs["prompt"]), list(logs["completion"])
        rewards = {name: list(logs["rewards"][name]) for name in names}
        advantages = list(logs["advantages"])
        rows = []
        for i in range(min(self.per_step, len(completions))):
            per_func = {name: rewards[name][i] for name in names}
            pairs = zip(weights, per_func.values(), strict=True)
            total = sum(w * v for w, v in pairs if math.isfinite(v))
            rows.append({
                "step": step,
                "question": _last_user_turn(prompts[i]),
                "completion": completions[i],
                **per_func,
                "total": total,
                "advantage": advantages[i] if i < len(advantages) else float("nan"),
            })
        return rows


def _last_user_turn(prompt: Any) -> str:
    """The question from a chat prompt (text or messages), without the system prompt."""
    if isinstance(prompt, list):
        users = [m["content"] for m in prompt if m.get("role") == "user"]
        return users[-1] if users else str(prompt)
    text = str(prompt)
    for marker in ("<|im_start|>user\n", "<|start_header_id|>user<|end_header_id|>\n\n"):
        if marker in text:
            text = text.rsplit(marker, 1)[1]
    return text.split("<|", 1)[0].strip()


def completion_table(rows: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame of sampled completions, whole and unshortened, rewards rounded."""
    import pandas as pd

    table = pd.DataFrame(rows)
    return table if table.empty else table.round(3)


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
