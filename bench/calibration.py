"""How often the lab's verdicts go wrong, measured: the A/A calibration of notebook 11's verdicts.

The pool is the course's arm alone on POOL_SEEDS seeds (bench/ablations.py --pool: each run with
its own LoRA start, data order and sampling), made here first if it is missing or short; it
resumes. Then the pool's runs are split at random (helpers.lab.calibration): a 4-seed pseudo-arm
against the other runs (a verdict against the pool), against 8 others (today's grid), and
pseudo-grids of eight pseudo-arms judged with Holm. Every "helps" or "hurts" there is false, and
so is every "equivalent" once the pseudo-arm is moved by the margin. The null arm
(helpers.lab.NULL_ARM: the course with other samples) runs on the same seeds, into the same file,
for the same check of the verdict paired by seed. Writes runs/bench/lab_calibration.json. Run
it from the repository root:

    python -m bench.calibration
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from bench._results import bench_dir, write_result
from bench.ablations import plan, run_grid
from helpers.lab import COURSE, NULL_ARM, POOL_FILE, stale_note
from helpers.lab.calibration import (
    ARM_SEEDS,
    GRID_REFERENCE_SEEDS,
    aa_rates,
    bootstrap_intervals,
    family_rates,
    paired_aa_rates,
)
from helpers.stats import minimum_detectable_effect, welch_df

POOL_SEEDS = 40
SPLITS = 1000  # per design; the pool's C(40, 4) = 91,390 splits leave room
BOOTSTRAP = 100  # resamples of the pool's runs for the rate's interval


def pool_gains() -> tuple[dict[str, dict[int, float]], dict[str, Any]]:
    """{arm: {seed: gain}} for the course and the null arm on the pool's seeds, after making any
    runs the pool lacks (the course's first, then the null arm's)."""
    name = Path(POOL_FILE).name
    for chosen in (COURSE, NULL_ARM.name):
        run_grid(plan([chosen], "native", POOL_SEEDS), name=name)
    pool = json.loads((bench_dir() / name).read_text())
    note = stale_note(pool)
    if note:
        raise SystemExit(note.replace("bench.ablations --fresh", "bench.ablations --pool "
                                      f"{POOL_SEEDS} --fresh"))
    found: dict[str, dict[int, float]] = {COURSE: {}, NULL_ARM.name: {}}
    for row in pool["rows"]:
        if row["arm"] in found and row.get("kernel_path", "native") == "native":
            found[row["arm"]][row["seed"]] = row["gain"]
    return found, pool


def paired_figures(course: dict[int, float], null: dict[int, float]) -> dict[str, Any]:
    """The null arm against the course seed by seed: how far two runs that share their LoRA start
    and data order still differ, and the smallest effect a paired 4-seed verdict shows 80% of
    the time."""
    seeds = sorted(course.keys() & null.keys())
    differences = [null[s] - course[s] for s in seeds]
    sd = statistics.stdev(differences)
    return {"pairs": len(seeds), "mean": statistics.fmean(differences), "sd": sd,
            "correlation": statistics.correlation([course[s] for s in seeds],
                                                  [null[s] for s in seeds]),
            "mde": minimum_detectable_effect(sd / ARM_SEEDS ** 0.5, ARM_SEEDS - 1),
            "differences": differences}


def pool_figures(gains: list[float]) -> dict[str, Any]:
    """The pool's spread, and the smallest effect a 4-seed arm shows 80% of the time against it
    and against 8 seeds: what the ±5-point margin has to be read against."""
    sd = statistics.stdev(gains)

    def mde(reference: int) -> float:
        return minimum_detectable_effect(sd * (1 / 4 + 1 / reference) ** 0.5,
                                         welch_df(sd, 4, reference))

    return {"seeds": len(gains), "mean": statistics.fmean(gains), "sd": sd,
            "low": min(gains), "high": max(gains),
            "mde_against_pool": mde(len(gains) - 4), "mde_against_8": mde(GRID_REFERENCE_SEEDS)}


def main() -> dict[str, Any]:
    found, pool = pool_gains()
    gains = [found[COURSE][s] for s in sorted(found[COURSE])]
    paired = paired_figures(found[COURSE], found[NULL_ARM.name])
    result = {"pool": pool_figures(gains), "splits": SPLITS, "bootstrap": BOOTSTRAP,
              "against_pool": aa_rates(gains, SPLITS),
              "against_8": aa_rates(gains, SPLITS, reference_seeds=GRID_REFERENCE_SEEDS),
              "family": family_rates(gains, SPLITS), "null_arm": paired,
              "paired": paired_aa_rates(paired["differences"], SPLITS),
              "settings": pool["settings"]}
    for key, values, kwargs in (
            ("against_pool", gains, {}),
            ("against_8", gains, {"reference_seeds": GRID_REFERENCE_SEEDS}),
            ("paired", paired["differences"], {"rates": paired_aa_rates})):
        spans = bootstrap_intervals(values, BOOTSTRAP, SPLITS // 5, **kwargs)
        result[key] |= {f"{rate}_pool_interval": span for rate, span in spans.items()}
    print(report(result))
    write_result("lab_calibration", result)
    return result


def report(result: dict[str, Any]) -> str:
    """The calibration in a few lines, in points and percent."""
    p = result["pool"]
    lines = [f"pool: the course's arm on {p['seeds']} seeds, gain {100 * p['mean']:.1f} points "
             f"(sd {100 * p['sd']:.1f}, {100 * p['low']:.1f} to {100 * p['high']:.1f}); a 4-seed "
             f"arm shows {100 * p['mde_against_pool']:.1f} points against the pool, "
             f"{100 * p['mde_against_8']:.1f} against 8 seeds (80% of the time)"]
    n = result["null_arm"]
    lines.append(f"the null arm against the course on {n['pairs']} seeds: difference "
                 f"{100 * n['mean']:+.1f} points (sd {100 * n['sd']:.1f}, correlation "
                 f"{n['correlation']:.2f}); a paired 4-seed arm shows {100 * n['mde']:.1f} points "
                 "(80% of the time)")
    for key, what in (("against_pool", "4 seeds against the pool's others"),
                      ("against_8", "4 seeds against 8 others"),
                      ("paired", "4 seeds paired with the course's same seeds")):
        r = result[key]
        lines.append(
            f"{what}, {r['splits']} splits: false helps/hurts {100 * r['false_difference']:.1f}% "
            f"(runs resampled: {_span(r['false_difference_pool_interval'])}), equivalent "
            f"{100 * r['equivalent']:.1f}%; at a true ±5 points, false equivalent "
            f"{100 * r['false_equivalent']:.1f}% ({_span(r['false_equivalent_pool_interval'])})")
    f = result["family"]
    lines.append(f"pseudo-grids of {f['arms']} arms against 8 seeds, {f['grids']} of them: any "
                 f"false helps/hurts {100 * f['raw']['any_false']:.1f}% raw, "
                 f"{100 * f['holm']['any_false']:.1f}% after Holm")
    return "\n".join(lines)


def _span(interval: list[float] | tuple[float, float]) -> str:
    return f"{100 * interval[0]:.1f} to {100 * interval[1]:.1f}%"


cli = main

if __name__ == "__main__":
    main()
