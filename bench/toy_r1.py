"""Toy R1 on a CPU: cold-start SFT, then GRPO from scratch, against three controls.

For each seed: a fresh 1M-parameter model, SFT until 30% training accuracy (cached on disk by
recipe and seed), then from those same weights GRPO and three controls with the same number of
optimiser updates: more SFT on labels, rejection-sampling fine-tuning (RFT), and GRPO with a random
reward. The first version of RFT runs too, as the evidence for its diagnosis. Held-out greedy
accuracy on 500 problems. Seeds run in separate processes, one thread each. Writes
runs/bench/toy_r1.json, whose tables notebook 08 (section 4) prints beside its own one-seed run.

    python bench/toy_r1.py                       # 3 seeds, the recipe's default steps
    python bench/toy_r1.py --rl-steps 100 --seeds 0 --no-diagnosis
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
    first_update_table,
    results_table,
    rft_table,
    run_seed,
)

MEANS = ["acc_before", "acc_after_grpo", "acc_after_sft_control", "acc_after_rft",
         "acc_after_random_reward", "acc_after_rft_first_version"]


def one_seed(seed: int, recipe: ToyRecipe, diagnose: bool) -> dict:
    return run_seed(seed, recipe, controls=True, diagnose_rft=diagnose)


def summary(rows: list[dict], recipe: ToyRecipe, wall_s: float) -> dict:
    """Means over seeds, the GRPO gain in points, the recipe, and every seed's row."""
    keys = [k for k in MEANS if k in rows[0]]
    result: dict = {k: sum(r[k] for r in rows) / len(rows) for k in keys}
    result["gain_grpo_points"] = 100 * (result["acc_after_grpo"] - result["acc_before"])
    result.update({
        "wall_s": wall_s, "budget": "optimiser updates",
        "recipe": {k: v for k, v in asdict(recipe).items() if k != "grpo"},
        "grpo_settings": asdict(recipe.grpo), "seeds": rows,
    })
    return result


def main(seeds: tuple[int, ...] = (0, 1, 2), rl_steps: int | None = None, workers: int = 2,
         diagnose: bool = True) -> dict:
    recipe = ToyRecipe() if rl_steps is None else replace(ToyRecipe(), rl_steps=rl_steps)
    start, rows = time.perf_counter(), []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for row in pool.map(one_seed, seeds, [recipe] * len(seeds), [diagnose] * len(seeds)):
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
    a = parser.parse_args()
    main(tuple(a.seeds), a.rl_steps, a.workers, not a.no_diagnosis)
