"""The Colab bootstrap: retried until an install succeeds, two-line failure, restart hint.

pip is never run: `install_stack.py` is replaced by a stub (or `run` by a fake) in a fake clone.
"""

import os
import sys
import textwrap
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import colab_bootstrap  # noqa: E402
from sync_notebooks import BOOTSTRAP  # noqa: E402


@pytest.fixture
def course(tmp_path):
    """A course folder with requirements.txt, as the clone has it."""
    folder = tmp_path / "grpo-course"
    (folder / "scripts").mkdir(parents=True)
    (folder / "requirements.txt").write_text("trl==0.22.2\n")
    return folder


def fake_pip(returncodes):
    """A stand-in for running install_stack.py: records the command, returns the next code."""
    calls = []

    def run(command):
        calls.append(command)
        return returncodes[len(calls) - 1]

    return run, calls


def test_failed_install_writes_no_stamp_and_says_error_and_fix_in_two_lines(course):
    run, calls = fake_pip([1])
    with pytest.raises(SystemExit) as stop:
        colab_bootstrap.ensure_stack(course, run=run)
    lines = str(stop.value.code).splitlines()
    assert len(lines) == 2
    assert "failed" in lines[0] and "exit code 1" in lines[0]
    assert lines[1].startswith("Fix: Runtime → Disconnect and delete runtime")
    assert not colab_bootstrap.stamp_path(course).exists()
    assert calls[0][-2:] == [str(course / "scripts" / "install_stack.py"), "colab"]


def test_missing_stamp_means_install_again_then_skip(course):
    run, calls = fake_pip([1, 0])
    with pytest.raises(SystemExit):
        colab_bootstrap.ensure_stack(course, run=run)
    assert colab_bootstrap.ensure_stack(course, run=run) is True  # retried, not skipped
    assert colab_bootstrap.is_installed(course)
    assert colab_bootstrap.ensure_stack(course, run=run) is False  # now the stamp says done
    assert len(calls) == 2


def test_changed_pins_install_again(course):
    run, calls = fake_pip([0, 0])
    colab_bootstrap.ensure_stack(course, run=run)
    (course / "requirements.txt").write_text("trl==0.23.0\n")
    assert not colab_bootstrap.is_installed(course)
    assert colab_bootstrap.ensure_stack(course, run=run) is True


def test_a_changed_lock_installs_again(course):
    run, calls = fake_pip([0, 0])
    (course / "locks").mkdir()
    (course / "locks" / "t4.txt").write_text("torch==2.9.0\n")
    colab_bootstrap.ensure_stack(course, run=run)
    (course / "locks" / "t4.txt").write_text("torch==2.9.1\n")
    assert not colab_bootstrap.is_installed(course)
    assert colab_bootstrap.ensure_stack(course, run=run) is True


def test_restart_hint_names_changed_packages_the_session_imported(course, monkeypatch, capsys):
    installed = {"numpy": "2.3.1", "pillow": "11.0.0"}
    monkeypatch.setattr(colab_bootstrap.metadata, "version", lambda dist: installed[dist])
    monkeypatch.setattr(
        colab_bootstrap.metadata, "packages_distributions",
        lambda: {"numpy": ["numpy"], "PIL": ["pillow"], "torch": ["torch"]},
    )

    def pip_changes_numpy(command):
        installed["numpy"] = "2.2.6"
        return 0

    loaded = {"numpy": None, "PIL.Image": None}  # what sys.modules holds in that session
    colab_bootstrap.ensure_stack(course, run=pip_changes_numpy, modules=loaded)
    out = capsys.readouterr().out
    assert "Runtime → Restart session" in out
    assert "numpy 2.3.1 → 2.2.6" in out and "pillow" not in out


def test_no_restart_hint_when_nothing_imported_changed(course, capsys):
    run, _ = fake_pip([0])
    colab_bootstrap.ensure_stack(course, run=run)
    assert "Restart" not in capsys.readouterr().out


def test_relay_streams_output_and_returns_the_exit_code(capsys):
    code = colab_bootstrap.relay([sys.executable, "-c", "print('Collecting trl'); exit(3)"])
    assert code == 3
    assert "Collecting trl" in capsys.readouterr().out


STUB_INSTALL = textwrap.dedent("""\
    import os, sys
    print("pip install (stub)", flush=True)
    sys.exit(int(os.environ["STUB_PIP_EXIT"]))
""")

FAKE_GIT = textwrap.dedent(f"""\
    #!/bin/sh
    # git clone ... <repo> <target>: copy what the bootstrap needs from the course under test.
    for last; do :; done
    [ -n "$FAKE_GIT_FAIL" ] && exit 128
    mkdir -p "$last/scripts" "$last/notebooks"
    cp {ROOT}/requirements.txt "$last/"
    cp {ROOT}/scripts/colab_bootstrap.py "$last/scripts/"
    cp "$STUB_INSTALL" "$last/scripts/install_stack.py"
""")


@pytest.fixture
def colab_cell(tmp_path, monkeypatch):
    """The real bootstrap cell, run as on Colab against a fake git and a stub install."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(FAKE_GIT)
    (bin_dir / "git").chmod(0o755)
    (tmp_path / "stub_install.py").write_text(STUB_INSTALL)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STUB_INSTALL", str(tmp_path / "stub_install.py"))
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    clone = tmp_path / "content" / "grpo-course"
    clone.parent.mkdir()
    source = BOOTSTRAP.replace('"/content/grpo-course"', repr(str(clone)))
    assert source != BOOTSTRAP

    def run(pip_exit: int) -> None:
        monkeypatch.setenv("STUB_PIP_EXIT", str(pip_exit))
        sys.modules.pop("colab_bootstrap", None)  # the clone's copy, as in a fresh kernel
        exec(compile(source, "bootstrap-cell", "exec"), {})

    return run, clone


def test_bootstrap_cell_retries_a_failed_install_even_though_the_clone_exists(colab_cell, capfd):
    run, clone = colab_cell
    with pytest.raises(SystemExit) as stop:
        run(pip_exit=1)
    assert clone.is_dir() and len(str(stop.value.code).splitlines()) == 2
    run(pip_exit=0)  # the rerun installs again: no stamp was written by the failure
    assert "pip install (stub)" in capfd.readouterr().out
    assert colab_bootstrap.stamp_path(clone).exists()
    assert Path.cwd() == clone / "notebooks"
    run(pip_exit=1)  # a third run skips the install (the stub would fail)
    assert "already installed" in capfd.readouterr().out


def test_bootstrap_cell_after_a_half_clone_clones_again(colab_cell, monkeypatch):
    run, clone = colab_cell
    (clone.parent / "grpo-course.partial").mkdir()  # an interrupted clone
    monkeypatch.setenv("FAKE_GIT_FAIL", "1")
    with pytest.raises(SystemExit) as stop:
        run(pip_exit=0)
    assert "Could not clone" in str(stop.value.code) and "\nFix: " in str(stop.value.code)
    assert not clone.exists()  # a failed clone never looks like a finished one
    monkeypatch.delenv("FAKE_GIT_FAIL")
    run(pip_exit=0)
    assert (clone / "scripts" / "colab_bootstrap.py").exists()
    assert not (clone.parent / "grpo-course.partial").exists()

