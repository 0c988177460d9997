"""Notebook 11's ablations: the arms change what they say, the verdict reads the seeds, the grid
resumes, and a name it does not know is one sentence."""

import json
import math
import os
import subprocess
import sys

import pytest

from helpers.ablations import (
    ARMS,
    COURSE,
    KNOBS,
    UnknownArmError,
    arm,
    dead_group_share,
    knob_arms,
    reward_setup,
    signals,
    summarize,
)
from helpers.grpo_config import config_differences, make_grpo_config
from helpers.hardware import detect_hardware
from helpers.paths import ROOT
from helpers.profiles import PROFILES, SEED
from helpers.stats import mean_difference, t_quantile, verdict

sys.path.insert(0, str(ROOT / "bench"))
import ablations as bench  # noqa: E402  (bench/ablations.py)

SMOKE = PROFILES["smoke"]


@pytest.mark.parametrize(("df", "expected"), [(1, 12.7062), (3, 3.1824), (6, 2.4469),
                                              (30, 2.0423), (1e6, 1.9600)])
def test_t_quantile_matches_the_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=2e-4)


def test_the_verdict_reads_the_interval_over_seeds():
    course = [0.15, 0.12, 0.17, 0.14]
    assert verdict([0.22, 0.24, 0.21, 0.23], course)["verdict"] == "helps"
    assert verdict([0.02, 0.05, 0.03, 0.01], course)["verdict"] == "hurts"
    wide = verdict([0.25, 0.05, 0.20, 0.10], course)
    assert wide["verdict"] == "within the seed spread"
    assert wide["low"] < 0 < wide["high"]
    assert wide["difference"] == pytest.approx(0.005)


def test_the_interval_is_welchs():
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 2.5, 3.0]
    diff, low, high = mean_difference(a, b)
    va, vb = (5 / 3) / 4, 0.25 / 3
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    assert diff == pytest.approx(-0.0)
    assert high - diff == pytest.approx(t_quantile(0.975, df) * math.sqrt(va + vb))
    with pytest.raises(ValueError, match="at least two runs"):
        mean_difference([1.0], b)


def test_dead_groups_follow_p_to_the_g():
    assert dead_group_share(0.2, 4) == pytest.approx(0.4112)  # the 41% a learner meets at G=4
    assert dead_group_share(0.5, 2) == pytest.approx(0.5)
    assert dead_group_share(0.0, 8) == 1.0
    assert dead_group_share(0.3, 16) < dead_group_share(0.3, 8) < dead_group_share(0.3, 2)
    with pytest.raises(ValueError, match="0 <= p <= 1"):
        dead_group_share(1.2, 4)


def test_each_arm_changes_its_knob_and_nothing_else(tmp_path):
    hw = detect_hardware()
    course = make_grpo_config(SMOKE, hw, tmp_path)
    for name, chosen in ARMS.items():
        _, weights = reward_setup(chosen)
        config = make_grpo_config(SMOKE, hw, tmp_path, **chosen.overrides, **weights)
        changed = {line.split("=", 1)[0] for line in config_differences(config, course)}
        expected = set(chosen.overrides) | set(weights)
        assert changed == expected, name
        if chosen.knob not in (COURSE, "rewards", "max_completion_length"):
            assert changed == {chosen.knob}, name
    # Fewer completions per prompt means more prompts, at the same 32 completions a step.
    g2 = make_grpo_config(SMOKE, hw, tmp_path, **ARMS["num_generations=2"].overrides)
    assert g2.generation_batch_size == course.generation_batch_size == 32


def test_reward_arms_keep_the_course_weights():
    funcs, weights = reward_setup(ARMS["rewards=correctness"])
    assert [f.__name__ for f in funcs] == ["correctness_reward"]
    assert weights == {"reward_weights": [2.0]}
    funcs, weights = reward_setup(ARMS["rewards=format"])
    assert "correctness_reward" not in [f.__name__ for f in funcs]
    assert len(weights["reward_weights"]) == len(funcs) == 3
    assert reward_setup(ARMS[COURSE]) == (None, {})


def test_the_grid_covers_the_knobs_the_lab_teaches():
    assert {"loss_type", "scale_rewards", "num_generations", "beta", "learning_rate",
            "num_iterations", "max_completion_length", "rewards"} <= set(KNOBS)
    assert [a.name for a in knob_arms("beta")] == [COURSE, "beta=0.04"]
    jobs = bench.default_jobs()
    per_arm = {name: sum(1 for a, _, k in jobs if a == name and k == "native") for name in ARMS}
    assert per_arm[COURSE] == bench.COURSE_SEEDS and min(per_arm.values()) >= 4
    assert {a for a, _, k in jobs if k == bench.RERUN_KERNEL} == set(bench.RERUN_ARMS)
    assert len(set(jobs)) == len(jobs)


