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
import threading
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import nbformat
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from helpers.course import (
    COURSE_REF,
    COURSE_REPO,
    needs_gpu,
    unpublished_target_line,
)
from helpers.paths import ROOT
from scripts import build_site, provenance

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
# At a phone's width, for a person to look at: where printed columns, display math and names in
# a table have to fit 358 px. (page, selector, text the element holds)
PHONE_DETAIL_SHOTS = {
    "ablation-grid": ("notebooks/11_ablation_lab.html", ".cell_output pre, .cell_output table",
                      "Gain in points"),
    "central-equation": ("notebooks/08_grpo_from_scratch.html", "div.math", None),
    "reward-table": ("notebooks/03_reward_design.html", ".cell_output table", "correctness"),
}
# Math left as source: $$, or $...$ around something that is not a space (prices have none here).
RAW_MATH = re.compile(r"\$\$|\$[^\s$][^$\n]*\$")
FIG_MARKER = re.compile(r"<!--\s*fig:[^>]*?-->(.*?)<!--\s*/fig\s*-->", re.S)
# The row under a Markdown table's header, as a cell prints it: `|---|---|` (or `| :-- |`).
TABLE_RULE = re.compile(r"^\|\s*:?-{3,}", re.M)


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
    search_snippets: list[str]
    folded_link_opens: bool
    phone: dict[str, dict]  # page -> what tapping its buttons at a phone's width did
    figure_tap: dict  # what a tap on 05's first figure showed, and where the page stayed
    copied: tuple[str, str]  # (what the first Copy button on 05 copied, the code it sits on)
    typed_hits: int  # results the search dialog showed while 'advantage' was typed (no Enter)
    highlighted: int  # words highlighted on a page opened from a search result
    before_icons: dict  # what of 05 worked while the theme's icon script was still loading
    focus: dict[str, dict]  # width -> control -> how it looks with keyboard focus (None: unreached)


# Run in each page once it has loaded and MathJax has typeset it.
PAGE_FACTS = """async () => {
  if (window.MathJax && MathJax.startup) { await MathJax.startup.promise; }
  await Promise.all([...document.images].map(i => { i.loading = 'eager';
    return i.decode().catch(() => null); }));
  const skip = 'pre, code, script, style, mjx-container, textarea, .highlight';
  const rawMath = [], comments = [], rawTables = [], markerText = [];
  const walker = document.createTreeWalker(document.body,
    NodeFilter.SHOW_TEXT | NodeFilter.SHOW_COMMENT);
  while (walker.nextNode()) {
    const n = walker.currentNode;
    if (n.nodeType === Node.COMMENT_NODE) {
      if (/fig:/.test(n.data)) comments.push(n.data);
    } else if (!n.parentElement.closest(skip)) {
      if (/\\$/.test(n.data)) rawMath.push(n.data.trim().slice(0, 120));
      if (/\\|\\s*:?-{3,}/.test(n.data)) rawTables.push(n.data.trim().slice(0, 120));
      if (/<!--|fig:[\\w.]+ ?-->/.test(n.data)) markerText.push(n.data.trim().slice(0, 120));
    }
  }
  const article = document.querySelector('article') || document.body;
  // a Markdown table a cell printed as text keeps its rule row, `|---|---|`
  for (const pre of article.querySelectorAll('.cell_output pre')) {
    rawTables.push(...pre.textContent.split('\\n').filter(l => /^\\s*\\|\\s*:?-{3,}/.test(l)));
  }
  const q = s => document.querySelector(s);
  const heading = article.querySelector('h1');
  const goals = [...article.querySelectorAll('strong')]
    .find(s => s.textContent.startsWith('What you will learn'));
  const firstCell = article.querySelector('div.cell');
  const folds = [...article.querySelectorAll('details.solutions')];
  const exercises = article.querySelector('section#exercises');
  const outputsAt = [...article.querySelectorAll('.cell_output')];
  const smokeNote = article.querySelector('.smoke-outputs');
  // code cells and the source listings cells display (HTML), not printed output
  const code = [...article.querySelectorAll('div.highlight')]
    .filter(b => !b.closest('.cell_output') || b.closest('.text_html'));
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
      outputTables: article.querySelectorAll('.cell_output .text_html table').length,
      // a table a cell printed as Markdown: in an output, but not in an HTML one
      markdownTables: [...article.querySelectorAll('.cell_output table')]
        .filter(t => !t.closest('.text_html')).length,
      rawTables, markerText,
      headers: [...article.querySelectorAll('th')].map(th => th.innerText.trim()),
      codeText: [...article.querySelectorAll('code')].map(c => c.textContent).join('\\n'),
      alts: [...document.images].map(i => [i.getAttribute('src'), i.alt,
        i.closest('a') ? i.closest('a').href : null]),
      smokeNoteFirst: !!smokeNote && (!outputsAt.length || !!(smokeNote.compareDocumentPosition(
        outputsAt[0]) & Node.DOCUMENT_POSITION_FOLLOWING)),
      bootstrapShown: firstCell ? firstCell.querySelector('.cell_input')?.checkVisibility() : null,
      bootstrapFolded: !!firstCell && !!firstCell.querySelector('details.hide summary'),
      codeBlocks: code.length,
      listings: code.filter(b => b.closest('.cell_output')).length,
      listingButtons: code.filter(b => b.closest('.cell_output')
        && b.querySelector('button.copy-button')).length,
      copyButtons: code.filter(b => b.querySelector('button.copy-button')).length,
      download: [...article.querySelectorAll('a.download-button')].map(a => a.href),
      courseRun: article.querySelector('p.course-run')?.innerText ?? null,
      foldLabels: [...article.querySelectorAll('details > summary')].map(s => [
        s.getAttribute('aria-label'), s.innerText.trim()]),
      colabMuted: [...article.querySelectorAll('a.colab-button, a.source-button')]
        .map(a => a.classList.contains('unpublished')),
      searchInView: [...document.querySelectorAll('.search-button__button')].some(b =>
        b.checkVisibility() && b.getBoundingClientRect().top >= 0
        && b.getBoundingClientRect().bottom <= window.innerHeight),
      courseRunStale: !!article.querySelector('p.course-run.stale'),
      courseRunUnderTitle: !!heading && !!article.querySelector('p.course-run') && !!(
        heading.compareDocumentPosition(article.querySelector('p.course-run'))
        & Node.DOCUMENT_POSITION_FOLLOWING) && (!firstCell || !!(article.querySelector(
        'p.course-run').compareDocumentPosition(firstCell) & Node.DOCUMENT_POSITION_FOLLOWING)),
      footer: (q('.bd-footer-content') || {innerText: ''}).innerText,
      announcement: (q('.bd-header-announcement') || {innerText: ''}).innerText,
      favicon: q('link[rel~=icon]') ? q('link[rel~=icon]').href : null,
      captions: [...document.querySelectorAll('.bd-sidebar-primary p.caption')].map(c => [
        c.textContent.trim(), [...c.nextElementSibling.querySelectorAll('a.reference.internal')]
          .map(a => a.href)]),
    },
  };
}"""


