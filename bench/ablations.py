"""The ablation grid: each arm of helpers.lab.KNOBS over seeds, on the smoke profile.

Every run trains the committed smoke model for the course's 60 steps (an arm may set its own
budget) with one thing changed, everything else as notebook 05 sets it, and scores it on the lab's
census of the 100 sums (helpers.lab.engine.train_and_score with lab=True): held-out accuracy every
15 steps, and each problem's result. The course's arm and the two controls run on 8 seeds, every
other arm on 4; two arms and the course's rerun on torch's scalar `default` kernels, on seeds the
native grid never used, to see whether their verdicts hold on another float kernel path. Each run
is a fresh process on one thread, two at a time. Rows are saved as each run ends in
runs/bench/ablations.json, so a killed grid resumes where it stopped (`--fresh` starts over).
Notebook 11 and README read their figures from it. Run it from the repository root:

    python -m bench.ablations                          # the whole grid (resumes)
    python -m bench.ablations --arms course learning_rate=3e-3 --seeds 2 --kernel default
    python -m bench.ablations --knob beta              # one knob and the course's arm
    python -m bench.ablations --one-cell               # time notebook 11's own arm, as a learner
    python -m bench.ablations --pool 40                # the course's arm alone, on 40 seeds

The pool (runs/bench/course_pool.json) is the course's arm on many seeds, each with its own LoRA
start, data order and sampling: what an arm that changes nothing would give. bench/calibration.py
adds the null arm's runs on the same seeds and splits both to measure how often the verdicts go
wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._results import bench_dir, dumps, machine
from helpers.lab import (
    ARMS,
    COURSE,
    POOL_FILE,
    UnknownArmError,
    arm,
    course_settings,
    design,
    knob_arms,
    stale_note,
    summarize,
)
from helpers.paths import ROOT
from helpers.profiles import PROFILES, SEED
from tools.smoke_runs import KERNEL_PATHS, another_kernel_path, run_on_kernel_path

SEEDS = 4  # per arm; the course's arm, every knob's reference, gets twice as many
# and so do the two controls: with nothing to learn their seeds drift apart, and 4 of them cannot
# clear Holm's strictest level even when the control hurts (the first grid's lesson)
COURSE_SEEDS = 8
RERUN_ARMS = (COURSE, "learning_rate=3e-4", "rewards=format")
RERUN_FIRST_SEED = SEED + COURSE_SEEDS  # seeds the native grid never ran: new runs, not repeats
WORKERS = 2  # one thread each: the two cores
RUN_TIMEOUT = 3600  # seconds: a 120-step run on a busy machine takes far longer than one of 60
KEEP = ("gain", "base", "trained", "ci_low", "ci_high", "fixed", "broken", "n", "train_seconds",
        "signals", "kernel", "curve", "correct", "base_correct")


def one_run(name: str, seed: int, kernel: str, steps: int | None = None) -> dict[str, Any]:
    """One arm at one seed, trained and scored as the lab scores, in a fresh process on `kernel`."""
    start = time.perf_counter()
    chosen = arm(name)
    result = run_on_kernel_path(kernel, seed, max_steps=steps, arm=name, lab=True,
                                timeout=RUN_TIMEOUT)
    return {"arm": name, "knob": chosen.knob, "seed": seed, "kernel_path": kernel,
            "reference": chosen.reference,
            "steps": steps or chosen.steps or PROFILES["smoke"].max_steps,
            "run_seconds": time.perf_counter() - start, **{k: result[k] for k in KEEP}}


def plan(names: list[str], kernel: str, seeds: int | None,
         first_seed: int = SEED) -> list[tuple[str, int, str]]:
    """(arm, seed, kernel) jobs, seed by seed, so a stopped grid has every arm on some seeds."""
    counts = {n: seeds or (COURSE_SEEDS if n == COURSE or arm(n).control else SEEDS)
              for n in names}
    return [(n, first_seed + i, kernel) for i in range(max(counts.values()))
            for n in names if i < counts[n]]


def default_jobs() -> list[tuple[str, int, str]]:
    """The grid `make bench` runs: every arm on this CPU's kernels, then the reruns on the path
    furthest from them that this CPU can run (torch's scalar kernels where it can)."""
    return (plan(list(ARMS), "native", None)
            + plan(list(RERUN_ARMS), another_kernel_path(), SEEDS, RERUN_FIRST_SEED))


class Grid:
    """runs/bench/ablations.json as the grid fills it: rows saved one by one, summaries on top."""

    def __init__(self, path: Path, fresh: bool) -> None:
        self.path, self.lock = path, threading.Lock()
        saved = {} if fresh or not path.exists() else json.loads(path.read_text())
        stale = saved and saved.get("rows") and stale_note(saved)
        if stale:  # a resume would mix runs of two courses
            raise SystemExit(stale.replace("; until then the reference is the course's arm run "
                                           "here", ""))
        self.rows: list[dict[str, Any]] = saved.get("rows", [])
        self.sessions: list[dict[str, Any]] = saved.get("sessions", [])
        self.machine = saved.get("machine")  # where the last run ran; a resume with none keeps it

    def done(self, job: tuple[str, int, str]) -> bool:
        return any((r["arm"], r["seed"], r["kernel_path"]) == job for r in self.rows)

    def add(self, row: dict[str, Any]) -> None:
        with self.lock:
            self.rows.append(row)
            self.machine = machine()
            try:
                self.save()
            except Exception as error:  # noqa: BLE001  (the rows are kept; the end saves again)
                self.save(rows_only=True)
                print(f"summaries not written ({type(error).__name__}: {error}); rows saved",
                      flush=True)

    def save(self, rows_only: bool = False) -> None:
        kernels = sorted({r["kernel_path"] for r in self.rows})
        data = {
            "rows": sorted(self.rows, key=lambda r: (r["kernel_path"], r["arm"], r["seed"])),
            "summary": {} if rows_only else {k: summarize(self.rows, k) for k in kernels},
            "design": {} if rows_only else design(self.rows),
            "steps": PROFILES["smoke"].max_steps,
            "settings": course_settings(),  # what the runs were made under: stale_note reads it
            "problems": max((r["n"] for r in self.rows), default=0),
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
             steps: int | None = None, name: str = "ablations.json") -> dict[str, Any]:
    """Run the jobs not yet in the saved grid (runs/bench/`name`), two at a time, with progress
    and an ETA."""
    grid = Grid(bench_dir() / name, fresh)
    if name != Path(POOL_FILE).name:
        grid.rows += from_pool([job for job in jobs if not grid.done(job)])
    todo = [job for job in jobs if not grid.done(job)]
    print(f"{len(jobs) - len(todo)} of {len(jobs)} runs already saved; {len(todo)} to go "
          f"({workers} at a time)", flush=True)
    start, finished, failed = time.perf_counter(), [], []

    def work(job: tuple[str, int, str]) -> None:
        try:
            row = one_run(*job, steps)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            failed.append(job)
            print(f"{job[0]} seed {job[1]}: {error}", flush=True)
            return
        grid.add(row)
        finished.append(row["run_seconds"] / (row["steps"] / PROFILES["smoke"].max_steps))
        left = sum(arm(n).steps or PROFILES["smoke"].max_steps
                   for n, _, _ in todo[len(finished) + len(failed):])
        eta = statistics.median(finished) * left / PROFILES["smoke"].max_steps / workers
        print(f"[{len(finished) + len(failed)}/{len(todo)}] {row['arm']} seed {row['seed']} "
              f"{row['kernel_path']}: {100 * row['gain']:+.1f} points in "
              f"{row['run_seconds']:.0f} s; about {eta / 60:.0f} min left", flush=True)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(work, todo))
    if todo:
        grid.sessions.append({"date": datetime.now(UTC).strftime("%Y-%m-%d"),
                              "runs": len(finished), "workers": workers,
                              "load_1min": round(os.getloadavg()[0], 1),
                              "wall_seconds": time.perf_counter() - start})
    grid.save()
    print(report(grid.rows))
    print(f"wrote {grid.path}; wall this time {time.perf_counter() - start:.0f} s")
    if failed:
        raise SystemExit(f"{len(failed)} runs failed; run the same command again to retry them.")
    return json.loads(grid.path.read_text())


