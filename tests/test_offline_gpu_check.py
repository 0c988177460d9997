"""scripts/offline_gpu_check.py: its carry list against the T4 lock and the size budget, the
trimmed wheel, the plan, and its CPU phases run for real. Among them: a run stopped at its first
checkpoint and resumed in a new process ends with the unbroken run's adapter and losses, bit for
bit, and it does not when the checkpoint's RNG state is not the one it saved."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers.paths import ROOT
from scripts import offline_gpu_check as o


def test_every_carried_wheel_is_the_t4_locks_version():
    pins = o.lock_pins()
    assert {w.name: w.version for w in o.CARRIED} == {
        w.name: pins[o.normalized(w.name)] for w in o.CARRIED}


def test_the_listed_wheels_and_the_tracked_tree_fit_the_budget():
    total = o.listed_bytes() + o.tracked_bytes()
    assert o.size_verdict(total) is None
    assert total <= o.GOAL_MIB * o.MIB, f"{total / o.MIB:.1f} MiB carried"
    assert "over the 64 MiB budget" in o.size_verdict(o.BUDGET_MIB * o.MIB + 1)


def test_a_downloaded_wheel_counts_at_its_own_size(tmp_path: Path):
    trl = next(w for w in o.CARRIED if w.name == "trl")
    (tmp_path / "trl-0.22.2-py3-none-any.whl").write_bytes(b"x" * 1000)
    lines, total = o.carry_lines(tmp_path, tree=0)
    assert total == o.listed_bytes() - trl.bytes + 1000
    assert any("trl-0.22.2-py3-none-any.whl" in line for line in lines)


def test_trimming_keeps_the_python_files_and_the_named_libraries(tmp_path: Path):
    wheel = tmp_path / "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"
    names = ["bitsandbytes/__init__.py", "bitsandbytes/libbitsandbytes_cuda130.so",
             "bitsandbytes/libbitsandbytes_cuda128.so", "bitsandbytes/libbitsandbytes_cpu.so"]
    record = "bitsandbytes-0.50.2.dist-info/RECORD"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in names:
            z.writestr(name, b"\0" * 5000)
        z.writestr(record, "".join(f"{n},sha256=x,5000\n" for n in names) + f"{record},,\n")
    assert o.trim_wheel(wheel) > 0
    with zipfile.ZipFile(wheel) as z:
        kept, lines = set(z.namelist()), z.read(record).decode()
    assert kept == {*names, record} - {"bitsandbytes/libbitsandbytes_cuda128.so"}
    assert "cuda128" not in lines and "cuda130" in lines and "__init__.py" in lines
    assert o.trim_wheel(wheel) == 0  # already trimmed


def test_the_dry_run_lists_every_phase_and_the_carried_wheels(capsys):
    assert o.main(["--dry-run", "--wheels", "/nonexistent"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {phase} " in out for phase in o.PHASE_NAMES)
    assert all(f"{w.name}=={w.version}" in out for w in o.CARRIED)
    assert "of the 64 MiB budget" in out


def test_the_wheels_are_installed_on_python_3_12_only(tmp_path: Path):
    assert "no wheels in" in o.install_skip(tmp_path, (3, 12))
    (tmp_path / "trl-0.22.2-py3-none-any.whl").write_bytes(b"")
    assert o.install_skip(tmp_path, (3, 12)) is None
    assert "for CPython 3.12 and this is 3.11" in o.install_skip(tmp_path, (3, 11))


def test_a_cpu_skips_the_cuda_phases_and_those_whose_needs_failed(tmp_path: Path):
    ran = []

    def child(phase, work, env, log):
        ran.append(phase)
        return o.PhaseResult(phase, "fail" if phase == "resume" else "pass", 1.0)

    results = o.run_phases(o.PHASE_NAMES, tmp_path, "cpu", {}, io.StringIO(), child)
    found = {r.name: (r.status, r.detail) for r in results}
    assert ran == ["train", "resume", "export"]
    assert found["room"] == ("skip", "needs CUDA: it reads torch.cuda.mem_get_info")
    assert found["cross"][0] == "skip" and found["straight"] == ("skip", "needs resume")
    assert found["rerun"] == ("skip", "needs straight")


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """The whole check on this CPU, as a user runs it (with this Python's packages)."""
    work, out = tmp_path_factory.mktemp("work"), tmp_path_factory.mktemp("out")
    done = subprocess.run(
        [sys.executable, "-m", "scripts.offline_gpu_check", "--device", "cpu", "--wheels",
         str(work / "none"), "--work", str(work), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
        env={**os.environ, "GRPO_PROFILE": "smoke"})
    report = json.loads((out / "offline-gpu-check.json").read_text())
    assert done.returncode == 0, (done.stdout[-2000:],
                                  (out / "offline-gpu-check.log").read_text()[-4000:])
    return {"work": work, "report": report, "phases": {p["name"]: p for p in report["phases"]}}


def test_every_phase_a_cpu_can_run_passes(checked):
    phases = checked["phases"]
    assert {n for n, p in phases.items() if p["status"] == "pass"} == {
        "train", "resume", "straight", "rerun", "export"}
    assert {n for n, p in phases.items() if p["status"] == "skip"} == {"install", "room", "cross"}
    assert phases["train"]["data"]["optimizer_state"] == "torch.uint8"  # bitsandbytes' 8-bit
    assert (checked["work"] / "a" / "checkpoints" / "checkpoint-1" / "rng_state.pth").is_file()


def test_a_resumed_run_is_the_unbroken_run_bit_for_bit(checked):
    """Stopped after checkpoint-1, resumed in a new process: the same adapter and losses."""
    assert checked["phases"]["straight"]["data"] == {"adapter_max_abs_diff": 0.0,
                                                     "same_losses": True}
    work = checked["work"]
    assert o.losses(work / "a/checkpoints/checkpoint-2") == o.losses(
        work / "s/checkpoints/checkpoint-2")
    start = work / "a/checkpoints/checkpoint-1"
    assert o.adapter_difference(start, work / "s/checkpoints/checkpoint-2") > 0  # it trained


def test_rerunning_the_stopped_trainer_is_the_unbroken_run_too(checked):
    """Exercise 3 (risk B): stopped inside step 2, rerun on the same trainer object."""
    data = checked["phases"]["rerun"]["data"]
    assert data["stopped_at_micro_step"] % 4 != 0  # inside a step: its completions half used
    assert data["generated_at"] == "0" and data["adapter_max_abs_diff"] == 0.0


def test_a_resume_without_the_saved_rng_state_is_another_run(checked, tmp_path: Path):
    """The same resume with checkpoint-1's torch RNG state replaced: the sampled completions
    differ, and so do the adapter and losses, so the test above can fail."""
    import torch

    work = checked["work"]
    shutil.copytree(work / "a", tmp_path / "a")
    shutil.rmtree(tmp_path / "a/checkpoints/checkpoint-2")
    rng = tmp_path / "a/checkpoints/checkpoint-1/rng_state.pth"
    state = torch.load(rng, weights_only=False)
    state["cpu"] = torch.Generator().manual_seed(12345).get_state()
    torch.save(state, rng)
    done = subprocess.run([sys.executable, "-m", "scripts.offline_gpu_check", "--child", "resume",
                           "--work", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env=o.phase_environment(None, "cpu"))
    assert json.loads((tmp_path / "phase-resume.json").read_text())["status"] == "pass", (
        done.stdout[-3000:])
    resumed, unbroken = tmp_path / "a/checkpoints/checkpoint-2", work / "s/checkpoints/checkpoint-2"
    assert o.adapter_difference(resumed, unbroken) > 0
    assert o.losses(resumed) != o.losses(unbroken)
