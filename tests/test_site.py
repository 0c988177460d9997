"""The web book (`make site`), opened in a real headless Chromium over a local server.

The book is built once for this file (build_site.build into a temp folder) and every page is
loaded once; the tests then check what the crawl saw. Screenshots and the table of what was
checked go to runs/site/ (git-ignored), where a person can look at them.

Chromium comes from the system (Debian's `chromium`; .ci/run installs it). Without it these
tests skip on a developer's machine, and fail under CI=true, where a skip would hide them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import sys
import threading
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import nbformat
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import build_site  # noqa: E402

from helpers.course import COURSE_REF, COURSE_REPO  # noqa: E402

# Sphinx's own deprecation notices about the theme's code, not ours.
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
REPORT = ROOT / "runs" / "site"
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
VIEWPORTS = {"laptop": (1366, 900), "phone": (390, 844)}
SHOTS = {"front": "index.html", "training": "notebooks/05_grpo_training.html",
         "from-scratch": "notebooks/08_grpo_from_scratch.html"}
# Further down a page, at the laptop's width: a stored figure, rendered math, folded Solutions.
DETAIL_SHOTS = {"training-figure": ("notebooks/05_grpo_training.html", ".cell_output img"),
                "policy-gradient-math": ("notebooks/04_policy_gradient.html", "div.math"),
                "training-solutions": ("notebooks/05_grpo_training.html", "section#exercises")}
# Math left as source: $$, or $...$ around something that is not a space (prices have none here).
RAW_MATH = re.compile(r"\$\$|\$[^\s$][^$\n]*\$")
FIG_MARKER = re.compile(r"<!--\s*fig:[^>]*?-->(.*?)<!--\s*/fig\s*-->", re.S)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    message = "Chromium is not installed: apt-get install -y chromium (.ci/run does)."
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class Page:
    """What the browser saw on one page."""

    path: str
    ids: set[str]
    links: list[str]  # absolute URLs of every <a href> on the page
    images: list[tuple[str, int]]  # (src, naturalWidth)
    raw_math: list[str]
    comments: list[str]  # HTML comments left in the document that mention a figure
    text: str
    info: dict = field(default_factory=dict)  # page-specific facts (buttons, navigation, ...)


@dataclass
class Crawl:
    base: str
    pages: dict[str, Page]
    console_errors: list[str]
    failed_requests: list[str]
    search_hits: list[str]
    folded_link_opens: bool


# Run in each page once it has loaded and MathJax has typeset it.
PAGE_FACTS = """async () => {
  if (window.MathJax && MathJax.startup) { await MathJax.startup.promise; }
  await Promise.all([...document.images].map(i => { i.loading = 'eager';
    return i.decode().catch(() => null); }));
  const skip = 'pre, code, script, style, mjx-container, textarea, .highlight';
  const rawMath = [], comments = [];
  const walker = document.createTreeWalker(document.body,
    NodeFilter.SHOW_TEXT | NodeFilter.SHOW_COMMENT);
  while (walker.nextNode()) {
    const n = walker.currentNode;
    if (n.nodeType === Node.COMMENT_NODE) {
      if (/fig:/.test(n.data)) comments.push(n.data);
    } else if (!n.parentElement.closest(skip) && /\\$/.test(n.data)) {
      rawMath.push(n.data.trim().slice(0, 120));
    }
  }
  const article = document.querySelector('article') || document.body;
  const q = s => document.querySelector(s);
  const heading = article.querySelector('h1');
  const goals = [...article.querySelectorAll('strong')]
    .find(s => s.textContent.startsWith('What you will learn'));
  const firstCell = article.querySelector('div.cell');
  const folds = [...article.querySelectorAll('details.solutions')];
  const exercises = article.querySelector('section#exercises');
  return {
    ids: [...document.querySelectorAll('[id], a[name]')].map(e => e.id || e.name),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    images: [...document.images].map(i => [i.currentSrc || i.src, i.naturalWidth]),
    rawMath, comments, text: document.body.innerText,
    info: {
      title: heading ? heading.textContent.replace(/#$/, '').trim() : null,
      goalsBeforeCode: !!goals && (!firstCell ||
        !!(goals.compareDocumentPosition(firstCell) & Node.DOCUMENT_POSITION_FOLLOWING)),
      colab: [...article.querySelectorAll('a.colab-button')].map(a => a.href),
      source: [...article.querySelectorAll('a.source-button')].map(a => a.href),
      prev: q('a.left-prev') ? q('a.left-prev').href : null,
      next: q('a.right-next') ? q('a.right-next').href : null,
      sidebar: [...document.querySelectorAll('.bd-sidebar-primary a.reference.internal')]
        .map(a => a.href),
      // checkVisibility, not offsetHeight: a closed <details> still lays out its content.
      folds: folds.map(d => ({open: d.open,
        summaryShown: d.querySelector('summary').checkVisibility(),
        bodyShown: [...d.children].filter(c => c.tagName !== 'SUMMARY')
          .map(c => c.checkVisibility())})),
      exercisesShown: !!exercises && exercises.checkVisibility(),
      math: document.querySelectorAll('mjx-container').length,
      outputImages: article.querySelectorAll('.cell_output img').length,
      outputTables: article.querySelectorAll('.cell_output table').length,
    },
  };
}"""


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per request would bury pytest's report


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "html"
    build_site.build(out)
    return out


@pytest.fixture(scope="module")
def crawl(site: Path) -> Crawl:
    executable = chromium()
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    errors: list[str] = []
    failed: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable,
                                        args=["--no-sandbox", "--disable-dev-shm-usage"])
            context = browser.new_context(viewport={"width": 1366, "height": 900})

            # Nothing may leave the local server: such a request is refused and counted.
            def refuse(route, request) -> None:
                failed.append(f"remote: {request.url}")
                route.abort()

            context.route(lambda url: not url.startswith((base, "data:", "blob:")), refuse)
            page = context.new_page()
            where = {"page": ""}
            page.on("console", lambda m: m.type == "error" and errors.append(
                f"{where['page']}: {m.text}"))
            page.on("pageerror", lambda e: errors.append(f"{where['page']}: {e}"))
            page.on("requestfailed", lambda r: r.url.startswith(base) and failed.append(
                f"{where['page']}: {r.url} ({r.failure})"))
            page.on("response", lambda r: r.status >= 400 and failed.append(
                f"{where['page']}: {r.url} (HTTP {r.status})"))
            pages = {}
            for html in sorted(site.rglob("*.html")):
                rel = html.relative_to(site).as_posix()
                if rel.startswith("_"):
                    continue  # _static/ holds the theme's template fragments, not pages
                where["page"] = rel
                page.goto(base + rel, wait_until="load")
                facts = page.evaluate(PAGE_FACTS)
                pages[rel] = Page(rel, set(facts["ids"]), facts["links"],
                                  [tuple(i) for i in facts["images"]], facts["rawMath"],
                                  facts["comments"], facts["text"], facts["info"])
            search_hits = search(page, base, where)
            folded_link_opens = link_into_fold_opens(page, base, where)
            screenshots(context, base)
            browser.close()
    finally:
        server.shutdown()
    result = Crawl(base, pages, errors, failed, search_hits, folded_link_opens)
    write_report(result)
    return result


def search(page, base: str, where: dict) -> list[str]:
    """Types 'advantage' into the search box of the policy-gradient page; the hits' URLs."""
    where["page"] = "search from notebooks/04_policy_gradient.html"
    page.goto(base + "notebooks/04_policy_gradient.html")
    page.locator("button.search-button__button:visible").first.click()
    box = page.locator("#pst-search-dialog input[name=q]")
    box.fill("advantage")
    box.press("Enter")
    page.wait_for_url("**/search.html?q=advantage*")
    hits = page.locator("#search-results li a")
    hits.first.wait_for(timeout=15_000)
    # Each hit's snippet is fetched from its page after the list shows: let those finish, or
    # leaving the page aborts them (and they would count as failed requests).
    page.get_by_text("Search finished").wait_for(timeout=15_000)
    page.wait_for_load_state("networkidle")
    return [h.get_attribute("href") or "" for h in hits.all()]


def link_into_fold_opens(page, base: str, where: dict) -> bool:
    """Follows a link to a heading inside 05's folded Solutions: does the fold open?"""
    where["page"] = "a link into 05's Solutions"
    page.goto(base + "notebooks/05_grpo_training.html")
    inside = page.locator("details.solutions section[id]").first.get_attribute("id")
    page.goto(base + f"notebooks/05_grpo_training.html#{inside}")
    try:  # the page handles hashchange after the navigation has returned: wait for it
        page.wait_for_function("() => document.querySelector('details.solutions').open",
                               timeout=5_000)
    except PlaywrightTimeout:
        return False
    return True


def screenshots(context, base: str) -> None:
    """The first screen of three pages at a laptop's and a phone's width, for a person to see."""
    REPORT.mkdir(parents=True, exist_ok=True)
    for device, (width, height) in VIEWPORTS.items():
        page = context.new_page()
        page.set_viewport_size({"width": width, "height": height})
        for name, rel in SHOTS.items():
            page.goto(base + rel, wait_until="load")
            page.evaluate("async () => { if (window.MathJax && MathJax.startup) "
                          "await MathJax.startup.promise; }")
            page.screenshot(path=REPORT / f"{name}-{device}.png")
        if device == "laptop":
            for name, (rel, selector) in DETAIL_SHOTS.items():
                page.goto(base + rel, wait_until="load")
                page.evaluate("async () => { if (window.MathJax && MathJax.startup) "
                              "await MathJax.startup.promise; }")
                page.locator(selector).first.scroll_into_view_if_needed()
                page.screenshot(path=REPORT / f"{name}-laptop.png")
        page.close()


def local_links(crawl: Crawl) -> list[tuple[str, str]]:
    """(page, link) for every link to this site, javascript and bare '#' toggles left out."""
    return [(page.path, link) for page in crawl.pages.values() for link in page.links
            if link.startswith(crawl.base) and not link.endswith(page.path + "#")]


def write_report(crawl: Crawl) -> None:
    links = local_links(crawl)
    rows = {
        "pages": len(crawl.pages),
        "images": sum(len(p.images) for p in crawl.pages.values()),
        "links (internal)": len(links),
        "anchors": sum(1 for _, link in links if urldefrag(link).fragment),
        "console errors": len(crawl.console_errors),
        "failed requests": len(crawl.failed_requests),
    }
    REPORT.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"| {k} | {v} |\n" for k, v in rows.items())
    table = "| checked | count |\n|---|---|\n" + lines
    (REPORT / "report.md").write_text(table)
    (REPORT / "report.json").write_text(json.dumps(
        {**rows, "console_error_lines": crawl.console_errors,
         "failed_request_lines": crawl.failed_requests}, indent=1))


