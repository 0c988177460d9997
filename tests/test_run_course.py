"""scripts/run_course.py's per-cell timeout: fixed on CPU, long enough for training on a GPU."""

from __future__ import annotations

import pytest

from helpers.profiles import PROFILES
from scripts import run_course as rc


def test_cpu_keeps_a_fixed_timeout():
    assert rc.cell_timeout(30, on_gpu=False) == rc.CPU_CELL_TIMEOUT
    assert rc.profile_timeout("smoke") == rc.CPU_CELL_TIMEOUT


@pytest.mark.parametrize("name", [n for n, p in PROFILES.items() if p.min_vram_gb > 0])
def test_a_gpu_profile_can_train_in_one_cell(name: str):
    profile = PROFILES[name]
    timeout = rc.profile_timeout(name)
    # Notebook 05 trains in one cell: the slowest T4 step unsloth publishes is 55 s.
    assert timeout > 55 * profile.max_steps > rc.CPU_CELL_TIMEOUT
    slowest = (profile.t4_seconds_per_step or (0, 55))[1]
    assert timeout >= 2 * slowest * profile.max_steps


def test_a_timeout_for_no_steps_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        rc.cell_timeout(0, on_gpu=True)


def test_recording_outputs_starts_the_training_run_from_step_1(tmp_path, monkeypatch):
    """Stored outputs must show training: a run left in the course folder is removed first."""
    monkeypatch.setenv("GRPO_RUN_DIR", str(tmp_path))  # run_dir("smoke") -> tmp_path/smoke
    assert "starts a new one" in rc.clear_course_run("smoke")
    (tmp_path / "smoke" / "checkpoints" / "checkpoint-60").mkdir(parents=True)
    said = rc.clear_course_run("smoke")
    assert "trained from step 1" in said and not (tmp_path / "smoke").exists()
