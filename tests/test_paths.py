"""The run folder: runs/ off Colab (as before), Google Drive on Colab, and the newest run."""

import os
import sys
import time
import types
from pathlib import Path

import pytest

from helpers import run_folder, storage
from helpers.paths import ROOT
from helpers.run_folder import (
    RunFolder,
    RunMissingError,
    find_run,
    newest_run,
    run_dir,
    training_run_dir,
)


@pytest.fixture
def no_colab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.delenv("GRPO_RUN_DIR", raising=False)


@pytest.fixture
def fake_colab(tmp_path, monkeypatch):
    """A `google.colab` whose drive.mount makes <tmp>/drive/MyDrive; returns the mount calls."""
    mounts = []

    def mount(path, **kwargs):
        mounts.append(path)
        Path(path, "MyDrive").mkdir(parents=True, exist_ok=True)

    drive = types.SimpleNamespace(mount=mount)
    monkeypatch.setitem(sys.modules, "google.colab", types.SimpleNamespace(drive=drive))
    monkeypatch.setenv("GRPO_DRIVE_MOUNT", str(tmp_path / "drive"))
    monkeypatch.delenv("GRPO_RUN_DIR", raising=False)
    return mounts


def make_run(folder: Path) -> Path:
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / "adapter_config.json").write_text("{}")
    return folder


def test_off_colab_nothing_changes(no_colab, monkeypatch, tmp_path):
    assert run_dir("t4").root == ROOT / "runs" / "course" / "t4"
    assert run_dir("t4", use_drive=True).root == run_dir("t4").root  # no Colab: no Drive
    monkeypatch.setenv("GRPO_RUN_DIR", str(tmp_path / "runs" / "stamp"))
    assert run_dir("smoke", use_drive=True).root == tmp_path / "runs" / "stamp" / "smoke"


def test_on_colab_the_run_folder_is_on_drive_and_drive_is_mounted(fake_colab, tmp_path, capsys):
    run = training_run_dir("t4", use_drive=True)
    assert run.root == tmp_path / "drive" / "MyDrive" / "grpo-course" / "runs" / "course" / "t4"
    assert fake_colab == [str(tmp_path / "drive")]
    out = capsys.readouterr().out
    assert "Google Drive is mounted so that the run folder outlives this runtime" in out
    training_run_dir("t4", use_drive=True)
    assert len(fake_colab) == 1  # mounted once per runtime


def test_one_switch_keeps_everything_local_on_colab(fake_colab, capsys):
    assert training_run_dir("t4", use_drive=False).root == ROOT / "runs" / "course" / "t4"
    assert fake_colab == [] and "Google Drive" not in capsys.readouterr().out


