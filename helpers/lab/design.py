"""The grid's design, measured from its rows: the power of its comparisons, seeds as blocks,
the evaluation's share of the seed spread, the dead-group fit, the evaluation sets' coverage,
and the reference check replayed on another kernel path."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from helpers.lab.arms import COURSE, NO_OPS
from helpers.lab.groups import dead_group_fit
from helpers.lab.problems import coverage, fact_of, lab_problems
from helpers.lab.verdicts import family, reference_check, summarize
from helpers.profiles import PROFILES, SEED
from helpers.stats import ALPHA, blocked_anova, minimum_detectable_effect, welch_df
from helpers.synthetic import synthetic_split


def _pooled_sd(summary: dict[str, Any], names: Sequence[str]) -> float | None:
    """The seed spread pooled over arms (each arm's variance around its own mean)."""
    found = [summary[n]["gains"] for n in names if n in summary and len(summary[n]["gains"]) > 1]
    df = sum(len(g) - 1 for g in found)
    if not df:
        return None
    return math.sqrt(sum((len(g) - 1) * statistics.variance(g) for g in found) / df)


def _plain(summary: dict[str, Any], steps: int | None = None) -> list[str]:
    """The course and the arms that are not controls (at the profile's steps)."""
    steps = steps or PROFILES["smoke"].max_steps
    return [n for n, s in summary.items() if n not in NO_OPS and not s["control"]
            and (s.get("steps") or steps) == steps]


def power(summary: dict[str, Any], arm_seeds: int = 4) -> dict[str, Any] | None:
    """The smallest effect the grid finds 80% of the time: one arm's `arm_seeds` against the
    course's seeds by Welch's test (at 5%, and at Holm's strictest level over the family), with
    the seed spread pooled over the plain arms; and how many seeds per arm a smaller one needs."""
    sd = _pooled_sd(summary, _plain(summary))
    if sd is None or COURSE not in summary or summary[COURSE]["seeds"] < 2:
        return None
    n_ref, m = summary[COURSE]["seeds"], max(1, len(family(summary)))
    se = sd * math.sqrt(1 / arm_seeds + 1 / n_ref)
    df = welch_df(sd, arm_seeds, n_ref)
    per_seeds = {}
    for n in (4, 8, 16, 32):  # n seeds on each side
        per_seeds[str(n)] = minimum_detectable_effect(sd * math.sqrt(2 / n), 2 * n - 2)
    return {"sd": sd, "arm_seeds": arm_seeds, "reference_seeds": n_ref, "se": se, "df": df,
            "mde": minimum_detectable_effect(se, df),
            "mde_holm": minimum_detectable_effect(se, df, ALPHA / m), "family": m,
            "mde_equal_seeds": per_seeds}


def blocks(rows: Sequence[dict[str, Any]], seeds: int = 4) -> dict[str, Any] | None:
    """Seeds as blocks: the plain arms x their first `seeds` shared seeds in one two-way analysis
    (helpers.stats.blocked_anova); a contrast of two arms then loses the seed's common part,
    and its smallest detectable effect follows from the residual spread."""
    summary = summarize(rows)
    wanted = list(range(SEED, SEED + seeds))
    table, names = [], []
    for name in _plain(summary):
        by_seed = {r["seed"]: r["gain"] for r in rows
                   if r["arm"] == name and r.get("kernel_path", "native") == "native"}
        if all(s in by_seed for s in wanted):
            table.append([by_seed[s] for s in wanted])
            names.append(name)
    if len(table) < 3:
        return None
    found = blocked_anova(table)
    se = math.sqrt(2 * found["residual_variance"] / seeds)
    return {**found, "arms": names, "seeds": wanted,
            "residual_sd": math.sqrt(found["residual_variance"]),
            "se": se, "mde": minimum_detectable_effect(se, found["residual_df"])}


def evaluation_noise(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """How much of the seed spread is the evaluation's own.

    On the census every sum is asked twice, in two wordings. A run that gets one wording right and
    the other wrong, where other runs do not, shows wording noise: what a fresh census of the same
    sums would reshuffle. Its variance over the 200 problems, v/200 for a run's accuracy, is the
    evaluation's part of the seed spread; the rest is training. A random 200-problem set (the
    evaluation notebook's kind) adds the sampling of sums, estimated from the runs x sums spread.
    Pooled over the plain arms with three runs or more (and for the course alone).
    """
    problems = lab_problems()
    by_fact: dict[str, list[int]] = {}
    for i, row in enumerate(problems):
        by_fact.setdefault(fact_of(row), []).append(i)
    pairs = [tuple(ix) for ix in by_fact.values() if len(ix) == 2]
    n_facts = len(pairs)
    summary = summarize(rows)
    parts = {}
    for name in _plain(summary):
        runs = [r for r in rows if r["arm"] == name and r.get("kernel_path", "native") == "native"
                and len(r.get("correct", "")) == len(problems)]
        if len(runs) >= 3:
            parts[name] = _noise_parts(runs, pairs)
    if not parts:
        return None
    # A random set of 200 from 100 sums: E[sum of squared shares] against the census' 1/100.
    n = len(problems)
    extra = 1 / n + (1 - 1 / n) / n_facts - 1 / n_facts

    def report(found: Sequence[dict[str, float]]) -> dict[str, float]:
        weight = sum(f["runs"] - 1 for f in found)
        seed_var = sum((f["runs"] - 1) * f["seed_var"] for f in found) / weight
        wording = sum((f["runs"] - 1) * f["wording"] for f in found) / weight
        facts = sum((f["runs"] - 1) * f["facts"] for f in found) / weight
        census = wording / n  # a run's accuracy over n problems, each wording on its own
        random_set = census + extra * facts
        return {"runs": sum(f["runs"] for f in found), "seed_sd": math.sqrt(seed_var),
                "evaluation_sd": math.sqrt(census), "share": census / seed_var,
                "random_set_sd": math.sqrt(random_set), "random_set_share": random_set / seed_var}

    return {"pooled": report(list(parts.values())),
            **({"course": report([parts[COURSE]])} if COURSE in parts else {}),
            "arms": sorted(parts), "facts": n_facts}


def _noise_parts(runs: Sequence[dict[str, Any]], pairs: Sequence[tuple[int, ...]]
                 ) -> dict[str, float]:
    """One arm's runs x problems: the seed variance of accuracy, the per-problem wording variance
    v, and the runs x sums interaction variance (both net of what all runs share)."""
    r = len(runs)
    x = [[int(c) for c in run["correct"]] for run in runs]
    diffs = [[x[k][i] - x[k][j] for i, j in pairs] for k in range(r)]
    mean_diff = [statistics.fmean(d[f] for d in diffs) for f in range(len(pairs))]
    squares = sum((diffs[k][f] - mean_diff[f]) ** 2 for k in range(r) for f in range(len(pairs)))
    wording = squares / (r * len(pairs)) / (2 * (1 - 1 / r))
    means = [[(x[k][i] + x[k][j]) / 2 for i, j in pairs] for k in range(r)]
    row = [statistics.fmean(m) for m in means]
    col = [statistics.fmean(means[k][f] for k in range(r)) for f in range(len(pairs))]
    grand = statistics.fmean(row)
    residual = sum((means[k][f] - row[k] - col[f] + grand) ** 2
                   for k in range(r) for f in range(len(pairs))) / ((r - 1) * (len(pairs) - 1))
    accuracy = [statistics.fmean(v) for v in x]
    return {"runs": r, "seed_var": statistics.variance(accuracy), "wording": wording,
            "facts": max(0.0, residual - wording / 2)}


def design(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the grid can tell apart and how well it measures: the power of its comparisons,
    seeds as blocks, the evaluation's share of the spread, the dead-group calculator's test,
    the evaluation sets' coverage, and the reference check replayed on the other kernel path."""
    native = [r for r in rows if r.get("kernel_path", "native") == "native"]
    summary = summarize(native)
    course = [r for r in native if r["arm"] == COURSE]
    replays = {}
    for kernel in sorted({r["kernel_path"] for r in rows} - {"native"}):
        theirs = sorted((r for r in rows if r["arm"] == COURSE and r["kernel_path"] == kernel),
                        key=lambda r: r["seed"])
        if theirs and len(course) >= 2:
            replays[kernel] = {"first_two": reference_check(theirs[:2], course),
                               "all": reference_check(theirs, course)}
    return {"power": power(summary), "blocks": blocks(native),
            "evaluation": evaluation_noise(native), "dead_groups": dead_group_fit(native),
            "coverage": {"census": coverage(lab_problems()),
                         "heldout": coverage(synthetic_split("test", 200))},
            "reference_check": replays}
