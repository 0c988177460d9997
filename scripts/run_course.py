"""Execute the course's notebooks in order, headless, like a learner pressing "Run all".

    python scripts/run_course.py                # copies + figures under runs/<timestamp>/
    python scripts/run_course.py --only 03 04   # just these notebooks
    python scripts/run_course.py --in-place     # refresh the committed notebooks' stored outputs

The profile comes from the hardware, or from $GRPO_PROFILE.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sync_notebooks import synced  # noqa: E402


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
    parser.add_argument("--only", nargs="+", metavar="NN", help="notebook numbers, e.g. 03 04")
    parser.add_argument("--in-place", action="store_true", help="overwrite notebooks/ with outputs")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    args = parser.parse_args()

    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if args.only:
        paths = [p for p in paths if p.name[:2] in args.only]
        if not paths:
            raise SystemExit(f"No notebook numbered {' '.join(args.only)} in notebooks/.")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = ROOT / "runs" / stamp
    if not args.in_place:
        os.environ["GRPO_RUN_DIR"] = str(out)  # kernels inherit it: runs, adapters, logs go here
    profile = os.environ.get("GRPO_PROFILE", "chosen from the hardware")
    print(f"Executing {len(paths)} notebooks (profile: {profile})")
    total = 0.0
    for number, path in enumerate(paths, 1):
        print(f"[{number}/{len(paths)}] {path.name}", flush=True)
        try:
            nb, seconds = execute(path, args.timeout)
        except CellExecutionError as error:
            print(f"\n{path.name} failed:\n{str(error)[-3000:]}")
            return 1
        total += seconds
        if args.in_place:
            nbformat.write(nb, path)
            path.write_text(nbformat.writes(synced(path)) + "\n")
            print(f"    done in {seconds:.0f} s, outputs stored in {path.relative_to(ROOT)}")
        else:
            (out / "notebooks").mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, out / "notebooks" / path.name)
            figures = save_figures(nb, out / "figures" / path.stem)
            print(f"    done in {seconds:.0f} s, {figures} figure(s)")
    where = "notebooks/ (in place)" if args.in_place else str(out.relative_to(ROOT))
    print(f"All {len(paths)} notebooks ran in {total / 60:.1f} min. Results: {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