# Run at each width once the page is typeset: how printed output, names in tables and display
# math fit the column.
LAYOUT_FACTS = """async () => {
  if (window.MathJax && MathJax.startup) { await MathJax.startup.promise; }
  const article = document.querySelector('article') || document.body;
  const scrolls = (element, upTo) => {
    for (let e = element; e && e !== upTo.parentElement; e = e.parentElement) {
      if (['auto', 'scroll'].includes(getComputedStyle(e).overflowX)) return true;
    }
    return false;
  };
  // Printed output and listings: a line that wraps makes the box taller than its lines unwrapped;
  // a line longer than the box must scroll inside it.
  const wrapped = [];
  for (const pre of article.querySelectorAll('.cell_output pre')) {
    if (!pre.checkVisibility()) continue;
    const shown = pre.getBoundingClientRect().height;
    const kept = pre.style.whiteSpace;
    pre.style.whiteSpace = 'pre';
    const unwrapped = pre.getBoundingClientRect().height;
    pre.style.whiteSpace = kept;
    const spills = pre.scrollWidth > pre.clientWidth + 1
      && !scrolls(pre, pre.closest('.cell_output'));
    if (shown > unwrapped + 1 || spills) {
      wrapped.push((shown > unwrapped + 1 ? 'wraps: ' : 'spills: ')
        + pre.textContent.trim().split('\\n')[0].slice(0, 80));
    }
  }
  // A name in a table cell breaks only after _ . / - or a space: where a character starts a new
  // line, the one before it says whether the break is one of those.
  const brokenNames = [];
  const range = document.createRange();
  for (const name of article.querySelectorAll('td code, th code, table.dataframe th')) {
    if (!name.checkVisibility()) continue;
    const walker = document.createTreeWalker(name, NodeFilter.SHOW_TEXT);
    let before = null, top = null;
    while (walker.nextNode()) {
      const text = walker.currentNode;
      for (let i = 0; i < text.length; i++) {
        range.setStart(text, i); range.setEnd(text, i + 1);
        const box = range.getClientRects()[0];
        if (!box || /\\s/.test(text.data[i])) { before = text.data[i]; continue; }
        if (top !== null && box.top > top + 2 && !/[\\s_.\\/-]/.test(before)) {
          brokenNames.push(name.textContent.trim());
          break;
        }
        top = box.top; before = text.data[i];
      }
    }
  }
  // Display math: [width of the formula, width of its box, whether the box scrolls]
  const displayMath = [...article.querySelectorAll('mjx-container[display="true"]')].map(m => [
    Math.round(m.querySelector('mjx-math').getBoundingClientRect().width), m.clientWidth,
    scrolls(m, m)]);
  // A Copy button in view that covers the first line of its code: [button, first line] boxes meet
  const coveredCode = [];
  for (const button of article.querySelectorAll('.copy-button')) {
    const code = button.parentElement.querySelector('pre');
    if (!code || !button.checkVisibility({opacityProperty: true})) continue;
    const first = document.createRange();
    first.selectNodeContents(code);
    const line = [...first.getClientRects()].find(r => r.width > 0);
    const box = button.getBoundingClientRect();
    if (line && box.bottom > line.top && box.top < line.bottom) {
      coveredCode.push(code.textContent.split('\\n')[0].slice(0, 60));
    }
  }
  const size = (tag) => {
    const heading = article.querySelector(tag);
    return heading ? parseFloat(getComputedStyle(heading).fontSize) : null;
  };
  return {wrapped, brokenNames: [...new Set(brokenNames)], displayMath, coveredCode,
          headingSizes: ['h1', 'h2', 'h3'].map(size)};
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
            context = browser.new_context(viewport={"width": 1366, "height": 900},
                                          permissions=["clipboard-read", "clipboard-write"])

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
            # A request the browser cancels when the test leaves a page (ERR_ABORTED: a late
            # favicon, say) is not a fault of the site; a missing file still shows as HTTP 404.
            page.on("requestfailed", lambda r: r.url.startswith(base)
                    and r.failure != "net::ERR_ABORTED" and failed.append(
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
                facts["info"] |= page.evaluate(LAYOUT_FACTS)
                facts["info"] |= laptop_menu(page)
                pages[rel] = Page(rel, set(facts["ids"]), facts["links"],
                                  [tuple(i) for i in facts["images"]], facts["rawMath"],
                                  facts["comments"], facts["text"], facts["info"])
            search_hits, snippets = search(page, base, where)
            folded_link_opens = link_into_fold_opens(page, base, where)
            copied = copy_first_cell(page, base, where)
            typed_hits = search_while_typing(page, base, where)
            highlighted = landing_highlights(page, base, where)
            before_icons = while_icons_load(context, base)
            focus = {"laptop": focus_rings(page, base, where)}
            phone_context = browser.new_context(viewport={"width": 390, "height": 844},
                                                is_mobile=True, has_touch=True)
            phone_context.route(lambda url: not url.startswith((base, "data:", "blob:")), refuse)
            phone = phone_context.new_page()
            phone.on("pageerror", lambda e: errors.append(f"{where['page']} (phone): {e}"))
            taps = {rel: tap_menus(phone, base, rel, where) for rel in pages}
            figure_tap = tap_a_figure(phone, base, where)
            focus["phone"] = focus_rings(phone, base, where)
            phone_context.close()
            screenshots(context, base)
            browser.close()
    finally:
        server.shutdown()
    result = Crawl(base, pages, errors, failed, search_hits, snippets, folded_link_opens, taps,
                   figure_tap, copied, typed_hits, highlighted, before_icons, focus)
    write_report(result)
    return result


def laptop_menu(page) -> dict:
    """Clicks ☰ at the laptop's width: does the sidebar collapse? (Clicked after the page's facts
    are read, since it changes the page.)"""
    toggle = page.locator(".primary-toggle:visible")
    if not toggle.count():
        return {"menuCollapses": None}
    toggle.first.click()
    try:
        page.wait_for_function("() => !document.getElementById('pst-primary-sidebar')"
                               ".checkVisibility({visibilityProperty: true})", timeout=3_000)
    except PlaywrightTimeout:
        return {"menuCollapses": False}
    return {"menuCollapses": True}


def tap_menus(page, base: str, rel: str, where: dict) -> dict:
    """At a phone's width: how far the page is wider than the screen, and whether a tap on ☰
    and on the contents button opens the navigation and the page's contents."""
    where["page"] = f"{rel} (phone)"
    page.goto(base + rel, wait_until="load")
    facts = {"overflow": page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth")}
    facts |= page.evaluate(LAYOUT_FACTS)
    for name, button, dialog in [("menu", ".primary-toggle", "#pst-primary-sidebar-modal"),
                                 ("contents", ".secondary-toggle", "#pst-secondary-sidebar-modal")]:
        shown = page.locator(f"{button}:visible")
        if not shown.count():
            facts[name] = None  # no such button on this page (search, index)
            continue
        shown.first.tap()
        try:  # open, and showing links (the theme moves the sidebar's content into it)
            page.locator(f"{dialog}[open] a").first.wait_for(state="visible", timeout=3_000)
            facts[name] = True
        except PlaywrightTimeout:
            facts[name] = False
        if name == "contents" and facts[name]:  # a tap on a section: does the drawer close?
            page.locator(f"{dialog}[open] a[href*='#']").first.tap()
            try:
                page.wait_for_function(f"() => !document.querySelector('{dialog}').open",
                                       timeout=3_000)
                facts["contentsCloses"] = True
            except PlaywrightTimeout:
                facts["contentsCloses"] = False
        page.keyboard.press("Escape")
        # Escape closes it; after a tap on a section that left the drawer open, it may not
        page.evaluate(f"() => document.querySelector('{dialog}').close()")
        page.wait_for_function(f"() => !document.querySelector('{dialog}').open", timeout=3_000)
    return facts


def tap_a_figure(page, base: str, where: dict) -> dict:
    """Taps the training figure on 05 at a phone's width: what the dialog shows, and whether
    Escape closes it on the same page."""
    where["page"] = "a tap on 05's training figure (phone)"
    url = base + "notebooks/05_grpo_training.html"
    page.goto(url, wait_until="load")
    page.locator(".cell_output img").first.tap()
    shown = page.locator("#figure-view[open] img")
    try:
        shown.wait_for(state="visible", timeout=5_000)
    except PlaywrightTimeout:
        return {"url": page.url, "shown": None}
    facts = shown.evaluate("""async (i) => { await i.decode(); return {
        natural: i.naturalWidth, width: Math.round(i.getBoundingClientRect().width),
        file: document.querySelector('#figure-view a.figure-view-file').href}; }""")
    page.keyboard.press("Escape")
    try:
        page.wait_for_function("() => !document.getElementById('figure-view').open",
                               timeout=3_000)
        closed = True
    except PlaywrightTimeout:
        closed = False
    return {"url": page.url, "shown": facts, "closed": closed, "same_page": page.url == url}


# The controls the themes leave without a focus ring (the sidebar's search field shows on laptops).
FOCUSED = {"menu": ".bd-header-article .primary-toggle",
           "repository": ".bd-header-article .btn-source-repository-button",
           "search": ".search-button-field, .bd-header-article .search-button"}


def focus_rings(page, base: str, where: dict) -> dict[str, dict | None]:
    """Tabs through 05 from the top as a keyboard user does; for each FOCUSED control it reaches,
    its outline and shadow while focused (None: Tab never reached it)."""
    where["page"] = "keyboard focus on 05"
    page.goto(base + "notebooks/05_grpo_training.html", wait_until="load")
    found: dict[str, dict | None] = dict.fromkeys(FOCUSED)
    for _ in range(120):
        page.keyboard.press("Tab")
        style = page.evaluate("""(controls) => {
          const e = document.activeElement;
          const name = Object.keys(controls).find(k => e && e.matches(controls[k]));
          if (!name) return null;
          const s = getComputedStyle(e);
          return {name, outline: s.outlineStyle === 'none' ? 0 : parseFloat(s.outlineWidth),
                  shadow: s.boxShadow};
        }""", FOCUSED)
        if style and found[style["name"]] is None:
            found[style.pop("name")] = style
        if all(found.values()):
            break
    return found


def copy_first_cell(page, base: str, where: dict) -> tuple[str, str]:
    """Clicks the Copy button of 05's first shown code cell: (the clipboard, the cell's code)."""
    where["page"] = "the Copy button on 05"
    page.goto(base + "notebooks/05_grpo_training.html", wait_until="load")
    block = page.locator(".cell_input div.highlight:visible").first
    block.hover()
    button = block.locator("button.copy-button")
    if not button.count():
        return "", block.locator("pre").text_content() or ""
    button.click()
    copied = page.evaluate("() => navigator.clipboard.readText()")
    return copied, (block.locator("pre").text_content() or "").rstrip("\n")


def search(page, base: str, where: dict) -> tuple[list[str], list[str]]:
    """Types 'advantage' into the search box of the policy-gradient page; the hits' URLs and
    the snippets shown under them."""
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
    snippets = page.locator("#search-results li p.context").all_text_contents()
    return [h.get_attribute("href") or "" for h in hits.all()], snippets


def search_while_typing(page, base: str, where: dict) -> int:
    """Types 'advantage' into the search dialog of 04, without Enter: how many results show."""
    where["page"] = "search as you type on notebooks/04_policy_gradient.html"
    page.goto(base + "notebooks/04_policy_gradient.html")
    page.locator("button.search-button__button:visible").first.click()
    page.locator("#pst-search-dialog input[name=q]").press_sequentially("advantage", delay=20)
    try:
        page.locator("#search-results li a").first.wait_for(timeout=10_000)
    except PlaywrightTimeout:
        return 0
    # Each hit's snippet is fetched in turn, then the search says it finished: leaving the page
    # earlier would abort those fetches.
    page.locator("#search-results").get_by_text("Search finished").wait_for(timeout=15_000)
    return page.locator("#search-results li a").count()


def while_icons_load(context, base: str) -> dict:
    """Opens 05 with the theme's icon script (fontawesome.js, 1.5 MB) held back, as a slow link
    delivers it last: do the Copy buttons and figure links work before it arrives?"""
    page, held = context.new_page(), []
    page.route("**/fontawesome.js*", lambda route: held.append(route))  # answered after the checks
    page.goto(base + "notebooks/05_grpo_training.html", wait_until="commit")
    try:
        page.locator(".bd-article .copy-button").first.wait_for(state="attached", timeout=10_000)
        facts = page.evaluate("""() => ({
          copyButtons: document.querySelectorAll('.bd-article .copy-button').length,
          figureLinks: document.querySelectorAll('a.figure-link').length,
          iconsPending: !window.FontAwesome})""")
    except PlaywrightTimeout:
        facts = {"copyButtons": 0, "figureLinks": 0, "iconsPending": True}
    for route in held:
        route.continue_()
    page.wait_for_load_state("load")
    page.close()
    return facts


def landing_highlights(page, base: str, where: dict) -> int:
    """Opens 11 as a search result for 'dead group' does: how many words are highlighted."""
    where["page"] = "a search result landing on 11"
    page.goto(base + "notebooks/11_ablation_lab.html?highlight=dead%20group", wait_until="load")
    return page.locator(".bd-article span.highlighted").count()


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
        if device == "phone":
            for name, (rel, selector, text) in PHONE_DETAIL_SHOTS.items():
                page.goto(base + rel, wait_until="load")
                page.evaluate("async () => { if (window.MathJax && MathJax.startup) "
                              "await MathJax.startup.promise; }")
                found = page.locator(selector)
                # The element at the top of the screen, below the article's sticky header
                (found.filter(has_text=text) if text else found).first.evaluate(
                    "e => { e.scrollIntoView(); window.scrollBy(0, -8 - (document.querySelector("
                    "'.bd-header-article')?.getBoundingClientRect().height ?? 0)); }")
                page.screenshot(path=REPORT / f"{name}-phone.png")
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
    markdown_tables = 0
    for stem in NOTEBOOKS:
        nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        outputs = [o.get("data", {}) for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", [])]
        # myst-nb shows HTML before a PNG when an output has both, as Jupyter does.
        pngs = sum(1 for d in outputs if "image/png" in d and "text/html" not in d)
        tables = sum(d.get("text/html", "").count("<table") for d in outputs)
        # and Markdown before plain text: a table a cell prints with IPython's Markdown()
        printed = sum(len(TABLE_RULE.findall(d["text/markdown"])) for d in outputs
                      if "text/markdown" in d and "text/html" not in d)
        markdown_tables += printed
        info = crawl.pages[nb_page(stem)].info
        assert info["outputImages"] == pngs, f"{stem}: {info['outputImages']} of {pngs} figures"
        assert info["outputTables"] == tables, f"{stem}: {info['outputTables']} of {tables} tables"
        assert info["markdownTables"] == printed, \
            f"{stem}: {info['markdownTables']} of the {printed} Markdown tables its cells print " \
            "are rendered as tables (book/conf.py: nb_render_markdown_format)"
    assert markdown_tables >= 10, f"only {markdown_tables} Markdown tables: this checks too little"


def test_no_table_is_left_as_pipes(crawl: Crawl) -> None:
    raw = [f"{p.path}: {row}" for p in crawl.pages.values() for row in p.info["rawTables"]]
    assert raw == [], "Markdown tables shown as text, not as tables:\n" + "\n".join(raw)


def test_a_tag_in_a_printed_table_keeps_its_text(crawl: Crawl) -> None:
    # 09's RFT table has a column "text after </answer>", printed unescaped by helpers/toy_r1.py.
    headers = crawl.pages[nb_page("09_r1_recipe_toy")].info["headers"]
    assert "text after </answer>" in headers, [h for h in headers if h.startswith("text after")]


def test_menu_and_contents_buttons_open_on_a_phone(crawl: Crawl) -> None:
    dead = [f"{rel}: {name}" for rel, taps in crawl.phone.items()
            for name in ("menu", "contents") if taps[name] is False]
    assert dead == [], "a tap at 390 px opened nothing:\n" + "\n".join(dead)
    # Every page has the menu; every page with sections has its contents button.
    assert all(taps["menu"] for taps in crawl.phone.values())
    assert all(crawl.phone[nb_page(stem)]["contents"] for stem in NOTEBOOKS)


def test_menu_button_collapses_the_sidebar_on_a_laptop(crawl: Crawl) -> None:
    stuck = [p.path for p in crawl.pages.values() if not p.info["menuCollapses"]]
    assert stuck == [], f"☰ at 1366 px left the sidebar in place on {stuck}"


def test_no_page_is_wider_than_a_phone(crawl: Crawl) -> None:
    wide = {rel: taps["overflow"] for rel, taps in crawl.phone.items() if taps["overflow"] > 0}
    assert wide == {}, f"pages that scroll sideways at 390 px (px too wide): {wide}"


def test_every_image_has_alt_text_that_says_what_it_shows(crawl: Crawl) -> None:
    images = [(page.path, src, alt) for page in crawl.pages.values()
              for src, alt, _ in page.info["alts"]]
    # A file path (myst-nb's default) or a word or two says nothing to a screen reader.
    unsaid = [f"{path}: {src}: {alt!r}" for path, src, alt in images
              if len(re.findall(r"[A-Za-z]{2,}", alt)) < 3 or Path(src).name in alt
              or ".png" in alt]
    assert unsaid == [], f"{len(unsaid)} of {len(images)} images without alt text:\n" \
        + "\n".join(unsaid)


def test_a_tap_on_a_figure_opens_it_full_size(crawl: Crawl) -> None:
    unlinked = [f"{page.path}: {src} ({link})" for page in crawl.pages.values()
                for src, _, link in page.info["alts"]
                if not (link and urlsplit(link).path.endswith(Path(src).name))]
    assert unlinked == [], "images that are not links to their file:\n" + "\n".join(unlinked)
    # On a phone a tap shows the figure at its own size, wider than the 358 px column, on the
    # same page; the dialog links the file and Escape returns to the page.
    tap = crawl.figure_tap
    assert tap["shown"], f"a tap on 05's figure showed nothing (the page went to {tap['url']})"
    assert tap["shown"]["width"] == tap["shown"]["natural"] > 390, tap
    assert tap["shown"]["file"].endswith(".png") and tap["closed"] and tap["same_page"], tap


def test_gpu_notebooks_say_their_outputs_come_from_a_cpu(crawl: Crawl) -> None:
    for stem in NOTEBOOKS:
        info = crawl.pages[nb_page(stem)].info
        if needs_gpu(stem):
            assert info["smokeNoteFirst"], f"{stem}: no CPU-outputs note before its outputs"
        else:
            assert info["smokeNoteFirst"] is False, f"{stem} needs no GPU, but has the note"


def test_the_setup_cell_is_folded_and_test_markers_are_gone(crawl: Crawl) -> None:
    for stem in NOTEBOOKS:
        page = crawl.pages[nb_page(stem)]
        assert page.info["bootstrapFolded"] and page.info["bootstrapShown"] is False, stem
        assert "NBVAL" not in page.text, f"{stem}: a test-harness marker shows"


def test_code_has_copy_buttons_that_copy_it(crawl: Crawl) -> None:
    bare = {p.path: p.info["codeBlocks"] - p.info["copyButtons"] for p in crawl.pages.values()
            if p.info["codeBlocks"] != p.info["copyButtons"]}
    assert bare == {}, f"code blocks without a Copy button: {bare}"
    copied, code = crawl.copied
    assert copied and copied == code, f"the Copy button copied {copied[:80]!r}, not {code[:80]!r}"


def test_each_notebook_page_offers_its_notebook_for_download(crawl: Crawl, site: Path) -> None:
    for stem in NOTEBOOKS:
        links = crawl.pages[nb_page(stem)].info["download"]
        assert links == [f"{crawl.base}notebooks/{stem}.ipynb"], f"{stem}: {links}"
        served = site / "notebooks" / f"{stem}.ipynb"
        assert served.read_bytes() == (ROOT / "notebooks" / f"{stem}.ipynb").read_bytes(), stem


def test_footer_shows_the_version_and_a_favicon_is_set(crawl: Crawl) -> None:
    for page in crawl.pages.values():
        assert "Author name not set" not in page.text, f"{page.path}: placeholder author"
        assert COURSE_REF in page.info["footer"], f"{page.path}: footer {page.info['footer']!r}"
        assert page.info["favicon"], f"{page.path}: no favicon (the browser asks for one)"


def test_guides_are_apart_from_maintainer_docs(crawl: Crawl) -> None:
    captions = dict(crawl.pages["index.html"].info["captions"])
    assert list(captions) == ["Notebooks", "Guides", "For maintainers"], list(captions)
    maintainers = {urlsplit(a).path.lstrip("/") for a in captions["For maintainers"]}
    expected = {d.replace(".md", ".html") for d in build_site.MAINTAINER_DOCS}
    assert maintainers == expected, maintainers
    assert "docs/memory-tricks.html" in {urlsplit(a).path.lstrip("/") for a in captions["Guides"]}


def test_search_snippets_quote_the_text_not_the_contents_list(crawl: Crawl) -> None:
    assert crawl.search_snippets, "the search showed no snippets"
    listing = [s for s in crawl.search_snippets if "Contents" in s]
    assert listing == [], f"snippets that quote a page's contents list: {listing[:3]}"
    assert all("advantage" in s.lower() for s in crawl.search_snippets), crawl.search_snippets


def test_an_unpublished_colab_target_is_said_everywhere(crawl: Crawl) -> None:
    from scripts.sync_notebooks import bootstrap_cell

    line = unpublished_target_line()
    cell = bootstrap_cell("05_grpo_training.ipynb")
    for page in crawl.pages.values():
        assert ("not published" in page.info["announcement"]) == bool(line), page.path
    if line:
        assert "Unpublished target" in cell
        with pytest.raises(SystemExit, match="Unpublished target"):
            build_site.require_published()
    else:
        assert "Unpublished target" not in cell


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
        shown = page.info["markerText"]
        assert shown == [], f"{rel}: figure marker text shows: {shown}"
        for value in FIG_MARKER.findall(text):
            plain = re.sub(r"[*_`]", "", value).strip()
            assert plain in page.text, f"{rel}: the figure value {plain!r} is not on the page"
            checked += 1
    assert checked, "no figure marker found in any source: this test checks nothing"
    # Where the prose shows a marker as code, the page shows it as written.
    shown_as_code = "<!-- fig:KEY -->VALUE<!-- /fig -->"
    assert shown_as_code in crawl.pages["index.html"].info["codeText"]
    assert shown_as_code in crawl.pages["docs/contributing.html"].info["codeText"]


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
    for name in PHONE_DETAIL_SHOTS:
        shot = REPORT / f"{name}-phone.png"
        assert shot.stat().st_size > 2_000, f"{shot} is (nearly) empty"


def test_printed_columns_and_listings_keep_their_lines(crawl: Crawl) -> None:
    # A column table (11's grid) or an indented listing that wraps loses its alignment; a long
    # line scrolls sideways inside its box instead, at both widths.
    wrapped = [f"{p.path}: {line}" for p in crawl.pages.values() for line in p.info["wrapped"]]
    wrapped += [f"{rel} (phone): {line}" for rel, taps in crawl.phone.items()
                for line in taps["wrapped"]]
    assert wrapped == [], f"{len(wrapped)} printed outputs wrap or spill:\n" + "\n".join(wrapped)


def test_source_listings_have_copy_buttons(crawl: Crawl) -> None:
    # show_source displays a helper's code as HTML; a learner copies it like a cell, so
    # test_code_has_copy_buttons_that_copy_it counts it among the code blocks.
    info = crawl.pages[nb_page("03_reward_design")].info
    assert info["listings"] > 0, "03 shows no source listing: this checks nothing"
    assert info["listingButtons"] == info["listings"], info


def test_names_in_tables_break_only_between_words(crawl: Crawl) -> None:
    broken = [f"{rel}: {name}" for rel, taps in crawl.phone.items()
              for name in taps["brokenNames"]]
    assert broken == [], f"{len(broken)} names in table cells break mid-word at 390 px:\n" \
        + "\n".join(broken[:30])


def test_display_math_fits_or_scrolls_and_the_central_equation_fits_a_phone(crawl: Crawl) -> None:
    for rel, taps in crawl.phone.items():
        cut = [m for m in taps["displayMath"] if m[0] > m[1] + 1 and not m[2]]
        assert cut == [], f"{rel}: display math wider than its box that does not scroll: {cut}"
    central = crawl.phone[nb_page("08_grpo_from_scratch")]["displayMath"][:2]
    assert central and all(width <= box for width, box, _ in central), \
        f"08's GRPO objective and its ratio (formula px, box px) at 390 px: {central}"


def test_the_contents_drawer_closes_after_a_tap_on_a_section(crawl: Crawl) -> None:
    stuck = [rel for rel, taps in crawl.phone.items() if taps.get("contentsCloses") is False]
    assert stuck == [], f"the contents drawer stays open after a tap on a section: {stuck}"
    assert crawl.phone[nb_page("05_grpo_training")]["contentsCloses"]


def test_keyboard_focus_is_visible_on_menu_repository_and_search(crawl: Crawl) -> None:
    for width, controls in crawl.focus.items():
        for control, style in controls.items():
            assert style is not None, f"{width}: Tab never reaches the {control} control"
            assert style["outline"] >= 2 or style["shadow"] != "none", \
                f"{width}: the {control} control shows no focus: {style}"


def test_the_build_refuses_assets_from_another_host(tmp_path: Path) -> None:
    (tmp_path / "page.html").write_text(
        '<a href="https://example.org/">a plain link is fine</a>\n'
        '<img alt="badge" src="https://example.org/badge.svg">\n'
        '<link rel="stylesheet" href="//example.org/theme.css">\n'
        '<script src="_static/local.js"></script>\n')
    (tmp_path / "style.css").write_text("@font-face { src: url('https://example.org/f.woff2'); }")
    found = build_site.remote_assets(tmp_path)
    assert len(found) == 3 and not any("plain link" in line for line in found), found


def test_staged_markdown_leaves_code_as_written() -> None:
    stager = build_site.Stager(set())
    source = ("Write `<!-- fig:K -->V<!-- /fig -->`; here <!-- fig:a -->`51 s`<!-- /fig -->.\n"
              "```\n<!-- fig:b -->2<!-- /fig -->\n```\n")
    assert stager.markdown(source, "docs/x.md") == (
        "Write `<!-- fig:K -->V<!-- /fig -->`; here `51 s`.\n"
        "```\n<!-- fig:b -->2<!-- /fig -->\n```\n")
    with pytest.raises(SystemExit, match="not closed"):
        stager.markdown("<!-- fig:a -->1 and `code`", "docs/x.md")


def test_staged_markdown_rewrites_markers_and_links() -> None:
    stager = build_site.Stager({"docs/ci.md", "notebooks/00_setup.ipynb"})
    source = ("<!-- fig:a.b -->42%<!-- /fig --> of [CI](ci.md), [home](../README.md#start), "
              "[code](../helpers/course.py), [web](https://example.org)")
    assert stager.markdown(source, "docs/x.md") == (
        "42% of [CI](ci.md), [home](../index.md#start), "
        f"[code]({COURSE_REPO}/blob/{COURSE_REF}/helpers/course.py), [web](https://example.org)")


def test_each_notebook_page_says_which_run_made_its_outputs(crawl: Crawl) -> None:
    recorded = 0
    for stem in NOTEBOOKS:
        nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        info, run = crawl.pages[nb_page(stem)].info, nb.metadata.get(provenance.KEY)
        assert info["courseRun"] and info["courseRunUnderTitle"], f"{stem}: {info['courseRun']}"
        assert info["courseRunStale"] == provenance.is_stale(nb), stem
        if run is None:
            assert "not recorded" in info["courseRun"], f"{stem}: {info['courseRun']}"
            continue
        recorded += 1
        for said in (run["date"], run["machine"], f"torch {run['packages']['torch']}",
                     f"trl {run['packages']['trl']}", f"profile {run['profile']}"):
            assert said in info["courseRun"], f"{stem}: {said!r} not in {info['courseRun']!r}"
    assert recorded, "no notebook records its run: make execute-notebooks writes the record"


def test_a_page_is_flagged_when_a_pin_or_its_code_changed(tmp_path: Path) -> None:
    # A copy of the pins: the recorded run matches it until one pinned version changes.
    shutil.copy2(ROOT / "requirements.txt", tmp_path / "requirements.txt")
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    nb = nbformat.read(ROOT / "notebooks" / "00_setup.ipynb", as_version=4)
    nb.metadata[provenance.KEY] = {
        "date": "2026-12-07", "machine": "CPU only, 2 cores (x86_64)", "python": "3.11.7",
        "packages": {"torch": "2.13.0", "transformers": "4.56.2", "trl": "0.22.2",
                     "peft": "0.21.2"},
        "profile": "smoke", "seed": 3407, "seconds": 12.0,
        "inputs": provenance.inputs_digest(nb, tmp_path)}
    fresh = build_site.run_header(nb, tmp_path)
    assert "course-run" in fresh and "stale" not in fresh and "2026-12-07" in fresh, fresh
    # The bootstrap cell is rewritten on publishing: that alone leaves the outputs current.
    code = [c for c in nb.cells if c.cell_type == "code"]
    code[0].source += "\n# published elsewhere"
    assert not provenance.is_stale(nb, tmp_path)
    pins = (tmp_path / "requirements.txt").read_text()
    pin = re.search(r"^([A-Za-z0-9_.-]+)==(\d+)", pins, re.M)
    assert pin, "requirements.txt pins nothing with =="
    bumped = pins.replace(pin.group(0), f"{pin.group(1)}=={int(pin.group(2)) + 1}", 1)
    (tmp_path / "requirements.txt").write_text(bumped)
    flagged = build_site.run_header(nb, tmp_path)
    assert "stale" in flagged and "Outputs out of date" in flagged, flagged
    (tmp_path / "requirements.txt").write_text(pins)  # the pins back, a code cell changed
    code[1].source += "\nprint('changed')"
    assert provenance.is_stale(nb, tmp_path)
    nb.metadata.pop(provenance.KEY)  # a notebook executed before runs were recorded
    assert "not recorded" in build_site.run_header(nb, tmp_path)


def test_an_executed_notebook_records_its_run() -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    run = provenance.run_record(nb, "smoke", 3.21)
    assert set(run) == {"date", "machine", "python", "packages", "profile", "seed", "seconds",
                        "inputs"}
    assert set(run["packages"]) == {"torch", "transformers", "trl", "peft"}
    assert run["inputs"] == provenance.inputs_digest(nb) and run["seconds"] == 3.2
    assert provenance.run_line(run).startswith(f"Outputs from a run on {run['date']}: ")


def test_search_shows_results_while_typing_and_highlights_where_it_lands(crawl: Crawl) -> None:
    assert crawl.typed_hits > 0, "typing 'advantage' in the search dialog showed no result"
    assert crawl.highlighted > 0, "a page opened from a search result highlights no word"
    hidden = [p.path for p in crawl.pages.values() if not p.info["searchInView"]]
    assert hidden == [], f"no search control in view on arrival at 1366 px: {hidden}"


def test_on_a_phone_section_headings_are_smaller_than_the_title(crawl: Crawl) -> None:
    for rel, taps in crawl.phone.items():
        sizes = [size for size in taps["headingSizes"] if size is not None]
        assert sizes == sorted(sizes, reverse=True), f"{rel}: h1, h2, h3 at {sizes} px"


def test_folds_are_named_by_what_they_show(crawl: Crawl) -> None:
    for page in crawl.pages.values():
        for label, text in page.info["foldLabels"]:
            assert label in (None, text), \
                f"{page.path}: a fold shows {text!r} but is named {label!r}"


def test_unpublished_colab_buttons_do_not_look_live(crawl: Crawl) -> None:
    muted = bool(unpublished_target_line())
    for page in crawl.pages.values():
        assert all(m == muted for m in page.info["colabMuted"]), \
            f"{page.path}: {page.info['colabMuted']}"


def test_copy_buttons_and_figure_links_work_before_the_icons_load(crawl: Crawl) -> None:
    # On a slow link the icon script arrives seconds after the text; the buttons a reader
    # reaches for first do not wait for it.
    facts = crawl.before_icons
    assert facts["iconsPending"], f"the icon script was not held back: {facts}"
    assert facts["copyButtons"] > 0 and facts["figureLinks"] > 0, facts


def test_copy_buttons_do_not_cover_code_on_a_touch_screen(crawl: Crawl) -> None:
    # On a phone the button is always shown (no hover): it sits above the code, not on it.
    covered = [f"{rel}: {line}" for rel, taps in crawl.phone.items()
               for line in taps["coveredCode"]]
    assert covered == [], f"{len(covered)} Copy buttons cover code at 390 px:\n" \
        + "\n".join(covered[:20])
