"""The grid's verdicts: per arm over seeds against its reference, in four words
(helpers.stats.verdict), with Holm and Benjamini-Hochberg over the grid's family of tests."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from helpers.lab.arms import ARMS, COURSE, NO_OPS
from helpers.stats import (
    adjusted_verdicts,
    benjamini_hochberg,
    holm,
    paired_difference,
    t_quantile,
    verdict,
)


def area_under_curve(curve: Sequence[Sequence[float]], base: float) -> float:
    """The mean held-out gain over a run: the area under (step, accuracy - base) by the trapezoid
    rule, divided by the steps. A knob that only learns later scores lower here than at the end."""
    points = sorted((float(s), float(a) - base) for s, a in curve)
    if len(points) < 2 or points[-1][0] == points[0][0]:
        raise ValueError(f"Need held-out scores at two steps at least, got {points}.")
    steps = zip(points, points[1:], strict=False)
    area = sum((s2 - s1) * (g1 + g2) / 2 for (s1, g1), (s2, g2) in steps)
    return area / (points[-1][0] - points[0][0])


def summarize(rows: Sequence[dict[str, Any]], kernel_path: str = "native") -> dict[str, Any]:
    """Per arm, over its seeds on one kernel path: the gains, their mean and range, the area
    under the held-out curve, each signal's mean, and the verdict against its reference
    (helpers.stats.verdict), raw and adjusted over the grid's family of tests, the difference
    and the equivalence p-values each on their own (Holm: the chance of any false helps or
    hurts at most 5%, and of any false equivalent; Benjamini-Hochberg: at most 5% of the
    verdicts called false, on average), and beside it the difference paired by seed on the
    seeds both sides ran (not part of the verdict: pairing does not narrow the lab's intervals,
    docs/lab.md). Rows of a retired no-op arm (NO_OPS: a test now, no longer an arm) are left
    out."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["seed"]):  # gains in seed order, however run
        if row.get("kernel_path", "native") == kernel_path and row["arm"] not in NO_OPS:
            by_arm.setdefault(row["arm"], []).append(row)
    out: dict[str, Any] = {}
    for name, found in by_arm.items():
        chosen = ARMS.get(name)
        gains = [r["gain"] for r in found]
        reference = None if name == COURSE else found[0].get("reference") or (
            chosen.reference if chosen else COURSE)
        against = by_arm.get(reference, []) if reference else []
        aucs = [area_under_curve(r["curve"], r["base"]) for r in found if r.get("curve")]
        keys = sorted({k for r in found for k in r.get("signals", {})})
        s: dict[str, Any] = {
            "knob": found[0]["knob"], "steps": found[0].get("steps"), "reference": reference,
            "seeds": len(gains), "gains": gains, "mean": statistics.fmean(gains),
            "base": statistics.fmean(r["base"] for r in found),  # the start's score, for its prompt
            "low": min(gains), "high": max(gains),
            "aucs": aucs, "auc": statistics.fmean(aucs) if aucs else None,
            **{k: statistics.fmean(r[k] for r in found) for k in ("fixed", "broken")
               if all(k in r for r in found)},
            "signals": {k: statistics.fmean(r["signals"][k] for r in found if k in r["signals"])
                        for k in keys},
            "control": chosen.control if chosen else "",
            "verdict": None if len(against) < 2 or len(gains) < 2 else
            verdict(gains, [r["gain"] for r in against]),
        }
        paired = paired_against(found, against) if s["verdict"] else None
        if paired:  # beside the verdict: the same seeds, paired
            s["paired"] = paired
        ref_aucs = [area_under_curve(r["curve"], r["base"]) for r in against if r.get("curve")]
        if s["verdict"] and len(aucs) >= 2 and len(ref_aucs) >= 2:
            s["verdict_auc"] = verdict(aucs, ref_aucs)
        out[name] = s
    family = [n for n, s in out.items() if s["verdict"]]
    for method, adjust in (("holm", holm), ("bh", benjamini_hochberg)):
        judged = adjusted_verdicts([out[n]["verdict"] for n in family], adjust)
        for n, a in zip(family, judged, strict=True):
            out[n]["verdict"] |= {f"p_{method}": a["p"], f"p_equivalence_{method}":
                                  a["p_equivalence"], method: a["verdict"]}
    return out


def paired_against(rows: Sequence[dict[str, Any]],
                   reference: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The arm against the reference's runs on the same seeds (stats.paired_difference), or None
    when fewer than two seeds are shared."""
    arm = {r["seed"]: r["gain"] for r in rows}
    ref = {r["seed"]: r["gain"] for r in reference}
    return paired_difference(arm, ref) if len(arm.keys() & ref.keys()) >= 2 else None


def family(summary: dict[str, Any]) -> list[str]:
    """The arms tested against a reference (a stored no-op aside): the family Holm and BH adjust."""
    return [n for n, s in summary.items() if s["verdict"] and n not in NO_OPS]


def reference_check(local: Sequence[dict[str, Any]],
                    stored: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Does this machine reproduce the stored course arm? "exact" when every local seed gave the
    stored answers; "consistent" when the local runs' mean lies in the 95% prediction interval
    of the mean of as many new stored-machine runs; else "shifted": this machine's kernels move
    the reference, and a verdict must use a reference run here."""
    if not local or len(stored) < 2:
        raise ValueError("Need local runs and at least two stored runs to compare.")
    same = {r["seed"]: r for r in stored}
    exact = all(r["seed"] in same and r["gain"] == same[r["seed"]]["gain"]
                and r.get("correct") == same[r["seed"]].get("correct") for r in local)
    gains = [r["gain"] for r in stored]
    mean, n, m = statistics.fmean(gains), len(gains), len(local)
    half = t_quantile(0.975, n - 1) * statistics.stdev(gains) * math.sqrt(1 / n + 1 / m)
    local_mean = statistics.fmean(r["gain"] for r in local)
    status = "exact" if exact else ("consistent" if abs(local_mean - mean) <= half
                                    else "shifted")
    return {"status": status, "local_mean": local_mean, "stored_mean": mean,
            "low": mean - half, "high": mean + half, "local_seeds": [r["seed"] for r in local]}
