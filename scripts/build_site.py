"""Build the course as a static HTML book: `make site` writes _site/ (open _site/index.html).

    python -m scripts.build_site            # stage, build, check it is offline, print a summary
    python -m scripts.build_site --out DIR  # somewhere else (the tests build into a temp folder)

The pages are README (the front page), the notebooks in order with the outputs they were
committed with (never executed), then docs/*.md. The sources are first copied to a staging
folder with the rewrites only a web page needs (Stager), then Sphinx renders them with
book/conf.py. Nothing is fetched at build or view time: the theme, the search and MathJax come
from installed packages, and the build fails if a page would load anything from the network.
"""

from __future__ import annotations

import argparse
import ast
import html
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

# Both use the standard library only: the book needs no torch (the Pages build installs none).
from helpers import course
from helpers.paths import ROOT
from helpers.profiles import PROFILES
from scripts import provenance

BOOK = ROOT / "book"
DEFAULT_OUT = ROOT / "_site"

COLAB = "https://colab.research.google.com/github/"
# A run figure in prose: <!-- fig:KEY -->VALUE<!-- /fig -->. The page shows VALUE alone; left
# as it is, a marker at the start of a line would turn the whole line into a raw HTML block.
FIG = re.compile(r"<!--\s*fig:[^>]*?-->(.*?)<!--\s*/fig\s*-->", re.S)
FIG_LEFT = re.compile(r"<!--\s*/?fig")
# Code in Markdown, fenced or inline: shown as written, so no rewrite may touch it (the docs show
# a marker itself as `<!-- fig:KEY -->VALUE<!-- /fig -->`).
CODE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?^ {0,3}\1"
                  r"|(`+)(?!`)(?:(?!\n[ \t]*\n).)*?(?<!`)\2(?!`)", re.S | re.M)
# The Colab badge sync_notebooks.py writes; its image lives on Colab's host, so the book draws
# its own button instead (book/_static/course.css).
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
# Targets of Markdown links and images, `[text](target)` and `![alt](target)`.
LINK = re.compile(r"(\]\()([^)\s<>]+)(\))")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
SOLUTIONS = "## Solutions"
FOLD_PREFIX = "fold-solutions-"  # book/fold_solutions.py folds the section with this label
# The first code cell: the Colab bootstrap (scripts/sync_notebooks.py writes it). A reader of the
# web page needs none of it, so it folds under myst-nb's "Show code" toggle.
BOOTSTRAP_STARTS = ("#@title Course bootstrap", "# Course bootstrap")
# Test-harness markers (nbval): noise on a page that never runs.
NBVAL = re.compile(r"^[ \t]*# NBVAL_\w+[ \t]*\n?|[ \t]+# NBVAL_\w+(?=[ \t]*$)", re.M)
# A tag in a Markdown output: the helpers escape their text, and one that did not would lose
# what looks like an HTML tag to the browser (`text after </answer>` would read "text after").
TAG_START = re.compile(r"<(?=/?[A-Za-z])")
# docs/*.md for whoever maintains or publishes the course; the rest are the reader's Guides.
MAINTAINER_DOCS = ["docs/ci.md", "docs/stack.md", "docs/config-check.md", "docs/benchmarks.md",
                   "docs/publishing.md", "docs/contributing.md"]
# A figure drawn by code the cell does not call itself: training draws its curves live
# (helpers.callbacks.LivePlot, with helpers.plotting.plot_training and its PANELS).
DRAWN_DURING = {"train_or_resume": "training_curves"}
T4_SLOT = re.compile(r"<!-- T4 RESULTS:.*?-->\n(.*?)<!-- /T4 RESULTS -->", re.S)
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


def outside_code(text: str, rewrite) -> str:
    """`rewrite` applied to the Markdown outside code spans and fenced blocks."""
    pieces, at = [], 0
    for match in CODE.finditer(text):
        pieces += [rewrite(text[at:match.start()]), match.group(0)]
        at = match.end()
    return "".join([*pieces, rewrite(text[at:])])


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
    """The row under a notebook's title: open it on Colab, read its source at the tag, or
    download it (build() puts the committed notebook beside its page)."""
    name = posixpath.basename(rel)
    muted = " unpublished" if course.unpublished_target_line() else ""  # course.css dims them
    return ('<div class="course-buttons">\n'
            f'<a class="colab-button{muted}" href="{colab_url(rel)}">Open in Colab</a>\n'
            f'<a class="source-button{muted}" href="{source_url(rel)}">Source notebook</a>\n'
            f'<a class="download-button" href="{name}" download>Download .ipynb</a>\n'
            "</div>")