def nb_page(stem: str) -> str:
    return f"notebooks/{stem}.html"


def test_every_page_of_the_book_is_built(crawl: Crawl) -> None:
    docs = {f"docs/{p.stem}.html" for p in (ROOT / "docs").glob("*.md")}
    expected = {"index.html", *map(nb_page, NOTEBOOKS), *docs}
    assert expected <= set(crawl.pages), f"missing pages: {sorted(expected - set(crawl.pages))}"


def test_no_console_error_and_no_failed_request(crawl: Crawl) -> None:
    assert crawl.console_errors == [], "\n".join(crawl.console_errors)
    assert crawl.failed_requests == [], "\n".join(crawl.failed_requests)


def test_every_image_loads(crawl: Crawl) -> None:
    broken = [f"{p.path}: {src}" for p in crawl.pages.values() for src, w in p.images if w <= 0]
    assert broken == [], "images with no width:\n" + "\n".join(broken)
    # Each diagram is on a page, as an image or as a link to the file (README links three);
    # test_every_internal_link_and_anchor_resolves checks that the linked file is there.
    shown = {Path(urlsplit(src).path).name for p in crawl.pages.values() for src, _ in p.images}
    linked = {Path(urlsplit(link).path).name for _, link in local_links(crawl)}
    diagrams = {p.name for p in (ROOT / "docs/figures").glob("*.png")}
    assert diagrams <= shown | linked, f"diagrams not in the book: {diagrams - shown - linked}"


