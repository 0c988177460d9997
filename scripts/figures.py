"""Fill, or check, every `<!-- fig:KEY -->VALUE<!-- /fig -->` in README, docs/ and the notebooks,
and every table docs/ copies from the code (`<!-- table:NAME -->`, tools/doc_tables.py).

    python -m scripts.figures            # rewrite each VALUE from its source (make figures)
    python -m scripts.figures --check    # fail, naming the fix, on a wrong VALUE, key or source
    python -m scripts.figures --list     # every registered key and its value

Only the text between the markers changes; in notebooks, only markdown cells are read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat

from helpers.paths import ROOT
from tools.cited_numbers import SOURCES, check_text, compute, fill_text, keys_in
from tools.doc_tables import fill_tables, table_problems


def documents(root: Path) -> list[Path]:
    """The files whose prose may cite figures: README, docs/ and every notebook."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md")),
            *sorted((root / "notebooks").glob("*.ipynb"))]


def texts(path: Path) -> list[tuple[str, str]]:
    """(where, text) for README, or for each markdown cell of a notebook."""
    if path.suffix != ".ipynb":
        return [(path.name, path.read_text())]
    nb = nbformat.read(path, as_version=4)
    return [(f"{path.name} cell {i}", cell.source) for i, cell in enumerate(nb.cells)
            if cell.cell_type == "markdown"]


def used_prefixes(paths: list[Path]) -> set[str]:
    """The registered sources that some marker names (so only those are read)."""
    keys = [key for path in paths for _, text in texts(path) for key in keys_in(text)]
    return {key.split(".", 1)[0] for key in keys} & set(SOURCES)


def check(root: Path) -> list[str]:
    """Every problem with every marker, each prefixed with where it is."""
    paths = documents(root)
    figures = compute(root, used_prefixes(paths))
    return [f"{where}: {problem}" for path in paths for where, text in texts(path)
            for problem in check_text(text, figures, root)
            + (table_problems(text) if path.suffix == ".md" else [])]


def fill(root: Path) -> list[Path]:
    """Rewrite every marker's VALUE from the registry; return the files that changed."""
    paths = documents(root)
    figures = compute(root, used_prefixes(paths))
    changed = []
    for path in paths:
        if path.suffix != ".ipynb":
            old = path.read_text()
            if (new := fill_tables(fill_text(old, figures))) != old:
                path.write_text(new)
                changed.append(path)
            continue
        # Read, change and write at once: other cells of the notebook may be edited meanwhile.
        nb = nbformat.read(path, as_version=4)
        touched = False
        for cell in nb.cells:
            new = fill_text(cell.source, figures) if cell.cell_type == "markdown" else cell.source
            if new != cell.source:
                cell.source, touched = new, True
        if touched:
            path.write_text(nbformat.writes(nb) + "\n")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a problem")
    parser.add_argument("--list", action="store_true", help="print every registered key")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list:
        for key, value in sorted(compute(args.root).items()):
            print(f"{key:<52} {value}")
        return 0
    if not args.check:
        for path in fill(args.root):
            print(f"updated {path.relative_to(args.root)}")
    problems = check(args.root)
    for line in problems:
        print(line)
    count = sum(len(keys_in(t)) for p in documents(args.root) for _, t in texts(p))
    print(f"{count} figures, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