def run_header(nb: nbformat.NotebookNode, root: Path = ROOT) -> str:
    """The line under a notebook's title: the run its outputs come from (scripts/provenance.py),
    and a warning when its code or the pinned stack changed since that run."""
    line = html.escape(provenance.run_line(nb.metadata.get(provenance.KEY)))
    if not provenance.is_stale(nb, root):
        return f'<p class="course-run">{line}</p>'
    return ('<p class="course-run stale"><strong>Outputs out of date:</strong> this notebook\'s '
            "code or the pinned stack (requirements.txt, locks/) changed after the run that made "
            "them; "
            f"<code>make execute-notebooks</code> makes them again. {line}</p>")


def t4_results_recorded() -> bool:
    """True once `make gpu-check` has filled README's T4 slot with a run."""
    slot = T4_SLOT.search((ROOT / "README.md").read_text())
    return bool(slot) and "No T4 run has been recorded" not in slot.group(1)


def smoke_outputs_note(rel: str) -> str:
    """Said before the first output of a GPU notebook: where its stored outputs come from, and
    what a run on Colab's T4 runs instead (helpers/profiles.py)."""
    smoke, t4 = PROFILES["smoke"], PROFILES["t4"]
    results = posixpath.relpath("index.md", posixpath.dirname(rel)) + "#results"
    seen = (f"[Results]({results}) shows the T4 run" if t4_results_recorded() else
            f"no T4 run is recorded yet ([Results]({results}))")
    data = "synthetic problems" if t4.synthetic_data else "real GSM8K"
    return ("```{admonition} The outputs on this page come from a CPU, not a T4\n"
            ":class: note smoke-outputs\n\n"
            f"They were stored by the **{smoke.name}** profile: "
            f"{smoke.summary.partition(': ')[2] or smoke.summary}. So \"no GPU found\" is "
            "expected, and the numbers are the tiny model's. On a Colab T4 this notebook runs "
            f"the **{t4.name}** profile: {t4.summary.partition(': ')[2] or t4.summary}, "
            f"{t4.max_steps} GRPO steps on {data}; {seen}.\n"
            "```")


def figure_descriptions() -> dict[str, str]:
    """{name: first paragraph of its docstring} of each function in helpers/ that draws a figure
    (returns a Figure, or is named plot_*), and DRAWN_DURING's figures. Read from the source:
    nothing is imported."""
    found = {"training_curves": training_curves_alt()}
    for path in sorted((ROOT / "helpers").rglob("*.py")):  # helpers/lab/ too
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or not ast.get_docstring(node):
                continue
            returns = ast.unparse(node.returns) if node.returns else ""
            if "Figure" in returns or node.name.startswith("plot_"):
                doc = " ".join(ast.get_docstring(node).split("\n\n")[0].split())
                found[node.name] = doc.replace("`", "").rstrip(".")
    return found


def training_curves_alt() -> str:
    """What plot_training draws: one panel per logged metric, titled as PANELS titles them."""
    tree = ast.parse((ROOT / "helpers/plotting.py").read_text())
    panels = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                  and any(getattr(target, "id", "") == "PANELS" for target in node.targets))
    titles = [call.args[0].value for call in panels.elts]
    return ("Training curves against the step, a panel for each metric in the log: "
            + ", ".join(titles))


def figure_alt(source: str, figures: dict[str, str]) -> str | None:
    """What a cell's figure shows, for its alt text: the titles the cell sets, else what the
    helpers it calls draw (their docstrings); None if neither says."""
    titles = re.findall(r"\.(?:set_title|suptitle)\(\s*f?[\"']([^\"']+)[\"']", source)
    if titles:
        return "; ".join(titles)
    called = [DRAWN_DURING.get(name, name) for name in re.findall(r"\b(\w+)\(", source)]
    drawn = [figures[name] for name in dict.fromkeys(called) if name in figures]
    return "; ".join(drawn) or None


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
        # A marker's value may hold code (`51 s`), so markers are found in the whole text and
        # only those that start inside code are left as written.
        code = [m.span() for m in CODE.finditer(text)]

        def value(m: re.Match) -> str:
            return m.group(0) if any(a <= m.start() < b for a, b in code) else m.group(1)

        text = FIG.sub(value, text)
        if any(FIG_LEFT.search(piece) for piece in CODE.split(text)[::3] if piece):
            raise SystemExit(f"{src}: a figure marker is not closed with <!-- /fig -->.")
        text = LINK.sub(lambda m: m.group(1) + self.link(m.group(2), src) + m.group(3), text)
        return text


def stage_code_cell(cell: nbformat.NotebookNode, figures: dict[str, str], rel: str) -> None:
    """A code cell as a reader needs it: no test markers, Markdown outputs that keep their
    text, and figures with alt text that says what they show."""
    cell.source = NBVAL.sub("", cell.source)
    images = 0
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        if "text/markdown" in data:
            data["text/markdown"] = outside_code(
                data["text/markdown"], lambda s: TAG_START.sub("&lt;", s))
        images += "image/png" in data
    mystnb = cell.metadata.setdefault("mystnb", {})
    if images and "alt" not in mystnb.get("image", {}):
        alt = figure_alt(cell.source, figures)
        if alt is None:
            raise SystemExit(f"{rel}: cell {cell.get('id')} draws a figure, but neither a title "
                             "it sets nor a helper it calls says what the figure shows: set "
                             "metadata.mystnb.image.alt on the cell, or add its call to "
                             "DRAWN_DURING in scripts/build_site.py.")
        mystnb.setdefault("image", {})["alt"] = alt


