"""Time `make test` and add the run to runs/bench/make_test.json (docs/ci.md cites the newest).

    python -m scripts.time_tests                      # make test in a fresh clone of HEAD
    python -m scripts.time_tests --here               # in this checkout (its .venv and .cache)
    python -m scripts.time_tests --target test-fast   # another make target
    python -m scripts.time_tests --commit 4ea934c     # an older commit, for a before-and-after
    make figures                                      # then docs/ci.md shows the new run

CPU-seconds are user + sys of make and every process it waited for (pip, the test processes, the
notebook kernels): the work the code asks for, much the same on a busy machine. Wall time follows
the machine, so each run also records a gauge of its speed, `pytest tests/test_paths.py -n 2`.
`make test` and `make test-release` also store their seconds per test group (pytest
--store-durations), from which conftest.py orders the next session and draws `make test-fast`'s
line; test-fast stores none, since the file's figures must come from whole sessions.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from helpers.paths import ROOT

RECORD = ROOT / "runs" / "bench" / "make_test.json"
DURATIONS = Path("runs") / "bench" / "test_durations.json"
GAUGE = [".venv/bin/python", "-m", "pytest", "tests/test_paths.py", "-n", "2", "-q",
         "-p", "no:randomly"]
STORES_DURATIONS = ("test", "test-release")  # whole tiers: their groups' seconds compare
# pytest's last line: "1339 passed, 4 skipped in 941.20s (0:15:41)", between = signs or not.
SUMMARY = re.compile(r"(\d+ (?:passed|failed|error).*?) in ([\d.]+)s")


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> dict[str, object]:
    """Run `argv`, echoing its output; its wall and CPU seconds, exit code and pytest's summary."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    summary = None
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            summary = SUMMARY.search(line) or summary
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {"rc": proc.returncode, "wall_s": round(wall, 1), "cpu_s": round(user + system, 1),
            "user_s": round(user, 1), "sys_s": round(system, 1),
            "tests": summary.group(1) if summary else None,
            "session_s": round(float(summary.group(2)), 1) if summary else None}


def cpu_model() -> str:
    """The CPU's model name (Linux), or the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def fresh_clone(parent: Path, commit: str | None = None) -> Path:
    """A clone of this checkout's HEAD, or of `commit` (committed work only), as CI and a
    newcomer get it."""
    folder = parent / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(folder)], check=True)
    if commit:
        subprocess.run(["git", "checkout", "-q", commit], cwd=folder, check=True)
    return folder


def commit_of(folder: Path) -> str:
    """The short commit of `folder`, with "+" when its tracked files differ from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=folder, check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=folder).returncode != 0
    return head + ("+" if dirty else "")


def measure(target: str, folder: Path, fresh: bool, durations: bool = True) -> dict[str, object]:
    """Run `make target` in `folder`, then the speed gauge; the record of both."""
    env = dict(os.environ)
    if durations and target in STORES_DURATIONS:
        env["PYTEST_ADDOPTS"] = "--store-durations"
    record: dict[str, object] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"), "commit": commit_of(folder),
        "target": target, "fresh_clone": fresh, "cpu": cpu_model(), "cores": os.cpu_count(),
        "load_1min": round(os.getloadavg()[0], 1)}
    record |= timed(["make", target], folder, env)
    gauge = timed(GAUGE, folder, {**os.environ, "GRPO_PROFILE": "smoke"})
    record["gauge_s"] = gauge["wall_s"] if gauge["rc"] == 0 else None
    return record


def append(record: dict[str, object], path: Path = RECORD) -> None:
    """Add `record` to the runs in `path` (oldest first), in bench/_results.py's JSON form."""
    data = json.loads(path.read_text()) if path.exists() else {"runs": []}
    data["runs"].append(record)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="test", help="the make target (default: test)")
    parser.add_argument("--here", action="store_true",
                        help="run in this checkout instead of a fresh clone of HEAD")
    parser.add_argument("--commit", help="a fresh clone of this commit instead of HEAD (its "
                        "groups' seconds are not stored: an older suite may not know the flag)")
    args = parser.parse_args(argv)
    if args.here and args.commit:
        parser.error("--here runs this checkout as it is: leave out --commit")
    with tempfile.TemporaryDirectory(prefix="time-tests-") as parent:
        folder = ROOT if args.here else fresh_clone(Path(parent), args.commit)
        record = measure(args.target, folder, fresh=not args.here, durations=not args.commit)
        if args.commit:
            record["older"] = True  # for comparison: docs/ci.md's figure stays HEAD's
        if not args.here and not args.commit and (folder / DURATIONS).exists():
            shutil.copy(folder / DURATIONS, ROOT / DURATIONS)
    append(record)
    print(json.dumps(record, indent=2))
    print(f"added to {RECORD.relative_to(ROOT)}; `make figures` puts it into docs/ci.md")
    return int(record["rc"])  # type: ignore[arg-type]


if __name__ == "__main__":
    raise SystemExit(main())
