"""Notebook 05 as a learner runs it in one runtime: an edited config, then 06 and 07 on its run.

One run serves both checks (it is the slowest part): notebook 05 in a fresh kernel up to its
training cell (MAX_STEPS = 2, the smoke profile, a temporary run folder), with `beta=0.0` changed
to `beta=0.04` in the `GRPOConfig(...)` cell as Exercise 2 asks; then notebooks 06 and 07 in
that runtime, on that run, without Google Drive: the cheapest Colab path.
"""

import json
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from helpers import one_runtime, run_folder
from helpers.one_runtime import (
    RESTART,
    GpuBusyError,
    check_gpu_free,
    gpu_memory_used_mib,
    key_results,
    run_06_07_here,
    with_parameters,
)
from helpers.paths import ROOT


def test_a_kernel_that_still_holds_the_gpu_is_refused_in_one_sentence():
    check_gpu_free(None)  # no GPU: nothing to hold
    check_gpu_free(300)  # a fresh kernel's CUDA context
    with pytest.raises(GpuBusyError) as caught:
        check_gpu_free(9000)  # 05's model and vLLM's pool
    message = str(caught.value)
    assert message.endswith(f"{RESTART}.") and message.count(". ") == 0
    assert "8.8 GiB" in message and "out of memory" in message


def test_the_gpu_reading_comes_from_nvidia_smi_and_none_without_it(monkeypatch):
    monkeypatch.setattr(one_runtime.shutil, "which", lambda name: None)
    assert gpu_memory_used_mib() is None
    monkeypatch.setattr(one_runtime.shutil, "which", lambda name: "/usr/bin/" + name)
    answer = subprocess.CompletedProcess([], 0, stdout="7543\n", stderr="")
    monkeypatch.setattr(one_runtime.subprocess, "run", lambda *a, **k: answer)
    assert gpu_memory_used_mib() == 7543


def test_the_parameters_cell_gets_the_runs_values_and_key_results_are_read_by_tag():
    notebook = nbformat.read(ROOT / "notebooks" / "06_evaluation.ipynb", as_version=4)
    with_parameters(notebook, PROFILE="smoke", USE_DRIVE=False, RUN_FOLDER="/runs/x")
    params = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    assert params.source.endswith("\nPROFILE = 'smoke'\nUSE_DRIVE = False\nRUN_FOLDER = '/runs/x'")
    namespace: dict = {}
    exec(params.source, namespace)
    assert (namespace["PROFILE"], namespace["USE_DRIVE"]) == ("smoke", False)
    tagged = [c for c in notebook.cells if one_runtime.KEY_RESULT in c.metadata.get("tags", [])]
    assert len(tagged) >= 2  # the paired test, the smoke promise, the sampled accuracy
    assert key_results(notebook)  # their stored outputs are what the runner prints


@pytest.mark.parametrize("name", one_runtime.FOLLOWERS)
def test_both_notebooks_tag_their_key_results(name):
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    assert any(one_runtime.KEY_RESULT in c.metadata.get("tags", []) for c in notebook.cells)


def test_06_and_07_find_05s_run_in_the_same_runtime_without_drive(tmp_path, monkeypatch, capsys):
    """On Colab with USE_DRIVE = False, 05 writes its run on the runtime's disk, and 06 and 07
    started there find it, without mounting Drive."""
    monkeypatch.setattr(run_folder, "on_colab", lambda: True)  # a stood-in Colab
    monkeypatch.setattr(run_folder, "ROOT", tmp_path / "grpo-course")
    monkeypatch.setenv("GRPO_DRIVE_MOUNT", str(tmp_path / "drive"))
    monkeypatch.delenv("GRPO_RUN_DIR", raising=False)

    def no_drive() -> Path:
        raise AssertionError("Drive was mounted with USE_DRIVE = False")

    monkeypatch.setattr(run_folder, "mount_drive", no_drive)
    written = run_folder.training_run_dir("smoke", use_drive=False)  # notebook 05
    assert written.root == tmp_path / "grpo-course" / "runs" / "course" / "smoke"
    written.adapter.mkdir(parents=True)
    (written.adapter / "adapter_config.json").write_text("{}")
    assert run_folder.find_run("smoke", use_drive=False) == written  # notebooks 06 and 07
    assert capsys.readouterr().out.count("Run folder: ") == 2


NOTEBOOK = ROOT / "notebooks" / "05_grpo_training.ipynb"
TRAINS = "result = train_or_resume(trainer)"
REPORT = ("import json\n"
          "print(json.dumps([e.get('kl') for e in trainer.state.log_history if 'loss' in e]))")


@pytest.fixture(scope="module")
def edited_05(tmp_path_factory) -> tuple[nbformat.NotebookNode, Path]:
    """Notebook 05 with `beta` edited, executed to its training cell; its run folder."""
    runs = tmp_path_factory.mktemp("one-runtime")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    end = next(i for i, c in enumerate(nb.cells) if TRAINS in c.source)
    nb.cells = nb.cells[: end + 1] + [nbformat.v4.new_code_cell(REPORT)]
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    params.source += "\nMAX_STEPS = 2"
    config = next(c for c in nb.cells if c.source.startswith("from trl import GRPOConfig"))
    assert config.source.count("    beta=0.0,") == 1
    config.source = config.source.replace("    beta=0.0,", "    beta=0.04,")
    with pytest.MonkeyPatch.context() as env:  # the kernel inherits this environment
        env.setenv("GRPO_PROFILE", "smoke")
        env.setenv("GRPO_RUN_DIR", str(runs))  # the course's own run stays untouched
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    return nb, runs / "smoke"


def test_an_edited_beta_trains_and_the_config_cell_names_it(edited_05):
    nb, run = edited_05
    config = next(c for c in nb.cells if c.source.startswith("from trl import GRPOConfig"))
    said = "".join(o.get("text", "") for o in config.outputs if o.output_type == "stream")
    assert "Your changes to the course's settings: beta=0.04 (course: 0.0)\n" in said
    kl = json.loads(nb.cells[-1].outputs[0]["text"])
    assert len(kl) == 2 and all(value is not None for value in kl)  # trl logs kl when beta > 0
    assert (run / "adapter" / "adapter_config.json").is_file()


def test_05_runs_06_and_07_here_on_its_run_and_prints_their_key_results(edited_05, capsys):
    two_step_run = edited_05[1]
    copies = run_06_07_here("smoke", False, str(two_step_run), NUM_PROBLEMS=8,
                            NUM_CHECK_PROBLEMS=2)
    assert copies == [two_step_run / "notebooks" / name for name in one_runtime.FOLLOWERS]
    out = capsys.readouterr().out
    for copy in copies:
        executed = nbformat.read(copy, as_version=4)
        code = [c for c in executed.cells if c.cell_type == "code"]
        assert all(c.execution_count for c in code[1:]), copy.name  # ran top to bottom
        assert f"{copy.name}, saved as" in out
    assert "sampled, T=1, 4 answers" in out  # 06's sampled accuracy
    assert "2/2 greedy answers identical after saving and reloading" in out  # 07's round trip
    assert (two_step_run / "eval" / "results.json").is_file()
