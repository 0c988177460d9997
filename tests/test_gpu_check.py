"""scripts/gpu_check.py's non-GPU logic on CPU: the refusal, the step runner, the phases' plan
and budgets (--dry-run), a phase run as its own command, the fp16 path's arguments, the table,
the JSON report and README's T4 slot. The GPU steps themselves run only on a GPU."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from itertools import count
from pathlib import Path

import pytest
import torch

from helpers.grpo_config import grpo_settings, validate
from helpers.hardware import TESLA_T4
from helpers.paths import ROOT
from scripts import gpu_check as g

T4_GPU = {"name": "Tesla T4", "memory_gib": 14.74, "compute_capability": "7.5"}
SETTINGS = {"profile": "t4", "model": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "grpo_steps": 3,
            "command": "scripts/gpu_check.py"}
VERSIONS = {"unsloth": "2026.10.9", "vllm": "0.11.2"}
NOW = datetime(2026, 12, 3, tzinfo=UTC)


def ticking_meter(peaks: list[float]) -> g.Meter:
    """A clock that advances 2 s per reading, and a peak counter that pops given values."""
    ticks = count(step=2.0)
    return g.Meter(clock=lambda: float(next(ticks)), reset_peak=lambda: None,
                   peak_gib=lambda: peaks.pop(0))


def boom() -> None:
    raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")


def test_refuses_in_one_line_without_a_gpu(capsys):
    assert g.main([], has_cuda=lambda: False) == 1
    out = capsys.readouterr().out
    assert out.splitlines() == [g.REFUSAL]
    assert "needs a CUDA GPU" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: it would run")
def test_the_script_refuses_on_this_cpu_machine():
    done = subprocess.run([sys.executable, "-m", "scripts.gpu_check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stdout.strip() == g.REFUSAL


def test_steps_pass_fail_and_skip_with_timing_and_peaks():
    steps = [
        g.Step("load", lambda: {"model": "m"}),
        g.Step("train", boom, ("load",)),
        g.Step("save", lambda: None, ("train",)),
        g.Step("generate", lambda: {"seconds_per_step": 1.23456}, ("load",)),
    ]
    results = g.run_steps(steps, ticking_meter([5.0, 7.5, 6.0]))
    assert [(r.name, r.status) for r in results] == [
        ("load", "pass"), ("train", "fail"), ("save", "skip"), ("generate", "pass")]
    assert [r.seconds for r in results] == [2.0, 2.0, 0.0, 2.0]
    assert [r.peak_gpu_gib for r in results] == [5.0, 7.5, None, 6.0]
    assert results[1].detail == "RuntimeError: CUDA out of memory."
    assert results[2].detail == "needs train"
    assert results[3].detail == "seconds_per_step=1.23"


def test_a_step_can_need_one_that_passed_in_an_earlier_process():
    earlier = [g.StepResult("save_adapter", "pass")]
    (result,) = g.run_steps([g.Step("reload", lambda: None, ("save_adapter",))], g.Meter(),
                            earlier)
    assert result.status == "pass"


def fake_child(failing: str | None = None):
    calls = []

    def child(phase: str, args: argparse.Namespace) -> list[g.StepResult]:
        calls.append(phase)
        return [g.StepResult(n, "fail" if n == failing else "pass", 1.0, 2.0)
                for n in g.PHASES[phase].steps]

    return child, calls


def fake_clock(step: float = 60.0):
    ticks = count(step=step)
    return lambda: float(next(ticks))


def test_all_phases_run_in_order_when_everything_passes(tmp_path: Path, capsys):
    child, calls = fake_child()
    results, seconds = g.run_all(argparse.Namespace(work=tmp_path), child, clock=fake_clock())
    assert calls == ["train", "resume", "reload", "merge", "plain"]
    assert [r.name for r in results] == [n for p in g.PHASES.values() for n in p.steps]
    assert seconds == dict.fromkeys(g.PHASES, 60.0)
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "phase train: 1.0 min of its 3.5 min budget"
    assert said[-1] == "phase plain: 1.0 min of its 0.5 min budget OVER BUDGET"


def test_a_failed_save_skips_every_later_process(tmp_path: Path):
    child, calls = fake_child(failing="save_adapter")
    found, _ = g.run_all(argparse.Namespace(work=tmp_path), child, clock=fake_clock())
    results = {r.name: r for r in found}
    assert calls == ["train", "resume"]
    assert results["reload_adapter"].status == "skip"
    assert results["plain_transformers"].detail == "needs merge_16bit"


def test_a_failed_merge_skips_only_plain_transformers(tmp_path: Path):
    child, calls = fake_child(failing="merge_16bit")
    g.run_all(argparse.Namespace(work=tmp_path), child, clock=fake_clock())
    assert calls == ["train", "resume", "reload", "merge"]


def saving_child(work: Path, failing: str | None = None):
    """A fake child that, like the real one, leaves its results in --work."""
    child, calls = fake_child(failing)

    def run(phase: str, args: argparse.Namespace) -> list[g.StepResult]:
        results = child(phase, args)
        g.results_path(work, phase).write_text(json.dumps([vars(r) for r in results]))
        return results

    return run, calls


def test_each_phase_runs_as_its_own_command_on_what_the_earlier_ones_left(tmp_path: Path):
    """`--phase train`, then `--phase resume`, ...: each command runs one process and finds the
    earlier phases' results (and seconds) in --work; the last one reports every phase."""
    args = argparse.Namespace(work=tmp_path)
    child, calls = saving_child(tmp_path)
    for phase in g.PHASES:
        results, seconds = g.run_all(args, child, phases=[phase], clock=fake_clock(30.0))
    assert calls == list(g.PHASES)
    assert [r.name for r in results] == [n for p in g.PHASES.values() for n in p.steps]
    assert seconds == dict.fromkeys(g.PHASES, 30.0)
    child, calls = saving_child(tmp_path)
    results, seconds = g.run_all(args, child, phases=["resume"], clock=fake_clock(30.0))
    assert calls == ["resume"] and list(seconds) == ["train", "resume"]  # later ones dropped
    assert [r.name for r in results] == [*g.PHASES["train"].steps, *g.PHASES["resume"].steps]


