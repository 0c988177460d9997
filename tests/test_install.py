"""The installer: one source of versions, a CPU install that can never pull CUDA torch, and a GPU
install that is one resolve of the lock."""

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.hardware import A100_40GB, TESLA_T4
from helpers.paths import ROOT
from helpers.stack import check_pins, pin_report, read_pins
from scripts import install_stack
from scripts.lock_stack import LIGHT, PYTHONS, Lock, gpu_class, read_colab_record, read_lock

FRAGILE = ["unsloth", "unsloth_zoo", "transformers", "trl", "peft", "datasets", "bitsandbytes",
           "accelerate", "matplotlib", "math-verify"]


def test_requirements_pin_every_fragile_package_exactly():
    pins = read_pins()
    assert sorted(pins) == sorted(FRAGILE)
    assert pins["transformers"] == "4.56.2" and pins["trl"] == "0.22.2"
    for line in install_stack.read_requirements("requirements.txt"):
        assert "==" in line, f"unpinned requirement: {line}"


def test_dev_requirements_are_pinned_too():
    assert all("==" in line for line in install_stack.read_requirements("requirements-dev.txt"))


def recorder(calls: list, tool: str = "", returncode: int = 0):
    """A stand-in for try_pip (tool "") or try_uv ("uv"): records the arguments, with a
    requirements file (`-r`) read in place of its path; uv's calls start with "uv"."""

    def fake(*positional, quiet):
        args = list(positional[2:] if tool else positional[1:])  # (uv,) python, *args
        if "-r" in args:
            at = args.index("-r") + 1
            args[at] = Path(args[at]).read_text().splitlines()
        calls.append(tuple(a if isinstance(a, str) else tuple(a) for a in
                           ([tool] if tool else []) + args))
        return subprocess.CompletedProcess(args, returncode=returncode)

    return fake


@pytest.fixture
def recorded(monkeypatch):
    """Each pip or uv call's arguments (uv's start with "uv"), with a requirements file (`-r`)
    read in place of its path. uv is there at once (fetch_uv is not run).

    It runs as on Colab's Python, the first the locks are checked for."""
    calls = []
    monkeypatch.setattr(install_stack, "THIS_PYTHON", tuple(map(int, PYTHONS[0].split("."))))
    monkeypatch.setattr(install_stack, "try_pip", recorder(calls))
    monkeypatch.setattr(install_stack, "try_uv", recorder(calls, "uv"))
    monkeypatch.setattr(install_stack, "fetch_uv", lambda python, folder: "/fetched/uv")
    monkeypatch.setattr(install_stack, "unseen_pins", lambda python, requirements: [])
    return calls


def test_cpu_install_pins_cpu_torch_and_keeps_unsloth_deps_out(recorded):
    install_stack.install("python", None, [install_stack.CPU_TORCH], quiet=True)
    assert recorded[0] == ("torch==2.13.0+cpu",)  # the +cpu tag: no CUDA wheel can match
    for args in recorded[1:]:
        if "--no-deps" in args:
            assert set(args) == {"--no-deps", "unsloth==2026.10.9", "unsloth_zoo==2026.10.9"}
        else:
            assert "torch==2.13.0+cpu" in args  # held fixed in the same resolve
            assert not any(a.startswith(("unsloth", "vllm", "-r")) for a in args)


def test_cpu_install_lets_the_compiler_start_after_torch_and_after_the_stack(recorded):
    steps = []
    install_stack.install("python", None, [install_stack.CPU_TORCH], quiet=True,
                          step_done=lambda: steps.append(len(recorded)))
    assert steps == [1, 3]  # after torch's own install, and after the stack (with unsloth)


