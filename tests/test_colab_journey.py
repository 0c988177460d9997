"""The Colab learner's journey, 05 -> 06 -> 07, each notebook in a fresh process, on a fake Colab.

Each notebook opened from its badge gets its own runtime, so nothing but Google Drive carries over.
The real notebooks run (smoke profile, small overrides) in fresh kernels with a fake `google.colab`
module and a temporary folder as the Drive mount; the bootstrap's Colab branch (clone, install) is
tested on its own in test_colab_bootstrap.py, so the fake is installed right after it.

The journey: 06 with no run yet stops with one sentence; 05 is cut off after its first checkpoint
(a disconnect); 06 evaluates the adapter saved at that checkpoint; 05, rerun, resumes and
finishes; 07 exports the finished run; 07 on an empty Drive stops with the same sentence.
"""

import json
import os

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from helpers.paths import ROOT

NOTEBOOKS = ROOT / "notebooks"
MAX_STEPS = 2  # the smoke profile checkpoints every step at this length

FAKE_COLAB = """\
import importlib.machinery
import pathlib
import sys
import types

drive = types.ModuleType("google.colab.drive")
drive.mount = lambda path, **kw: pathlib.Path(path, "MyDrive").mkdir(parents=True, exist_ok=True)
drive.flush_and_unmount = lambda **kw: None  # the files are written already: nothing pending
colab = types.ModuleType("google.colab")
colab.drive = drive
for module in (colab, drive):  # libraries ask importlib.util.find_spec("google.colab")
    module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None)
sys.modules.update({"google.colab": colab, "google.colab.drive": drive})"""

DISCONNECT = """\
from transformers import TrainerCallback


class Disconnect(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        raise KeyboardInterrupt("simulated Colab disconnect after the first checkpoint")


trainer.add_callback(Disconnect())"""


def run_notebook(name: str, overrides: str = "", after: dict[str, str] | None = None) -> list:
    """Execute notebooks/<name> in a fresh kernel on the fake Colab; return its cells' outputs.

    `overrides` is appended to the parameters cell (as papermill would); `after` maps a line of a
    cell to the code of a cell inserted after it.
    """
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    cells = [nb.cells[0], nb.cells[1], nbformat.v4.new_code_cell(FAKE_COLAB)]
    for cell in nb.cells[2:]:
        if cell.cell_type == "markdown" and cell.source.startswith("## Solutions"):
            break  # the journey is about Drive and runtimes; CI runs the solutions with nbval
        if "parameters" in cell.metadata.get("tags", []):
            cell.source += "\n" + overrides
        cells.append(cell)
        for line, code in (after or {}).items():
            if line in cell.source:
                cells.append(nbformat.v4.new_code_cell(code))
    nb.cells = cells
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    try:
        client.execute()
    finally:
        outputs = [cell.get("outputs", []) for cell in nb.cells]
    return outputs


def text_of(error: CellExecutionError) -> str:
    return f"{error.ename}: {error.evalue}"


@pytest.fixture(scope="module")
def journey(tmp_path_factory):
    """Run the whole journey once; return what each step left on the fake Drive and printed."""
    root = tmp_path_factory.mktemp("colab")
    saved = dict(os.environ)
    os.environ.update(
        GRPO_PROFILE="smoke", GRPO_DRIVE_MOUNT=str(root / "drive"), PYTHONPATH=str(ROOT),
        GRPO_EXPORT_DIR=str(root / "local-exports"),
    )
    os.environ.pop("GRPO_RUN_DIR", None)  # `make course` sets it; on Colab nothing does
    run = root / "drive" / "MyDrive" / "grpo-course" / "runs" / "course" / "smoke"
    found: dict = {"run": run}
    try:
        with pytest.raises(CellExecutionError) as no_run:
            run_notebook("06_evaluation.ipynb", "NUM_PROBLEMS = 4")
        found["06 without a run"] = text_of(no_run.value)

        with pytest.raises(CellExecutionError) as cut:
            run_notebook(
                "05_grpo_training.ipynb", f"MAX_STEPS = {MAX_STEPS}",
                after={"trainer.add_callback(samples)": DISCONNECT},
            )
        found["05 cut off"] = text_of(cut.value)
        found["adapter at the cut"] = json.loads(
            (run / "adapter" / "training_step.json").read_text()
        )
        found["06 on the cut run"] = run_notebook("06_evaluation.ipynb", "NUM_PROBLEMS = 4")
        found["eval of the cut run"] = json.loads((run / "eval" / "results.json").read_text())

        found["05 resumed"] = run_notebook("05_grpo_training.ipynb", f"MAX_STEPS = {MAX_STEPS}")
        found["07"] = run_notebook("07_save_and_use.ipynb", "NUM_CHECK_PROBLEMS = 2")

        os.environ["GRPO_DRIVE_MOUNT"] = str(root / "another-drive")
        with pytest.raises(CellExecutionError) as no_run:
            run_notebook("07_save_and_use.ipynb", "NUM_CHECK_PROBLEMS = 2")
        found["07 without a run"] = text_of(no_run.value)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    found["exports"] = root / "local-exports" / "smoke"
    return found


def printed(outputs: list) -> str:
    """Everything the cells printed, in order."""
    return "".join(o.get("text") or o.get("data", {}).get("text/plain", "")
                   for cell in outputs for o in cell)


def test_without_a_run_06_and_07_say_what_to_do_in_one_sentence(journey):
    for key in ("06 without a run", "07 without a run"):
        message = journey[key]
        assert message.startswith("RunMissingError: No trained smoke run in "), message
        assert "\n" not in message and message.count(". ") == 0
        assert "run notebook 05" in message and "RUN_FOLDER" in message and "PROFILE" in message


def test_05_writes_its_run_to_drive_and_says_why(journey):
    run = journey["run"]
    assert (run / "checkpoints").is_dir() and (run / "log_history.json").is_file()
    assert (run / "figures" / "training.png").is_file()
    out = printed(journey["05 resumed"])
    assert "Google Drive is mounted so that the run folder outlives this runtime" in out
    assert "No T4 time for the smoke profile" in out  # the expected-time line
    assert f"step {MAX_STEPS}/{MAX_STEPS}:" in out and "s/step" in out  # the step timer


def test_a_disconnect_after_the_first_checkpoint_leaves_a_usable_adapter(journey):
    assert "simulated Colab disconnect" in journey["05 cut off"]
    assert journey["adapter at the cut"] == {"step": 1, "max_steps": MAX_STEPS}
    out = printed(journey["06 on the cut run"])
    assert f"saved at checkpoint step 1 of {MAX_STEPS}" in out
    results = journey["eval of the cut run"]
    assert len(results["problems"]) == 4


def test_06_in_its_own_runtime_evaluates_05s_run_from_drive(journey):
    out = printed(journey["06 on the cut run"])
    assert "Run folder: " in out and "MyDrive/grpo-course/runs/course/smoke" in out


def test_05_rerun_resumes_and_07_exports_the_finished_run(journey):
    assert "RESUMING from checkpoint-1" in printed(journey["05 resumed"])
    steps = json.loads((journey["run"] / "adapter" / "training_step.json").read_text())
    assert steps == {"step": MAX_STEPS, "max_steps": MAX_STEPS}
    out = printed(journey["07"])
    assert "MyDrive/grpo-course/runs/course/smoke" in out
    assert "Disk check: the merge needs about" in out
    exports = journey["exports"]
    assert (exports / "lora" / "adapter_config.json").is_file()
    assert any((exports / "merged_16bit").glob("*.safetensors"))
    assert not (journey["run"] / "export").exists()  # nothing big is written to Drive