def test_a_phase_alone_whose_earlier_phase_never_ran_is_skipped(tmp_path: Path):
    child, calls = saving_child(tmp_path)
    results, seconds = g.run_all(argparse.Namespace(work=tmp_path), child, phases=["resume"])
    assert calls == [] and seconds == {}
    assert {r.detail for r in results} == {"needs grpo_until_checkpoint"}


def test_the_dry_run_lists_the_fp16_path_and_a_budget_per_phase(capsys):
    """No GPU needed: the plan a run would follow, each phase's own command and budget."""
    assert g.main(["--dry-run", "--precision", "fp16"], has_cuda=lambda: False) == 0
    out = capsys.readouterr().out
    assert "dtype=torch.float16" in out and "GRPOConfig(fp16=True, bf16=False)" in out
    assert "scaler.pt" in out and "UNSLOTH_VLLM_NO_FLASHINFER=1" in out
    for phase in g.PHASES.values():
        row = next(line for line in out.splitlines() if line.startswith(f"| {phase.name} |"))
        assert f"`python -m scripts.gpu_check --phase {phase.name} --precision fp16`" in row
        assert ", ".join(phase.steps) in row
        assert row.endswith(f"| {phase.budget_s / 60:.1f} min |")
    total = sum(phase.budget_s for phase in g.PHASES.values())
    assert total <= 600  # within 10 minutes, cold, on a data-centre GPU
    assert f"| {total / 60:.1f} min |" in out.splitlines()[-3]
    g.main(["--dry-run"], has_cuda=lambda: False)
    assert "auto: the GPU's own (bf16 on compute capability 8.0+" in capsys.readouterr().out


def test_flashinfer_is_built_on_a_t4_only_unless_asked():
    assert g.child_environment((7, 5), False, {}) == {}  # a T4: the path under test
    assert g.child_environment((9, 0), False, {}) == {g.NO_FLASHINFER: "1"}
    assert g.child_environment((9, 0), True, {}) == {}
    assert g.child_environment((9, 0), False, {g.NO_FLASHINFER: "0"}) == {g.NO_FLASHINFER: "0"}