def test_the_compiler_leaves_no_file_uncompiled_whatever_pip_does_meanwhile(tmp_path):
    site = tmp_path / "lib" / "python3" / "site-packages"
    (site / "pip").mkdir(parents=True)
    (site / "torch").mkdir()
    (site / "pip" / "main.py").write_text("X = 1\n")
    (site / "torch" / "early.py").write_text("X = 1\n")
    compiler = install_stack.Compiler(sys.executable, tmp_path / "lib")
    compiler.step_done()  # a pass in the background, without pip's own files
    first = compiler.running
    going = SimpleNamespace(poll=lambda: None)  # as if that pass were still going
    compiler.running = going
    compiler.step_done()
    assert compiler.running is going  # no second pass beside it
    compiler.running = first
    first.wait()
    pyc = {p.name.split(".")[0] for p in site.rglob("*.pyc")}
    assert pyc == {"early"}
    (site / "late").mkdir()  # a package installed after the pass
    (site / "late" / "late.py").write_text("X = 2\n")
    early = site / "torch" / "early.py"
    early.write_text("X = 'changed'\n")  # and a file pip replaced, seconds later
    os.utime(early, (early.stat().st_mtime + 2,) * 2)
    compiler.finish()
    pyc = {p.name.split(".")[0]: p for p in site.rglob("*.pyc")}
    assert set(pyc) == {"early", "late", "main"}
    assert b"changed" in pyc["early"].read_bytes()


def test_cpu_torch_falls_back_to_pytorchs_cpu_index(monkeypatch):
    calls = []

    def fake_pip(python, *args, quiet):
        calls.append(args)
        return subprocess.CompletedProcess(args, returncode=1 if len(calls) == 1 else 0)

    monkeypatch.setattr(install_stack, "try_pip", fake_pip)
    install_stack.install("python", None, [install_stack.CPU_TORCH], quiet=True)
    assert calls[1] == ("--extra-index-url", install_stack.TORCH_CPU_INDEX, "torch==2.13.0+cpu")


@pytest.mark.parametrize("gpu", [TESLA_T4, A100_40GB], ids=["t4", "ampere"])
def test_gpu_install_is_one_resolve_of_the_whole_lock(recorded, gpu):
    install_stack.install("python", gpu, [], quiet=True)
    ((flag, lines),) = recorded  # one pip call: torch is never downloaded twice
    lock = read_lock(gpu_class(gpu))
    assert flag == "-r" and lines == tuple(f"{p}=={v}" for p, v in sorted(lock.pins.items()))
    assert "vllm==0.11.2" in lines and "unsloth==2026.10.9" in lines
    assert "torchao==0.17.0" in lines and "torch==2.9.0" in lines


def test_colab_keeps_colabs_numpy_or_pillow_only_inside_the_hold_range(recorded, monkeypatch):
    colab = {"numpy": "2.0.2", "pillow": "9.5.0"}  # numpy fits the lock's range, pillow does not
    monkeypatch.setattr(install_stack, "installed_version", colab.get)
    install_stack.install("python", TESLA_T4, [], quiet=True, colab=True)
    ((tool, flag, lines),) = recorded
    assert (tool, flag) == ("uv", "-r")  # one uv resolve of the requirements file
    assert "numpy==2.0.2" in lines
    assert f"pillow=={read_lock('t4').pins['pillow']}" in lines


def test_colab_installs_exactly_the_lock_with_uv_and_never_pip(recorded, monkeypatch):
    monkeypatch.setattr(install_stack, "installed_version", {}.get)  # nothing held
    install_stack.install("python", TESLA_T4, [], quiet=True, colab=True)
    ((tool, flag, lines),) = recorded
    lock = read_lock("t4")
    assert (tool, flag) == ("uv", "-r")
    assert lines == tuple(f"{p}=={v}" for p, v in sorted(lock.pins.items()))  # every pin, exact
    assert len(lines) == len(lock.pins) == 206


@pytest.mark.parametrize("uv_fails", ["cannot be fetched", "fails", "installs out of sight"])
def test_colab_falls_back_to_pip_with_the_same_pins(monkeypatch, capsys, uv_fails):
    calls = []
    monkeypatch.setattr(install_stack, "THIS_PYTHON", tuple(map(int, PYTHONS[0].split("."))))
    monkeypatch.setattr(install_stack, "installed_version", {}.get)
    monkeypatch.setattr(install_stack, "try_pip", recorder(calls))
    monkeypatch.setattr(install_stack, "try_uv", recorder(
        calls, "uv", returncode=1 if uv_fails == "fails" else 0))
    monkeypatch.setattr(install_stack, "fetch_uv", lambda python, folder: (
        None if uv_fails == "cannot be fetched" else "/fetched/uv"))
    monkeypatch.setattr(install_stack, "unseen_pins", lambda python, requirements: (
        ["torch==2.9.0"] if uv_fails == "installs out of sight" else []))
    install_stack.install("python", TESLA_T4, [], quiet=True, colab=True)
    *uv, (no_cache, flag, lines) = calls
    assert (no_cache, flag) == ("--no-cache-dir", "-r")  # Colab's disk is small
    assert lines == tuple(f"{p}=={v}" for p, v in sorted(read_lock("t4").pins.items()))
    assert len(uv) == (0 if uv_fails == "cannot be fetched" else 1)
    assert "so pip installs the stack instead" in capsys.readouterr().out


