"""Write the Colab badges and the bootstrap cell into the notebooks, from helpers/course.py.

    python scripts/sync_notebooks.py          # rewrite notebooks in place
    python scripts/sync_notebooks.py --check  # exit 1 if any notebook is out of date

The repository URL and ref live in one place (helpers/course.py); this script copies them into
the badge (cell 1) and the bootstrap cell (the first code cell) of each notebook, and into
README's badge links.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers.course import COLAB_DIR, COURSE_REF, COURSE_REPO  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
BADGE_PREFIX = "[![Open In Colab]"
COLAB_LINK = re.compile(r"colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/")
BOOTSTRAP_MARK = "# Course bootstrap"

BOOTSTRAP = f'''{BOOTSTRAP_MARK}: on Colab, fetch the course and install its pinned stack
# (once per runtime, ~3 min). Anywhere else it only makes `helpers` importable.
import os
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # text progress bars are fine
COURSE_REPO = "{COURSE_REPO}"
COURSE_REF, COLAB_DIR = "{COURSE_REF}", "{COLAB_DIR}"
if "google.colab" in sys.modules and not os.path.isdir(COLAB_DIR):
    git = ["git", "clone", "-q", "--depth=1", f"--branch={{COURSE_REF}}", COURSE_REPO, COLAB_DIR]
    if subprocess.run(git, capture_output=True, text=True).returncode != 0:
        raise SystemExit(f"Could not clone {{COURSE_REPO}} at {{COURSE_REF}}: is the tag there?")
    subprocess.run([sys.executable, f"{{COLAB_DIR}}/scripts/install_stack.py", "colab"], check=True)
if "google.colab" in sys.modules:
    os.chdir(f"{{COLAB_DIR}}/notebooks")
sys.path.insert(0, os.path.abspath(".."))'''


def badge(notebook: Path) -> str:
    owner_repo = COURSE_REPO.removeprefix("https://github.com/")
    url = (
        f"https://colab.research.google.com/github/{owner_repo}/blob/{COURSE_REF}"
        f"/notebooks/{notebook.name}"
    )
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
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    return nb


def synced_readme(text: str) -> str:
    """README's badge links point at the same repository and ref."""
    owner_repo = COURSE_REPO.removeprefix("https://github.com/")
    return COLAB_LINK.sub(f"colab.research.google.com/github/{owner_repo}/blob/{COURSE_REF}/", text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale files only")
    args = parser.parse_args()
    stale = []
    notebooks = NOTEBOOKS.glob("*.ipynb")
    updates = [(p, lambda p=p: nbformat.writes(synced(p)) + "\n") for p in notebooks]
    readme = ROOT / "README.md"
    updates.append((readme, lambda: synced_readme(readme.read_text())))
    for path, render in sorted(updates):
        new = render()
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