def test_grpo_run_dir_still_overrides_on_colab(fake_colab, monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_RUN_DIR", str(tmp_path / "mine"))
    assert training_run_dir("t4", use_drive=True).root == tmp_path / "mine" / "t4"
    assert fake_colab == []


def test_06_and_07_find_the_newest_run_of_the_profile_on_drive(fake_colab, tmp_path):
    runs = tmp_path / "drive" / "MyDrive" / "grpo-course" / "runs"
    old = make_run(runs / "course" / "t4")
    new = make_run(runs / "second-try" / "t4")
    make_run(runs / "course" / "t4-7b")
    stamp = time.time()
    os.utime(old / "adapter" / "adapter_config.json", (stamp - 60, stamp - 60))
    assert find_run("t4").root == new
    assert newest_run(runs, "large") is None
    assert find_run("t4", folder=str(old)).root == old  # RUN_FOLDER picks another one


def test_no_run_is_one_sentence_naming_the_three_fixes(fake_colab, tmp_path):
    runs = tmp_path / "drive" / "MyDrive" / "grpo-course" / "runs"
    make_run(runs / "course" / "t4-7b")
    with pytest.raises(RunMissingError) as error:
        find_run("t4")
    message = str(error.value)
    assert "\n" not in message and message.count(". ") == 0 and message.endswith(".")
    assert message.startswith("No trained t4 run in ")
    for fix in ("run notebook 05 with this profile", "set RUN_FOLDER", "set PROFILE"):
        assert fix in message
    assert "(runs found for: t4-7b)" in message
    with pytest.raises(RunMissingError, match="No trained t4 run in"):
        find_run("t4", folder=str(tmp_path / "nowhere"))


def test_off_colab_05_reads_runs_course_and_names_the_fix(no_colab, monkeypatch, tmp_path):
    monkeypatch.setattr(run_folder, "ROOT", tmp_path)
    with pytest.raises(RunMissingError, match="No trained smoke run in .*runs/course: run "):
        find_run("smoke")
    run = make_run(tmp_path / "runs" / "course" / "smoke")
    assert find_run("smoke").root == run


def test_exports_stay_off_drive(fake_colab, monkeypatch, tmp_path):
    on_drive = tmp_path / "drive" / "MyDrive" / "grpo-course" / "runs" / "course" / "t4"
    assert RunFolder(on_drive).exports == ROOT / "runs" / "export" / "t4"
    monkeypatch.setenv("GRPO_EXPORT_DIR", str(tmp_path / "local"))
    assert RunFolder(on_drive).exports == tmp_path / "local" / "t4"
    local = RunFolder(tmp_path / "runs" / "course" / "t4")
    assert local.exports == tmp_path / "runs/course/t4/export"


# ---- whole files, whole folders, and writes a kill cannot leave half-done ---------------------


def test_file_problem_knows_a_cut_off_file_of_each_kind(tmp_path):
    import torch
    from safetensors.torch import save_file

    from helpers.storage import file_problem

    save_file({"w": torch.ones(64)}, tmp_path / "a.safetensors")
    torch.save({"w": torch.ones(64)}, tmp_path / "b.pt")
    (tmp_path / "c.json").write_text('{"global_step": 4}')
    for name in ("a.safetensors", "b.pt", "c.json"):
        assert file_problem(tmp_path / name) is None
        data = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(data[: len(data) * 2 // 3])
    assert file_problem(tmp_path / "a.safetensors").startswith("is cut off (")
    assert file_problem(tmp_path / "b.pt") == "is cut off (not a whole torch file)"
    assert file_problem(tmp_path / "c.json") == "is not valid JSON"
    (tmp_path / "c.json").write_text("")
    assert file_problem(tmp_path / "c.json") == "is empty"
    assert file_problem(tmp_path / "missing.json") == "is missing"


class Killed(BaseException):
    """A kill at a fault point."""


def test_swap_in_leaves_a_whole_folder_at_every_moment(tmp_path):
    from helpers.storage import add_fault_hook, swap_in, whole_folder

    def make(folder: Path, text: str) -> Path:
        folder.mkdir()
        (folder / "f.json").write_text(text)
        return folder

    def whole(folder: Path) -> str | None:
        return None if (folder / "f.json").is_file() else "missing"

    target = make(tmp_path / "adapter", '"old"')
    hooks = storage._FAULT_HOOKS
    try:
        add_fault_hook(lambda point, step: (_ for _ in ()).throw(Killed) if point == "t" else None)
        with pytest.raises(Killed):  # killed between the two renames
            swap_in(make(tmp_path / "adapter.partial", '"new"'), target, point="t")
    finally:
        hooks.clear()
    assert not target.exists()
    assert whole_folder(target, whole) == tmp_path / "adapter.old"  # what 06 and 07 read now
    swap_in(make(tmp_path / "adapter.partial2", '"newer"'), target)  # the next save
    assert (target / "f.json").read_text() == '"newer"'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "adapter.partial"]


def test_a_run_cut_mid_swap_still_counts_as_a_run_with_an_adapter(tmp_path):
    run = tmp_path / "course" / "run"
    (run / "adapter.old").mkdir(parents=True)
    (run / "adapter.old" / "adapter_config.json").write_text("{}")
    assert run_folder.has_adapter(run)
    assert newest_run(tmp_path, "run").root == run


@pytest.mark.parametrize(("error", "reason", "fix"), [
    (OSError(28, "No space left on device"), "No space left on device", "free some space"),
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"),
     "a file was cut off mid-write", "free some space"),
    (ValueError("Error while serializing: I/O error: File too large (os error 27)"),
     "File too large", "free some space"),
    (PermissionError(13, "Permission denied"), "Permission denied", "make it writable"),
    (OSError(5, "Input/output error"), "Input/output error", "still mounted"),
])
def test_a_failed_write_is_one_sentence_with_its_fix(tmp_path, error, reason, fix):
    failure = storage.storage_failure(error, tmp_path, "from checkpoint-4")
    message = str(failure)
    assert message.startswith(f"Writing into {tmp_path} failed ({reason}; ")
    assert fix in message and message.endswith("training resumes from checkpoint-4.")
    assert "\n" not in message


def test_a_failed_write_names_the_file_when_python_knows_it(tmp_path):
    error = OSError(28, "No space left on device", str(tmp_path / "adapter.partial" / "x.json"))
    message = str(storage.storage_failure(error, tmp_path / "checkpoints", "from checkpoint-2"))
    assert message.startswith(f"Writing into {tmp_path / 'adapter.partial' / 'x.json'} failed (")


def test_other_errors_are_not_taken_for_storage_faults(tmp_path):
    assert storage.storage_failure(ValueError("bad shape"), tmp_path, "") is None
    assert storage.storage_failure(RuntimeError("CUDA out of memory"), tmp_path, "") is None


def test_the_held_out_adapter_stays_off_drive(fake_colab, tmp_path):
    """vLLM reads it at every held-out score (six rewrites of ~150 MB a t4 run): on Drive those
    would fill the bin and the revisions; no later notebook needs it."""
    on_drive = RunFolder(tmp_path / "drive" / "MyDrive" / "grpo-course" / "runs" / "course" / "t4")
    assert not on_drive.heldout_adapter.is_relative_to(tmp_path / "drive")
    assert on_drive.heldout_adapter.parent == on_drive.exports
    local = RunFolder(tmp_path / "runs" / "course" / "t4")
    assert local.heldout_adapter.parent == local.root
