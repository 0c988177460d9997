"""Statistics for accuracies: intervals, pass@k, and paired tests of two models on one problem set.

Notebook 06 compares the base and the trained model on the same problems (McNemar's exact test and
a paired bootstrap); notebook 09 and the benchmarks use the same functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
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
    """Student's t quantile (0.5 <= q < 1) for `df` degrees of freedom, by bisection on its CDF
    (`t_cdf`); no SciPy needed."""
    if not 0.5 <= q < 1 or df <= 0:
        raise ValueError(f"Need 0.5 <= q < 1 and df > 0, got q={q}, df={df}.")
    if math.isinf(df):
        df = 1e12
    low, high = 0.0, 1.0
    while t_cdf(high, df) < q:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < q else (low, mid)
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


# ---- Comparing arms over seeds (notebook 11): four verdicts, families of tests, power ----------

VERDICTS = ("helps", "hurts", "equivalent", "inconclusive")
EQUIVALENCE_MARGIN = 0.05  # ±5 points of accuracy: "equivalent" means the 90% interval lies inside
ALPHA = 0.05


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((qam + 2 * m) * (a + 2 * m)),
                          -(a + m) * (qab + m) * x / ((a + 2 * m) * (qap + 2 * m))):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def beta_regularized(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function: the CDF of Beta(a, b) at x."""
    if not 0 <= x <= 1 or a <= 0 or b <= 0:
        raise ValueError(f"Need 0 <= x <= 1 and a, b > 0, got x={x}, a={a}, b={b}.")
    if x in (0.0, 1.0):
        return x
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):  # the fraction converges fast on this side
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1 - math.exp(log_front) * _beta_fraction(b, a, 1 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t CDF, through the incomplete beta function (fast enough for simulations)."""
    if df <= 0:
        raise ValueError(f"Need df > 0, got {df}.")
    tail = 0.5 * beta_regularized(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t > 0 else tail


def f_survival(f: float, d1: float, d2: float) -> float:
    """P(F > f) for Fisher's F with (d1, d2) degrees of freedom."""
    if f <= 0:
        return 1.0
    return beta_regularized(d2 / 2, d1 / 2, d2 / (d2 + d1 * f))


def welch(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Welch's comparison of two groups of runs: mean(a) - mean(b), its standard error, the
    Welch-Satterthwaite degrees of freedom and the two-sided p-value of "no difference"."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Need at least two runs on each side, got {len(a)} and {len(b)}.")
    diff = statistics.fmean(a) - statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:  # every run the same on both sides: nothing to test against
        return {"difference": diff, "se": 0.0, "df": math.inf,
                "p": 1.0 if diff == 0 else 0.0}
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    se = math.sqrt(va + vb)
    return {"difference": diff, "se": se, "df": df, "p": 2 * t_cdf(-abs(diff) / se, df)}


def paired_difference(arm: dict[int, float], reference: dict[int, float],
                      level: float = 0.95) -> dict[str, Any]:
    """Arm against reference on the seeds both ran ({seed: gain}): the mean of the per-seed
    differences, its t interval on n - 1 df and the two-sided p-value of "no difference". A seed
    moves both runs alike, so pairing takes its common part out of the comparison."""
    shared = sorted(arm.keys() & reference.keys())
    if len(shared) < 2:
        raise ValueError(f"Need at least two seeds that both sides ran, got {shared}: run the "
                         "arm on the reference's seeds.")
    diffs = [arm[s] - reference[s] for s in shared]
    mean, df = statistics.fmean(diffs), len(diffs) - 1
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    if se == 0:  # the same difference on every seed
        return {"seeds": shared, "difference": mean, "se": 0.0, "df": df, "low": mean,
                "high": mean, "p": 1.0 if mean == 0 else 0.0}
    half = t_quantile(1 - (1 - level) / 2, df) * se
    return {"seeds": shared, "difference": mean, "se": se, "df": df, "low": mean - half,
            "high": mean + half, "p": 2 * t_cdf(-abs(mean) / se, df)}


def equivalence_p(difference: float, se: float, df: float,
                  margin: float = EQUIVALENCE_MARGIN) -> float:
    """TOST (two one-sided tests): the p-value of "the true difference lies outside ±margin";
    below 0.05 exactly when the 90% interval lies inside ±margin."""
    if se == 0:
        return 0.0 if abs(difference) < margin else 1.0
    low = 1 - t_cdf((difference + margin) / se, df)  # H0: difference <= -margin
    high = t_cdf((difference - margin) / se, df)  # H0: difference >= +margin
    return max(low, high)


def say(p_difference: float, p_equivalence: float, difference: float,
        alpha: float = ALPHA) -> str:
    """The four-way verdict from the two p-values: a difference first, then equivalence."""
    if p_difference < alpha:
        return VERDICTS[0] if difference > 0 else VERDICTS[1]
    return VERDICTS[2] if p_equivalence < alpha else VERDICTS[3]


def tests(arm: Sequence[float], reference: Sequence[float],
          margin: float = EQUIVALENCE_MARGIN) -> dict[str, float]:
    """Welch's difference test and the TOST equivalence test of an arm against its reference."""
    w = welch(arm, reference)
    return {**w, "p_equivalence": equivalence_p(w["difference"], w["se"], w["df"], margin)}


def verdict(arm: Sequence[float], reference: Sequence[float], level: float = 0.95,
            margin: float = EQUIVALENCE_MARGIN) -> dict[str, Any]:
    """How an arm's gains over seeds compare with the reference arm's, in four words: "helps" or
    "hurts" when Welch's interval leaves 0; else "equivalent" when the 90% interval lies inside
    ±margin (TOST); else "inconclusive": no large effect shown, and none ruled out. Beside it:
    the smallest true difference this comparison finds 80% of the time ("mde", from its own
    standard error) and the largest one its interval leaves possible ("largest")."""
    w = tests(arm, reference, margin)
    diff, se, df = w["difference"], w["se"], w["df"]
    half = t_quantile(0.5 + level / 2, df) * se if se else 0.0
    half90 = t_quantile(0.95, df) * se if se else 0.0
    return {"difference": diff, "low": diff - half, "high": diff + half,
            "low90": diff - half90, "high90": diff + half90, "se": se, "df": df, "p": w["p"],
            "p_equivalence": w["p_equivalence"], "margin": margin,
            "mde": minimum_detectable_effect(se, df, 1 - level) if se else 0.0,
            "largest": abs(diff) + half,
            "verdict": say(w["p"], w["p_equivalence"], diff, 1 - level)}


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values: below alpha, a family-wise error of at most alpha."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [1.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values): below q, a false discovery rate of at most
    q among the verdicts called (valid here, where the tests share one reference, by
    Benjamini-Yekutieli's positive dependence)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i], reverse=True)
    adjusted, running = [1.0] * m, 1.0
    for rank, i in enumerate(order):
        running = min(running, pvalues[i] * m / (m - rank))
        adjusted[i] = running
    return adjusted


def adjusted_verdicts(found: Sequence[dict[str, Any]],
                      adjust: Callable[[Sequence[float]], list[float]]) -> list[dict[str, Any]]:
    """A family of `tests` results judged together: the difference and the equivalence p-values
    each adjusted over the family by `adjust` (holm, benjamini_hochberg), then the four words;
    one {"p", "p_equivalence", "verdict"} per test, in order."""
    ps = adjust([f["p"] for f in found])
    qs = adjust([f["p_equivalence"] for f in found])
    return [{"p": p, "p_equivalence": q, "verdict": say(p, q, f["difference"])}
            for f, p, q in zip(found, ps, qs, strict=True)]


def minimum_detectable_effect(se: float, df: float, alpha: float = ALPHA,
                              power: float = 0.8) -> float:
    """The smallest true difference a two-sided test at `alpha` finds with probability `power`,
    for a difference with standard error `se` on `df` degrees of freedom: (t_a + t_power) se."""
    return (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * se


def welch_df(sd: float, n_arm: int, n_reference: int) -> float:
    """Welch's degrees of freedom when both sides spread alike (sd): the design's own df."""
    va, vb = sd**2 / n_arm, sd**2 / n_reference
    return (va + vb) ** 2 / (va**2 / (n_arm - 1) + vb**2 / (n_reference - 1))


def blocked_anova(table: Sequence[Sequence[float]]) -> dict[str, float]:
    """Two-way analysis of arms (rows) x seeds (columns), one run per cell: seeds as blocks.

    Every arm ran the same seeds, and a seed sets the data order and the sampling for all of them
    (and, in lab runs, the LoRA start); taking each seed's common part out leaves the residual
    spread. Returns the residual variance and its df, and the F test of the seed blocks.
    """
    rows, cols = len(table), len(table[0])
    if rows < 2 or cols < 2 or any(len(r) != cols for r in table):
        raise ValueError("Need a full table of at least two arms by two seeds.")
    grand = statistics.fmean(v for r in table for v in r)
    arm_means = [statistics.fmean(r) for r in table]
    seed_means = [statistics.fmean(r[j] for r in table) for j in range(cols)]
    seed_ss = rows * sum((m - grand) ** 2 for m in seed_means)
    residual_ss = sum((table[i][j] - arm_means[i] - seed_means[j] + grand) ** 2
                      for i in range(rows) for j in range(cols))
    seed_df, residual_df = cols - 1, (rows - 1) * (cols - 1)
    residual = residual_ss / residual_df
    f = (seed_ss / seed_df) / residual if residual else math.inf
    return {"residual_variance": residual, "residual_df": residual_df, "seed_f": f,
            "seed_df": seed_df, "seed_p": f_survival(f, seed_df, residual_df),
            "seed_effects": [m - grand for m in seed_means]}


# A sequential design: 4 seeds, then 8, then 16, stopping as soon as the verdict is not
# "inconclusive". Looking three times at one family of runs needs a stricter level at each look;
# SEQUENTIAL_ALPHA keeps the chance of a false "helps" or "hurts" at 5% over the three looks
# (tests/test_lab_stats.py simulates it), as Pocock's constant boundary does.
SEQUENTIAL_LOOKS = (4, 8, 16)
SEQUENTIAL_ALPHA = 0.022  # Pocock's constant level for three looks


def sequential_step(arm: Sequence[float], reference: Sequence[float],
                    looks: Sequence[int] = SEQUENTIAL_LOOKS, alpha: float = SEQUENTIAL_ALPHA,
                    margin: float = EQUIVALENCE_MARGIN) -> tuple[dict[str, Any], int | None]:
    """The verdict at this look (every test at `alpha`) and how many seeds the arm needs next:
    None when it stops (a verdict, or the last look)."""
    found: dict[str, Any] = dict(tests(arm, reference, margin))
    found["verdict"] = say(found["p"], found["p_equivalence"], found["difference"], alpha)
    later = [n for n in looks if n > len(arm)]
    more = later[0] if later and found["verdict"] == VERDICTS[3] else None
    return found, more


def simulate_sequential(effect: float, sd: float, n_reference: int, reps: int, seed: int = 0,
                        looks: Sequence[int] = SEQUENTIAL_LOOKS, alpha: float = SEQUENTIAL_ALPHA,
                        margin: float = EQUIVALENCE_MARGIN) -> dict[str, float]:
    """Run the sequential design `reps` times on normal gains (arm mean `effect` above a reference
    of n_reference runs, both with spread `sd`): the share of each verdict and the mean seeds."""
    import random

    rng = random.Random(seed)
    counts = dict.fromkeys(VERDICTS, 0)
    seeds = 0
    for _ in range(reps):
        reference = [rng.gauss(0, sd) for _ in range(n_reference)]
        arm: list[float] = []
        need: int | None = looks[0]
        while need is not None:
            arm += [rng.gauss(effect, sd) for _ in range(need - len(arm))]
            found, need = sequential_step(arm, reference, looks, alpha, margin)
        counts[found["verdict"]] += 1
        seeds += len(arm)
    return {**{k: v / reps for k, v in counts.items()}, "mean_seeds": seeds / reps}
