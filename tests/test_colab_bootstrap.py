"""The Colab bootstrap: retried until an install succeeds, two-line failure, the install each
notebook needs, and a cell that stops for a restart when the install changed an imported package.

pip is never run: `install_stack.py` is replaced by a stub (or `run` by a fake) in a fake clone.
Packages "imported before the install" are small distributions written into a temporary folder.
"""

import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from helpers.paths import ROOT
from scripts import colab_bootstrap, install_stack
from scripts.sync_notebooks import bootstrap_cell

GPU_NOTEBOOK, LIGHT_NOTEBOOK = "05_grpo_training.ipynb", "02_gsm8k_formatting.ipynb"


@pytest.fixture(autouse=True)
def no_pending_restart(monkeypatch):
    """A stop for a restart marks this process (RESTART_PENDING): undone after each test."""
    monkeypatch.setenv(colab_bootstrap.RESTART_PENDING, "")  # recorded, so it is unset after
    monkeypatch.delenv(colab_bootstrap.RESTART_PENDING)


def write_distribution(site: Path, name: str, version: str, package: str) -> None:
    """An installed distribution `name`==`version` holding the module `package` (a/b: a
    namespace package a, module b), as pip leaves one: dist-info with METADATA and RECORD."""
    for old in site.glob(f"{name.replace('-', '_')}-*.dist-info"):
        shutil.rmtree(old)
    module = site / package.replace(".", "/") / "__init__.py"
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(f"__version__ = {version!r}\n")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    files = [module.relative_to(site).as_posix(), f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))


@pytest.fixture
def course(tmp_path):
    """A course folder with requirements.txt, as the clone has it."""
    folder = tmp_path / "grpo-course"
    (folder / "scripts").mkdir(parents=True)
    (folder / "requirements.txt").write_text("trl==0.22.2\n")
    return folder


def fake_pip(returncodes):
    """A stand-in for running install_stack.py: records the command, returns the next code.

    Tests about the stamp pass `modules={}` (nothing imported): no restart can come up."""
    calls = []

    def run(command, cwd):
        calls.append([str(cwd), *command])
        return returncodes[len(calls) - 1]

    return run, calls


def test_failed_install_writes_no_stamp_and_says_error_and_fix_in_two_lines(course):
    run, calls = fake_pip([1])
    with pytest.raises(SystemExit) as stop:
        colab_bootstrap.ensure_stack(course, run=run, modules={})
    lines = str(stop.value.code).splitlines()
    assert len(lines) == 2
    assert "failed" in lines[0] and "exit code 1" in lines[0]
    assert lines[1].startswith("Fix: Runtime → Disconnect and delete runtime")
    assert not colab_bootstrap.stamp_path(course).exists()
    assert calls[0][0] == str(course) and calls[0][-3:] == ["-m", "scripts.install_stack", "colab"]


def test_a_python_the_locks_do_not_take_points_at_the_runtime_version(course):
    run, _ = fake_pip([install_stack.WRONG_PYTHON])
    with pytest.raises(SystemExit) as stop:
        colab_bootstrap.ensure_stack(course, run=run, modules={})
    first, fix = str(stop.value.code).splitlines()
    assert "Python" in first and "runtime version" in fix and "Disconnect" not in fix
    assert colab_bootstrap.WRONG_PYTHON == install_stack.WRONG_PYTHON


def test_missing_stamp_means_install_again_then_skip(course):
    run, calls = fake_pip([1, 0])
    with pytest.raises(SystemExit):
        colab_bootstrap.ensure_stack(course, run=run, modules={})
    assert colab_bootstrap.ensure_stack(course, run=run, modules={}) is True  # retried
    assert colab_bootstrap.is_installed(course)
    assert colab_bootstrap.ensure_stack(course, run=run, modules={}) is False  # the stamp says done
    assert len(calls) == 2


