"""Every function a notebook shows is the one in `helpers/`: stored copies cannot drift.

A `show_source(...)` cell may only import and call show_source, so it can be replayed here in a
fraction of a second, without executing the notebook, and its stored output compared.
"""

import ast
from pathlib import Path

import nbformat
import pytest

from helpers.show import source

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def shown_cells(path: Path) -> list[nbformat.NotebookNode]:
    nb = nbformat.read(path, as_version=4)
    return [c for c in nb.cells if c.cell_type == "code" and "show_source(" in c.source]


def replay(cell_source: str) -> list[str]:
    """The text each show_source call in the cell displays today."""
    shown: list[str] = []
    namespace = {"show_source": lambda *objs: shown.append(source(*objs))}
    body = [node for node in ast.parse(cell_source).body]
    for node in body:
        is_call = (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                   and getattr(node.value.func, "id", None) == "show_source")
        if not (is_call or isinstance(node, ast.Import | ast.ImportFrom)):
            raise AssertionError(
                f"a show_source cell may only import and call show_source; found: "
                f"{ast.unparse(node)[:60]!r}: move it to another cell"
            )
    code = "\n".join(ast.unparse(node) for node in body if not _imports_show(node))
    exec(compile(code, "<cell>", "exec"), namespace)  # noqa: S102 (committed notebook code)
    return shown


def _imports_show(node: ast.stmt) -> bool:
    return isinstance(node, ast.ImportFrom) and any(a.name == "show_source" for a in node.names)


def stored(cell: nbformat.NotebookNode) -> list[str]:
    return [o["data"]["text/plain"] for o in cell.get("outputs", [])
            if o.get("output_type") == "display_data" and "text/plain" in o.get("data", {})]


CASES = [(p, i) for p in NOTEBOOKS for i in range(len(shown_cells(p)))]


def test_the_course_shows_code_from_helpers():
    assert CASES, "no notebook calls show_source: the key code is not on the page"


@pytest.mark.parametrize("path,index", CASES, ids=[f"{p.stem}-{i}" for p, i in CASES])
def test_a_shown_copy_matches_helpers(path, index):
    cell = shown_cells(path)[index]
    assert replay(cell.source) == stored(cell), (
        f"{path.name}: the stored output of the cell `{cell.source.splitlines()[-1]}` is not the "
        "current source in helpers/: re-execute the notebook (make execute-notebooks)"
    )


def test_a_cell_that_computes_is_refused():
    with pytest.raises(AssertionError, match="may only import and call show_source"):
        replay("from helpers.show import show_source\nx = 1\nshow_source(len)")