def test_math_is_rendered_everywhere(crawl: Crawl) -> None:
    raw = [f"{p.path}: {t}" for p in crawl.pages.values() for t in p.raw_math if RAW_MATH.search(t)]
    assert raw == [], "TeX left unrendered:\n" + "\n".join(raw)
    # And MathJax did run: the policy-gradient page is mostly formulas.
    assert crawl.pages[nb_page("04_policy_gradient")].info["math"] > 10


def test_every_internal_link_and_anchor_resolves(crawl: Crawl, site: Path) -> None:
    broken = []
    for page, link in local_links(crawl):
        target, anchor = urldefrag(link)
        rel = unquote(urlsplit(target).path).lstrip("/") or "index.html"
        if rel.endswith("/"):
            rel += "index.html"
        if not (site / rel).is_file():
            broken.append(f"{page}: {link} (no file {rel})")
        elif anchor and rel in crawl.pages and unquote(anchor) not in crawl.pages[rel].ids:
            broken.append(f"{page}: {link} (no #{anchor} in {rel})")
    assert broken == [], "broken links:\n" + "\n".join(broken)


def test_each_notebook_page_opens_its_own_notebook_on_colab(crawl: Crawl) -> None:
    repo = COURSE_REPO.removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{repo}/blob/{COURSE_REF}/notebooks/"
    # The front page's button starts the course, as README's badge does.
    assert crawl.pages["index.html"].info["colab"] == [f"{colab}{NOTEBOOKS[0]}.ipynb"]
    for stem in NOTEBOOKS:
        info = crawl.pages[nb_page(stem)].info
        assert info["colab"] == [f"{colab}{stem}.ipynb"], stem
        assert info["source"] == [f"{COURSE_REPO}/blob/{COURSE_REF}/notebooks/{stem}.ipynb"], stem