def test_the_fp16_path_loads_in_float16_and_trains_with_fp16(tmp_path: Path, monkeypatch):
    """--precision fp16 on any GPU: from_pretrained(dtype=torch.float16) in every process that
    loads, and GRPOConfig(fp16=True, bf16=False), which the course's checks accept on an A100."""
    import types

    from helpers.hardware import A100_40GB

    loaded = []
    fake = types.SimpleNamespace(from_pretrained=lambda **kwargs: (
        loaded.append(kwargs) or (types.SimpleNamespace(dtype=kwargs.get("dtype")), None)))
    monkeypatch.setitem(sys.modules, "unsloth", types.SimpleNamespace(FastLanguageModel=fake))
    import helpers.loading

    monkeypatch.setattr(helpers.loading, "load_trained",
                        lambda *a, **kwargs: loaded.append(kwargs) or (None, None))
    args = argparse.Namespace(work=tmp_path, profile="t4", model=None, grpo_steps=2,
                              precision="fp16")
    steps = g.PhaseSteps(args, gpu=False)
    steps.load_4bit_vllm(), steps.reload_adapter(), steps.load_16bit_merge()
    assert [kwargs["dtype"] for kwargs in loaded] == [torch.float16] * 3
    assert loaded[0]["fast_inference"] and loaded[2]["fast_inference"] is False
    hw = g.run_hardware("fp16", A100_40GB)
    settings = grpo_settings(g.check_profile("t4", None, 2), hw, "out", **g.grpo_overrides(2))
    validate(g.check_profile("t4", None, 2), hw, settings)
    assert settings["fp16"] and not settings["bf16"]
    auto = g.PhaseSteps(argparse.Namespace(**{**vars(args), "precision": "auto"}), gpu=False)
    assert auto.dtype() is None and g.run_hardware("auto", A100_40GB).precision == "bf16"


def test_a_child_is_run_as_a_module_with_the_runs_settings(tmp_path: Path, monkeypatch):
    ran = []
    monkeypatch.setattr(g.subprocess, "run", lambda command, **kw: ran.append((command, kw))
                        or subprocess.CompletedProcess(command, 1))
    args = argparse.Namespace(work=tmp_path, profile="t4", grpo_steps=2, model=None,
                              precision="fp16", phase_timeout=60, child_env={"X": "1"})
    g.run_child("train", args)
    ((command, kw),) = ran
    assert command[1:4] == ["-m", "scripts.gpu_check", "--child"]
    assert command[command.index("--precision") + 1] == "fp16"
    assert kw["cwd"] == ROOT and kw["env"] == {"X": "1"}


def test_an_fp16_run_must_save_its_scaler_under_precision_auto_too(tmp_path: Path):
    """A real T4 runs `make gpu-check` with --precision auto and trains in fp16: the scaler.pt
    requirement follows the run's own precision, not the flag."""
    import types

    args = argparse.Namespace(work=tmp_path, profile="t4", model=None, grpo_steps=2,
                              precision="auto")
    steps = g.PhaseSteps(args, gpu=True)
    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    fp16 = types.SimpleNamespace(args=types.SimpleNamespace(fp16=True, bf16=False))
    bf16 = types.SimpleNamespace(args=types.SimpleNamespace(fp16=False, bf16=True))
    with pytest.raises(g.CheckFailed, match="no scaler.pt"):
        steps.check_scaler(fp16, checkpoint)
    assert steps.check_scaler(bf16, checkpoint) is False  # bf16 has no scaler to save
    (checkpoint / "scaler.pt").write_bytes(b"")
    assert steps.check_scaler(fp16, checkpoint) is True


def test_a_child_that_dies_without_results_fails_its_first_step(tmp_path: Path):
    # On this CPU machine the child process refuses (no GPU) and writes no results file.
    args = argparse.Namespace(work=tmp_path, profile="t4", grpo_steps=1, model=None,
                              precision="auto", phase_timeout=120)
    results = g.run_child("plain", args)
    assert [(r.name, r.status) for r in results] == [("plain_transformers", "fail")]
    assert results[0].detail == "the plain process exited with status 1"


