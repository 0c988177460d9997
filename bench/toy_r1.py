"""Toy R1 on a CPU: cold-start SFT, then GRPO from scratch, against three controls.

For each CPU float kernel path (tools.smoke_runs.KERNEL_PATHS) and seed: a fresh 1M-parameter
model, SFT until 30% training accuracy (cached on disk by recipe, seed and kernel path), then from
those same weights GRPO and three controls with the same number of optimiser updates: more SFT on
labels, rejection-sampling fine-tuning (RFT), and GRPO with a random reward. The first version of
RFT runs too, as the evidence for its diagnosis, and GRPO runs once more from a weak cold start
(SFT stopped at 10%) with the same budget: does the cold start decide? Held-out greedy accuracy on
500 problems. Each
(kernel path, seed) runs in a fresh process (torch picks its kernels at import), one thread, two at
a time. Writes runs/bench/toy_r1.json: the native path's seeds at the top level (notebook 09,
section 4, prints them beside its own run) and every path's under `by_kernel`.

    python bench/toy_r1.py                                   # 4 kernel paths x 3 seeds
    python bench/toy_r1.py --kernels native --seeds 0 --rl-steps 100 --no-diagnosis \
        --no-weak-cold-start
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace

from bench._results import write_result
from helpers.paths import ROOT
from helpers.toy_r1 import (
    ToyRecipe,
    cold_start_table,
    first_update_table,
    results_table,
    rft_table,
)
from tools.smoke_runs import KERNEL_PATHS

MEANS = ["acc_before", "acc_after_grpo", "acc_after_sft_control", "acc_after_rft",
         "acc_after_random_reward", "acc_after_rft_first_version"]

CHILD = """
import json, sys
from helpers.toy_r1 import ToyRecipe, run_seed
recipe = ToyRecipe(rl_steps={rl_steps})
print(json.dumps(run_seed({seed}, recipe, controls=True, diagnose_rft={diagnose},
                          weak_cold_start={weak})))
"""


def one_seed(kernel: str, seed: int, recipe: ToyRecipe, diagnose: bool, weak: bool) -> dict:
    """One seed's row, computed in a fresh process on `kernel`."""
    code = CHILD.format(rl_steps=recipe.rl_steps, seed=seed, diagnose=diagnose,
                        weak=weak)
    env = {**os.environ, **KERNEL_PATHS[kernel]}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, cwd=ROOT).stdout  # `-c` imports from cwd
    row = json.loads(out.strip().splitlines()[-1])
    print(f"{kernel:<15} seed {seed}: cold start {row['acc_before']:.1%} -> GRPO "
          f"{row['acc_after_grpo']:.1%}", flush=True)
    return row


def summary(rows: list[dict]) -> dict:
    """Means over seeds, the GRPO gain in points (from each cold start), and every seed's row."""
    keys = [k for k in MEANS if k in rows[0]]
    result: dict = {k: _mean([r[k] for r in rows]) for k in keys}
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
    return {**result, "seeds": rows}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def main(kernels: list[str], seeds: list[int], rl_steps: int | None = None,
         diagnose: bool = True, weak: bool = True) -> dict:
    recipe = ToyRecipe() if rl_steps is None else replace(ToyRecipe(), rl_steps=rl_steps)
    start = time.perf_counter()
    jobs = [(kernel, seed) for kernel in kernels for seed in seeds]
    with ThreadPoolExecutor(2) as pool:
        rows = list(pool.map(lambda job: one_seed(*job, recipe, diagnose, weak), jobs))
    by_kernel = {kernel: summary([row for (k, _), row in zip(jobs, rows, strict=True)
                                  if k == kernel]) for kernel in kernels}
    first = by_kernel[kernels[0]]  # the top level: native's, as notebook 09 reads it
    result = {**first, "kernel_path": kernels[0], "by_kernel": by_kernel,
              "wall_s": time.perf_counter() - start, "budget": "optimiser updates",
              "recipe": {k: v for k, v in asdict(recipe).items() if k != "grpo"},
              "grpo_settings": asdict(recipe.grpo)}
    print(results_table(first["seeds"]))
    for kernel, s in by_kernel.items():
        print(f"{kernel:<15} mean GRPO gain {s['gain_grpo_points']:+.1f} points held-out "
              f"({s['acc_before']:.1%} -> {s['acc_after_grpo']:.1%}; extra SFT "
              f"{s['acc_after_sft_control']:.1%}, RFT {s['acc_after_rft']:.1%}, random reward "
              f"{s['acc_after_random_reward']:.1%})")
    if diagnose:
        print("\nRFT diagnosis: what each version trained on\n" + rft_table(first["seeds"]))
        print("\nOne labelled SFT update with a fresh AdamW, from the cold start\n"
              + first_update_table(first["seeds"]))
    if weak:
        print("\nThe cold start decides: GRPO from the recipe's cold start and from a weak one\n"
              + cold_start_table(first["seeds"]))
    print(f"\nwall {result['wall_s']:.0f} s")
    write_result("toy_r1", result)
    return result


def cli(argv: list[str] | None = None) -> dict:
    """The command line (`make bench` passes no arguments: every kernel path, three seeds)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="+", choices=list(KERNEL_PATHS),
                        default=list(KERNEL_PATHS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rl-steps", type=int, default=None,
                        help="GRPO updates, and each control's (default: the recipe's)")
    parser.add_argument("--no-diagnosis", action="store_true",
                        help="skip the first version of RFT")
    parser.add_argument("--no-weak-cold-start", action="store_true",
                        help="skip GRPO from the weak cold start")
    a = parser.parse_args(argv)
    return main(a.kernels, a.seeds, a.rl_steps, not a.no_diagnosis, not a.no_weak_cold_start)


if __name__ == "__main__":
    cli()
