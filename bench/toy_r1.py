"""Toy R1 on a CPU: cold-start SFT, then GRPO from scratch, against three controls.

For each seed: a fresh 1M-parameter model, SFT until 30% training accuracy (cached on disk by
recipe and seed), then from those same weights GRPO and three controls with the same number of
optimiser updates: more SFT on labels, rejection-sampling fine-tuning (RFT), and GRPO with a random
reward. The first version of RFT runs too, as the evidence for its diagnosis, and GRPO runs once
more from a weak cold start (SFT stopped at 10%), the same budget: does the cold start decide?
Held-out greedy accuracy on 500 problems. Seeds run in separate processes, one thread each. Writes
runs/bench/toy_r1.json, whose tables notebook 08 (section 4) prints beside its own one-seed run.

    python bench/toy_r1.py                       # 3 seeds, the recipe's default steps
    python bench/toy_r1.py --rl-steps 100 --seeds 0 --no-diagnosis --no-weak-cold-start
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

from _results import write_result  # noqa: E402 (bench/ is on sys.path)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers.toy_r1 import (  # noqa: E402
    ToyRecipe,
    cold_start_table,
    first_update_table,
    results_table,
    rft_table,
    run_seed,
)

MEANS = ["acc_before", "acc_after_grpo", "acc_after_sft_control", "acc_after_rft",
         "acc_after_random_reward", "acc_after_rft_first_version"]


def one_seed(seed: int, recipe: ToyRecipe, diagnose: bool, weak: bool) -> dict:
    return run_seed(seed, recipe, controls=True, diagnose_rft=diagnose, weak_cold_start=weak)


def summary(rows: list[dict], recipe: ToyRecipe, wall_s: float) -> dict:
    """Means over seeds, the GRPO gain in points, the recipe, and every seed's row."""
    keys = [k for k in MEANS if k in rows[0]]
    result: dict = {k: sum(r[k] for r in rows) / len(rows) for k in keys}
    result["gain_grpo_points"] = 100 * (result["acc_after_grpo"] - result["acc_before"])
    if all("zero_spread_first_20" in r for r in rows):
        result["zero_spread_first_20"] = _mean([r["zero_spread_first_20"] for r in rows])
    if all("weak_cold_start" in r for r in rows):
        weak = [r["weak_cold_start"] for r in rows]
        result["weak_cold_start"] = {
            "target": weak[0]["target"],
            **{k: _mean([w[k] for w in weak])
               for k in ("acc_before", "acc_after_grpo", "zero_spread_first_20")}}
        result["weak_cold_start"]["gain_grpo_points"] = 100 * (
            result["weak_cold_start"]["acc_after_grpo"] - result["weak_cold_start"]["acc_before"])
    result.update({
        "wall_s": wall_s, "budget": "optimiser updates",
        "recipe": {k: v for k, v in asdict(recipe).items() if k != "grpo"},
        "grpo_settings": asdict(recipe.grpo), "seeds": rows,
    })
    return result


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def main(seeds: tuple[int, ...] = (0, 1, 2), rl_steps: int | None = None, workers: int = 2,
         diagnose: bool = True, weak: bool = True) -> dict:
    recipe = ToyRecipe() if rl_steps is None else replace(ToyRecipe(), rl_steps=rl_steps)
    start, rows = time.perf_counter(), []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for row in pool.map(one_seed, seeds, [recipe] * len(seeds), [diagnose] * len(seeds),
                            [weak] * len(seeds)):
            rows.append(row)
            if len(rows) < len(seeds):  # a long run keeps what it has if it is stopped
                write_result("toy_r1", {**summary(rows, recipe, time.perf_counter() - start),
                                        "partial": True})
    result = summary(rows, recipe, time.perf_counter() - start)
    print(results_table(rows))
    print(f"\nmean GRPO gain: {result['gain_grpo_points']:+.1f} points held-out "
          f"({recipe.rl_steps} updates for GRPO and for each control)")
    if diagnose:
        print("\nRFT diagnosis: what each version trained on\n" + rft_table(rows))
        print("\nOne labelled SFT update with a fresh AdamW, from the cold start\n"
              + first_update_table(rows))
    if weak:
        print("\nThe cold start decides: GRPO from the recipe's cold start and from a weak one\n"
              + cold_start_table(rows))
    print(f"\nwall {result['wall_s']:.0f} s")
    write_result("toy_r1", result)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rl-steps", type=int, default=None,
                        help="GRPO updates, and each control's (default: the recipe's)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-diagnosis", action="store_true",
                        help="skip the first version of RFT")
    parser.add_argument("--no-weak-cold-start", action="store_true",
                        help="skip GRPO from the weak cold start")
    a = parser.parse_args()
    main(tuple(a.seeds), a.rl_steps, a.workers, not a.no_diagnosis, not a.no_weak_cold_start)