def test_notebook_pages_start_with_title_and_goals(crawl: Crawl) -> None:
    for stem in NOTEBOOKS:
        nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        title = nb.cells[0].source.splitlines()[0].removeprefix("# ").strip()
        info = crawl.pages[nb_page(stem)].info
        assert info["title"] == title, f"{stem}: the page's first heading is {info['title']!r}"
        assert info["goalsBeforeCode"], f"{stem}: 'What you will learn' is not before the code"


def test_solutions_are_folded_and_exercises_shown(crawl: Crawl) -> None:
    for stem in NOTEBOOKS:
        nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        marked = [c for c in nb.cells if c.metadata.get("jp-MarkdownHeadingCollapsed")]
        info = crawl.pages[nb_page(stem)].info
        assert len(info["folds"]) == len(marked), f"{stem}: {info['folds']} for {len(marked)}"
        for fold in info["folds"]:
            assert not fold["open"] and fold["summaryShown"], f"{stem}: {fold}"
            assert fold["bodyShown"] and not any(fold["bodyShown"]), \
                f"{stem}: the folded solutions show on the page: {fold}"
        if any(c.source.startswith("## Exercises") for c in nb.cells):
            assert info["exercisesShown"], f"{stem}: the Exercises are hidden"


def test_a_link_to_a_solution_opens_the_fold(crawl: Crawl) -> None:
    assert crawl.folded_link_opens, "the Solutions stay folded when a link points inside them"


