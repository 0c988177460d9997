"""The run folder has one owner: helpers/run_folder.py spells its layout, and nothing else does.

A name of the layout written as a path part anywhere else (`run / "checkpoints"`) is how a second
copy of the layout starts, and how two copies drift apart; the scan reads every `/` join of a
string in helpers/, tools/, scripts/, bench/ and the notebooks' code cells.
"""

import ast
import json
from pathlib import Path

import pytest

from helpers.paths import ROOT
from helpers.run_folder import RunFolder, as_run, training_run_dir

SCANNED = ("helpers", "tools", "scripts", "bench", "notebooks")
LAYOUT = ("checkpoints", "adapter", "heldout-adapter", "log_history.json", "completions.json",
          "figures", "training.png", "eval", "answers", "results.json", "problems.csv",
          "export", "run_fingerprint.json", "training_step.json")
# `/` joins of the same words that are not the run folder: make course's notebook figures, and
# the concept diagrams in docs/figures/.
OTHER_FOLDERS = {("scripts/run_course.py", "figures"), ("helpers/diagrams.py", "figures")}


def sources() -> list[tuple[str, str]]:
    """(path, Python source) for every scanned file; a notebook's code cells joined."""
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found.append((str(path.relative_to(ROOT)), path.read_text()))
        for path in sorted((ROOT / folder).rglob("*.ipynb")):
            cells = json.loads(path.read_text())["cells"]
            code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
            lines = [line for cell in code for line in cell.splitlines()
                     if not line.lstrip().startswith(("%", "!"))]
            found.append((str(path.relative_to(ROOT)), "\n".join(lines)))
    return found


def joined_names(source: str) -> list[str]:
    """The string constants that are an operand of `/` (a path join), in order."""
    return [side.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
            for side in (node.left, node.right)
            if isinstance(side, ast.Constant) and isinstance(side.value, str)]


def test_only_the_run_folder_spells_the_layout():
    spelled: dict[str, list[str]] = {}
    for path, source in sources():
        for name in joined_names(source):
            if name in LAYOUT and (path, name) not in OTHER_FOLDERS:
                spelled.setdefault(name, []).append(path)
    others = {name: paths for name, paths in spelled.items()
              if paths != ["helpers/run_folder.py"]}
    assert not others, f"layout names joined outside helpers/run_folder.py: {others}"


def test_the_scan_finds_a_layout_name_joined_by_hand():
    assert joined_names('run = Path(x)\nlog = run / "log_history.json"\n') == ["log_history.json"]
    assert joined_names('saved["answers"]\nf("adapter")\n') == []


def test_every_path_of_a_run_is_inside_it(tmp_path: Path):
    run = RunFolder(tmp_path / "smoke")
    paths = [run.checkpoints, run.fingerprint, run.adapter, run.adapter_staging,
             run.heldout_adapter, run.log, run.samples, run.figure, run.eval, run.answers,
             run.results, run.problems, run.exports]
    assert all(path.is_relative_to(run.root) for path in paths)
    assert len(set(paths)) == len(paths)
    assert run.name == "smoke" and str(run) == str(tmp_path / "smoke")


def test_a_run_folder_is_recognised_from_its_checkpoints(tmp_path: Path):
    run = RunFolder(tmp_path)
    assert RunFolder.of_checkpoints(run.checkpoints) == run
    assert RunFolder.of_checkpoints(tmp_path / "elsewhere") is None
    assert as_run(tmp_path) == run and as_run(run) is run


def test_the_training_notebook_gets_a_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture):
    run = training_run_dir("smoke", use_drive=False, folder=str(tmp_path / "mine"))
    assert isinstance(run, RunFolder) and run.root == tmp_path / "mine"
    assert "Run folder:" in capsys.readouterr().out
