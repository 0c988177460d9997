"""Pages a learner can read: no wall of text, the training run early in its notebook, and the
costly solutions skipped on a GPU's Run all with one line that says how to run them."""

import json
import re
from pathlib import Path

import pytest

from helpers.paths import ROOT
from helpers.profiles import PROFILES
from helpers.session import solution_runs

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_WORDS = 300  # a markdown cell longer than this is split, or its digression moves to docs/
# The reading budget of notebooks 00-10 (11, the lab, has its own): all their markdown, the main
# path (everything before Solutions and Sources), and the longest cell a learner must read on it.
BUDGET_NOTEBOOKS = [p for p in NOTEBOOKS if p.stem[:2] <= "10"]
BUDGET_ALL, BUDGET_MAIN, BUDGET_MAIN_CELL = 24_000, 20_000, 220
BUDGET_LAB = 3_000  # notebook 11, every markdown cell


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


def main_path(path: Path) -> list[dict]:
    """The markdown cells a learner reads before the folded Solutions and the Sources."""
    found = [c for c in cells(path) if c["cell_type"] == "markdown"]
    end = next((i for i, c in enumerate(found)
                if re.match(r"## (Solutions|Sources)\b", "".join(c["source"]))), len(found))
    return found[:end]


def test_notebooks_00_to_10_keep_their_reading_budget():
    every = sum(words(c) for p in BUDGET_NOTEBOOKS for c in cells(p)
                if c["cell_type"] == "markdown")
    main = sum(words(c) for p in BUDGET_NOTEBOOKS for c in main_path(p))
    long = {f"{p.stem[:2]} cell {cells(p).index(c)}": words(c) for p in BUDGET_NOTEBOOKS
            for c in main_path(p) if words(c) > BUDGET_MAIN_CELL}
    assert len(BUDGET_NOTEBOOKS) == 11, [p.name for p in BUDGET_NOTEBOOKS]
    fix = "cut, or move the digression to docs/ and link it"
    assert every <= BUDGET_ALL, f"notebooks 00-10: {every} markdown words > {BUDGET_ALL}: {fix}"
    assert main <= BUDGET_MAIN, f"their main path: {main} words > {BUDGET_MAIN}: {fix}"
    assert not long, f"main-path cells over {BUDGET_MAIN_CELL} words: {long}"


def test_the_lab_keeps_its_reading_budget():
    """Notebook 11 teaches the lab; its method lives in docs/lab.md."""
    path = next(p for p in NOTEBOOKS if p.stem.startswith("11_"))
    every = sum(words(c) for c in cells(path) if c["cell_type"] == "markdown")
    assert every <= BUDGET_LAB, (f"notebook 11: {every} markdown words > {BUDGET_LAB}: cut, or "
                                 "move the method to docs/lab.md and link it")


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