def test_changed_pins_install_again(course):
    run, calls = fake_pip([0, 0])
    colab_bootstrap.ensure_stack(course, run=run, modules={})
    (course / "requirements.txt").write_text("trl==0.23.0\n")
    assert not colab_bootstrap.is_installed(course)
    assert colab_bootstrap.ensure_stack(course, run=run, modules={}) is True


def test_a_changed_lock_installs_again(course):
    run, calls = fake_pip([0, 0])
    (course / "locks").mkdir()
    (course / "locks" / "t4.txt").write_text("torch==2.9.0\n")
    colab_bootstrap.ensure_stack(course, run=run, modules={})
    (course / "locks" / "t4.txt").write_text("torch==2.9.1\n")
    assert not colab_bootstrap.is_installed(course)
    assert colab_bootstrap.ensure_stack(course, run=run, modules={}) is True


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder of installed distributions on sys.path, forgotten again after the test."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        if name.split(".")[0] in {"colabfake_dep", "fakens"}:
            del sys.modules[name]


def test_the_cell_stops_for_a_restart_when_the_install_changed_an_imported_package(course, site):
    write_distribution(site, "colabfake-dep", "1.0", "colabfake_dep")
    import colabfake_dep  # noqa: F401  (imported before the install, as Colab's kernel does)

    def pip_changes_it(command, cwd):
        write_distribution(site, "colabfake-dep", "2.0", "colabfake_dep")
        return 0

    with pytest.raises(SystemExit) as stop:
        colab_bootstrap.ensure_stack(course, run=pip_changes_it)
    message = str(stop.value.code)
    assert message.startswith("Runtime → Restart session, then run all again.")
    assert "colabfake-dep 1.0 → 2.0" in message and "skips the install" in message
    assert colab_bootstrap.is_installed(course)  # the install itself succeeded


@pytest.mark.parametrize("new, stops", [("2.0", False), ("3.0", True)])
def test_a_package_checked_safe_to_leave_stale_needs_no_restart_at_the_checked_version_only(
        course, site, monkeypatch, capsys, new, stops):
    """colabfake-dep is checked at 2.0: an upgrade to 2.0 goes on with one line, to 3.0 (not
    checked) stops for a restart."""
    monkeypatch.setitem(colab_bootstrap.STALE_IS_SAFE, "colabfake-dep", ("2.0", "checked"))
    write_distribution(site, "colabfake-dep", "1.0", "colabfake_dep")
    import colabfake_dep  # noqa: F401

    def pip_changes_it(command, cwd):
        write_distribution(site, "colabfake-dep", new, "colabfake_dep")
        return 0

    if stops:
        with pytest.raises(SystemExit) as stop:
            colab_bootstrap.ensure_stack(course, run=pip_changes_it)
        assert str(stop.value.code).startswith(colab_bootstrap.RESTART)
        assert "colabfake-dep 1.0 → 3.0" in str(stop.value.code)
    else:
        assert colab_bootstrap.ensure_stack(course, run=pip_changes_it) is True
        out = capsys.readouterr().out
        assert "upgraded colabfake-dep 1.0 → 2.0" in out and "no restart is needed" in out
        assert "Restart session" not in out


def test_todays_colab_upgrades_need_no_restart_and_any_other_one_does():
    """The full install's upgrades of what Colab's kernel imported (docs/colab.md's table)."""
    today = {"certifi": ("2026.7.22", "2026.10.19.post1"), "setuptools": ("75.2.0", "80.10.2")}
    assert colab_bootstrap.needs_restart(today) == {}
    pyzmq = {"pyzmq": ("26.2.1", "27.3.0")}
    assert colab_bootstrap.needs_restart({**today, **pyzmq}) == pyzmq
    newer = {"certifi": ("2026.7.22", "2026.12.1")}  # not the version that was checked
    assert colab_bootstrap.needs_restart(newer) == newer


def test_the_restart_table_in_the_docs_names_each_package_left_stale_and_why():
    text = (ROOT / "docs" / "colab.md").read_text()
    section = text.split("## The first cell and restarts")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    for name, (version, _) in colab_bootstrap.STALE_IS_SAFE.items():
        row = next((r for r in rows if r.startswith(f"| {name} ")), None)
        assert row is not None and f"→ {version}" in row and "no restart" in row, name


