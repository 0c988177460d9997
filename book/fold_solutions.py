"""Fold a notebook's Solutions section into <details>, as Jupyter and Colab fold it.

scripts/build_site.py marks the heading cell that sync_notebooks.py folds in the notebook
(metadata jp-MarkdownHeadingCollapsed) with a label whose id starts with FOLD_PREFIX; every
node under that heading moves into a <details> element, so the Exercises stay in view and the
answers wait for a click. A Sphinx extension of its own so the nodes pickle for parallel builds.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx

FOLD_PREFIX = "fold-solutions-"
SUMMARY = "Show the solutions (try the exercises first)"


class details(nodes.General, nodes.Element):
    pass


class summary(nodes.General, nodes.TextElement):
    pass


def visit_details(self, node: details) -> None:
    self.body.append('<details class="solutions">')


def depart_details(self, node: details) -> None:
    self.body.append("</details>")


def visit_summary(self, node: summary) -> None:
    self.body.append("<summary>")


def depart_summary(self, node: summary) -> None:
    self.body.append("</summary>")


def fold(app: Sphinx, doctree: nodes.document) -> None:
    for section in list(doctree.findall(nodes.section)):
        if not any(i.startswith(FOLD_PREFIX) for i in section["ids"]):
            continue
        folded = details()
        folded += summary(text=SUMMARY)
        for child in section.children[1:]:  # all but the title, which stays in view
            section.remove(child)
            folded += child
        section += folded


def setup(app: Sphinx) -> dict:
    app.add_node(details, html=(visit_details, depart_details))
    app.add_node(summary, html=(visit_summary, depart_summary))
    app.connect("doctree-read", fold)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
