"""Statistics for accuracies: intervals, pass@k, and paired tests of two models on one problem set.

Notebook 06 compares the base and the trained model on the same problems (McNemar's exact test and
a paired bootstrap); notebook 09 and the benchmarks use the same functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from helpers.rewards import Mode

SIDES = ("base", "trained")  # the two models every paired comparison holds side by side
Z_95 = 1.959963984540054  # the normal quantile for a two-sided 95% interval


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval for a proportion: sound near 0% and 100% and for small n."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"Need 0 <= successes <= n and n > 0, got {successes}/{n}.")
    p = successes / n
    denom = 1 + z**2 / n
    center = (p + z**2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): P(at least one of k draws from the n is correct)."""
    if not 0 <= num_correct <= num_samples or not 1 <= k <= num_samples:
        raise ValueError(f"Need 0 <= c <= n and 1 <= k <= n, got n={num_samples}, "
                         f"c={num_correct}, k={k}.")
    if num_samples - num_correct < k:
        return 1.0
    return 1.0 - math.comb(num_samples - num_correct, k) / math.comb(num_samples, k)


def mcnemar_p(fixed: int, broken: int) -> float:
    """Exact two-sided McNemar p-value: under "no change", each flip is a fair coin."""
    if fixed < 0 or broken < 0:
        raise ValueError(f"Flip counts must be >= 0, got fixed={fixed}, broken={broken}.")
    n = fixed + broken
    tail = sum(math.comb(n, k) for k in range(min(fixed, broken) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_bootstrap(
    base: Sequence[bool], trained: Sequence[bool], resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile interval of trained minus base accuracy, resampling problems as pairs."""
    import numpy as np

    if len(base) != len(trained) or not base:
        raise ValueError(f"Need two equal, non-empty lists of outcomes, got {len(base)} and "
                         f"{len(trained)}.")
    diff = np.asarray(trained, dtype=float) - np.asarray(base, dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(diff), size=(resamples, len(diff)))
    low, high = np.percentile(diff[picks].mean(axis=1), [2.5, 97.5])
    return float(low), float(high)


def paired_test(results: dict[str, Any], mode: Mode = "strict") -> dict[str, Any]:
    """The paired comparison: flips each way, the gain with a bootstrap 95% CI, McNemar's p."""
    rows = results["problems"]
    base = [bool(r[f"base_{mode}"]) for r in rows]
    trained = [bool(r[f"trained_{mode}"]) for r in rows]
    fixed = sum(t and not b for b, t in zip(base, trained, strict=True))
    broken = sum(b and not t for b, t in zip(base, trained, strict=True))
    low, high = paired_bootstrap(base, trained)
    return {
        "mode": mode, "n": len(rows), "fixed": fixed, "broken": broken,
        "gain": (fixed - broken) / len(rows), "ci_low": low, "ci_high": high,
        "mcnemar_p": mcnemar_p(fixed, broken),
    }


def describe_paired(test: dict[str, Any]) -> str:
    """One sentence: the paired gain, its interval, the flips and whether it is more than noise."""
    verdict = (
        "the interval excludes 0: a real change" if test["ci_low"] > 0 or test["ci_high"] < 0
        else "the interval includes 0: not shown to differ"
    )
    return (
        f"{test['mode']}: {100 * test['gain']:+.1f} points on {test['n']} problems "
        f"(paired bootstrap 95% CI {100 * test['ci_low']:+.1f} to {100 * test['ci_high']:+.1f}); "
        f"{test['fixed']} fixed, {test['broken']} broken, McNemar p = {test['mcnemar_p']:.2g}; "
        f"{verdict}."
    )


def t_quantile(q: float, df: float) -> float:
    """Student's t quantile (0.5 <= q < 1) for `df` degrees of freedom, by bisection on its CDF.

    The CDF is the density integrated from 0 with Simpson's rule: exact to ~1e-6 here, and no
    SciPy needed for the one quantile the seed comparisons use.
    """
    if not 0.5 <= q < 1 or df <= 0:
        raise ValueError(f"Need 0.5 <= q < 1 and df > 0, got q={q}, df={df}.")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float, steps: int = 2000) -> float:
        h = x / steps
        f = [math.exp(log_c - (df + 1) / 2 * math.log1p((i * h) ** 2 / df))
             for i in range(steps + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    low, high = 0.0, 1.0
    while cdf(high) < q:
        high *= 2
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < q else (low, mid)
    return (low + high) / 2


def mean_difference(a: Sequence[float], b: Sequence[float],
                    level: float = 0.95) -> tuple[float, float, float]:
    """mean(a) - mean(b) with Welch's t interval: two groups of runs, unequal spreads allowed."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Need at least two runs on each side, got {len(a)} and {len(b)}.")
    diff = statistics.fmean(a) - statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(0.5 + level / 2, df) * math.sqrt(va + vb)
    return diff, diff - half, diff + half


VERDICTS = ("helps", "hurts", "within the seed spread")


def verdict(arm: Sequence[float], reference: Sequence[float],
            level: float = 0.95) -> dict[str, Any]:
    """How an arm's gains over seeds compare with the reference arm's: the difference of means,
    its interval, and "helps" or "hurts" when the interval leaves 0, else "within the seed
    spread"."""
    diff, low, high = mean_difference(arm, reference, level)
    said = VERDICTS[0] if low > 0 else VERDICTS[1] if high < 0 else VERDICTS[2]
    return {"difference": diff, "low": low, "high": high, "verdict": said}
