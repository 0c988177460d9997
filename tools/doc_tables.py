"""Tables that docs/ shows and the code prints: a page cannot run code, so it keeps a copy between
two markers, each on a line of its own with a blank line either side of the table:

    <!-- table:NAME -->

    | ... |

    <!-- /table -->

`make figures` (scripts/figures.py) rewrites each copy from the function TABLES names, as it does
the `<!-- fig -->` figures, and `--check` fails on a copy that differs.
"""

from __future__ import annotations

import re
from collections.abc import Callable

MARKER = re.compile(r"<!-- table:(?P<name>[\w-]+) -->\n\n(?P<table>.*?)\n\n<!-- /table -->",
                    re.S)
START = re.compile(r"<!-- table:(?P<name>[^\s>]*) -->")


def _install() -> str:
    from tools.install_table import install_table

    return install_table()


def _journey() -> str:
    from helpers.journey import Measured, journey_markdown

    return journey_markdown(found=Measured())  # estimates: a T4's own run goes to README's slot


def _lab_grid() -> str:
    from helpers.lab import grid_markdown, load_grid

    return grid_markdown(load_grid()["summary"]["native"])


TABLES: dict[str, Callable[[], str]] = {
    "install": _install,  # docs/colab.md: which notebooks take which install
    "journey": _journey,  # docs/colab.md: minutes per notebook on a T4, as notebook 00 prints
    "lab-grid": _lab_grid,  # docs/results.md: the ablation grid, from runs/bench/ablations.json
}


def fill_tables(text: str) -> str:
    """`text` with every known table's copy made again (unknown names left alone)."""
    def table(m: re.Match[str]) -> str:
        make = TABLES.get(m["name"])
        body = make().strip("\n") if make else m["table"]
        return f"<!-- table:{m['name']} -->\n\n{body}\n\n<!-- /table -->"

    return MARKER.sub(table, text)


def table_problems(text: str) -> list[str]:
    """Every table copy in `text` that is unknown, badly marked or out of date: one sentence
    each, naming the fix."""
    whole = {m.start(): m for m in MARKER.finditer(text)}
    out = []
    for start in START.finditer(text):
        name, m = start["name"], whole.get(start.start())
        if name not in TABLES:
            out.append(f"table:{name} is no known table (one of {', '.join(TABLES)}): fix the "
                       "name, or add its function to TABLES in tools/doc_tables.py.")
        elif m is None:
            out.append(f"table:{name} is not marked as tools/doc_tables.py says: a blank line "
                       "after its opening marker and before <!-- /table -->.")
        elif m["table"] != TABLES[name]().strip("\n"):
            out.append(f"table:{name} is out of date: run `make figures`.")
    return out
