// Runs `setup` once the page's HTML is parsed. DOMContentLoaded would wait for the theme's
// deferred scripts, whose 1.5 MB icon script holds it back for seconds on a slow link.
function whenParsed(setup) {
  if (document.readyState !== "loading") setup();
  else document.addEventListener("readystatechange", setup, { once: true });
}

// A link to a heading inside the folded Solutions opens the fold, so the link lands somewhere.
function openFoldedTarget() {
  const id = decodeURIComponent(window.location.hash.slice(1));
  const target = id && document.getElementById(id);
  const fold = target && target.closest("details");
  if (fold) { fold.open = true; target.scrollIntoView(); }
}
window.addEventListener("hashchange", openFoldedTarget);
whenParsed(openFoldedTarget);

// The themes bind the sidebar buttons' handlers to the first .primary-toggle and
// .secondary-toggle on the page, which sit in the top bar that course.css hides; the buttons a
// reader sees (the article's header) hand their clicks on to those (pydata-sphinx-theme #2451).
whenParsed(() => {
  for (const kind of ["primary-toggle", "secondary-toggle"]) {
    const [bound, ...shown] = document.querySelectorAll(`.${kind}`);
    for (const button of shown) {
      button.addEventListener("click", (event) => { event.preventDefault(); bound.click(); });
    }
  }
});

// A Copy button on every code block and source listing (`show_source` displays one as HTML),
// but not on printed output: learners copy cells and helpers into their notebook.
whenParsed(() => {
  for (const block of document.querySelectorAll(".bd-article div.highlight")) {
    if (block.closest(".cell_output") && !block.closest(".text_html")) continue;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy-button";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy this code");
    button.addEventListener("click", async () => {
      const code = block.querySelector("pre");
      try {
        await navigator.clipboard.writeText(code.textContent.replace(/\n$/, ""));
        button.textContent = "Copied";
      } catch {  // no clipboard (an old browser, or a page opened from a file): select it
        window.getSelection().selectAllChildren(code);
        button.textContent = "Selected";
      }
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    });
    block.prepend(button);
  }
});

// A tap on a figure shows it at its own size over the page, in a box that scrolls both ways (a
// phone shows a chart's labels readable, not scaled to the column); Close, Escape or a tap
// beside it returns to the same place, and the box links the image file itself.
function figureView() {
  let view = document.getElementById("figure-view");
  if (view) return view;
  view = document.createElement("dialog");
  view.id = "figure-view";
  view.setAttribute("aria-label", "The figure at its own size");
  view.innerHTML = '<div class="figure-view-bar"><a class="figure-view-file">Open the image file'
    + '</a><button type="button" class="figure-view-close" autofocus>Close</button></div>'
    + '<div class="figure-view-body"><img alt=""></div>';
  view.querySelector(".figure-view-close").addEventListener("click", () => view.close());
  view.addEventListener("click", (event) => { if (event.target === view) view.close(); });
  // Escape closes it at the first press, wherever the focus is inside it
  view.addEventListener("keydown", (event) => { if (event.key === "Escape") view.close(); });
  document.body.append(view);
  return view;
}
document.addEventListener("click", (event) => {
  const link = event.target.closest("a.figure-link");
  if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
  event.preventDefault();
  const view = figureView();
  const image = view.querySelector(".figure-view-body img");
  image.src = link.href;
  image.alt = link.querySelector("img")?.alt ?? "";
  view.querySelector(".figure-view-file").href = link.href;
  view.showModal();
});

// Search results land with the searched words highlighted: Sphinx skips this on every page
// here, since the theme loads the search script (Search) on all of them, not only search.html.
whenParsed(() => {
  if (window.location.pathname.endsWith("/search.html") || typeof SphinxHighlight === "undefined") {
    return;
  }
  SphinxHighlight.highlightSearchWords();
});

// A fold's summary is named by the text it shows ("Show the setup cell"), not by myst-nb's
// "Toggle hidden content", so a voice-control user can say what they see.
whenParsed(() => {
  for (const summary of document.querySelectorAll(".bd-article details > summary[aria-label]")) {
    summary.removeAttribute("aria-label");
  }
});

// A tap on a figure opens it full size: on a phone a chart is scaled down to unreadable labels.
whenParsed(() => {
  for (const image of document.querySelectorAll(".bd-article img")) {
    if (image.closest("a")) continue;
    const link = document.createElement("a");
    link.href = image.getAttribute("src");
    link.className = "figure-link";
    link.title = "Open the full-size image";
    image.replaceWith(link);
    link.append(image);
  }
});

// Search snippets quote the page's text: Sphinx takes them from role="main", which here also
// holds the page's contents list, so most snippets quoted the list instead.
whenParsed(() => {
  if (typeof Search === "undefined") return;  // searchtools.js is only on search.html
  Search.htmlToText = (htmlString, anchor) => {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    page.querySelectorAll(".headerlink, script, style, .copy-button").forEach((e) => e.remove());
    const article = page.querySelector("article.bd-article") || page.body;
    let part = null;
    try { part = anchor && article.querySelector(anchor); } catch { /* not a valid selector */ }
    return (part || article).textContent;
  };
});

// A name in a table cell (`correctness_reward`, a path, a dataframe's header) may break only
// after _ . or /: a <wbr> there, none elsewhere (course.css), and copying it is unchanged.
const BREAK_AFTER = /([_./])(?=[^_./])/g;
function breakNamesAt(element) {
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  const texts = [];
  while (walker.nextNode()) texts.push(walker.currentNode);
  for (const text of texts) {
    const parts = text.data.split(BREAK_AFTER);
    if (parts.length < 2) continue;
    const pieces = document.createDocumentFragment();
    parts.forEach((part, i) => {
      if (!part) return;
      pieces.append(part);
      if (i % 2) pieces.append(document.createElement("wbr"));  // after each separator
    });
    text.replaceWith(pieces);
  }
}
whenParsed(() => {
  const names = ".bd-article table code.literal, .cell_output table.dataframe th";
  document.querySelectorAll(names).forEach(breakNamesAt);
});

// On a phone the page's contents open in a drawer; a tap on a section closes it, so the reader
// sees the section rather than the drawer.
document.addEventListener("click", (event) => {
  const link = event.target.closest("#pst-secondary-sidebar-modal a[href]");
  if (link) link.closest("dialog").close();
});
