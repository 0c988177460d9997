"""Pages a learner can read: no wall of text, the training run early in its notebook, and the
costly solutions skipped on a GPU's Run all with one line that says how to run them."""

import json
import re
from pathlib import Path

import pytest

from helpers.profiles import PROFILES
from helpers.session import solution_runs

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
MAX_WORDS = 300  # a markdown cell longer than this is split, or its digression moves to docs/


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def words(cell: dict) -> int:
    text = re.sub(r"<!--.*?-->", "", "".join(cell["source"]), flags=re.S)  # figure markers
    return len(re.sub(r"\(https?://[^)]*\)", "", text).split())  # a link's address is no word


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_markdown_cell_is_a_wall(path: Path):
    walls = {i: words(c) for i, c in enumerate(cells(path))
             if c["cell_type"] == "markdown" and words(c) > MAX_WORDS}
    assert not walls, f"{path.name}: markdown cells over {MAX_WORDS} words (cell: words): {walls}"


def test_the_training_cell_comes_in_the_first_third_of_its_notebook():
    path = next(p for p in NOTEBOOKS if p.stem.startswith("05_"))
    found = cells(path)
    at = next(i for i, c in enumerate(found)
              if c["cell_type"] == "code" and "train_or_resume(trainer)" in "".join(c["source"]))
    assert at < len(found) / 3, f"the training cell is cell {at} of {len(found)}"


def test_a_costly_solution_runs_on_smoke_and_waits_to_be_asked_on_a_gpu(capsys):
    assert solution_runs(PROFILES["smoke"], "trains")
    assert not solution_runs(PROFILES["t4"], "trains two more steps (about a minute on a T4)")
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and "Skipped on the t4 profile" in said
    assert "set run_anyway=True in the line above" in said
    assert solution_runs(PROFILES["t4"], "trains", run_anyway=True)
