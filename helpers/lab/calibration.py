"""The lab's verdicts measured where the truth is known: the course's arm on many seeds (the
pool, `python -m bench.ablations --pool 40`), split again and again into a pseudo-arm and a
pseudo-reference that share nothing and judged by the grid's own verdict: helpers.stats.verdict's
two tests and its rule for the four words (`word`; the intervals it also computes are not needed).

In such an A/A split every "helps" or "hurts" is false. Moving the pseudo-arm's gains by the
equivalence margin makes a true effect of exactly the margin, where every "equivalent" is false.
A pseudo-grid (a reference and as many 4-seed pseudo-arms as the pool holds) measures the chance
of any false verdict over a family, raw and after Holm, as the grid's summary adjusts it.

Two runs of the course on one seed train the same bits, so the pool alone cannot test a verdict
paired by seed. The null arm (helpers.lab.arms.NULL_ARM: at each seed the course's LoRA start and
data order, other samples) can: its per-seed differences from the course are an A/A of the
paired comparison the grid keeps beside each verdict (`paired_aa_rates`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from helpers.stats import (
    EQUIVALENCE_MARGIN,
    VERDICTS,
    adjusted_verdicts,
    equivalence_p,
    holm,
    paired_difference,
    say,
    tests,
    wilson_interval,
)

HELPS, HURTS, EQUIVALENT, _ = VERDICTS
ARM_SEEDS = 4  # an arm's seeds in the grid and in try_arm
GRID_REFERENCE_SEEDS = 8  # the course's seeds in today's grid


def word(arm: Sequence[float], reference: Sequence[float]) -> str:
    """helpers.stats.verdict's four words for an arm against its reference, without its
    intervals (the same two tests and the same rule, twenty times faster)."""
    found = tests(arm, reference)
    return say(found["p"], found["p_equivalence"], found["difference"])


def paired_word(differences: Sequence[float]) -> str:
    """The four words for an arm against its reference paired by seed, from the per-seed
    differences: the grid's paired_difference (a t test on n - 1 df), its TOST, and say's rule."""
    found = paired_difference(dict(enumerate(differences)), dict.fromkeys(
        range(len(differences)), 0.0))
    return say(found["p"], equivalence_p(found["difference"], found["se"], found["df"]),
               found["difference"])


def split(gains: Sequence[float], arm_seeds: int, reference_seeds: int | None,
          rng: random.Random) -> tuple[list[float], list[float]]:
    """A random pseudo-arm of `arm_seeds` runs and a disjoint pseudo-reference of
    `reference_seeds` (None: all the others)."""
    order = rng.sample(range(len(gains)), len(gains))
    rest = order[arm_seeds:] if reference_seeds is None else \
        order[arm_seeds:arm_seeds + reference_seeds]
    return [gains[i] for i in order[:arm_seeds]], [gains[i] for i in rest]


def _rates(found: Sequence[str], shifted: dict[str, Sequence[str]]) -> dict[str, Any]:
    n = len(found)
    false = sum(v in (HELPS, HURTS) for v in found)
    out = {"splits": n, "false_difference": false / n,
           "false_difference_interval": wilson_interval(false, n),
           **{v: sum(x == v for x in found) / n for v in VERDICTS}}
    wrong = [x == EQUIVALENT for side in shifted.values() for x in side]
    out["false_equivalent"] = sum(wrong) / len(wrong)
    out["false_equivalent_interval"] = wilson_interval(sum(wrong), len(wrong))
    return out


def aa_rates(gains: Sequence[float], splits: int = 1000, arm_seeds: int = ARM_SEEDS,
             reference_seeds: int | None = None, margin: float = EQUIVALENCE_MARGIN,
             seed: int = 0) -> dict[str, Any]:
    """The verdicts over `splits` A/A splits of the pool's gains: the share of each of the four
    words (every "helps" or "hurts" false, with its Wilson interval over the splits), and the
    share of "equivalent" when the pseudo-arm's gains are moved by +margin and by -margin (each
    one false)."""
    if len(gains) < arm_seeds + (reference_seeds or 2):
        raise ValueError(f"A pool of {len(gains)} runs cannot give a pseudo-arm of {arm_seeds} "
                         f"and a reference of {reference_seeds or 2}: run more seeds "
                         "(`python -m bench.ablations --pool 40`).")
    rng = random.Random(seed)
    found, shifted = [], {"+margin": [], "-margin": []}
    for _ in range(splits):
        arm, reference = split(gains, arm_seeds, reference_seeds, rng)
        found.append(word(arm, reference))
        for side, sign in (("+margin", 1), ("-margin", -1)):
            moved = [g + sign * margin for g in arm]
            shifted[side].append(word(moved, reference))
    return {"arm_seeds": arm_seeds, "reference_seeds": reference_seeds or
            len(gains) - arm_seeds} | _rates(found, shifted)


def paired_aa_rates(differences: Sequence[float], splits: int = 1000,
                    arm_seeds: int = ARM_SEEDS, margin: float = EQUIVALENCE_MARGIN,
                    seed: int = 0) -> dict[str, Any]:
    """aa_rates for the paired verdict: `differences` are the null arm's gains minus the course's
    on the same seeds; each split draws `arm_seeds` of them, as an arm on 4 of the grid's seeds
    is paired with the course on those 4."""
    if len(differences) < arm_seeds + 1:
        raise ValueError(f"{len(differences)} seeds of the null arm cannot give {arm_seeds}-seed "
                         "splits: run it on the pool's seeds (`python -m bench.calibration`).")
    rng = random.Random(seed)
    found, shifted = [], {"+margin": [], "-margin": []}
    for _ in range(splits):
        drawn = rng.sample(list(differences), arm_seeds)
        found.append(paired_word(drawn))
        for side, sign in (("+margin", 1), ("-margin", -1)):
            shifted[side].append(paired_word([d + sign * margin for d in drawn]))
    return {"arm_seeds": arm_seeds, "pairs": len(differences)} | _rates(found, shifted)


def pseudo_grid(gains: Sequence[float], rng: random.Random, arm_seeds: int = ARM_SEEDS,
                reference_seeds: int = GRID_REFERENCE_SEEDS) -> dict[str, list[str]]:
    """One pseudo-grid: the pool shuffled into a reference and as many disjoint pseudo-arms as
    it holds, each judged as verdicts.summarize judges the grid: raw, and with Holm over the
    family on the difference and the equivalence p-values."""
    order = rng.sample(list(gains), len(gains))
    reference, rest = order[:reference_seeds], order[reference_seeds:]
    arms = [rest[i:i + arm_seeds] for i in range(0, len(rest) - arm_seeds + 1, arm_seeds)]
    found = [tests(a, reference) for a in arms]
    return {"raw": [say(v["p"], v["p_equivalence"], v["difference"]) for v in found],
            "holm": [v["verdict"] for v in adjusted_verdicts(found, holm)]}


def family_rates(gains: Sequence[float], grids: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Over `grids` pseudo-grids: how often at least one pseudo-arm is called "helps" or "hurts"
    (the family-wise error, which Holm keeps at 5%), raw and after Holm."""
    rng = random.Random(seed)
    made = [pseudo_grid(gains, rng) for _ in range(grids)]
    out: dict[str, Any] = {"grids": grids, "arms": len(made[0]["raw"])}
    for level in ("raw", "holm"):
        any_false = sum(any(v in (HELPS, HURTS) for v in g[level]) for g in made)
        out[level] = {"any_false": any_false / grids,
                      "interval": wilson_interval(any_false, grids),
                      "equivalent": sum(v == EQUIVALENT for g in made for v in g[level])
                      / sum(len(g[level]) for g in made)}
    return out


def bootstrap_intervals(gains: Sequence[float], draws: int = 200, splits: int = 200,
                        seed: int = 1, rates: Callable[..., dict[str, Any]] = aa_rates,
                        **kwargs: Any) -> dict[str, tuple[float, float]]:
    """95% intervals for the A/A rates that count the pool's own chance: the splits share the
    pool's runs, so their Wilson interval is too narrow. Each draw resamples the pool's runs (or
    the null arm's differences) with replacement and measures the rates again (`rates`, aa_rates
    or paired_aa_rates, with `kwargs`)."""
    rng = random.Random(seed)
    keys = ("false_difference", "false_equivalent")
    found = [rates(rng.choices(gains, k=len(gains)), splits, seed=rng.randrange(2**31),
                   **kwargs) for _ in range(draws)]
    out = {}
    for key in keys:
        rates = sorted(r[key] for r in found)
        out[key] = (rates[int(0.025 * draws)], rates[min(draws - 1, int(0.975 * draws))])
    return out
