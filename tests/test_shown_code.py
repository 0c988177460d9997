"""Every function a notebook shows is the one in `helpers/`: stored copies cannot drift.

A `show_source(...)` cell may only import and call show_source, so it can be replayed here in a
fraction of a second, without executing the notebook, and its stored output compared.

A learner's cell (notebook 08) holds the learner's own version of a helper and ends with
`check(my_x, x)`. It may only import, define functions and call check, so its versions are
replayed here too: each must still match the helper, so neither can drift from the other.
"""

import ast
import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest

from helpers.paths import ROOT
from helpers.show import source

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


CHECK_CALL = re.compile(r"^check\((my_\w+), (\w+)\)\s*$", re.M)


def learner_cells(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code" and CHECK_CALL.search(c.source)]


def replay_learner(sources: list[str]) -> list[str]:
    """Run a notebook's learner cells in order, in one namespace; what each `check` printed."""
    namespace: dict = {}
    exec("import torch\nfrom helpers.checking import check", namespace)  # noqa: S102
    printed = []
    for cell_source in sources:
        tree = ast.parse(cell_source)
        for node in tree.body:
            is_check = (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                        and getattr(node.value.func, "id", None) == "check")
            if not (is_check or isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef)):
                raise AssertionError(
                    f"a learner's cell may only import, define functions and call check; found: "
                    f"{ast.unparse(node)[:60]!r}: move it to another cell")
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            exec(compile(tree, "<cell>", "exec"), namespace)  # noqa: S102 (committed notebook code)
        printed.append(buffer.getvalue().strip())
    return printed


LEARNER_NOTEBOOKS = [p for p in NOTEBOOKS if learner_cells(p)]
FROM_SCRATCH = ROOT / "notebooks" / "08_grpo_from_scratch.ipynb"


def test_the_learner_writes_the_core_pieces_of_the_loss():
    checked = [CHECK_CALL.search(s).group(2) for s in learner_cells(FROM_SCRATCH)]
    assert {"group_advantages", "clipped_surrogate", "k3_kl", "aggregate", "grpo_loss"} <= set(
        checked), checked


@pytest.mark.parametrize("path", LEARNER_NOTEBOOKS, ids=[p.stem for p in LEARNER_NOTEBOOKS])
def test_each_learner_version_on_the_page_matches_helpers(path):
    for line in replay_learner(learner_cells(path)):
        assert " matches " in line, (
            f"{path.name}: {line} Make the cell's version and helpers/grpo_scratch.py agree again.")


def test_a_wrong_edit_on_the_page_is_caught_by_its_check_and_by_the_loss_built_on_it():
    cells = learner_cells(FROM_SCRATCH)
    wrong = [s.replace("torch.min(ratio * a", "torch.max(ratio * a") for s in cells]
    assert wrong != cells, "the clipped term's cell no longer takes a min: update this test"
    printed = replay_learner(wrong)
    assert any(line.startswith("my_clipped_surrogate does not match clipped_surrogate: on case 1")
               for line in printed), printed
    assert any(line.startswith("my_grpo_loss does not match grpo_loss") for line in printed)


def test_a_learner_cell_that_computes_is_refused():
    with pytest.raises(AssertionError, match="may only import, define functions and call check"):
        replay_learner(["x = 1\ncheck(my_f, f)"])