def test_clearing_the_scratch_folder_removes_only_what_the_check_writes(tmp_path: Path):
    for name in ("run/adapter/a.bin", "merged_16bit/m.bin", "phase-train.json", "notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    g.clear_work(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("phase", sorted(g.PHASES))
def test_each_process_runs_the_steps_the_plan_names(phase: str, tmp_path: Path):
    args = argparse.Namespace(work=tmp_path, profile="t4", model=None, grpo_steps=2,
                              precision="fp16")
    steps = g.PhaseSteps(args).steps(phase)  # binds methods only: nothing GPU-side is imported
    assert tuple(s.name for s in steps) == g.PHASES[phase].steps
    inside = {n for s in steps for n in s.needs}
    assert inside <= set(g.PHASES[phase].steps), "a step may only need steps of its own process"


def test_a_phase_needs_only_steps_of_the_phases_before_it():
    earlier: set[str] = set()
    for phase in g.PHASES.values():
        assert set(phase.needs) <= earlier, f"{phase.name} needs a step no earlier phase runs"
        earlier |= set(phase.steps)


def test_the_checked_profile_is_the_t4_one_with_offline_data():
    profile = g.check_profile("t4", "/models/qwen", 3)
    assert profile.model_name == "/models/qwen" and profile.fast_inference
    assert profile.synthetic_data and profile.max_steps == 3
    t4 = g.check_profile("t4", None, 3)
    settings = grpo_settings(t4, TESLA_T4, "out", **g.grpo_overrides(3))
    validate(t4, TESLA_T4, settings)  # the course's own checks accept the overrides on a T4
    assert settings["save_steps"] == 1 and settings["fp16"]  # checkpoint-1 is resumed


def sample_report(passed: bool = True) -> dict:
    results = [
        g.StepResult("load_4bit_vllm", "pass", 95.2, 4.1, "model=m"),
        g.StepResult("resume_grpo", "pass" if passed else "fail", 60.0, 9.87,
                     "seconds_per_step=20", {"seconds_per_step": 20.0}),
        g.StepResult("plain_transformers", "skip", detail="needs merge_16bit"),
    ]
    return g.build_report(results, T4_GPU, SETTINGS, VERSIONS, NOW, wall_seconds=600.0)


def test_the_report_sums_up_and_round_trips_through_json(tmp_path: Path):
    report = sample_report()
    assert report["passed"] is False  # a skipped step is not a pass
    assert report["peak_gpu_gib"] == 9.87 and report["seconds_per_grpo_step"] == 20.0
    assert report["steps_seconds"] == 155.2 and report["wall_seconds"] == 600.0
    assert report["vllm_first_start_seconds"] == 95.2  # the journey table reads it
    assert sample_report(passed=True)["vllm_first_start_seconds"] == 95.2
    path = g.write_report(report, g.report_path("Tesla T4", tmp_path))
    assert path.name == "tesla-t4.json"
    assert json.loads(path.read_text()) == report
    assert g.results_from(json.loads(path.read_text()))[1].data == {"seconds_per_step": 20.0}


def test_report_names_are_safe_file_names(tmp_path: Path):
    assert g.report_path("NVIDIA A100-SXM4-40GB", tmp_path).name == "nvidia-a100-sxm4-40gb.json"


def test_the_table_shows_every_step():
    table = g.render_table(g.results_from(sample_report()))
    assert table.splitlines()[2] == "| load_4bit_vllm | PASS | 95.2 | 4.10 | model=m |"
    assert table.splitlines()[4] == "| plain_transformers | SKIP | - | - | needs merge_16bit |"


README_TEXT = """# Course

### Free Colab T4 (profile `t4`)

<!-- T4 RESULTS: filled by `make gpu-check` on a T4.
     Never fill by hand. -->
*No T4 run has been recorded yet.*
<!-- /T4 RESULTS -->

### Next section
"""


def test_the_slot_is_rendered_from_the_report():
    slot = g.render_slot(sample_report())
    assert slot.startswith("`make gpu-check` on a Tesla T4 (14.7 GiB, compute capability 7.5) "
                           "on 2026-12-03, profile `t4`")
    assert "2 of 3 steps passed in 10.0 min; 20.0 s per GRPO step" in slot
    assert "peak GPU memory 9.9 GiB" in slot and "| resume_grpo | PASS |" in slot


def test_filling_the_slot_replaces_only_the_text_between_the_markers():
    filled = g.fill_slot(README_TEXT, "NEW TEXT\n")
    assert "*No T4 run" not in filled and "NEW TEXT\n<!-- /T4 RESULTS -->" in filled
    assert filled.startswith(README_TEXT.split("*No T4")[0])
    assert filled.endswith("<!-- /T4 RESULTS -->\n\n### Next section\n")
    assert g.fill_slot(filled, "NEWER\n") == g.fill_slot(README_TEXT, "NEWER\n")  # repeatable


def test_a_readme_without_the_end_marker_is_refused():
    with pytest.raises(ValueError, match="end marker"):
        g.fill_slot(README_TEXT.replace("<!-- /T4 RESULTS -->\n", ""), "x")
    with pytest.raises(ValueError, match="T4 RESULTS"):
        g.fill_slot("# no markers\n", "x")


def test_the_course_readme_has_a_fillable_t4_slot():
    readme = (ROOT / "README.md").read_text()
    filled = g.fill_slot(readme, g.render_slot(sample_report()))
    assert filled.count("<!-- T4 RESULTS:") == 1 and "| resume_grpo | PASS |" in filled


def test_only_a_t4_report_fills_the_readme(tmp_path: Path):
    readme = tmp_path / "README.md"
    readme.write_text(README_TEXT)
    other = {**sample_report(), "gpu": {**T4_GPU, "name": "NVIDIA L4"}}
    with pytest.raises(ValueError, match="T4 run only"):
        g.fill_readme(other, readme)
    g.fill_readme(sample_report(), readme)
    assert "Tesla T4" in readme.read_text()


def test_fill_readme_from_a_saved_report_needs_no_gpu(tmp_path: Path, monkeypatch, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(README_TEXT)
    monkeypatch.setattr(g, "README", readme)
    saved = g.write_report(sample_report(), tmp_path / "tesla-t4.json")
    assert g.main(["--fill-readme", str(saved)], has_cuda=lambda: False) == 0
    assert "| load_4bit_vllm | PASS |" in readme.read_text()


def test_the_report_records_the_python_it_ran_on():
    import platform

    found = g.versions()
    assert list(found)[0] == "python" and found["python"] == platform.python_version()
    report = g.build_report([], T4_GPU, SETTINGS, found, NOW, 1.0)
    assert f"python {platform.python_version()}" in g.render_slot(report)


def test_a_failed_stop_at_the_first_checkpoint_skips_the_resume(tmp_path: Path):
    child, calls = fake_child(failing="grpo_until_checkpoint")
    found, _ = g.run_all(argparse.Namespace(work=tmp_path), child, clock=fake_clock())
    results = {r.name: r for r in found}
    assert calls == ["train"]
    assert results["resume_grpo"].detail == "needs grpo_until_checkpoint"


def test_notebook_05s_run_stops_after_its_first_checkpoint_and_resumes_on_a_cpu(tmp_path: Path):
    """The train and resume phases with the GPU checks stood in: the smoke profile on this CPU,
    through helpers.grpo_run with the standard callbacks, in one process each as on a GPU."""
    args = argparse.Namespace(work=tmp_path, profile="smoke", model=None, grpo_steps=2,
                              precision="auto")
    code = (
        "import argparse, json, sys, unsloth\n"
        "from pathlib import Path\n"
        "from scripts import gpu_check as g\n"
        "args = argparse.Namespace(**json.loads(sys.argv[2]))\n"
        "args.work = Path(args.work)\n"
        "results = g.run_steps(g.PhaseSteps(args, gpu=False).steps(sys.argv[1]))\n"
        "print(json.dumps([[r.name, r.status, r.detail] for r in results]))\n"
    )
    given = json.dumps({**vars(args), "work": str(tmp_path)})
    found = {}
    for phase in ("train", "resume"):
        done = subprocess.run([sys.executable, "-c", code, phase, given], cwd=ROOT,
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "GRPO_PROFILE": "smoke"})
        assert done.returncode == 0, done.stderr[-3000:]
        found[phase] = {name: (status, detail) for name, status, detail in
                        json.loads(done.stdout.strip().splitlines()[-1])}
        if phase == "resume":
            assert "RESUMING from checkpoint-1" in done.stdout
    assert all(status == "pass" for status, _ in found["train"].values()), found["train"]
    assert "stopped_at_step=1" in found["train"]["grpo_until_checkpoint"][1]
    assert all(status == "pass" for status, _ in found["resume"].values()), found["resume"]
    assert "heldout_steps=0,1,2" in found["resume"]["resume_grpo"][1]


def test_docs_ci_states_the_budgets_the_script_uses():
    text = " ".join((ROOT / "docs" / "ci.md").read_text().split())
    first, *rest = [f"{p.name} {p.budget_s / 60:.1f}" for p in g.PHASES.values()]
    total = sum(p.budget_s for p in g.PHASES.values()) / 60
    assert f"{first} min, {', '.join(rest)}, **{total:.1f} min** in all" in text