def test_no_stop_when_nothing_imported_changed(course, site, capsys):
    write_distribution(site, "colabfake-dep", "1.0", "colabfake_dep")
    import colabfake_dep  # noqa: F401

    run, _ = fake_pip([0])
    assert colab_bootstrap.ensure_stack(course, run=run) is True  # this session's sys.modules
    assert "Restart" not in capsys.readouterr().out


def test_only_the_distributions_whose_files_were_imported_count(site):
    """A namespace shared by several distributions (like `google`) counts the imported one only."""
    write_distribution(site, "fakens-used", "1.0", "fakens.used")
    write_distribution(site, "fakens-unused", "3.0", "fakens.unused")
    import fakens.used  # noqa: F401

    loaded = colab_bootstrap.loaded_versions()
    assert loaded.get("fakens-used") == "1.0" and "fakens-unused" not in loaded


def test_each_notebook_gets_its_install_and_a_full_install_serves_a_light_notebook(tmp_path):
    course = tmp_path / "grpo-course"
    (course / "helpers").mkdir(parents=True)
    shutil.copy(ROOT / "helpers" / "course.py", course / "helpers")
    (course / "requirements.txt").write_text("trl==0.22.2\n")
    run, calls = fake_pip([0, 0])

    def ensure(notebook: str) -> bool:
        return colab_bootstrap.ensure_stack(course, notebook, run=run, modules={})

    assert ensure(LIGHT_NOTEBOOK) is True
    assert calls[-1][-2:] == ["colab", "--light"]
    assert ensure(LIGHT_NOTEBOOK) is False
    assert ensure(GPU_NOTEBOOK) is True  # the light install is not enough for it
    assert calls[-1][-1] == "colab" and colab_bootstrap.installed_kind(course) == "full"
    assert ensure(LIGHT_NOTEBOOK) is False
    assert len(calls) == 2


def test_relay_streams_output_and_returns_the_exit_code(capsys):
    code = colab_bootstrap.relay([sys.executable, "-c", "print('Collecting trl'); exit(3)"], ROOT)
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
    mkdir -p "$last/scripts" "$last/notebooks" "$last/helpers"
    cp {ROOT}/requirements.txt "$last/"
    cp {ROOT}/helpers/course.py {ROOT}/helpers/prelude.py "$last/helpers/"
    touch "$last/helpers/__init__.py"
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
    cell = bootstrap_cell(GPU_NOTEBOOK)
    source = cell.replace('"/content/grpo-course"', repr(str(clone)))
    assert source != cell

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
    assert "already in this runtime" in capfd.readouterr().out


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



# --- a Colab kernel, simulated: a process with google.colab and a package imported at start ---

SESSION = textwrap.dedent("""\
    import importlib.machinery, sys, types
    colab = types.ModuleType("google.colab")  # what makes the cell take its Colab branch
    colab.__spec__ = importlib.machinery.ModuleSpec("google.colab", None)
    sys.modules["google.colab"] = colab
    import colabfake_dep  # imported by the kernel before any cell, as Colab's imports pyzmq
    stopped = False
    for _ in range(int(sys.argv[2])):  # the cell, run this many times in this one kernel
        try:
            exec(compile(open(sys.argv[1]).read(), "bootstrap-cell", "exec"), {})
        except SystemExit as stop:
            print(f"CELL STOPPED: {stop.code}")
            stopped = True
            continue
        print(f"CELL DONE with colabfake_dep {colabfake_dep.__version__}")
    sys.exit(3 if stopped else 0)
""")

