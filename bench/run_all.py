"""Run every benchmark in bench/ (each prints its figures and writes runs/bench/<name>.json).

    python -m bench.run_all              # all of them
    python -m bench.run_all rewards      # just these
"""

from __future__ import annotations

import subprocess
import sys
import time

from helpers.paths import ROOT

BENCH = ROOT / "bench"


def main() -> int:
    scripts = [p.stem for p in BENCH.glob("*.py") if not p.stem.startswith(("_", "run_all"))]
    names = sys.argv[1:] or sorted(scripts)
    failed = []
    for name in names:
        print(f"=== bench/{name}.py", flush=True)
        start = time.perf_counter()
        # One process each: peak-memory figures must not include another benchmark's.
        if subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=ROOT).returncode:
            failed.append(name)
        print(f"=== {name}: {time.perf_counter() - start:.0f} s\n", flush=True)
    if failed:
        print(f"Failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
