"""The installer: one source of versions, a CPU install that can never pull CUDA torch, and a GPU
install that is one resolve of the lock."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.hardware import A100_40GB, TESLA_T4
from helpers.stack import check_pins, pin_report, read_pins
from scripts.lock_stack import LIGHT, PYTHONS, Lock, gpu_class, read_colab_record, read_lock

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "install_stack.py"
spec = importlib.util.spec_from_file_location("install_stack", SCRIPT)
install_stack = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install_stack)

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


@pytest.fixture
def recorded(monkeypatch):
    """Each pip call's arguments, with a requirements file (`-r`) read in place of its path.

    It runs as on Colab's Python, the first the locks are checked for."""
    calls = []
    monkeypatch.setattr(install_stack, "THIS_PYTHON", tuple(map(int, PYTHONS[0].split("."))))

    def fake_pip(python, *args, quiet):
        args = list(args)
        if "-r" in args:
            at = args.index("-r") + 1
            args[at] = Path(args[at]).read_text().splitlines()
        calls.append(tuple(a if isinstance(a, str) else tuple(a) for a in args))
        return subprocess.CompletedProcess(args, returncode=0)

    monkeypatch.setattr(install_stack, "try_pip", fake_pip)
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
    ((no_cache, flag, lines),) = recorded
    assert (no_cache, flag) == ("--no-cache-dir", "-r")  # Colab's disk is small
    assert "numpy==2.0.2" in lines
    assert f"pillow=={read_lock('t4').pins['pillow']}" in lines


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
    ((no_cache, flag, lines),) = recorded
    assert (no_cache, flag) == ("--no-cache-dir", "-r")
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
    assert python in PYTHONS and "install_stack.py gpu" in text
    assert "requirements" not in text.split("dependencies:")[1]  # no pip resolve outside a lock


def test_pin_report_flags_a_mismatch_with_the_fix():
    report = pin_report(check_pins({"trl": "0.0.1", "peft": read_pins()["peft"]}))
    trl_line = next(line for line in report.splitlines() if line.startswith("trl"))
    assert "MISMATCH" in trl_line and "rerun" in trl_line
    assert next(line for line in report.splitlines() if line.startswith("peft")).endswith("ok")
