"""The installer: one source of versions, and a CPU install that can never pull CUDA torch."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

from helpers.hardware import TESLA_T4
from helpers.stack import check_pins, pin_report, read_pins

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
    calls = []

    def fake_pip(python, *args, quiet):
        calls.append(args)
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
            assert not any(a.startswith(("unsloth", "vllm")) for a in args)


def test_cpu_torch_falls_back_to_pytorchs_cpu_index(monkeypatch):
    calls = []

    def fake_pip(python, *args, quiet):
        calls.append(args)
        return subprocess.CompletedProcess(args, returncode=1 if len(calls) == 1 else 0)

    monkeypatch.setattr(install_stack, "try_pip", fake_pip)
    install_stack.install("python", None, [install_stack.CPU_TORCH], quiet=True)
    assert calls[1] == ("--extra-index-url", install_stack.TORCH_CPU_INDEX, "torch==2.13.0+cpu")


def test_gpu_install_adds_vllm_by_gpu_class(recorded):
    install_stack.install("python", TESLA_T4, [], quiet=True)
    (args,) = recorded
    assert "vllm==0.11.2" in args and "unsloth==2026.10.9" in args


def test_environment_yml_uses_the_same_requirement_files():
    text = (ROOT / "environment.yml").read_text()
    assert "-r requirements.txt" in text and "==" not in text


def test_pin_report_flags_a_mismatch_with_the_fix():
    report = pin_report(check_pins({"trl": "0.0.1", "peft": read_pins()["peft"]}))
    trl_line = next(line for line in report.splitlines() if line.startswith("trl"))
    assert "MISMATCH" in trl_line and "rerun" in trl_line
    assert next(line for line in report.splitlines() if line.startswith("peft")).endswith("ok")
