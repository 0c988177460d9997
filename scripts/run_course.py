"""Execute the course's notebooks in order, headless, like a learner pressing "Run all".

    python -m scripts.run_course                # copies + figures under runs/<timestamp>/
    python -m scripts.run_course --only 03 05   # just these notebooks
    python -m scripts.run_course --in-place     # refresh the committed notebooks' stored outputs

The profile comes from the hardware, or from $GRPO_PROFILE.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from helpers.paths import ROOT
from scripts import provenance
from scripts.sync_notebooks import synced

NOTEBOOKS = ROOT / "notebooks"

CPU_CELL_TIMEOUT = 1800  # s: on CPU (smoke profile) the slowest cell takes about a minute
# On a GPU, notebook 05 trains max_steps steps in one cell: allow 4x the slowest T4 step time
# published for unsloth's GRPO notebooks (55 s), so only a hung cell is stopped.
GPU_SECONDS_PER_STEP = 240


def save_figures(nb: nbformat.NotebookNode, folder: Path) -> int:
    """Write every PNG the notebook displayed to `folder`; return how many."""
    count = 0
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                count += 1
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"cell{index:02d}_{count}.png").write_bytes(base64.b64decode(png))
    return count


def cell_timeout(max_steps: int, on_gpu: bool) -> int:
    """Seconds any one cell may run: fixed on CPU; on a GPU, enough for the whole training."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    if not on_gpu:
        return CPU_CELL_TIMEOUT
    return CPU_CELL_TIMEOUT + GPU_SECONDS_PER_STEP * max_steps


def profile_name(requested: str | None) -> str:
    """The profile the notebooks will pick: `requested`, else the hardware's."""
    from helpers.profiles import PROFILES, default_profile_name

    if requested in PROFILES:
        return requested
    from helpers.hardware import detect_hardware  # none, or unknown: the notebooks say so

    return default_profile_name(detect_hardware())


TRAINING_NOTEBOOK = "grpo_training"  # its run is what 06 and 07 read


def clear_course_run(profile: str) -> str:
    """Delete the profile's course run folder before stored outputs are recorded: the training
    notebook would otherwise resume (or just load) the run it finds there, and its stored outputs
    would show no training. Says what it did."""
    import shutil

    from helpers.paths import shown
    from helpers.run_folder import run_dir

    run = run_dir(profile)
    if not run.root.exists():
        return f"No earlier run in {shown(run)}: the training notebook starts a new one."
    shutil.rmtree(run.root)
    return (f"Removed the earlier run in {shown(run)}: the stored outputs come from a new run, "
            "trained from step 1.")


def profile_timeout(requested: str | None) -> int:
    """cell_timeout for the profile the notebooks will pick: `requested`, else the hardware's."""
    from helpers.profiles import PROFILES

    profile = PROFILES[profile_name(requested)]
    return cell_timeout(profile.max_steps, on_gpu=profile.min_vram_gb > 0)


def course_times(seconds: dict[str, float]) -> dict[str, object]:
    """The record behind each notebook header's "CPU smoke N s (measured)": tools/cited_numbers.py.

    Recorded with an empty cache (see main), so a time includes what a first run builds.
    """
    return {
        "profile": "smoke", "cores": os.cpu_count(), "command": "make execute-notebooks",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"), "cache": "empty",
        "seconds": {name: round(s, 1) for name, s in sorted(seconds.items())},
    }


def write_course_times(record: dict[str, object]) -> Path:
    """Save `record` as runs/bench/course_times.json (committed, diff-friendly)."""
    out = ROOT / "runs" / "bench" / "course_times.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return out


def execute(path: Path, timeout: int) -> tuple[nbformat.NotebookNode, float]:
    """Run every cell with the notebooks folder as working directory, printing progress."""
    nb = nbformat.read(path, as_version=4)
    code_cells = sum(cell.cell_type == "code" for cell in nb.cells)
    done = 0

    def progress(cell, **_: object) -> None:
        nonlocal done
        done += 1
        print(f"\r    cell {done}/{code_cells}", end="", flush=True)

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,  # no timestamps: committed notebooks stay diff-clean
        resources={"metadata": {"path": str(NOTEBOOKS)}},
        on_cell_executed=progress,
    )
    start = time.perf_counter()
    client.execute()
    print("\r", end="")
    return nb, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description="Execute the course notebooks in order.")
    parser.add_argument("--only", nargs="+", metavar="NN", help="notebook numbers, e.g. 03 05")
    parser.add_argument("--in-place", action="store_true", help="overwrite notebooks/ with outputs")
    parser.add_argument(
        "--timeout", type=int, default=None,
        help=f"seconds per cell; default: {CPU_CELL_TIMEOUT} on CPU, on a GPU "
        f"{CPU_CELL_TIMEOUT} + {GPU_SECONDS_PER_STEP} x the profile's max_steps",
    )
    args = parser.parse_args()

    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if args.only:
        paths = [p for p in paths if p.name[:2] in args.only]
        if not paths:
            raise SystemExit(f"No notebook numbered {' '.join(args.only)} in notebooks/.")
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out = ROOT / "runs" / stamp
    if not args.in_place:
        os.environ["GRPO_RUN_DIR"] = str(out)  # kernels inherit it: runs, adapters, logs go here
    elif any(p.stem.endswith(TRAINING_NOTEBOOK) for p in paths):
        print(clear_course_run(profile_name(os.environ.get("GRPO_PROFILE"))))
    profile = os.environ.get("GRPO_PROFILE", "chosen from the hardware")
    picked = profile_name(os.environ.get("GRPO_PROFILE"))
    timeout = args.timeout or profile_timeout(os.environ.get("GRPO_PROFILE"))
    print(f"Executing {len(paths)} notebooks (profile: {profile}; at most {timeout} s a cell)")
    # A full in-place smoke run is the one whose outputs are committed: its times are recorded.
    smoke = picked == "smoke"
    record = args.in_place and not args.only and smoke
    if record:  # a learner's first run: whatever a notebook caches (09's cold start) is built
        os.environ["GRPO_COURSE_CACHE"] = tempfile.mkdtemp(prefix="grpo-course-cache-")
    times: dict[str, float] = {}
    total = 0.0
    for number, path in enumerate(paths, 1):
        print(f"[{number}/{len(paths)}] {path.name}", flush=True)
        try:
            nb, seconds = execute(path, timeout)
        except (CellExecutionError, CellTimeoutError) as error:
            print(f"\n{path.name} failed:\n{str(error)[-3000:]}")
            return 1
        total += seconds
        times[path.name] = seconds
        if args.in_place:
            nbformat.write(nb, path)
            nb = synced(path)
        # The run that made these outputs, hashed with the code and pins it ran (the book shows it)
        nb.metadata[provenance.KEY] = provenance.run_record(nb, picked, seconds)
        if args.in_place:
            path.write_text(nbformat.writes(nb) + "\n")
            print(f"    done in {seconds:.0f} s, outputs stored in {path.relative_to(ROOT)}")
        else:
            (out / "notebooks").mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, out / "notebooks" / path.name)
            figures = save_figures(nb, out / "figures" / path.stem)
            print(f"    done in {seconds:.0f} s, {figures} figure(s)")
    where = "notebooks/ (in place)" if args.in_place else str(out.relative_to(ROOT))
    if record:
        saved = write_course_times(course_times(times))
        print(f"Times per notebook: {saved.relative_to(ROOT)} (then `make figures`)")
    print(f"All {len(paths)} notebooks ran in {total / 60:.1f} min. Results: {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
