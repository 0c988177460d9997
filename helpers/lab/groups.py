"""Dead groups: the share of groups with no reward spread at a pass rate, and its fit on the grid.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from helpers.lab.arms import COURSE, group_size


def dead_group_share(p: float, group_size: int, spread: float = 0.0) -> float:
    """The share of groups with no spread (all right or all wrong) at pass rate p.

    With one pass rate for every problem (spread 0) it is p^G + (1-p)^G. Problems differ: with
    their pass rates spread as a Beta distribution of mean p and intraclass correlation `spread`
    (0: all alike; 1: each problem always or never solved), it is the beta-binomial chance of 0 or
    G right answers, which is higher.
    """
    if not 0 <= p <= 1 or group_size < 1 or not 0 <= spread < 1:
        raise ValueError(f"Need 0 <= p <= 1, a group size of at least 1 and 0 <= spread < 1, got "
                         f"p={p}, G={group_size}, spread={spread}.")
    if spread == 0 or p in (0, 1):
        return p ** group_size + (1 - p) ** group_size
    a, b = p * (1 - spread) / spread, (1 - p) * (1 - spread) / spread

    def log_beta(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    base = log_beta(a, b)
    return (math.exp(log_beta(a, b + group_size) - base)
            + math.exp(log_beta(a + group_size, b) - base))


def fit_spread(points: Sequence[tuple[int, float, float]]) -> float:
    """The spread (intraclass correlation) whose curves best fit measured (G, p, share) points,
    by least squares on a grid of 0.001."""
    grid = [i / 1000 for i in range(0, 951)]
    return min(grid, key=lambda rho: sum((dead_group_share(p, g, rho) - share) ** 2
                                         for g, p, share in points))


# The fit's own arms, and temperature=0.7: the same problems under another sampler, where the
# spread fitted on the course's runs falls short (the spread is not the problems' alone).
DEAD_GROUP_ARMS = (COURSE, "num_generations=4", "num_generations=2", "rewards=correctness",
                   "temperature=0.7")


def dead_group_points(rows: Sequence[dict[str, Any]], names: Sequence[str] = DEAD_GROUP_ARMS,
                      kernel_path: str = "native") -> list[tuple[str, int, float, float]]:
    """(arm, G, the run's mean training pass rate, its measured share of groups with no
    correctness spread) for each lab run of `names` on one kernel path."""
    return [(r["arm"], group_size(r["arm"]), r["signals"]["correctness"],
             r["signals"]["zero_std_correctness"])
            for r in rows if r["arm"] in names and r.get("kernel_path", "native") == kernel_path
            and "zero_std_correctness" in r.get("signals", {})]


def dead_group_fit(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The calculator tested on the grid: the spread fitted on the course's runs (G = 8), then
    per arm the mean pass rate, the measured share without correctness spread, trl's share on
    the weighted total, and what each formula predicts at that pass rate."""
    points = dead_group_points(rows)
    course = [(g, p, m) for name, g, p, m in points if name == COURSE]
    if not course:
        return None
    spread = fit_spread(course)
    arms = {}
    for name in DEAD_GROUP_ARMS:
        mine = [(g, p, m) for n, g, p, m in points if n == name]
        if not mine:
            continue
        g, p = mine[0][0], statistics.fmean(x[1] for x in mine)
        trl = [r["signals"]["zero_std"] for r in rows if r["arm"] == name
               and r.get("kernel_path", "native") == "native" and "zero_std" in r["signals"]]
        arms[name] = {"group_size": g, "pass_rate": p,
                      "measured": statistics.fmean(x[2] for x in mine),
                      "trl_total": statistics.fmean(trl),
                      "one_parameter": dead_group_share(p, g),
                      "two_parameter": dead_group_share(p, g, spread)}
    return {"spread": spread, "fitted_on": COURSE, "arms": arms}