def test_an_unknown_arm_or_knob_is_one_sentence():
    with pytest.raises(UnknownArmError, match=r"^Unknown arm 'lr=1': the known arms are course, "):
        arm("lr=1")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "ablations.py"), "--knob", "kl"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("Unknown knob 'kl': the known knobs are loss_type, ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_signals_average_trls_log_and_predict_dead_groups():
    log = [{"step": 1, "frac_reward_zero_std": 0.5, "completions/mean_length": 30.0,
            "rewards/correctness_reward/mean": 0.2},
           {"step": 2, "frac_reward_zero_std": 0.25, "completions/mean_length": 34.0,
            "rewards/correctness_reward/mean": 0.4},
           {"train_runtime": 1.0, "step": 2}]
    found = signals(log, 4)
    assert found["zero_std"] == pytest.approx(0.375)
    assert found["length"] == pytest.approx(32.0)
    assert "kl" not in found  # beta = 0 logs no KL
    expected = (dead_group_share(0.2, 4) + dead_group_share(0.4, 4)) / 2
    assert found["zero_std_predicted"] == pytest.approx(expected)


def _row(name, seed, gain, kernel="native"):
    return {"arm": name, "knob": ARMS[name].knob, "seed": seed, "gain": gain,
            "kernel_path": kernel, "signals": {"zero_std": 0.1}, "run_seconds": 1.0}


def test_summaries_compare_each_arm_with_the_course_on_its_own_kernel_path():
    rows = [_row(COURSE, s, g) for s, g in enumerate([0.15, 0.12, 0.17, 0.14])]
    rows += [_row("beta=0.04", s, g) for s, g in enumerate([0.02, 0.05, 0.03, 0.01])]
    rows += [_row(COURSE, 0, 0.5, "default")]
    summary = summarize(rows)
    assert summary[COURSE]["verdict"] is None and summary[COURSE]["seeds"] == 4
    assert summary["beta=0.04"]["verdict"]["verdict"] == "hurts"
    assert summary["beta=0.04"]["low"] == 0.01 and summary["beta=0.04"]["high"] == 0.05
    assert summarize(rows, "default")[COURSE]["gains"] == [0.5]


def test_the_grid_resumes_without_redoing_a_finished_run(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_BENCH_DIR", str(tmp_path))
    calls = []

    def stand_in(name, seed, kernel, steps=None):
        calls.append((name, seed, kernel))
        if (name, seed) == ("beta=0.04", SEED + 2):
            raise RuntimeError("killed")  # as a run that dies mid-way
        return _row(name, seed, 0.1 + 0.01 * (seed - SEED), kernel)

    monkeypatch.setattr(bench, "one_run", stand_in)
    jobs = bench.plan([COURSE, "beta=0.04"], "native", 3)
    with pytest.raises(SystemExit, match="1 runs failed"):
        bench.run_grid(jobs)
    assert len(calls) == 6
    saved = json.loads((tmp_path / "ablations.json").read_text())
    assert len(saved["rows"]) == 5 and saved["sessions"][0]["runs"] == 5
    calls.clear()
    monkeypatch.setattr(bench, "one_run", lambda n, s, k, steps=None: _row(n, s, 0.1, k))
    data = bench.run_grid(jobs)
    assert len(data["rows"]) == 6 and len(data["sessions"]) == 2
    assert data["summary"]["native"]["beta=0.04"]["seeds"] == 3
    again = bench.run_grid(jobs)  # nothing left: nothing run, and the record stays as it was
    assert again["sessions"] == data["sessions"] and again["machine"] == data["machine"]


PEFT_RUN = """
import json, sys, tempfile
from pathlib import Path
from helpers.ablations import train_and_score
with tempfile.TemporaryDirectory() as folder:
    run = train_and_score(Path(folder), 0, 1, "course", "peft", problems=20)
assert "unsloth" not in sys.modules
print(json.dumps({"base": run["base"], "signals": run["signals"], "loader": run["loader"]}))
"""


def test_the_light_install_loader_trains_and_scores_as_unsloth_does(tmp_path):
    """Colab's light install has no unsloth: notebook 11's live runs load through transformers +
    peft there (in a process that never imported unsloth, as on Colab). Same base scores, same
    first sampled step as unsloth's CPU backend."""
    import unsloth  # noqa: F401  (before trl)

    from helpers.ablations import train_and_score

    done = subprocess.run([sys.executable, "-c", PEFT_RUN], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    peft = json.loads(done.stdout.strip().splitlines()[-1])
    ours = train_and_score(tmp_path, 0, 1, COURSE, "unsloth", problems=20)
    assert peft["loader"] == "peft"
    assert peft["base"] == ours["base"] > 0
    assert peft["signals"]["correctness"] == ours["signals"]["correctness"]
