"""Write the Colab badge and the bootstrap cell into every notebook, from helpers/course.py.

    python scripts/sync_notebooks.py          # rewrite notebooks in place
    python scripts/sync_notebooks.py --check  # exit 1 if any notebook is out of date

The repository URL and ref live in one place (helpers/course.py); this script copies them into
the badge (cell 1) and the bootstrap cell (the first code cell) of each notebook.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers.course import COLAB_DIR, COURSE_REF, COURSE_REPO  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
BADGE_PREFIX = "[![Open In Colab]"
BOOTSTRAP_MARK = "# Course bootstrap"

BOOTSTRAP = f'''{BOOTSTRAP_MARK}: on Colab, fetch the course and install its pinned stack (once, ~3 min).
# Anywhere else it only makes `helpers` importable. Nothing else in this notebook is Colab-only.
import os
import subprocess
import sys

COURSE_REPO, COURSE_REF, COLAB_DIR = "{COURSE_REPO}", "{COURSE_REF}", "{COLAB_DIR}"
if "google.colab" in sys.modules and not os.path.isdir(COLAB_DIR):
    git = ["git", "clone", "-q", "--depth=1", f"--branch={{COURSE_REF}}", COURSE_REPO, COLAB_DIR]
    if subprocess.run(git, capture_output=True, text=True).returncode != 0:
        raise SystemExit(f"Could not clone {{COURSE_REPO}} at {{COURSE_REF}}: check that the tag exists.")
    subprocess.run([sys.executable, f"{{COLAB_DIR}}/scripts/install_stack.py", "colab"], check=True)
if "google.colab" in sys.modules:
    os.chdir(f"{{COLAB_DIR}}/notebooks")
sys.path.insert(0, os.path.abspath(".."))'''


def badge(notebook: Path) -> str:
    owner_repo = COURSE_REPO.removeprefix("https://github.com/")
    url = f"https://colab.research.google.com/github/{owner_repo}/blob/{COURSE_REF}/notebooks/{notebook.name}"
    return f"{BADGE_PREFIX}(https://colab.research.google.com/assets/colab-badge.svg)]({url})"


def synced(path: Path) -> nbformat.NotebookNode:
    """The notebook with badge, bootstrap cell and clean metadata brought up to date."""
    nb = nbformat.read(path, as_version=4)
    title = nb.cells[0]
    if title.cell_type != "markdown" or not title.source.startswith("# "):
        raise SystemExit(f"{path.name}: the first cell must be a markdown title ('# ...').")
    lines = [line for line in title.source.splitlines() if not line.startswith(BADGE_PREFIX)]
    title.source = "\n".join([lines[0], "", badge(path), *lines[1:]]).replace("\n\n\n", "\n\n")
    code = next(c for c in nb.cells if c.cell_type == "code")
    if not code.source.startswith(BOOTSTRAP_MARK):
        raise SystemExit(f"{path.name}: the first code cell must be the course bootstrap.")
    code.source = BOOTSTRAP
    # Colab saves ipywidgets state without the 'state' key, which GitHub refuses to render.
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale notebooks, change nothing")
    args = parser.parse_args()
    stale = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        new = nbformat.writes(synced(path)) + "\n"
        if new != path.read_text():
            stale.append(path.name)
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"Out of date: {', '.join(stale)}. Run: make sync-notebooks")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