BUMPING_INSTALL = textwrap.dedent("""\
    # Stands in for install_stack.py: the install moves colabfake-dep from 1.0 to 2.0, once.
    import os, pathlib, sys
    site = pathlib.Path(os.environ["FAKE_SITE"])
    if (site / "colabfake_dep-2.0.dist-info").exists():
        sys.exit("the stub ran twice: the rerun after the restart must skip the install")
    (site / "colabfake_dep-1.0.dist-info").rename(site / "colabfake_dep-2.0.dist-info")
    for name in ("METADATA", "RECORD"):
        path = site / "colabfake_dep-2.0.dist-info" / name
        path.write_text(path.read_text().replace("1.0", "2.0"))
    (site / "colabfake_dep" / "__init__.py").write_text("__version__ = '2.0'\\n")
    print("pip install (stub): colabfake-dep 1.0 -> 2.0", flush=True)
""")


def kernel_sessions(tmp_path: Path):
    """A fake clone whose install moves colabfake-dep 1.0 (imported by every kernel before the
    cell) to 2.0, once; returns `session(runs)`: a fresh kernel running the cell `runs` times."""
    site, bin_dir, clone = tmp_path / "site", tmp_path / "bin", tmp_path / "content" / "grpo-course"
    write_distribution(site, "colabfake-dep", "1.0", "colabfake_dep")
    bin_dir.mkdir()
    (bin_dir / "git").write_text(FAKE_GIT)
    (bin_dir / "git").chmod(0o755)
    (tmp_path / "stub_install.py").write_text(BUMPING_INSTALL)
    clone.parent.mkdir()
    cell = tmp_path / "cell.py"
    cell.write_text(bootstrap_cell(GPU_NOTEBOOK).replace('"/content/grpo-course"',
                                                         repr(str(clone))))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(site), "FAKE_SITE": str(site),
           "STUB_INSTALL": str(tmp_path / "stub_install.py")}
    env.pop(colab_bootstrap.RESTART_PENDING, None)

    def session(runs: int = 1) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", SESSION, str(cell), str(runs)], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)

    return session


def test_a_colab_kernel_stops_at_the_first_cell_then_runs_all_after_one_restart(tmp_path):
    """Session 1 imports colabfake-dep 1.0 before the cell, and the install moves it to 2.0: the
    cell stops with the restart sentence. Session 2, the restarted kernel, runs the same cell:
    the stamp skips the install and the cell goes through, so "Run all" carries on."""
    session = kernel_sessions(tmp_path)
    first = session()
    assert first.returncode == 3, first.stderr
    assert "pip install (stub)" in first.stdout
    stopped = first.stdout.split("CELL STOPPED: ")[1]
    assert stopped.startswith("Runtime → Restart session, then run all again.")
    assert "colabfake-dep 1.0 → 2.0" in stopped
    second = session()  # Runtime → Restart session: a fresh kernel, then Run all
    assert second.returncode == 0, second.stdout + second.stderr
    assert "pip install (stub)" not in second.stdout
    assert "already in this runtime" in second.stdout
    assert "CELL DONE with colabfake_dep 2.0" in second.stdout


def test_rerunning_the_first_cell_instead_of_restarting_stops_again(tmp_path):
    """The learner reruns the cell rather than restarting: the kernel still holds colabfake-dep
    1.0, so the cell stops again with the same sentence, and installs nothing. Before, the stamp
    made the rerun print "already in this runtime" and Run all went on in the stale session."""
    session = kernel_sessions(tmp_path)
    same_kernel = session(runs=2)
    assert same_kernel.returncode == 3, same_kernel.stderr
    assert same_kernel.stdout.count("pip install (stub)") == 1
    # The rerun prints the cell's own first lines again (the unpublished-target note) before it
    # stops: what each stop said is the text up to those lines.
    first, again = (stop.split("\nUnpublished target:")[0].strip()
                    for stop in same_kernel.stdout.split("CELL STOPPED: ")[1:])
    assert again == first
    assert again.startswith("Runtime → Restart session, then run all again.")
    assert "CELL DONE" not in same_kernel.stdout and "already in this runtime" not in again
    restarted = session()
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert "CELL DONE with colabfake_dep 2.0" in restarted.stdout
