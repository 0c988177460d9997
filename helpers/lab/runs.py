"""Lab runs over seeds on this machine: each run in a forked process, two at a time, with the
time left; or one after the other in this process on a GPU (CUDA does not survive a fork)."""

from __future__ import annotations

import contextlib
import io
import math
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Sequence
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from helpers.lab.arms import Arm
from helpers.lab.engine import train_and_score
from helpers.profiles import PROFILES


def _seconds(value: float) -> str:
    return f"{value / 60:.1f} min" if value >= 90 else f"{value:.0f} s"


def _child(chosen: Arm, seed: int, steps: int | None, problems: int | None, send: Any) -> None:
    """One run in a forked process: its row, or the error in one line, sent back."""
    try:
        with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(
                io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = train_and_score(Path(folder), seed, steps, chosen, problems=problems,
                                     lab=True)
        result.pop("log_history")
        send.send(result)
    except BaseException as error:  # noqa: BLE001  (any failure goes back to the parent)
        send.send({"error": f"{type(error).__name__}: {error}"})
    finally:
        send.close()


def lab_row(chosen: Arm, seed: int, result: dict[str, Any], seconds: float,
            kernel_path: str = "native") -> dict[str, Any]:
    """A run as the grid stores it (bench/ablations.py's rows)."""
    keep = ("gain", "base", "trained", "ci_low", "ci_high", "fixed", "broken", "n",
            "train_seconds", "signals", "kernel", "curve", "correct", "base_correct")
    return {"arm": chosen.name, "knob": chosen.knob, "seed": seed, "kernel_path": kernel_path,
            "reference": chosen.reference, "steps": result["curve"][-1][0]
            if result.get("curve") else chosen.steps or PROFILES["smoke"].max_steps,
            "run_seconds": seconds, **{k: result[k] for k in keep if k in result}}


def run_seeds(chosen: Arm, seeds: Sequence[int], steps: int | None = None, workers: int = 2,
              typical_seconds: float | None = None,
              problems: int | None = None) -> list[dict[str, Any]]:
    """Train and score `chosen` at each seed as the grid does, `workers` at a time, each run in a
    forked process (a reward written in a notebook cell goes with it): a line per finished run
    with the time left, and the runs' rows. `problems` scores only the first so many."""
    import torch  # heavy: only when runs start

    if torch.cuda.is_available():  # CUDA does not survive a fork: one run at a time, in here
        return _runs_here(chosen, seeds, steps, problems)
    context = multiprocessing.get_context("fork")
    todo, running, rows, took = list(seeds), {}, [], []
    total, start = len(todo), time.perf_counter()
    if typical_seconds:
        rounds = math.ceil(total / workers)
        print(f"{chosen.name}: {total} runs, {workers} at a time; about "
              f"{_seconds(rounds * typical_seconds)}", flush=True)
    while todo or running:
        while todo and len(running) < workers:
            seed = todo.pop(0)
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child,
                                      args=(chosen, seed, steps, problems, send))
            process.start()
            send.close()
            running[receive] = (seed, process, time.perf_counter())
        for receive in wait(list(running)):
            seed, process, began = running.pop(receive)
            try:
                result = receive.recv()
            except EOFError:
                result = {"error": f"the process stopped (exit code {process.exitcode})"}
            process.join()
            if "error" in result:
                for _, other, _ in running.values():
                    other.terminate()
                raise RuntimeError(f"{chosen.name}, seed {seed}: {result['error']}")
            took.append(time.perf_counter() - began)
            rows.append(lab_row(chosen, seed, result, took[-1]))
            left = math.ceil((len(todo) + len(running)) / workers) * statistics.median(took)
            print(f"[{len(rows)}/{total}] {chosen.name}, seed {seed}: "
                  f"{100 * result['gain']:+.1f} points ({result['fixed']} fixed, "
                  f"{result['broken']} broken) in {took[-1]:.0f} s; "
                  + (f"about {_seconds(left)} left" if todo or running else
                     f"all done in {_seconds(time.perf_counter() - start)}"), flush=True)
    return sorted(rows, key=lambda r: r["seed"])


def _runs_here(chosen: Arm, seeds: Sequence[int], steps: int | None,
               problems: int | None) -> list[dict[str, Any]]:
    """The runs one after the other in this process (a GPU runtime), a line each."""
    rows = []
    for k, seed in enumerate(seeds, 1):
        began = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder, \
                contextlib.redirect_stdout(io.StringIO()):
            result = train_and_score(Path(folder), seed, steps, chosen, problems=problems,
                                     lab=True)
        rows.append(lab_row(chosen, seed, result, time.perf_counter() - began))
        print(f"[{k}/{len(seeds)}] {chosen.name}, seed {seed}: {100 * result['gain']:+.1f} "
              f"points in {rows[-1]['run_seconds']:.0f} s", flush=True)
    return rows