def test_after_uv_the_pins_this_python_does_not_see_are_named(tmp_path):
    requirements = tmp_path / "t4.txt"
    have = f"pytest=={version('pytest')}"
    requirements.write_text(f"{have}\nno-such-package-xyz==1.0\npytest-other==0.0.1\n")
    assert install_stack.unseen_pins(sys.executable, requirements) == [
        "no-such-package-xyz==1.0", "pytest-other==0.0.1"]
    requirements.write_text(f"{have}\n")
    assert install_stack.unseen_pins(sys.executable, requirements) == []


def test_the_installer_switch_makes_colab_install_with_pip(recorded, monkeypatch):
    monkeypatch.setattr(install_stack, "installed_version", {}.get)
    monkeypatch.setenv(install_stack.INSTALLER_ENV, "pip")
    install_stack.install("python", TESLA_T4, [], quiet=True, colab=True)
    ((no_cache, flag, lines),) = recorded
    assert (no_cache, flag) == ("--no-cache-dir", "-r") and len(lines) == 206


def test_uv_is_fetched_into_a_folder_by_pip_not_into_the_runtime(monkeypatch, tmp_path):
    calls = []

    def fake_pip(python, *args, quiet):
        calls.append(args)
        target = Path(args[args.index("--target") + 1])
        (target / "bin").mkdir(parents=True)
        (target / "bin" / "uv").write_text("")
        return subprocess.CompletedProcess(args, returncode=0)

    monkeypatch.setattr(install_stack, "try_pip", fake_pip)
    assert install_stack.fetch_uv("python", tmp_path / "uv") == str(tmp_path / "uv" / "bin" / "uv")
    ((*flags, pinned),) = calls
    assert pinned == install_stack.UV and re.fullmatch(r"uv==[\d.]+", pinned)  # one version
    assert "--no-cache-dir" in flags and "--target" in flags
    failed = recorder([], returncode=1)
    monkeypatch.setattr(install_stack, "try_pip", failed)
    assert install_stack.fetch_uv("python", tmp_path / "other") is None


def fake_uv(folder: Path) -> Path:
    """A uv that prints its arguments, then every UV_* variable it was given (name=value)."""
    uv = folder / "uv"
    uv.write_text('#!/bin/sh\necho "$@"\nenv | grep "^UV_" | sort\n')
    uv.chmod(0o755)
    return uv


def test_uv_installs_into_the_given_python_without_a_cache_and_with_its_resolver(tmp_path):
    done = install_stack.try_uv(str(fake_uv(tmp_path)), "/colab/python", "-r", "t4.txt",
                                quiet=True)
    assert done.stdout.split() == [
        "pip", "install", "--no-config", "--python", "/colab/python", "--break-system-packages",
        "--no-cache", "-r", "t4.txt"]  # no --no-deps: uv checks the lock, as pip does


@pytest.mark.parametrize("quiet", [True, False], ids=["captured", "streamed"])
def test_colabs_stale_uv_settings_never_reach_uv(tmp_path, monkeypatch, capsys, quiet):
    """Colab has persisted UV_CONSTRAINT (and UV_BUILD_CONSTRAINT) pointing at a file that is
    gone, an empty UV_PRERELEASE and UV_SYSTEM_PYTHON (googlecolab/colabtools#5237,
    astral-sh/uv#12724): uv 0.13.9 then fails with "File not found" or a CLI error, and pip
    installs instead, twice as slow. Before, the child inherited all of them."""
    stale = {"UV_CONSTRAINT": "/backend-container/containers/requirements.constraints",
             "UV_BUILD_CONSTRAINT": "/backend-container/containers/build.constraints",
             "UV_PRERELEASE": "", "UV_SYSTEM_PYTHON": "true"}
    for name, value in stale.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")  # not uv's: left as it is
    done = install_stack.try_uv(str(fake_uv(tmp_path)), "/colab/python", "-r", "t4.txt",
                                quiet=quiet)
    out = done.stdout if quiet else capsys.readouterr().out
    assert done.returncode == 0
    assert not [line for line in out.splitlines() if line.startswith("UV_")], out
    assert "--no-config" in out.split()
    said = capsys.readouterr().out if quiet else out
    assert ("Running uv without this runtime's UV_BUILD_CONSTRAINT, UV_CONSTRAINT, "
            "UV_PRERELEASE, UV_SYSTEM_PYTHON: the lock alone decides") in said
    assert os.environ["UV_CONSTRAINT"] == stale["UV_CONSTRAINT"]  # this process keeps its own


