"""Write the Colab badges and the bootstrap cell into the notebooks, from helpers/course.py.

    python -m scripts.sync_notebooks          # rewrite notebooks in place
    python -m scripts.sync_notebooks --check  # exit 1 if any notebook is out of date

The repository URL and ref, and what each notebook needs on Colab, live in one place
(helpers/course.py). This script writes them into every notebook: the badge and a line saying what
to expect on Colab (title cell), Colab's runtime metadata (a "full" notebook asks for a T4), and
the bootstrap cell (the first code cell, folded into a Colab form). It also rewrites README's badge
links and gives each `parameters` cell its Colab form (`#@param`).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import textwrap
from pathlib import Path

import nbformat

from helpers.course import (
    COLAB_DIR,
    COLAB_GPU,
    COURSE_REF,
    COURSE_REPO,
    FULL_INSTALL_RESTART,
    INSTALL_MINUTES,
    notebook_install,
    notebook_key,
    unpublished_target_line,
)
from helpers.journey import time_line
from helpers.paths import ROOT

NOTEBOOKS = ROOT / "notebooks"
# The cell's text, with {names} that bootstrap_cell fills (braces the cell needs are doubled).
BOOTSTRAP_TEMPLATE = NOTEBOOKS / "bootstrap_cell.txt"
BADGE_PREFIX = "[![Open In Colab]"
COLAB_LINK = re.compile(r"colab\.research\.google\.com/github/[^/]+/[^/]+/blob/[^/]+/")
PARAMETER = re.compile(r"^([A-Z][A-Z0-9_]*) = (.+?)(?:\s+# ?(.*))?$")
FORM_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}
# The bootstrap cell's first line: Colab folds the cell into a form that shows only this title.
BOOTSTRAP_TITLE = (
    '#@title Course bootstrap: fetch the course, install what it needs { display-mode: "form" }')
# Recognised as the bootstrap cell: the title, or the first line it had before it was a form.
BOOTSTRAP_STARTS = ("#@title Course bootstrap", "# Course bootstrap")
COLAB_LINE = "**On Colab:**"  # the title cell's line about the runtime and the install


def bootstrap_cell(notebook: str) -> str:
    """The bootstrap cell of `notebook` (its file name): its install comes from helpers/course."""
    minutes = INSTALL_MINUTES[notebook_install(notebook)]
    unpublished = unpublished_target_line()
    # While the target is the placeholder, the cell says so before it tries to clone it (in
    # pieces that keep the cell's lines under the linter's 100 characters).
    pieces = textwrap.wrap(unpublished or "", 80, drop_whitespace=False)
    warn = "print(" + "\n      ".join(map(json.dumps, pieces)) + ")\n" if pieces else ""
    return BOOTSTRAP_TEMPLATE.read_text().format(
        title=BOOTSTRAP_TITLE, minutes=minutes, key=notebook_key(notebook), repo=COURSE_REPO,
        ref=COURSE_REF, colab_dir=COLAB_DIR, warn=warn).rstrip("\n")


def is_bootstrap(source: str) -> bool:
    """True for the course's bootstrap cell (as a form, or as it was before)."""
    return source.startswith(BOOTSTRAP_STARTS)


def colab_line(notebook: str) -> str:
    """The title cell's line: which runtime, which install, and what to do without a GPU."""
    install = notebook_install(notebook)
    if install == "full":
        restart = f" In a new runtime {FULL_INSTALL_RESTART}." if FULL_INSTALL_RESTART else ""
        return (f"{COLAB_LINE} this notebook asks for a {COLAB_GPU} GPU runtime, and its first "
                f"cell installs the full stack ({INSTALL_MINUTES[install]}).{restart} No GPU? "
                f"Runtime → Change runtime type → {COLAB_GPU} GPU, then Runtime → Run all.")
    return (f"{COLAB_LINE} no GPU needed, any runtime will do: its first cell installs only the "
            f"light set, the course's packages on Colab's own torch ({INSTALL_MINUTES[install]}).")


