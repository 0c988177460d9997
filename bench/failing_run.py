"""A run that goes wrong and its fix: notebook 05's smoke run with a learning rate 10x too high,
and the same run at the course's, from the same seed.

Each run is `scripts/train_grpo.py` in its own process (the notebook's trainer, callbacks and
held-out scoring), both at once on two cores. Writes runs/bench/failing_run.json: each run's
learning rate, seconds and whole log, which notebook 05 section 7 reads and checks.

    python -m bench.failing_run                 # the smoke profile's 60 steps, ~2-4 min
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench._results import write_result
from helpers.paths import ROOT
from helpers.profiles import PROFILES
from helpers.resume import load_log_history
from helpers.run_folder import RunFolder

TOO_HIGH = 10  # times the course's learning rate


def train(folder: Path, learning_rate: float) -> dict:
    """One smoke run of scripts/train_grpo.py at `learning_rate`: its seconds and its log."""
    started = time.perf_counter()
    env = {**os.environ, "GRPO_PROFILE": "smoke", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "scripts.train_grpo", "--profile", "smoke", "--no-resume",
               "--output-dir", str(folder), "--learning-rate", f"{learning_rate:g}"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    log = load_log_history(RunFolder(folder))
    return {"learning_rate": learning_rate, "seconds": time.perf_counter() - started, "log": log}


def main() -> int:
    course = PROFILES["smoke"].learning_rate
    rates = {"too_high": TOO_HIGH * course, "course": course}
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=2) as pool:
        runs = dict(zip(rates, pool.map(lambda item: train(Path(tmp) / item[0], item[1]),
                                        rates.items()), strict=True))
    for name, run in runs.items():
        held = [e["heldout/strict"] for e in run["log"] if "heldout/strict" in e]
        print(f"{name}: learning rate {run['learning_rate']:g}, held-out "
              f"{' -> '.join(f'{a:.1%}' for a in held)}, {run['seconds']:.0f} s")
    write_result("failing_run", {"profile": "smoke", "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