def test_the_installer_runs_as_a_module_of_the_course_before_any_venv():
    """make and the Colab bootstrap run `python3 -m scripts.install_stack` in the course's root,
    before anything is installed: it starts on the standard library and the course alone."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "scripts.install_stack", "--help"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "{venv,colab,gpu}" in done.stdout, done.stderr


def test_held_pins_keep_a_version_only_inside_its_range():
    lock = Lock({"numpy": "2.2.6", "pillow": "11.0.0", "torch": "2.9.0"},
                {"numpy": ">=1.25,<2.3", "pillow": ">=10"})
    found = install_stack.held_pins(lock, {"numpy": "2.3.1", "pillow": "10.4.0", "torch": "2.8"})
    assert found == {"numpy": "2.2.6", "pillow": "10.4.0", "torch": "2.9.0"}
    assert install_stack.held_pins(lock, {}) == lock.pins  # not installed: the locked version


def test_a_failed_pip_run_exits_with_the_error_and_the_fix_in_two_lines(capsys):
    with pytest.raises(SystemExit) as stopped:
        install_stack.pip(sys.executable, "--no-index", "no-such-package-xyz==1.0", quiet=False,
                          colab=True)
    message = str(stopped.value.code).splitlines()
    assert len(message) == 2 and "no-such-package-xyz" in message[0]
    assert message[0].startswith("Error:") and message[1].startswith("Fix: Runtime > Disconnect")
    assert "no-such-package-xyz" in capsys.readouterr().out  # pip's own output was streamed


def test_pip_output_streams_with_a_heartbeat_in_long_silences(monkeypatch, capsys):
    monkeypatch.setattr(install_stack, "HEARTBEAT_S", 0.3)
    code = "import time; print('first', flush=True); time.sleep(1.0); print('last')"
    done = install_stack.stream([sys.executable, "-c", code])
    out = capsys.readouterr().out
    assert done.returncode == 0 and done.stdout == "first\nlast\n"
    assert out.index("first") < out.index("still working") < out.index("last")


CONFLICTS = [
    "Successfully built x\n",
    f"{install_stack.CONFLICTS_HEADER}. This behaviour is the source of the following dependency "
    "conflicts.\n",
    "google-colab 1.0.0 requires pandas==2.2.2, but you have pandas 2.3.3 which is incompatible.\n",
    "cuda-python 12.9.7 requires cuda-bindings~=12.9.7, but you have cuda-bindings 13.0.3 which "
    "is incompatible.\n",
]


def test_pips_known_conflicts_become_one_sentence():
    shown = install_stack.ConflictFilter()
    out = [line for line in CONFLICTS for line in shown.feed(line)]
    out += shown.feed("Successfully installed trl-0.22.2\n")
    assert out[0] == "Successfully built x\n" and out[-1].startswith("Successfully installed")
    (note,) = out[1:-1]
    assert note.startswith("Note: pip lists 2 conflict(s)") and "google-colab" in note
    assert "cuda-python" in note and "ERROR" not in note


def test_an_unknown_conflict_is_shown_as_pip_wrote_it(monkeypatch, capsys):
    unknown = "trl 0.22.2 requires transformers>=4.56.1, but you have transformers 4.1 which is " \
              "incompatible.\n"
    script = "import sys; sys.stdout.write(" + repr("".join([*CONFLICTS, unknown])) + ")"
    install_stack.stream([sys.executable, "-c", script])
    out = capsys.readouterr().out
    assert install_stack.CONFLICTS_HEADER in out and unknown in out  # the header, then the line
    assert "google-colab 1.0.0 requires" not in out and "Note: pip lists 2 conflict(s)" in out


@pytest.mark.parametrize("python", PYTHONS)
def test_the_locked_pythons_install(python):
    version = tuple(map(int, python.split(".")))
    assert install_stack.python_problem(version, colab=True) is None
    assert install_stack.python_problem(version, colab=False) is None


def test_another_python_stops_with_one_sentence_that_names_the_fix(monkeypatch, recorded, capsys):
    on_colab = install_stack.python_problem((3, 14), colab=True)
    assert "Python 3.14" in on_colab
    assert "Runtime > Change runtime type > Runtime version" in on_colab
    assert "conda" not in on_colab and on_colab.count(". ") == 0  # one sentence, no conda on Colab
    local = install_stack.python_problem((3, 11), colab=False)
    assert "Python 3.11" in local and "environment.yml" in local
    monkeypatch.setattr(install_stack, "THIS_PYTHON", (3, 11))
    with pytest.raises(SystemExit) as stopped:
        install_stack.install("python", TESLA_T4, [], quiet=True, colab=True)
    assert stopped.value.code == install_stack.WRONG_PYTHON and recorded == []
    assert "Runtime version" in capsys.readouterr().out


def test_colab_holds_every_package_its_kernel_imported_when_the_range_allows(recorded,
                                                                             monkeypatch):
    colab = read_colab_record().imported  # Colab's versions, as recorded
    monkeypatch.setattr(install_stack, "installed_version", colab.get)
    install_stack.install("python", TESLA_T4, [], quiet=True, colab=True)
    ((_, _, lines),) = recorded
    lock = read_lock("t4")
    for package in ("pyzmq", "python-dateutil", "psutil", "numpy", "pillow"):
        assert f"{package}=={colab[package]}" in lines, package  # no restart for these
    assert f"setuptools=={lock.pins['setuptools']}" in lines  # vLLM needs setuptools >= 77


def test_light_install_keeps_colabs_torch_and_installs_no_gpu_stack(recorded, monkeypatch,
                                                                    capsys):
    colab = {**read_colab_record().imported, "torch": "2.11.0+cu128"}
    monkeypatch.setattr(install_stack, "installed_version", colab.get)
    assert install_stack.install_light("python", quiet=True) is True
    ((tool, flag, lines),) = recorded
    assert (tool, flag) == ("uv", "-r")
    assert "torch==2.11.0+cu128" in lines  # named as it is, so that pip leaves it alone
    assert not [line for line in lines if line.startswith(("vllm", "unsloth", "xformers"))]
    assert f"trl=={read_lock(LIGHT).pins['trl']}" in lines
    assert f"numpy=={colab['numpy']}" in lines
    assert "on Colab's torch 2.11.0+cu128" in capsys.readouterr().out


def test_light_install_gives_way_to_the_full_one_when_colabs_torch_is_out_of_range(
        recorded, monkeypatch, capsys):
    monkeypatch.setattr(install_stack, "installed_version", {"torch": "2.5.1"}.get)
    assert install_stack.install_light("python", quiet=True) is False
    assert recorded == [] and "installing the full stack instead" in capsys.readouterr().out
    monkeypatch.setattr(install_stack, "installed_version", {}.get)
    assert install_stack.install_light("python", quiet=True) is False  # no torch at all


def test_environment_yml_gives_a_locked_python_and_leaves_packages_to_the_lock():
    text = (ROOT / "environment.yml").read_text()
    python = text.split("python=")[1].split()[0]
    assert python in PYTHONS and "python3 -m scripts.install_stack gpu" in text
    assert "requirements" not in text.split("dependencies:")[1]  # no pip resolve outside a lock


def test_pin_report_flags_a_mismatch_with_the_fix():
    report = pin_report(check_pins({"trl": "0.0.1", "peft": read_pins()["peft"]}))
    trl_line = next(line for line in report.splitlines() if line.startswith("trl"))
    assert "MISMATCH" in trl_line and "rerun" in trl_line
    assert next(line for line in report.splitlines() if line.startswith("peft")).endswith("ok")
