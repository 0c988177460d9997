"""The ablation grid: each arm of helpers.ablations.KNOBS over seeds, on the smoke profile.

Every run trains the committed smoke model for the course's 60 steps with one knob changed
(everything else as notebook 05 sets it) and scores it on the 200 held-out problems notebook 06
uses (helpers.ablations.train_and_score). The course's arm runs on 8 seeds, every other arm on 4;
two arms and the course's rerun on torch's scalar `default` kernels, to see whether their
verdicts hold on another float kernel path. Each run is a fresh process on one thread, two at a
time. Rows are saved as each run ends in runs/bench/ablations.json, so a killed grid resumes
where it stopped (`--fresh` starts over). Notebook 11 and README read their figures from it.

    python bench/ablations.py                          # the whole grid (resumes)
    python bench/ablations.py --arms course learning_rate=3e-3 --seeds 2 --kernel default
    python bench/ablations.py --knob beta              # one knob and the course's arm
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._results import bench_dir, dumps, machine
from helpers.ablations import ARMS, COURSE, UnknownArmError, arm, knob_arms, summarize
from helpers.profiles import PROFILES, SEED
from tools.smoke_runs import KERNEL_PATHS, run_on_kernel_path

ROOT = Path(__file__).resolve().parent.parent

SEEDS = 4  # per arm; the course's arm, every knob's reference, gets twice as many
COURSE_SEEDS = 8
RERUN_KERNEL = "default"  # torch's scalar kernels: the path furthest from this machine's own
RERUN_ARMS = (COURSE, "learning_rate=3e-4", "rewards=format")
WORKERS = 2  # one thread each: the two cores

def one_run(name: str, seed: int, kernel: str, steps: int | None = None) -> dict[str, Any]:
    """One arm at one seed, trained and scored in a fresh process on `kernel`: its row."""
    start = time.perf_counter()
    result = run_on_kernel_path(kernel, seed, max_steps=steps, arm=name)
    keep = ("gain", "base", "trained", "ci_low", "ci_high", "fixed", "broken", "n",
            "train_seconds", "signals", "kernel")
    return {"arm": name, "knob": arm(name).knob, "seed": seed, "kernel_path": kernel,
            "steps": steps or PROFILES["smoke"].max_steps,
            "run_seconds": time.perf_counter() - start, **{k: result[k] for k in keep}}


def plan(names: list[str], kernel: str, seeds: int | None) -> list[tuple[str, int, str]]:
    """(arm, seed, kernel) jobs, seed by seed, so a stopped grid has every arm on some seeds."""
    counts = {n: seeds or (COURSE_SEEDS if n == COURSE else SEEDS) for n in names}
    return [(n, SEED + i, kernel) for i in range(max(counts.values()))
            for n in names if i < counts[n]]


def default_jobs() -> list[tuple[str, int, str]]:
    """The grid `make bench` runs: every arm on this CPU's kernels, then the reruns."""
    return plan(list(ARMS), "native", None) + plan(list(RERUN_ARMS), RERUN_KERNEL, SEEDS)


