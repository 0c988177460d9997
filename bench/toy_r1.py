"""Toy R1 on a CPU: cold-start SFT, then GRPO from scratch, against two same-time controls.

For each seed: a fresh 1M-parameter model, SFT until 30% training accuracy (capped), then from those
same weights GRPO, more SFT on labels, and rejection-sampling fine-tuning (RFT), each for the same
wall time. Held-out greedy accuracy on 500 problems before and after. Two seeds run at once, one
thread each (one per core). Writes runs/bench/toy_r1.json.

    python bench/toy_r1.py                      # 3 seeds, 150 s of GRPO each
    python bench/toy_r1.py --grpo-seconds 60 --seeds 0
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _results import write_result  # noqa: E402 (bench/ is on sys.path)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MEANS = ["acc_before", "acc_after_grpo", "acc_after_sft_control", "acc_after_rft"]


def one_seed(seed: int, grpo_seconds: float, cold_start_seconds: float) -> dict:
    from helpers.toy_r1 import run_seed

    return run_seed(seed, grpo_seconds=grpo_seconds, cold_start_seconds=cold_start_seconds)


def markdown(rows: list[dict]) -> str:
    """seed x (before, after GRPO, after extra SFT, after RFT), in percent."""
    lines = ["| seed | cold start | after GRPO | after extra SFT | after RFT | GRPO steps |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['acc_before']:.1%} | {r['acc_after_grpo']:.1%} | "
                     f"{r['acc_after_sft_control']:.1%} | {r['acc_after_rft']:.1%} | "
                     f"{r['grpo_steps']} |")
    return "\n".join(lines)


def main(seeds: tuple[int, ...] = (0, 1, 2), grpo_seconds: float = 150.0,
         cold_start_seconds: float = 150.0, workers: int = 2) -> dict:
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        rows = list(pool.map(one_seed, seeds, [grpo_seconds] * len(seeds),
                             [cold_start_seconds] * len(seeds)))
    result = {key: sum(r[key] for r in rows) / len(rows) for key in MEANS}
    result["gain_grpo_points"] = 100 * (result["acc_after_grpo"] - result["acc_before"])
    result.update({
        "wall_s": time.perf_counter() - start,
        "max_cold_start_plus_grpo_s": max(r["cold_start_plus_grpo_s"] for r in rows),
        "grpo_seconds": grpo_seconds, "cold_start_seconds_cap": cold_start_seconds,
        "seeds": rows,
    })
    print(markdown(rows))
    print(f"mean: before {result['acc_before']:.1%}, GRPO {result['acc_after_grpo']:.1%} "
          f"({result['gain_grpo_points']:+.1f} points), extra SFT "
          f"{result['acc_after_sft_control']:.1%}, RFT {result['acc_after_rft']:.1%}")
    print(f"slowest cold start + GRPO: {result['max_cold_start_plus_grpo_s']:.0f} s; "
          f"wall {result['wall_s']:.0f} s")
    write_result("toy_r1", result)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--grpo-seconds", type=float, default=150.0)
    parser.add_argument("--cold-start-seconds", type=float, default=150.0)
    parser.add_argument("--workers", type=int, default=2)
    a = parser.parse_args()
    main(tuple(a.seeds), a.grpo_seconds, a.cold_start_seconds, a.workers)
