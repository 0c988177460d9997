"""The two wings' imports: helpers/ has no circle, never imports tools/, and holds only what the
notebooks use; the imports inside functions count too.

A circle that only function-level imports close still works at run time, but it means two modules
each need the other: the layering is lost. Imports under `if TYPE_CHECKING:` never run and are
left out. `helpers/` is the course a learner imports; `tools/` is the repository's own machinery
(cited numbers, the GPU-call registry, the smoke runs, the smoke recipe, fault injection).
"""

import ast
import json
import re
from pathlib import Path

from helpers.paths import ROOT

HELPERS, TOOLS, NOTEBOOKS = ROOT / "helpers", ROOT / "tools", ROOT / "notebooks"


def _runtime_nodes(tree: ast.AST):
    """Every node except those under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def package_imports(source: str, package: str = "helpers") -> set[str]:
    """The modules of `package` a source imports, at any depth."""
    found = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names
                      if a.name.startswith(f"{package}.")}
        elif isinstance(node, ast.ImportFrom) and node.module == package:
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"{package}."):
            found.add(node.module.split(".")[1])
    return found


def modules(folder: Path) -> dict[str, Path]:
    """Each module of `folder`, and each package in it (helpers/lab/) as one module."""
    return ({path.stem: path for path in folder.glob("*.py") if path.stem != "__init__"}
            | {path.parent.name: path.parent for path in folder.glob("*/__init__.py")})


def source(path: Path) -> str:
    """A module's source; a package's, all its files'."""
    return path.read_text() if path.is_file() else "\n".join(
        f.read_text() for f in sorted(path.glob("*.py")))


def import_graph(folder: Path = HELPERS) -> dict[str, set[str]]:
    found = modules(folder)
    return {name: package_imports(source(path), folder.name) & set(found) - {name}
            for name, path in found.items()}


def notebook_source(path: Path) -> str:
    """A notebook's code cells as one Python source (IPython magics dropped)."""
    cells = json.loads(path.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return "\n".join(line for cell in code for line in cell.splitlines()
                     if not line.lstrip().startswith(("%", "!")))


def reached_from_notebooks() -> set[str]:
    """The helpers modules a notebook imports, directly or through other helpers."""
    graph = import_graph()
    todo = set().union(*(package_imports(notebook_source(p)) for p in NOTEBOOKS.glob("*.ipynb")))
    reached: set[str] = set()
    while todo:
        module = todo.pop()
        if module in graph and module not in reached:
            reached.add(module)
            todo |= graph[module]
    return reached


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (circle := visit(nxt)):
                return circle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (circle := visit(node)):
            return circle
    return None


def test_helpers_import_no_circle():
    circle = find_circle(import_graph())
    assert circle is None, "import circle in helpers/: " + " -> ".join(circle)


def test_tools_import_no_circle():
    circle = find_circle(import_graph(TOOLS))
    assert circle is None, "import circle in tools/: " + " -> ".join(circle)


def test_no_helper_imports_the_machinery():
    upward = {name: sorted(package_imports(source(path), "tools"))
              for name, path in modules(HELPERS).items()}
    upward = {name: found for name, found in upward.items() if found}
    assert not upward, f"helpers/ must not import tools/ (the repository's machinery): {upward}"


def test_every_helper_module_is_used_by_a_notebook():
    unused = sorted(set(modules(HELPERS)) - reached_from_notebooks())
    assert not unused, (
        f"helpers/{{{', '.join(unused)}}}.py: no notebook imports them, directly or through "
        "another helper; move them to tools/ (the repository's machinery) or use them on a page"
    )


def test_the_walk_sees_function_level_imports_and_circles():
    source = "import os\nfrom helpers.data import x\ndef f():\n    from helpers import rewards\n"
    source += "if TYPE_CHECKING:\n    from helpers.profiles import Profile\n"
    source += "from tools.gpu_calls import GPU_CALLS\n"
    assert package_imports(source) == {"data", "rewards"}
    assert package_imports(source, "tools") == {"gpu_calls"}
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_smoke_model_check_sits_below_what_trains_and_evaluates_it():
    graph = import_graph()
    assert not graph["smoke_model"] & {"resume", "grpo_run", "export", "loading", "evaluation"}


INDEX_ROW = re.compile(r"^    ([a-z_0-9]+) {2,}(.+?) {2,}(-|\d\d(?:[-, ]+\d\d)*)$")


def index_groups() -> dict[str, dict[str, str]]:
    """helpers/__init__.py's index: {group's first word: {module: its notebooks column}}."""
    groups: dict[str, dict[str, str]] = {}
    group = ""
    for line in (HELPERS / "__init__.py").read_text().splitlines():
        if line.startswith("The ") and line.rstrip().endswith(tuple("abcdefghijklmnopqrstuvwxyz)")):
            group = line.split()[1].rstrip(":")
        elif (row := INDEX_ROW.match(line)) and group:
            groups.setdefault(group, {})[row[1]] = row[3]
    return groups


def notebooks_column(numbers: set[int]) -> str:
    """{1, 2, 5, 6, 7} -> '01, 02, 05-07': runs of three or more as a span; none -> '-'."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    parts = [[f"{r[0]:02d}-{r[-1]:02d}"] if len(r) > 2 else [f"{n:02d}" for n in r] for r in runs]
    return ", ".join(p for part in parts for p in part) or "-"


def test_the_index_lists_every_module_once_with_the_notebooks_that_import_it():
    groups = index_groups()
    listed = [name for rows in groups.values() for name in rows]
    assert sorted(listed) == sorted(modules(HELPERS)), (
        "helpers/__init__.py's index must list every module once: add or remove a row")
    importers: dict[str, set[int]] = {}
    for path in NOTEBOOKS.glob("*.ipynb"):
        for name in package_imports(notebook_source(path)):
            importers.setdefault(name, set()).add(int(path.name[:2]))
    wrong = {name: (column, notebooks_column(importers.get(name, set())))
             for rows in groups.values() for name, column in rows.items()
             if column != notebooks_column(importers.get(name, set()))}
    assert not wrong, f"index column (written, imported by): {wrong}"


def test_the_index_groups_are_layers():
    """The task stands on nothing else of the course; the engine on neither page nor lesson."""
    groups, graph = index_groups(), import_graph()
    assert set(groups) == {"task", "engine", "page", "lessons"}
    for name in groups["task"]:
        assert graph[name] <= set(groups["task"]), name
    for name in groups["engine"]:
        assert not graph[name] & (set(groups["page"]) | set(groups["lessons"])), name
    assert notebooks_column({1, 2, 5, 6, 7, 9}) == "01, 02, 05-07, 09"
    assert notebooks_column(set()) == "-"