def from_pool(jobs: list[tuple[str, int, str]]) -> list[dict[str, Any]]:
    """The pool's runs of the course's arm that `jobs` asks for, made under the course's present
    settings on this CPU's native kernels: the same seed there trains the same bits, so they are
    reused rather than trained again."""
    from helpers.hardware import cpu_kernel_path

    path = bench_dir() / Path(POOL_FILE).name
    pool = json.loads(path.read_text()) if path.exists() else {}
    if not pool or pool.get("settings") != course_settings():
        return []
    here = {k: v for k, v in cpu_kernel_path().items() if k in ("capability", "machine", "torch")}
    wanted = set(jobs)
    return [r for r in pool["rows"] if (r["arm"], r["seed"], r["kernel_path"]) in wanted
            and r["kernel_path"] == "native" and here.items() <= r["kernel"].items()]


ONE_CELL = "# Your arm"  # how notebook 11's cell that writes a learner's arm begins
NOTEBOOK = ROOT / "notebooks" / "11_ablation_lab.ipynb"


def one_cell(seeds: int = SEEDS) -> dict[str, Any]:
    """Notebook 11's own arm at the grid's size, timed as a learner meets it: the cell that
    writes the reward and calls arm_from, then try_arm against the stored course arm (the
    reference check first, once per machine). Appends the run to runs/bench/lab_arm.json."""
    from helpers.lab import reference_cache, try_arm
    from helpers.launch import plan_run

    plan_run(PROFILES["smoke"]).import_backend()  # unsloth before trl, as notebook 11 has it
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if c["cell_type"] == "code"
                  and "".join(c["source"]).startswith(ONE_CELL))
    cached = reference_cache(PROFILES["smoke"].max_steps, None).exists()
    load, start = os.getloadavg()[0], time.perf_counter()
    space: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(source, str(NOTEBOOK.name), "exec"), space)  # the cell, as Jupyter runs it
    result = try_arm(space["mine"], seeds=seeds)
    entry = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "arm": result["arm"],
             "seeds": seeds, "steps": PROFILES["smoke"].max_steps,
             "seconds": time.perf_counter() - start, "reference_cached": cached,
             "load_start": round(load, 1), "load_end": round(os.getloadavg()[0], 1),
             "reference": result["note"], "verdict": result["verdict"],
             "run_seconds": [r["run_seconds"] for r in result["rows"]]}
    path = bench_dir() / "lab_arm.json"
    saved = json.loads(path.read_text()) if path.exists() else {"runs": []}
    saved["runs"].append(entry)
    saved["machine"] = machine()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(saved))
    print(f"wrote {path}: {entry['seconds']:.0f} s, load {entry['load_start']} to "
          f"{entry['load_end']}")
    return entry


def report(rows: list[dict[str, Any]]) -> str:
    """The grid's table per kernel path (helpers.lab.grid_table), raw and adjusted."""
    from helpers.lab import grid_table

    lines = []
    for kernel in sorted({r["kernel_path"] for r in rows}):
        summary = summarize(rows, kernel)
        lines.append(f"\n{kernel} kernels: gain in points over the base model")
        lines.append(grid_table(summary) if COURSE in summary else "(no course runs yet)")
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
    parser.add_argument("--max-steps", type=int, help="a quick check (default: each arm's own)")
    parser.add_argument("--pool", type=int, metavar="SEEDS",
                        help=f"the course's arm alone on SEEDS seeds, in {POOL_FILE}")
    parser.add_argument("--one-cell", action="store_true",
                        help="time notebook 11's own arm at 4 seeds (runs/bench/lab_arm.json)")
    a = parser.parse_args(argv)
    if a.one_cell:
        one_cell()
        return None
    if a.pool:
        return run_grid(plan([COURSE], a.kernel, a.pool), a.fresh, a.workers, a.max_steps,
                        Path(POOL_FILE).name)
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
