"""Where a notebook's stored outputs came from: the run that made them, kept in its metadata.

`make execute-notebooks` (scripts/run_course.py --in-place) records the run in each notebook it
executes; the web book (scripts/build_site.py) shows it in one line under the page's title, and
flags the page when the notebook's code or the pinned stack changed since. Standard library,
nbformat and torch-free helpers only: the book's build installs no torch.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import nbformat

from helpers.paths import ROOT
from helpers.session import stack_versions  # no torch: the book's build can import it

KEY = "course_run"  # the notebook metadata key that holds the record
# The pinned stack: a changed pin can change any output.
PINNED = ("requirements.txt", "locks/*.txt")
# The first code cell is the Colab bootstrap, which `make sync-notebooks` rewrites when the course
# is published elsewhere: its outputs are not shown on the page, so it does not count.
BOOTSTRAP_STARTS = ("#@title Course bootstrap", "# Course bootstrap")


def pinned_files(root: Path = ROOT) -> list[Path]:
    """requirements.txt and the lock files, in a fixed order."""
    found = [path for pattern in PINNED for path in sorted(root.glob(pattern))]
    if not found:
        raise FileNotFoundError(f"No {' or '.join(PINNED)} under {root}: the stack is not pinned.")
    return found


def inputs_digest(nb: nbformat.NotebookNode, root: Path = ROOT) -> str:
    """A hash of what the outputs depend on: the code cells (but the bootstrap) and the pins."""
    digest = hashlib.sha256()
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    if code and code[0].startswith(BOOTSTRAP_STARTS):
        code = code[1:]
    for source in code:
        digest.update(source.encode() + b"\0")
    for path in pinned_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def machine() -> str:
    """'Tesla T4 GPU' or 'CPU only, 2 cores (x86_64)': what ran the kernels. Asked of
    nvidia-smi, not torch: a CUDA context here would hold GPU memory the notebooks need."""
    name = ""
    if os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        try:
            found = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=60)
            name = found.stdout.strip().splitlines()[0] if found.returncode == 0 else ""
        except (OSError, subprocess.TimeoutExpired, IndexError):
            name = ""  # no driver, no GPU
    return f"{name} GPU" if name else f"CPU only, {os.cpu_count()} cores ({platform.machine()})"


def run_record(nb: nbformat.NotebookNode, profile: str, seconds: float,
               root: Path = ROOT) -> dict[str, object]:
    """The metadata a just-executed notebook keeps about the run that made its outputs."""
    from helpers.profiles import SEED

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "python": platform.python_version(),
        "packages": stack_versions(),
        "profile": profile,
        "seed": SEED,
        "seconds": round(seconds, 1),
        "inputs": inputs_digest(nb, root),
    }


def run_line(run: dict | None) -> str:
    """The run in one line, as the page shows it under the title."""
    if not run:
        return "Outputs: the run that made them is not recorded yet."
    packages = ", ".join(f"{name} {v}" for name, v in run["packages"].items())
    return (f"Outputs from a run on {run['date']}: {run['machine']}, Python {run['python']}, "
            f"{packages}; profile {run['profile']}, seed {run['seed']}, {run['seconds']:.0f} s.")


def is_stale(nb: nbformat.NotebookNode, root: Path = ROOT) -> bool:
    """True if the code or the pins changed since the recorded run (False if none is recorded)."""
    run = nb.metadata.get(KEY)
    return bool(run) and run.get("inputs") != inputs_digest(nb, root)