def with_colab_line(title: str, line: str) -> str:
    """The title cell with `line` as its own paragraph just before the timing line, whose own
    explanation may follow it (idempotent)."""
    paragraphs = [p for p in title.split("\n\n") if not p.startswith(COLAB_LINE)]
    timing = next((i for i, p in enumerate(paragraphs) if p.startswith("**Time:**")), None)
    at = len(paragraphs) if timing is None else timing
    return "\n\n".join([*paragraphs[:at], line, *paragraphs[at:]])


TIME_LINE = "**Time:**"
MEASURED = " · CPU smoke"  # the measured part of the time line, a figure `make figures` fills


def with_time_line(title: str, line: str) -> str:
    """The title cell with its time line's estimate replaced by `line`; the measured CPU time
    that follows it stays (idempotent)."""
    paragraphs = title.split("\n\n")
    at = next((i for i, p in enumerate(paragraphs) if p.startswith(TIME_LINE)), None)
    if at is None:
        raise SystemExit(f"The title cell has no {TIME_LINE} paragraph: add one after the goals.")
    _, sep, measured = paragraphs[at].partition(MEASURED)
    paragraphs[at] = line + sep + measured
    return "\n\n".join(paragraphs)


def with_colab_metadata(metadata: dict, install: str) -> dict:
    """Colab's runtime metadata: a "full" notebook asks for a GPU of COLAB_GPU's type."""
    metadata = dict(metadata)
    colab = {k: v for k, v in metadata.pop("colab", {}).items() if k != "gpuType"}
    metadata.pop("accelerator", None)
    if install == "full":
        metadata["accelerator"] = "GPU"
        colab["gpuType"] = COLAB_GPU
    return {**metadata, **({"colab": colab} if colab else {})}


SOLUTIONS = "## Solutions"


def with_solutions_folded(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Fold the `## Solutions` section when the notebook opens, so it spoils nothing on scroll.

    Colab folds the sections whose heading cell's id is listed in `colab.collapsed_sections` (it
    keeps a cell's id in `metadata.id`); JupyterLab folds a heading cell marked
    `jp-MarkdownHeadingCollapsed`. The cells still run with "Run all" (and in CI).
    """
    headings = [c for c in nb.cells
                if c.cell_type == "markdown" and c.source.startswith(SOLUTIONS)]
    colab = dict(nb.metadata.get("colab", {}))
    colab.pop("collapsed_sections", None)
    for cell in headings:
        cell.metadata["id"] = cell.id
        cell.metadata["jp-MarkdownHeadingCollapsed"] = True
    if headings:
        colab["collapsed_sections"] = [cell.id for cell in headings]
    nb.metadata["colab"] = colab
    if not colab:
        nb.metadata.pop("colab")
    return nb


def form_type(value: str) -> str:
    """Colab's form type for a literal: boolean, integer, number, string, else raw (None, lists)."""
    try:
        literal = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return "raw"
    return FORM_TYPES.get(type(literal), "raw")


def _is_expression(text: str) -> bool:
    try:
        ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    return True


def with_forms(source: str) -> str:
    """`NAME = value  # why` becomes `# why` over `NAME = value  #@param {type:...}` (idempotent).

    Colab draws a form field for each `#@param`; papermill and nbval still see plain assignments.
    """
    lines = []
    for line in source.splitlines():
        match = PARAMETER.match(line)
        if match is None or "#@param" in line or not _is_expression(match.group(2)):
            lines.append(line)  # not a one-line parameter (or already a form field)
            continue
        name, value, why = match.groups()
        if why:
            lines.append(f"# {why}")
        lines.append(f'{name} = {value}  #@param {{type:"{form_type(value)}"}}')
    return "\n".join(lines)


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
    title.source = with_colab_line(title.source, colab_line(path.name))
    title.source = with_time_line(title.source, time_line(path.name))
    code = next(c for c in nb.cells if c.cell_type == "code")
    if not is_bootstrap(code.source):
        raise SystemExit(f"{path.name}: the first code cell must be the course bootstrap.")
    code.source = bootstrap_cell(path.name)
    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            cell.source = with_forms(cell.source)
    # Colab saves ipywidgets state without the 'state' key, which GitHub refuses to render.
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nb.metadata = nbformat.from_dict(with_colab_metadata(nb.metadata, notebook_install(path.name)))
    return with_solutions_folded(nb)


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
