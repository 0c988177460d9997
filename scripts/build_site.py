"""Build the course as a static HTML book: `make site` writes _site/ (open _site/index.html).

    python scripts/build_site.py            # stage, build, check it is offline, print a summary
    python scripts/build_site.py --out DIR  # somewhere else (the tests build into a temp folder)

The pages are README (the front page), the notebooks in order with the outputs they were
committed with (never executed), then docs/*.md. The sources are first copied to a staging
folder with the rewrites only a web page needs (Stager), then Sphinx renders them with
book/conf.py. Nothing is fetched at build or view time: the theme, the search and MathJax come
from installed packages, and the build fails if a page would load anything from the network.
"""

from __future__ import annotations

import argparse
import importlib.util
import posixpath
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
DEFAULT_OUT = ROOT / "_site"


def _load_course():
    # Only helpers/course.py (the published repository and tag), without the helpers package.
    spec = importlib.util.spec_from_file_location("_course_for_site", ROOT / "helpers/course.py")
    assert spec and spec.loader, "helpers/course.py is missing"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


course = _load_course()
COLAB = "https://colab.research.google.com/github/"
# A run figure in prose: <!-- fig:KEY -->VALUE<!-- /fig -->. The page shows VALUE alone; left
# as it is, a marker at the start of a line would turn the whole line into a raw HTML block.
FIG = re.compile(r"<!--\s*fig:[^>]*?-->(.*?)<!--\s*/fig\s*-->", re.S)
# The Colab badge sync_notebooks.py writes; its image lives on Colab's host, so the book draws
# its own button instead (book/_static/course.css).
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
# Targets of Markdown links and images, `[text](target)` and `![alt](target)`.
LINK = re.compile(r"(\]\()([^)\s<>]+)(\))")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
SOLUTIONS = "## Solutions"
FOLD_PREFIX = "fold-solutions-"  # book/fold_solutions.py folds the section with this label
# A page may load nothing from another host: these catch a script, stylesheet, font, image or
# frame whose address has a scheme (a plain <a href> to another site is fine).
REMOTE_ASSET = re.compile(
    r"<(?:script|img|iframe|source)\b[^>]*\bsrc=[\"'](?:https?:)?//"
    r"|<link\b(?=[^>]*\brel=[\"'](?:stylesheet|preload|icon|modulepreload|prefetch|preconnect))"
    r"[^>]*\bhref=[\"'](?:https?:)?//"
    r"|url\(\s*[\"']?(?:https?:)?//", re.I)


def repo_path() -> str:
    """'https://github.com/owner/name' -> 'owner/name'."""
    return course.COURSE_REPO.removeprefix("https://github.com/").strip("/")


def colab_url(rel: str) -> str:
    return f"{COLAB}{repo_path()}/blob/{course.COURSE_REF}/{rel}"


def source_url(rel: str, folder: bool = False) -> str:
    return f"{course.COURSE_REPO}/{'tree' if folder else 'blob'}/{course.COURSE_REF}/{rel}"


def notebooks() -> list[str]:
    found = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("*.ipynb"))
    if not found:
        raise SystemExit("No notebooks/*.ipynb to build the book from.")
    return found


def docs_in_reading_order(readme: str) -> list[str]:
    """docs/*.md in the order README first links them, then the rest by name."""
    all_docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    linked = [t for t in dict.fromkeys(m.group(2).split("#")[0] for m in LINK.finditer(readme))
              if t in all_docs]
    return linked + [d for d in all_docs if d not in linked]


def buttons(rel: str) -> str:
    """The row under a notebook's title: open it on Colab, or read its source at the tag."""
    return ('<div class="course-buttons">\n'
            f'<a class="colab-button" href="{colab_url(rel)}">Open in Colab</a>\n'
            f'<a class="source-button" href="{source_url(rel)}">Source notebook</a>\n'
            "</div>")


