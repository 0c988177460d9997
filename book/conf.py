"""Sphinx configuration for the course's web book (`make site`, scripts/build_site.py).

scripts/build_site.py stages README, the notebooks and docs/ into a source folder and points
Sphinx here with `-c book`. Everything a page loads comes from this folder or an installed
package, so the book builds and reads with no network.
"""

from __future__ import annotations

import html
import importlib.util
import shutil
import sys
from importlib.metadata import distribution
from pathlib import Path

from sphinx.application import Sphinx

ROOT = Path(__file__).resolve().parent.parent  # by path from Sphinx: helpers may not be importable


def _course_module():
    # helpers/course.py only, not the helpers package: the book needs no torch.
    spec = importlib.util.spec_from_file_location("_course_for_book", ROOT / "helpers/course.py")
    assert spec and spec.loader, "helpers/course.py is missing"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing look the module up by name
    spec.loader.exec_module(module)
    return module


course = _course_module()

project = "GRPO on a free GPU"
html_title = "GRPO on a free GPU"
version = release = course.COURSE_REF  # the tag the Colab buttons open, shown in every footer
sys.path.insert(0, str(Path(__file__).parent))  # fold_solutions.py, beside this file
# githubpages writes .nojekyll, so a host that runs Jekyll still serves _static/ and _images/.
extensions = ["myst_nb", "sphinx.ext.githubpages", "fold_solutions"]
# Quotes stay as written, so a title on the page is the notebook's title, character for character.
smartquotes = False
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
templates_path: list[str] = []

# Notebooks are shown with the outputs they were committed with; the book never runs code.
nb_execution_mode = "off"
nb_merge_streams = True
# Tables that cells print as Markdown: CommonMark, the default, has no tables and shows the pipes.
nb_render_markdown_format = "gfm"
myst_enable_extensions = ["dollarmath", "amsmath"]
# GitHub-style anchors for `#section` links between pages (README.md#results and the like).
myst_heading_anchors = 4

html_theme = "sphinx_book_theme"
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_js_files = ["course.js"]
html_favicon = "_static/favicon.svg"
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
# Follow the reader's system setting; left empty, the theme logs an error on some loads.
html_context = {"default_mode": "auto"}
html_theme_options = {
    "repository_url": course.COURSE_REPO,
    "repository_branch": course.COURSE_REF,
    "use_repository_button": True,
    "use_download_button": False,  # each notebook page has its own "Download .ipynb" button
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    # Results in the search dialog while typing: the index is loaded on every page anyway.
    "search_as_you_type": True,
    # No author line ("By Author name not set"): the course version and where it lives instead.
    "footer_content_items": ["extra-footer.html"],
    "extra_footer": (f'<p>{project} · course version {course.COURSE_REF} · '
                     f'<a href="{course.COURSE_REPO}">{course.COURSE_REPO}</a></p>'),
}
# Until the Colab target is published, every page says so above its title: the buttons would
# otherwise open Colab's "notebook not found" (helpers/course.py, docs/publishing.md).
if course.unpublished_target_line():
    html_theme_options["announcement"] = html.escape(
        f"Preview: the Colab and source links point at {course.COURSE_REPO} at "
        f"{course.COURSE_REF}, which is not published yet.")

# MathJax 3 from the sphinx-mathjax-offline wheel, served from _static/mathjax/. Only the parts
# tex-chtml.js loads are copied (its TeX extensions, fonts, menu and a11y), not the 24 MB whole.
mathjax_path = "mathjax/tex-chtml.js"
MATHJAX_PARTS = ["tex-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2", "ui",
                 "a11y"]


def mathjax_source() -> Path:
    found = Path(str(distribution("sphinx-mathjax-offline").locate_file(
        "sphinx-mathjax-offline/static/mathjax")))
    if not (found / "tex-chtml.js").is_file():
        raise FileNotFoundError(f"MathJax is not where sphinx-mathjax-offline puts it ({found}): "
                                "reinstall requirements-dev.txt (`make` does).")
    return found


def copy_mathjax(app: Sphinx, error: Exception | None) -> None:
    if error is not None or app.builder.format != "html":
        return
    source, target = mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, target / part, dirs_exist_ok=True)
        else:
            (target / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / part, target / part)


def setup(app: Sphinx) -> None:
    app.connect("build-finished", copy_mathjax)