def stage_notebook(stager: Stager, rel: str, out: Path, figures: dict[str, str]) -> None:
    nb = nbformat.read(ROOT / rel, as_version=4)
    header = run_header(nb)  # from the notebook as committed, before staging changes its cells
    stem = Path(rel).stem
    has_badge = False
    for cell in nb.cells:
        if cell.cell_type == "code":
            stage_code_cell(cell, figures, rel)
            continue
        if cell.cell_type != "markdown":
            continue
        source = stager.markdown(cell.source, rel)
        if BADGE.search(source):
            has_badge = True
            source = BADGE.sub(lambda _: header + "\n\n" + buttons(rel), source, count=1)
        if cell.metadata.get("jp-MarkdownHeadingCollapsed") and source.startswith(SOLUTIONS):
            source = f"({FOLD_PREFIX}{stem})=\n{source}"
        cell.source = source
    if not has_badge:
        raise SystemExit(f"{rel} has no Open In Colab badge: run `make sync-notebooks`.")
    code = [c for c in nb.cells if c.cell_type == "code"]
    if code and code[0].source.startswith(BOOTSTRAP_STARTS):
        code[0].metadata.setdefault("tags", []).append("hide-input")
        code[0].metadata["mystnb"]["code_prompt_show"] = "Show the setup cell"
        code[0].metadata["mystnb"]["code_prompt_hide"] = "Hide the setup cell"
        # What it printed is about the machine that ran it (an install log on Colab, the
        # unpublished-target line): the page's banner says the latter from today's setting.
        code[0].outputs = []
    if course.needs_gpu(rel):
        at = 1 if nb.cells[0].cell_type == "markdown" else 0  # right after the title cell
        nb.cells.insert(at, nbformat.v4.new_markdown_cell(smoke_outputs_note(rel)))
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
    muted = " unpublished" if course.unpublished_target_line() else ""
    front = BADGE.sub(lambda _: ('<div class="course-buttons">\n<a class="colab-button'
                                 f'{muted}" href="{colab_url(nbs[0])}">Open in Colab</a>\n</div>'),
                      stager.markdown(readme, "README.md"), count=1)
    guides = [d for d in docs if d not in MAINTAINER_DOCS]
    maintainers = [d for d in docs if d in MAINTAINER_DOCS]
    (out / "index.md").write_text(front + toctree("Notebooks", nbs) + toctree("Guides", guides)
                                  + toctree("For maintainers", maintainers))
    for rel in docs:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(stager.markdown((ROOT / rel).read_text(), rel))
    for rel in figures:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, out / rel)
    figures = figure_descriptions()
    for rel in nbs:
        stage_notebook(stager, rel, out, figures)
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
        for rel in notebooks():  # the committed notebook beside its page: "Download .ipynb"
            shutil.copy2(ROOT / rel, html / rel)
        # Source maps only serve someone debugging the theme's minified scripts.
        for source_map in html.rglob("*.map"):
            source_map.unlink()
        if out.exists():
            shutil.rmtree(out)  # a fresh book each time: no page left over from a renamed source
        shutil.move(html, out)
    remote = remote_assets(out)
    if remote:
        raise SystemExit("These would load from the network, but the book must work offline:\n  "
                         + "\n  ".join(remote))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {"seconds": time.monotonic() - start, "pages": pages, "megabytes": size / 2**20}


def require_published() -> None:
    """Refuse to go on unless COURSE_REPO holds the tag COURSE_REF (asks the host with git)."""
    line = course.unpublished_target_line()
    if line:
        raise SystemExit(line)
    found = subprocess.run(["git", "ls-remote", "--exit-code", "--tags", course.COURSE_REPO,
                            f"refs/tags/{course.COURSE_REF}"], capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"{course.COURSE_REPO} has no tag {course.COURSE_REF} (git ls-remote: "
                         f"{found.stderr.strip() or 'no such ref'}): push the tag first, so the "
                         "book's Colab buttons open something (docs/publishing.md).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="default: _site/")
    parser.add_argument("--require-published", action="store_true",
                        help="fail unless COURSE_REPO holds the tag COURSE_REF (for deploying)")
    args = parser.parse_args()
    if args.require_published:
        require_published()
    summary = build(args.out.resolve())
    print(f"site: {summary['pages']:.0f} pages, {summary['megabytes']:.1f} MB in "
          f"{summary['seconds']:.0f} s -> {args.out}/index.html")
    line = course.unpublished_target_line()
    if line:
        print(f"warning: {line} The book's Colab and source links lead nowhere until then.",
              file=sys.stderr)


if __name__ == "__main__":
    main()
