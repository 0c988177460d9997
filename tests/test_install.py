"""The installer: one source of versions, and a CPU install that can never pull CUDA torch."""

import importlib.util
from pathlib import Path

import pytest

from helpers.hardware import TESLA_T4
from helpers.stack import check_pins, pin_report, read_pins

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("install_stack", ROOT / "scripts" / "install_stack.py")
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
    monkeypatch.setattr(install_stack, "pip", lambda python, *args, quiet: calls.append(args))
    return calls


def test_cpu_install_pins_cpu_torch_and_keeps_unsloth_deps_out(recorded):
    install_stack.install("python", None, [install_stack.CPU_TORCH], quiet=True)
    assert recorded[0] == ("torch==2.13.0",)
    for args in recorded[1:]:
        if "--no-deps" in args:
            assert set(args) == {"--no-deps", "unsloth==2026.10.9", "unsloth_zoo==2026.10.9"}
        else:
            assert "torch==2.13.0" in args  # held fixed in the same resolve
            assert not any(a.startswith(("unsloth", "vllm")) for a in args)


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
