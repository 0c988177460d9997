"""docs/colab.md's install table: derived from helpers.course.NOTEBOOKS and the locks."""

import json

from helpers.course import NOTEBOOKS, lock_pins
from helpers.paths import ROOT
from tools.install_table import install_table


def test_each_notebook_is_in_its_installs_row_and_asks_colab_for_what_the_row_says():
    rows = {line.split(" | ")[0].removeprefix("| "): line
            for line in install_table().splitlines()[2:]}
    assert set(rows) == {"full", "light"}
    for number, (name, book) in enumerate(NOTEBOOKS.items()):
        assert f"{number:02d} {name}" in rows[book.install]
        other = "light" if book.install == "full" else "full"
        assert f"{number:02d} {name}" not in rows[other]
        path = next((ROOT / "notebooks").glob(f"{number:02d}_{name}.ipynb"))
        asks_gpu = json.loads(path.read_text())["metadata"].get("accelerator") == "GPU"
        assert asks_gpu == (book.install == "full"), path.name
    assert f"{len(lock_pins('full'))} packages" in rows["full"]
    assert f"({len(lock_pins('light'))} packages" in rows["light"]