class Stager:
    """Rewrites Markdown for the web; `pages`: the repository paths that are in the book."""

    def __init__(self, pages: set[str]) -> None:
        self.pages = pages

    def link(self, target: str, src: str) -> str:
        path, hash_, anchor = target.partition("#")
        if not path or SCHEME.match(path):
            return target  # an anchor on the same page, or another site
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(src), path))
        here = posixpath.dirname(src) or "."
        if resolved == "README.md":
            return posixpath.relpath("index.md", here) + hash_ + anchor
        if resolved in self.pages:
            return target
        if not (ROOT / resolved).exists():
            # A warning, not a failure: the link is wrong in the source on every host alike.
            print(f"warning: {src}: the link '{target}' points at {resolved}, which does not "
                  "exist: fix the link in the source.", file=sys.stderr)
        # Code, locks, configs: not pages of the book, so they open on the code host at the tag.
        return source_url(resolved, folder=(ROOT / resolved).is_dir()) + hash_ + anchor

    def markdown(self, text: str, src: str) -> str:
        text = FIG.sub(r"\1", text)
        if re.search(r"<!--\s*/?fig", text):
            raise SystemExit(f"{src}: a figure marker is not closed with <!-- /fig -->.")
        text = LINK.sub(lambda m: m.group(1) + self.link(m.group(2), src) + m.group(3), text)
        return text


def stage_notebook(stager: Stager, rel: str, out: Path) -> None:
    nb = nbformat.read(ROOT / rel, as_version=4)
    stem = Path(rel).stem
    has_badge = False
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        source = stager.markdown(cell.source, rel)
        if BADGE.search(source):
            has_badge = True
            source = BADGE.sub(lambda _: buttons(rel), source, count=1)
        if cell.metadata.get("jp-MarkdownHeadingCollapsed") and source.startswith(SOLUTIONS):
            source = f"({FOLD_PREFIX}{stem})=\n{source}"
        cell.source = source
    if not has_badge:
        raise SystemExit(f"{rel} has no Open In Colab badge: run `make sync-notebooks`.")
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out / rel)


def toctree(caption: str, entries: list[str]) -> str:
    lines = "\n".join(posixpath.splitext(e)[0] for e in entries)
    return f"\n\n```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{lines}\n```\n"


def stage(out: Path) -> int:
    """Writes the book's sources into `out`; returns the number of pages."""
    readme = (ROOT / "README.md").read_text()
    nbs, docs = notebooks(), docs_in_reading_order(readme)
    figures = [p.relative_to(ROOT).as_posix() for p in (ROOT / "docs/figures").glob("*.png")]
    stager = Stager(set(nbs) | set(docs) | set(figures))
    front = BADGE.sub(lambda _: ('<div class="course-buttons">\n<a class="colab-button" '
                                 f'href="{colab_url(nbs[0])}">Open in Colab</a>\n</div>'),
                      stager.markdown(readme, "README.md"), count=1)
    (out / "index.md").write_text(front + toctree("Notebooks", nbs) + toctree("Guides", docs))
    for rel in docs:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(stager.markdown((ROOT / rel).read_text(), rel))
    for rel in figures:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, out / rel)
    for rel in nbs:
        stage_notebook(stager, rel, out)
    return 1 + len(nbs) + len(docs)


def remote_assets(site: Path) -> list[str]:
    """Every page or stylesheet line that would load something from another host."""
    found = []
    for path in [*site.rglob("*.html"), *site.rglob("*.css")]:
        for match in REMOTE_ASSET.finditer(path.read_text(errors="replace")):
            found.append(f"{path.relative_to(site)}: {match.group(0)[:120]}")
    return found


def build(out: Path) -> dict[str, float]:
    from sphinx.cmd.build import build_main  # here, so --help works without the dev tools

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="site-src-") as tmp:
        # Sphinx writes into the temp folder: myst-nb puts its output files and cache beside
        # the output folder, which must not be the repository.
        src, doctrees, html = Path(tmp) / "src", Path(tmp) / "doctrees", Path(tmp) / "html"
        src.mkdir()
        pages = stage(src)
        # -W: a broken cross-reference or an unrenderable output fails the build, not the reader.
        status = build_main(["-b", "html", "-c", str(BOOK), "-d", str(doctrees), "-j", "auto",
                             "-q", "-W", "--keep-going", str(src), str(html)])
        if status:
            raise SystemExit(f"Sphinx failed (exit {status}): its warnings above name the page.")
        if out.exists():
            shutil.rmtree(out)  # a fresh book each time: no page left over from a renamed source
        shutil.move(html, out)
    remote = remote_assets(out)
    if remote:
        raise SystemExit("These would load from the network, but the book must work offline:\n  "
                         + "\n  ".join(remote))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {"seconds": time.monotonic() - start, "pages": pages, "megabytes": size / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="default: _site/")
    args = parser.parse_args()
    summary = build(args.out.resolve())
    print(f"site: {summary['pages']:.0f} pages, {summary['megabytes']:.1f} MB in "
          f"{summary['seconds']:.0f} s -> {args.out}/index.html")


if __name__ == "__main__":
    main()
