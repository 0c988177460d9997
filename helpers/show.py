"""Put a helper's code on the page: a notebook shows the one copy that lives in `helpers/`.

A cell that calls `show_source(f)` displays f's source, read from the module when the cell runs,
so the notebook can never hold a second copy that drifts. The stored output is that source as
text; tests/test_shown_code.py fails when a stored copy no longer matches `helpers/`.
"""

from __future__ import annotations

import inspect
from typing import Any


def source(*objects: Any) -> str:
    """The source code of each object, as `inspect` reads it from its file, blank-line separated."""
    if not objects:
        raise ValueError("show_source needs at least one function or class: show_source(f).")
    return "\n\n".join(inspect.getsource(obj).rstrip() for obj in objects)


def show_source(*objects: Any) -> None:
    """Display the objects' source with syntax highlighting (plain text where HTML is not shown)."""
    from IPython.display import Code, display

    display(Code(source(*objects), language="python"))
