"""helpers/ imports form no circle, counting the imports inside functions too.

A circle that only function-level imports close still works at run time, but it means two modules
each need the other: the layering is lost (the smoke model's builder imported the training and
evaluation code that loads it). Imports under `if TYPE_CHECKING:` never run and are left out.
"""

import ast
from pathlib import Path

HELPERS = Path(__file__).resolve().parent.parent / "helpers"


def _runtime_nodes(tree: ast.AST):
    """Every node except those under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def helper_imports(source: str) -> set[str]:
    """The helpers modules a source file imports, at any depth."""
    found = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("helpers.")}
        elif isinstance(node, ast.ImportFrom) and node.module == "helpers":
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers."):
            found.add(node.module.split(".")[1])
    return found


def import_graph(folder: Path = HELPERS) -> dict[str, set[str]]:
    modules = {path.stem: path for path in folder.glob("*.py") if path.stem != "__init__"}
    return {name: helper_imports(path.read_text()) & set(modules) - {name}
            for name, path in modules.items()}


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


def test_the_walk_sees_function_level_imports_and_circles():
    source = "import os\nfrom helpers.data import x\ndef f():\n    from helpers import rewards\n"
    source += "if TYPE_CHECKING:\n    from helpers.profiles import Profile\n"
    assert helper_imports(source) == {"data", "rewards"}
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_smoke_model_builder_sits_below_what_trains_and_evaluates_it():
    graph = import_graph()
    below = ("smoke_model", "model", "training", "evaluation", "export", "paths", "data")
    assert not [name for name in below if "learning" in graph[name]]  # nothing below imports it
    assert not graph["smoke_model"] & {"training", "export", "model", "learning"}
