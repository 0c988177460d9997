"""The smoke model on several CPU float kernel paths: rebuilding it, and what GRPO adds to it.

For each kernel path (tools.smoke_runs.KERNEL_PATHS, each in fresh processes):
- the recipe rebuilt from scratch into a temporary folder: warm-start steps, validation checks,
  build seconds and peak memory, and greedy strict accuracy on the 200 held-out problems;
- the committed model's held-out accuracy there (fixed weights: the start every machine shares);
- `helpers.lab.engine.train_and_score` from the committed model for GRPO seeds 0..N-1: the training
  notebook's run, scored as the evaluation notebook scores it, with the paired interval.
Two processes at a time, one thread each (the machine has two cores); times are under that load.
Writes runs/bench/smoke_model.json, whose rows README's tables show.

    python -m bench.smoke_model                                # 4 kernel paths x 4 seeds
    python -m bench.smoke_model --kernels native --seeds 2     # a quicker look
    python -m bench.smoke_model --quick                        # seconds: the figures' shape only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from bench._results import write_result
from helpers.paths import ROOT
from tools.smoke_runs import KERNEL_PATHS, run_on_kernel_path

REBUILD_CHILD = """
import json, resource, sys, time
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
from helpers.hardware import cpu_kernel_path
from tools.smoke_recipe import build_smoke_model, validation_accuracy
from helpers.smoke_model import ensure_smoke_model
from helpers.synthetic import synthetic_split

def held_out(path):
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    return validation_accuracy(model, AutoTokenizer.from_pretrained(path),
                               synthetic_split("test", 200))

row = {{"kernel": cpu_kernel_path(), "committed_strict": held_out(ensure_smoke_model())}}
if {rebuild!r}:
    start = time.perf_counter()
    manifest = build_smoke_model(Path({out!r}))
    row.update(build_s=time.perf_counter() - start, steps=manifest["warm_start_steps"],
               checks=manifest["validation_checks"], rebuilt_strict=held_out({out!r}),
               build_peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(row))
"""


def rebuild_row(kernel: str, rebuild: bool) -> dict:
    """The committed model's accuracy on `kernel`, and (if asked) a fresh build's figures there."""
    with tempfile.TemporaryDirectory() as folder:
        code = REBUILD_CHILD.format(rebuild=rebuild, out=f"{folder}/smoke")
        env = {**os.environ, **KERNEL_PATHS[kernel]}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, check=True, cwd=ROOT).stdout  # `-c` imports from cwd
    return {"name": kernel, **json.loads(out.strip().splitlines()[-1])}


def learning_row(kernel: str, seed: int, max_steps: int | None) -> dict:
    gain = run_on_kernel_path(kernel, seed=seed, max_steps=max_steps)
    print(f"{kernel:<15} seed {seed}: {gain['base']:.1%} -> {gain['trained']:.1%} "
          f"({100 * gain['gain']:+.1f} points, CI {100 * gain['ci_low']:+.1f} to "
          f"{100 * gain['ci_high']:+.1f}), {gain['fixed']} fixed, {gain['broken']} broken, "
          f"{gain['train_seconds']:.0f} s of training", flush=True)
    return {"kernel_path": kernel, "seed": seed, **gain}


def summary(learning: list[dict]) -> dict[str, dict[str, float]]:
    """Per kernel path: the lowest, median and highest gain in points."""
    out = {}
    for kernel in dict.fromkeys(row["kernel_path"] for row in learning):
        points = [100 * row["gain"] for row in learning if row["kernel_path"] == kernel]
        out[kernel] = {"min": min(points), "median": statistics.median(points), "max": max(points)}
    return out


def main(kernels: list[str], seeds: int, rebuild: bool = True, max_steps: int | None = None):
    with ThreadPoolExecutor(2) as pool:
        builds = list(pool.map(lambda k: rebuild_row(k, rebuild), kernels))
        for row in builds:
            rebuilt = (f"; rebuilt in {row['steps']} steps ({row['build_s']:.0f} s): "
                       f"{row['rebuilt_strict']:.1%}" if rebuild else "")
            print(f"{row['name']:<15} ({row['kernel']['capability']}): committed model "
                  f"{row['committed_strict']:.1%} held-out{rebuilt}", flush=True)
        jobs = [(kernel, seed) for kernel in kernels for seed in range(seeds)]
        learning = list(pool.map(lambda job: learning_row(*job, max_steps), jobs))
    spread = summary(learning)
    for kernel, s in spread.items():
        print(f"{kernel:<15} gain over {seeds} seeds: min {s['min']:+.1f}, median "
              f"{s['median']:+.1f}, max {s['max']:+.1f} points")
    result = {"kernel_paths": builds, "learning": learning, "spread": spread, "seeds": seeds,
              "max_steps": max_steps or "profile", "rebuilt": rebuild}
    write_result("smoke_model", result)
    return result


def cli(argv: list[str] | None = None) -> dict:
    """The command line (`make bench` passes no arguments: the full grid)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="+", choices=list(KERNEL_PATHS),
                        default=list(KERNEL_PATHS))
    parser.add_argument("--seeds", type=int, default=4, help="GRPO seeds per kernel path")
    parser.add_argument("--no-rebuild", action="store_true", help="skip rebuilding the model")
    parser.add_argument("--quick", action="store_true",
                        help="native only, 1 seed of 2 steps, no rebuild: checks the plumbing")
    a = parser.parse_args(argv)
    if a.quick:
        return main(["native"], 1, rebuild=False, max_steps=2)
    return main(a.kernels, a.seeds, rebuild=not a.no_rebuild)


if __name__ == "__main__":
    cli()
