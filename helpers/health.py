"""The health check: a run's log read in plain language, evidence first.

It reads the evidence in order. Greedy held-out accuracy (`heldout/strict`, the answer the model
would give now, on problems it never trains on) comes before the sampled reward (temperature 1):
when held-out accuracy rose beyond its noise, a flat sampled reward is reported as information,
not as a warning, and no change of learning rate is advised. Trends of the per-step rewards use a
permutation test of their slope.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from helpers.logs import (
    HELDOUT_KEY,
    HELDOUT_N_KEY,
    KEY_REWARD,
    REWARD_PREFIX,
    LogHistory,
    reward_names,
    series,
    training_entries,
)
from helpers.stats import wilson_interval


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


def _start_and_end(values: list[float]) -> tuple[list[float], list[float]]:
    """The first tenth of a run (at least 2 steps) and its last third: a rise that comes early
    and then levels off, as most of GRPO's do, is between these two, not between the thirds."""
    return values[:max(2, len(values) // 10)], _thirds(values)[1]


def _rise(values: list[float]) -> float:
    start, end = _start_and_end(values)
    return _mean(end) - _mean(start)


def _slope(values: list[float]) -> float:
    """Least-squares slope of `values` against 0, 1, 2, ... (per step)."""
    n = len(values)
    x_mean, y_mean = (n - 1) / 2, _mean(values)
    num = sum((i - x_mean) * (v - y_mean) for i, v in enumerate(values))
    return num / sum((i - x_mean) ** 2 for i in range(n))


@dataclass(frozen=True)
class Trend:
    """A series' start and end, and how often shuffling the same values gave as large a rise."""

    slope: float
    p_value: float  # one-sided permutation p-value for "the last third above the start"
    first: float  # mean of the first tenth (at least 2 steps)
    last: float  # mean of the last third
    p_fell: float = 1.0  # the same for "the last third below the start"

    @property
    def rose(self) -> bool:
        return self.p_value < TREND_ALPHA and self.last > self.first

    @property
    def fell(self) -> bool:
        return self.p_fell < TREND_ALPHA and self.last < self.first


TREND_ALPHA = 0.01


TREND_SHUFFLES = 1000


def trend(values: list[float], shuffles: int = TREND_SHUFFLES, seed: int = 0) -> Trend:
    """Did `values` rise? A permutation test of the last third's mean against the start's:
    order matters only if it rose."""
    import random

    if len(values) < 3:
        raise ValueError(f"A trend needs at least 3 logged steps, got {len(values)}.")
    observed, rng, shuffled = _rise(values), random.Random(seed), list(values)
    as_large = as_low = 0
    for _ in range(shuffles):
        rng.shuffle(shuffled)
        rise = _rise(shuffled)
        as_large += rise >= observed
        as_low += rise <= observed
    first, last = (_mean(part) for part in _start_and_end(values))
    return Trend(_slope(values), (as_large + 1) / (shuffles + 1), first, last,
                 (as_low + 1) / (shuffles + 1))


def _describe(name: str, t: Trend) -> str:
    p_value = t.p_fell if t.fell else t.p_value  # the p of the direction it moved
    return (f"{name} {t.first:.3f} -> {t.last:.3f} (first tenth vs last third), p = "
            f"{p_value:.3f} against shuffled copies of the log")


@dataclass(frozen=True)
class HeldOut:
    """The first and last held-out measurement, and whether the rise is beyond their noise."""

    first_step: int
    last_step: int
    first: float
    last: float
    n: int | None  # problems scored each time (`heldout/n`); None in logs that lack it
    first_interval: tuple[float, float] | None
    last_interval: tuple[float, float] | None

    @property
    def change(self) -> float:
        """The change in points."""
        return 100 * (self.last - self.first)

    @property
    def rose(self) -> bool:
        """Rose beyond its noise: the last score's 95% Wilson interval lies wholly above the
        first's. The criterion ignores that both scores are on the same problems (the log keeps
        no per-problem answers; notebook 06's paired test uses them), so it is conservative:
        two disjoint 95% intervals mean p < 0.01 for two independent samples. From 38.5% on 200
        problems a rise of 14 points passes; on 32 (the `t4` profile's) it takes 28 to 38."""
        if self.first_interval is None or self.last_interval is None:
            return False
        return self.last_interval[0] > self.first_interval[1]

    @property
    def fell(self) -> bool:
        """Fell beyond its noise: the last score's interval lies wholly below the first's."""
        if self.first_interval is None or self.last_interval is None:
            return False
        return self.last_interval[1] < self.first_interval[0]


def heldout_evidence(log_history: LogHistory) -> HeldOut | None:
    """The held-out scores at the first and last measurement, or None with fewer than two."""
    steps, accuracy = series(log_history, HELDOUT_KEY)
    if len(accuracy) < 2:
        return None
    _, sizes = series(log_history, HELDOUT_N_KEY)
    n = int(sizes[-1]) if sizes and len(set(sizes)) == 1 else None
    intervals = (None, None) if n is None else tuple(
        wilson_interval(round(a * n), n) for a in (accuracy[0], accuracy[-1]))
    return HeldOut(steps[0], steps[-1], accuracy[0], accuracy[-1], n, *intervals)


def _interval(bounds: tuple[float, float] | None) -> str:
    return "" if bounds is None else f" [{bounds[0]:.1%}, {bounds[1]:.1%}]"


def _heldout_findings(held: HeldOut | None, log_history: LogHistory) -> list[Finding]:
    """Greedy held-out accuracy at the first and last measurement, with 95% Wilson intervals."""
    if held is None:
        return []
    scored = f" on {held.n} problems" if held.n else ""
    text = (f"Held-out greedy accuracy went {held.first:.1%}{_interval(held.first_interval)} -> "
            f"{held.last:.1%}{_interval(held.last_interval)} ({held.change:+.1f} points){scored}, "
            f"from step {held.first_step} to step {held.last_step}")
    if held.rose:
        return [Finding(True, text + ": beyond its noise (the 95% intervals do not overlap).")]
    if held.fell:
        return [Finding(False, text + ": it fell beyond its noise, so training made the model "
                               "worse (the findings below say how).")]
    if held.n is None:
        return [Finding(False, text + ": the log does not say how many problems were scored, "
                               "so this cannot tell a rise from noise.")]
    return [Finding(False, text + (
        ": within its noise (the 95% intervals overlap). Notebook 06 measures on more problems, "
        "with a paired test."))]


def _sampled_flat(what: str, held: HeldOut) -> str:
    """A flat sampled curve beside a held-out rise: why that is not a problem, in one finding."""
    return (f"{what}; held-out greedy accuracy rose beyond its noise ({held.change:+.1f} points, "
            "above), so the run learned. A step's reward averages one batch of samples on new "
            "problems, so it is noisy; notebook 06 scores sampled answers on the held-out "
            "problems. Information, not a problem.")


def _hacked(held: HeldOut) -> Finding:
    """The reward rose and the answers did not: the alarm for a reward that pays the wrong thing."""
    return Finding(False, (
        f"The training reward rose while held-out greedy accuracy did not ({held.change:+.1f} "
        "points, above): the rewards may pay for something other than right answers (reward "
        "hacking). Read the completions and the reward components before training longer."))


def _reward_findings(log_history: LogHistory, held: HeldOut | None) -> list[Finding]:
    """The total reward's trend, then whether correctness fired and moved with the format."""
    learned = held is not None and held.rose
    findings = []
    _, rewards = series(log_history, "reward")
    if len(rewards) >= 3:
        t = trend(rewards)
        if t.rose and held is not None and held.change <= 0:
            findings.append(_hacked(held))
        elif t.rose:
            findings.append(Finding(True, "The reward rose: " + _describe("reward", t) + "."))
        elif t.fell:
            findings.append(Finding(False, (
                "The reward fell: " + _describe("reward", t) + ". The updates broke what the "
                "model could do; the usual cause is a learning_rate too high (notebook 05 "
                "section 8 shows one): lower it and train again.")))
        elif learned:
            findings.append(Finding(True, _sampled_flat(
                "The sampled reward did not rise clearly: " + _describe("reward", t), held)))
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
    elif t.fell:
        findings.append(Finding(False, f"{fired} and fell: {_describe(KEY_REWARD, t)}."))
    elif format_rose:  # strict held-out accuracy can rise on the format alone: still worth a look
        findings.append(Finding(False, (
            f"{fired} and stayed flat while {', '.join(format_rose)} rose: the run learned the "
            f"format, not the answers ({_describe(KEY_REWARD, t)})."
        )))
    elif learned:
        findings.append(Finding(True, _sampled_flat(
            f"{fired} and did not rise clearly ({_describe(KEY_REWARD, t)})", held)))
    else:
        findings.append(Finding(False, (
            f"{fired} but did not rise clearly ({_describe(KEY_REWARD, t)})."
        )))
    return findings


def health_check(log_history: LogHistory) -> list[Finding]:
    """Plain-language checks of a finished run: truncation, zero spread, held-out accuracy, the
    reward trends read in its light, silent rewards, NaN gradients, the loss."""
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
    held = heldout_evidence(log_history)
    findings += _heldout_findings(held, log_history)  # what the model answers now, first
    findings += _reward_findings(log_history, held)
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
