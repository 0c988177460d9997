"""On Colab: start() warns loudly when a GPU notebook got a runtime without a GPU, and notebook 05
hands its run over to 06 by flushing Google Drive. Colab is faked with a `google.colab` module."""

from __future__ import annotations

import importlib.machinery
import sys
import types

import pytest

from helpers import run_folder, session
from helpers.hardware import CPU_ONLY, TESLA_T4


@pytest.fixture
def fake_colab(monkeypatch, tmp_path):
    """A `google.colab` whose drive mounts into a temporary folder and records each flush (which
    unmounts it, as Colab's does)."""
    flushed = []
    drive = types.ModuleType("google.colab.drive")
    drive.mount = lambda path, **kw: (tmp_path / "drive" / "MyDrive").mkdir(parents=True)
    drive.flush_and_unmount = lambda **kw: (
        flushed.append(kw), (tmp_path / "drive" / "MyDrive").rmdir())
    colab = types.ModuleType("google.colab")
    colab.drive = drive
    for module in (colab, drive):
        module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setenv("GRPO_DRIVE_MOUNT", str(tmp_path / "drive"))
    monkeypatch.delenv("GRPO_PROFILE", raising=False)
    return flushed


@pytest.mark.parametrize(("hw", "requested", "colab", "notebook", "warns"), [
    (CPU_ONLY, None, True, "grpo_training", True),  # the case it is for
    (CPU_ONLY, None, True, "", True),  # no notebook known: warn rather than stay silent
    (CPU_ONLY, None, True, "no_such_notebook", True),
    (CPU_ONLY, "smoke", True, "grpo_training", False),  # PROFILE = "smoke" on purpose
    (CPU_ONLY, None, True, "gsm8k_formatting", False),  # a light notebook needs no GPU
    (CPU_ONLY, None, False, "grpo_training", False),  # off Colab (CI, a laptop)
    (TESLA_T4, None, True, "grpo_training", False),
])
def test_who_is_warned(monkeypatch, hw, requested, colab, notebook, warns):
    monkeypatch.delenv("GRPO_PROFILE", raising=False)
    assert session.warns_no_gpu(hw, requested, colab, notebook) is warns


def test_grpo_profile_set_on_purpose_silences_it(monkeypatch):
    monkeypatch.setenv("GRPO_PROFILE", "smoke")
    assert session.warns_no_gpu(CPU_ONLY, None, True, "grpo_training") is False


def test_start_on_a_colab_runtime_without_a_gpu_prints_the_boxed_warning(fake_colab, monkeypatch,
                                                                         capsys):
    monkeypatch.setenv(session.NOTEBOOK_ENV, "grpo_training")
    monkeypatch.setattr(session, "detect_hardware", lambda: CPU_ONLY)
    monkeypatch.setattr(session, "use_one_cpu_thread", lambda hw: None)
    hw, profile = session.start()
    out = capsys.readouterr().out
    with capsys.disabled():
        print("\n" + out)
    assert profile.name == "smoke"
    box = out.split("Hardware :")[0].splitlines()
    assert box[0].startswith("╔") and box[-1].startswith("╚")
    assert all(len(line) == session.BOX_WIDTH for line in box)
    text = " ".join(line.strip("║ ") for line in box)
    assert "NO GPU IN THIS COLAB RUNTIME" in text and "not the real run" in text
    assert "Runtime → Change runtime type → T4 GPU" in text and 'PROFILE = "smoke"' in text
    session.start("smoke")  # the same, chosen on purpose: no box
    assert "╔" not in capsys.readouterr().out


def test_flush_drive_does_nothing_off_colab(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    message = run_folder.flush_drive()
    assert "nothing to flush" in message and "the next notebook can be opened now" in message


def test_flush_drive_on_colab_flushes_then_mounts_again_for_the_cells_below(fake_colab):
    assert "nothing to flush" in run_folder.flush_drive()  # not mounted yet: nothing pending
    run_folder.mount_drive()
    message = run_folder.flush_drive()
    assert fake_colab == [{}] and "Google Drive is flushed" in message
    assert "the next notebook can be opened now" in message
    assert (run_folder.drive_mount() / "MyDrive").is_dir()  # mounted again


def test_a_remount_that_fails_after_the_flush_is_one_sentence(fake_colab, monkeypatch):
    run_folder.mount_drive()
    from google.colab import drive

    def timed_out(path, **kw):
        raise ValueError("mount failed: timeout during the consent request")

    monkeypatch.setattr(drive, "mount", timed_out)
    message = run_folder.flush_drive()  # returns: the notebook goes on
    assert fake_colab == [{}] and message.count(". ") == 0 and message.endswith(".")
    assert "the whole run is saved there" in message and "could not be mounted again" in message
    assert "ValueError: mount failed" in message
