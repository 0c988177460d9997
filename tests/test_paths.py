"""The run folder: runs/ off Colab (as before), Google Drive on Colab, and the newest run."""

import os
import sys
import time
import types
from pathlib import Path

import pytest

from helpers import paths
from helpers.paths import (
    ROOT,
    RunMissingError,
    exports_dir,
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
    assert run_dir("t4") == ROOT / "runs" / "course" / "t4"
    assert run_dir("t4", use_drive=True) == ROOT / "runs" / "course" / "t4"  # no Colab: no Drive
    monkeypatch.setenv("GRPO_RUN_DIR", str(tmp_path / "runs" / "stamp"))
    assert run_dir("smoke", use_drive=True) == tmp_path / "runs" / "stamp" / "smoke"


def test_on_colab_the_run_folder_is_on_drive_and_drive_is_mounted(fake_colab, tmp_path, capsys):
    run = training_run_dir("t4", use_drive=True)
    assert run == tmp_path / "drive" / "MyDrive" / "grpo-course" / "runs" / "course" / "t4"
    assert fake_colab == [str(tmp_path / "drive")]
    out = capsys.readouterr().out
    assert "Google Drive is mounted so that the run folder outlives this runtime" in out
    training_run_dir("t4", use_drive=True)
    assert len(fake_colab) == 1  # mounted once per runtime


def test_one_switch_keeps_everything_local_on_colab(fake_colab, capsys):
    assert training_run_dir("t4", use_drive=False) == ROOT / "runs" / "course" / "t4"
    assert fake_colab == [] and "Google Drive" not in capsys.readouterr().out


def test_grpo_run_dir_still_overrides_on_colab(fake_colab, monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_RUN_DIR", str(tmp_path / "mine"))
    assert training_run_dir("t4", use_drive=True) == tmp_path / "mine" / "t4"
    assert fake_colab == []


def test_05_and_06_find_the_newest_run_of_the_profile_on_drive(fake_colab, tmp_path):
    runs = tmp_path / "drive" / "MyDrive" / "grpo-course" / "runs"
    old = make_run(runs / "course" / "t4")
    new = make_run(runs / "second-try" / "t4")
    make_run(runs / "course" / "t4-7b")
    stamp = time.time()
    os.utime(old / "adapter" / "adapter_config.json", (stamp - 60, stamp - 60))
    assert find_run("t4") == new
    assert newest_run(runs, "large") is None
    assert find_run("t4", folder=str(old)) == old  # RUN_FOLDER picks another one


def test_no_run_is_one_sentence_naming_the_three_fixes(fake_colab, tmp_path):
    runs = tmp_path / "drive" / "MyDrive" / "grpo-course" / "runs"
    make_run(runs / "course" / "t4-7b")
    with pytest.raises(RunMissingError) as error:
        find_run("t4")
    message = str(error.value)
    assert "\n" not in message and message.count(". ") == 0 and message.endswith(".")
    assert message.startswith("No trained t4 run in ")
    for fix in ("run notebook 04 with this profile", "set RUN_FOLDER", "set PROFILE"):
        assert fix in message
    assert "(runs found for: t4-7b)" in message
    with pytest.raises(RunMissingError, match="No trained t4 run in"):
        find_run("t4", folder=str(tmp_path / "nowhere"))


def test_off_colab_05_reads_runs_course_and_names_the_fix(no_colab, monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    with pytest.raises(RunMissingError, match="No trained smoke run in .*runs/course: run "):
        find_run("smoke")
    run = make_run(tmp_path / "runs" / "course" / "smoke")
    assert find_run("smoke") == run


def test_exports_stay_off_drive(fake_colab, monkeypatch, tmp_path):
    on_drive = tmp_path / "drive" / "MyDrive" / "grpo-course" / "runs" / "course" / "t4"
    assert exports_dir(on_drive) == ROOT / "runs" / "export" / "t4"
    monkeypatch.setenv("GRPO_EXPORT_DIR", str(tmp_path / "local"))
    assert exports_dir(on_drive) == tmp_path / "local" / "t4"
    assert exports_dir(tmp_path / "runs" / "course" / "t4") == tmp_path / "runs/course/t4/export"