def test_stored_outputs_are_shown(crawl: Crawl) -> None:
    for stem in NOTEBOOKS:
        nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        outputs = [o.get("data", {}) for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", [])]
        # myst-nb shows HTML before a PNG when an output has both, as Jupyter does.
        pngs = sum(1 for d in outputs if "image/png" in d and "text/html" not in d)
        tables = sum(d.get("text/html", "").count("<table") for d in outputs)
        info = crawl.pages[nb_page(stem)].info
        assert info["outputImages"] == pngs, f"{stem}: {info['outputImages']} of {pngs} figures"
        assert info["outputTables"] == tables, f"{stem}: {info['outputTables']} of {tables} tables"


def test_figure_markers_show_their_values(crawl: Crawl) -> None:
    sources = {"index.html": (ROOT / "README.md").read_text()}
    sources |= {f"docs/{p.stem}.html": p.read_text() for p in (ROOT / "docs").glob("*.md")}
    for stem in NOTEBOOKS:
        nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        sources[nb_page(stem)] = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    checked = 0
    for rel, text in sources.items():
        page = crawl.pages[rel]
        assert page.comments == [], f"{rel}: figure comments left in the page: {page.comments}"
        shown = re.findall(r"<!--.{0,40}|fig:[\w.]+ ?-->", page.text)
        assert shown == [], f"{rel}: figure marker text shows: {shown}"
        for value in FIG_MARKER.findall(text):
            plain = re.sub(r"[*_`]", "", value).strip()
            assert plain in page.text, f"{rel}: the figure value {plain!r} is not on the page"
            checked += 1
    assert checked, "no figure marker found in any source: this test checks nothing"


def test_navigation_in_reading_order(crawl: Crawl) -> None:
    order = ["index.html", *map(nb_page, NOTEBOOKS)]
    links = crawl.pages["index.html"].info["sidebar"]
    sidebar = [urlsplit(link).path.lstrip("/") for link in links]
    assert sidebar[: len(order)] == order, f"the sidebar starts {sidebar[:len(order)]}"
    # Previous and next follow the sidebar, from the front page through the last guide.
    for i, page in enumerate(sidebar):
        info = crawl.pages[page].info
        before = crawl.base + sidebar[i - 1] if i else None
        after = crawl.base + sidebar[i + 1] if i + 1 < len(sidebar) else None
        assert (info["prev"], info["next"]) == (before, after), f"{page}: {info['prev']}, " \
            f"{info['next']}"


def test_search_finds_advantage_on_the_policy_gradient_page(crawl: Crawl) -> None:
    assert any("notebooks/04_policy_gradient.html" in hit for hit in crawl.search_hits), \
        f"the search for 'advantage' found only {crawl.search_hits}"


def test_screenshots_are_written(crawl: Crawl) -> None:
    for name in SHOTS:
        for device, (width, _) in VIEWPORTS.items():
            shot = REPORT / f"{name}-{device}.png"
            assert shot.stat().st_size > 10_000, f"{shot} is (nearly) empty"
            assert int.from_bytes(shot.read_bytes()[16:20], "big") == width, shot


def test_the_build_refuses_assets_from_another_host(tmp_path: Path) -> None:
    (tmp_path / "page.html").write_text(
        '<a href="https://example.org/">a plain link is fine</a>\n'
        '<img alt="badge" src="https://example.org/badge.svg">\n'
        '<link rel="stylesheet" href="//example.org/theme.css">\n'
        '<script src="_static/local.js"></script>\n')
    (tmp_path / "style.css").write_text("@font-face { src: url('https://example.org/f.woff2'); }")
    found = build_site.remote_assets(tmp_path)
    assert len(found) == 3 and not any("plain link" in line for line in found), found


def test_staged_markdown_rewrites_markers_and_links() -> None:
    stager = build_site.Stager({"docs/ci.md", "notebooks/00_setup.ipynb"})
    source = ("<!-- fig:a.b -->42%<!-- /fig --> of [CI](ci.md), [home](../README.md#start), "
              "[code](../helpers/course.py), [web](https://example.org)")
    assert stager.markdown(source, "docs/x.md") == (
        "42% of [CI](ci.md), [home](../index.md#start), "
        f"[code]({COURSE_REPO}/blob/{COURSE_REF}/helpers/course.py), [web](https://example.org)")