class Grid:
    """runs/bench/ablations.json as the grid fills it: rows saved one by one, summaries on top."""

    def __init__(self, path: Path, fresh: bool) -> None:
        self.path, self.lock = path, threading.Lock()
        saved = {} if fresh or not path.exists() else json.loads(path.read_text())
        self.rows: list[dict[str, Any]] = saved.get("rows", [])
        self.sessions: list[dict[str, Any]] = saved.get("sessions", [])
        self.machine = saved.get("machine")  # where the last run ran; a resume with none keeps it

    def done(self, job: tuple[str, int, str]) -> bool:
        return any((r["arm"], r["seed"], r["kernel_path"]) == job for r in self.rows)

    def add(self, row: dict[str, Any]) -> None:
        with self.lock:
            self.rows.append(row)
            self.machine = machine()
            self.save()

    def save(self) -> None:
        kernels = sorted({r["kernel_path"] for r in self.rows})
        data = {
            "rows": sorted(self.rows, key=lambda r: (r["kernel_path"], r["arm"], r["seed"])),
            "summary": {k: summarize(self.rows, k) for k in kernels},
            "steps": PROFILES["smoke"].max_steps,
            "problems": PROFILES["smoke"].num_eval_problems,
            "sessions": self.sessions,
            "wall_seconds": sum(s["wall_seconds"] for s in self.sessions),
            "run_seconds": sum(r["run_seconds"] for r in self.rows),
            "machine": self.machine or machine(),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(dumps(data))
        os.replace(partial, self.path)  # a kill mid-write leaves the last whole file


def run_grid(jobs: list[tuple[str, int, str]], fresh: bool = False, workers: int = WORKERS,
             steps: int | None = None) -> dict[str, Any]:
    """Run the jobs not yet in the saved grid, two at a time, with progress and an ETA."""
    grid = Grid(bench_dir() / "ablations.json", fresh)
    todo = [job for job in jobs if not grid.done(job)]
    print(f"{len(jobs) - len(todo)} of {len(jobs)} runs already saved; {len(todo)} to go "
          f"({steps or PROFILES['smoke'].max_steps} steps each, {workers} at a time)", flush=True)
    start, finished, failed = time.perf_counter(), [], []

    def work(job: tuple[str, int, str]) -> None:
        try:
            row = one_run(*job, steps)
        except RuntimeError as error:
            failed.append(job)
            print(f"{job[0]} seed {job[1]}: {error}", flush=True)
            return
        grid.add(row)
        finished.append(row["run_seconds"])
        left = len(todo) - len(finished) - len(failed)
        eta = statistics.median(finished) * left / workers
        print(f"[{len(finished) + len(failed)}/{len(todo)}] {row['arm']} seed {row['seed']} "
              f"{row['kernel_path']}: {100 * row['gain']:+.1f} points in "
              f"{row['run_seconds']:.0f} s; about {eta / 60:.0f} min left", flush=True)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(work, todo))
    if todo:
        grid.sessions.append({"date": datetime.now(UTC).strftime("%Y-%m-%d"),
                              "runs": len(finished), "workers": workers,
                              "wall_seconds": time.perf_counter() - start})
    grid.save()
    print(report(grid.rows))
    print(f"wrote {grid.path}; wall this time {time.perf_counter() - start:.0f} s")
    if failed:
        raise SystemExit(f"{len(failed)} runs failed; run the same command again to retry them.")
    return json.loads(grid.path.read_text())


def report(rows: list[dict[str, Any]]) -> str:
    """The knobs x arms table per kernel path: mean gain, the range over seeds, the verdict."""
    lines = []
    for kernel in sorted({r["kernel_path"] for r in rows}):
        lines.append(f"\n{kernel} kernels: gain in points over the base model (200 problems)")
        for name, s in summarize(rows, kernel).items():
            said = s["verdict"]
            against = (f"{100 * said['difference']:+.1f} [{100 * said['low']:+.1f}, "
                       f"{100 * said['high']:+.1f}] {said['verdict']}" if said else "reference")
            lines.append(f"  {name:<30} {s['seeds']} seeds  {100 * s['mean']:+5.1f} "
                         f"({100 * s['low']:+.1f} to {100 * s['high']:+.1f})  vs course: {against}")
    return "\n".join(lines)


def cli(argv: list[str] | None = None) -> dict[str, Any] | None:
    """The command line; `make bench` passes no arguments (the whole grid, resumed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", help="arm names (default: the whole grid)")
    parser.add_argument("--knob", help="one knob: its arms and the course's")
    parser.add_argument("--kernel", default="native", choices=list(KERNEL_PATHS))
    parser.add_argument("--seeds", type=int, help="seeds per arm (default: 8 course, 4 others)")
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--fresh", action="store_true", help="forget the saved runs")
    parser.add_argument("--max-steps", type=int, help="a quick check (default: the profile's 60)")
    a = parser.parse_args(argv)
    try:
        if a.knob:
            names = [x.name for x in knob_arms(a.knob)]
        else:
            names = [arm(n).name for n in a.arms] if a.arms else None
    except UnknownArmError as error:
        print(error, file=sys.stderr)
        raise SystemExit(2) from None
    jobs = default_jobs() if names is None else plan(names, a.kernel, a.seeds)
    return run_grid(jobs, a.fresh, a.workers, a.max_steps)


if __name__ == "__main__":
    cli()
