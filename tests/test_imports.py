"""The two wings' imports: helpers/ has no circle, never imports tools/, and holds only what the
notebooks use; the imports inside functions count too.

A circle that only function-level imports close still works at run time, but it means two modules
each need the other: the layering is lost. Imports under `if TYPE_CHECKING:` never run and are
left out. `helpers/` is the course a learner imports; `tools/` is the repository's own machinery
(cited numbers, the GPU-call registry, the smoke runs, the smoke recipe, fault injection).
"""

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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
    return {path.stem: path for path in folder.glob("*.py") if path.stem != "__init__"}


def import_graph(folder: Path = HELPERS) -> dict[str, set[str]]:
    found = modules(folder)
    return {name: package_imports(path.read_text(), folder.name) & set(found) - {name}
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
    upward = {name: sorted(package_imports(path.read_text(), "tools"))
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
