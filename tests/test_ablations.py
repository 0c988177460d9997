"""Notebook 11's ablations: the arms change what they say, the verdict reads the seeds, the grid
resumes, and a name it does not know is one sentence."""

import json
import math
import os
import statistics
import subprocess
import sys

import pytest

from bench import ablations as bench
from helpers.grpo_config import config_differences, make_grpo_config
from helpers.hardware import detect_hardware
from helpers.lab import (
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
from helpers.paths import ROOT
from helpers.profiles import PROFILES, SEED
from helpers.stats import mean_difference, t_quantile, verdict
from tools.smoke_runs import another_kernel_path

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
    assert wide["verdict"] == "inconclusive"
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
        if chosen.knob not in (COURSE, "rewards", "max_completion_length", "lora_rank",
                               "dynamic_sampling", "steps", "prompt", "clip"):  # one field each
            # the knob, crossed with its reference's change where the reference is not the course
            assert changed == {chosen.knob} | set(ARMS[chosen.reference].overrides), name
    # What GRPOConfig cannot say: the LoRA rank, the budget, the dead-group resampling.
    assert ARMS["lora_rank=1"].lora_rank == 1 and not ARMS["lora_rank=1"].overrides
    assert ARMS["learning_rate=3e-4+120steps"].steps == 120
    dynamic = ARMS["dynamic_sampling=on"]
    assert dynamic.dynamic_sampling and not dynamic.overrides
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
    funcs, weights = reward_setup(ARMS["rewards=random"])
    assert weights == {"reward_weights": [2.0]}


def test_the_random_reward_is_a_fair_coin_from_the_runs_seed():
    import torch

    from helpers.lab import random_reward

    torch.manual_seed(3407)
    first = random_reward(["x"] * 2000)
    torch.manual_seed(3407)
    assert random_reward(["x"] * 2000) == first
    assert set(first) == {0.0, 1.0} and abs(sum(first) / 2000 - 0.5) < 0.05


def test_the_grid_covers_the_knobs_the_lab_teaches():
    assert {"loss_type", "scale_rewards", "num_generations", "beta", "learning_rate",
            "num_iterations", "max_completion_length", "rewards", "epsilon_high",
            "importance_sampling_level", "temperature", "lora_rank", "dynamic_sampling"} \
        <= set(KNOBS)
    assert ARMS["scale_rewards=batch"].overrides == {"scale_rewards": "batch"}
    assert [a.name for a in knob_arms("beta")] == [COURSE, "beta=0.04"]
    assert [a.name for a in knob_arms("epsilon_high")] == [
        COURSE, "num_iterations=2", "epsilon_high=0.28+iter2"]
    jobs = bench.default_jobs()
    per_arm = {name: sum(1 for a, _, k in jobs if a == name and k == "native") for name in ARMS}
    assert per_arm[COURSE] == bench.COURSE_SEEDS and min(per_arm.values()) >= 4
    rerun = {k for _, _, k in jobs} - {"native"}
    assert rerun == {another_kernel_path()}  # the furthest path this CPU can train on
    assert {a for a, _, k in jobs if k in rerun} == set(bench.RERUN_ARMS)
    assert len(set(jobs)) == len(jobs)
    # The reruns on the other kernel path use seeds the native grid never ran.
    native = {s for _, s, k in jobs if k == "native"}
    assert not native & {s for _, s, k in jobs if k in rerun}


def test_the_no_ops_say_why_they_must_match_the_course_and_are_no_arms():
    from helpers.lab import NO_OPS

    assert set(NO_OPS) == {"loss_type=bnpo", "epsilon_high=0.28",
                           "importance_sampling_level=sequence"}
    assert all(a.same_as_reference and a.reference == COURSE for a in NO_OPS.values())
    assert not set(NO_OPS) & set(ARMS) and not any(a.same_as_reference for a in ARMS.values())
    assert not {n for n, _, _ in bench.default_jobs()} & set(NO_OPS)
    assert {n for n, a in ARMS.items() if a.control} == {"rewards=format", "rewards=random"}


def test_the_null_arm_is_found_by_name_but_is_no_arm_of_the_grid():
    """bench/calibration.py runs it by name in a fresh process; the grid never runs it."""
    from helpers.lab import NULL_ARM, arm

    assert arm("sampling=redrawn") is NULL_ARM and NULL_ARM.sampling_stream
    assert NULL_ARM.name not in ARMS and not any(a.sampling_stream for a in ARMS.values())
    assert NULL_ARM.name not in {n for n, _, _ in bench.default_jobs()}


def test_an_unknown_arm_or_knob_is_one_sentence():
    with pytest.raises(UnknownArmError, match=r"^Unknown arm 'lr=1': the known arms are course, "):
        arm("lr=1")
    done = subprocess.run([sys.executable, "-m", "bench.ablations", "--knob", "kl"],
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


def _row(name, seed, gain, kernel="native", correct=None):
    return {"arm": name, "knob": ARMS[name].knob, "seed": seed, "gain": gain, "base": 0.4,
            "kernel_path": kernel, "signals": {"zero_std": 0.1}, "run_seconds": 1.0,
            "reference": ARMS[name].reference, "steps": 60, "n": 200,
            "curve": [[0, 0.4], [30, 0.4 + gain / 2], [60, 0.4 + gain]],
            "correct": correct or f"{seed:0200b}"}


def test_summaries_compare_each_arm_with_the_course_on_its_own_kernel_path():
    rows = [_row(COURSE, s, g) for s, g in enumerate([0.15, 0.12, 0.17, 0.14])]
    rows += [_row("beta=0.04", s, g) for s, g in enumerate([0.02, 0.05, 0.03, 0.01])]
    rows += [_row(COURSE, 0, 0.5, "default")]
    summary = summarize(rows)
    assert summary[COURSE]["verdict"] is None and summary[COURSE]["seeds"] == 4
    assert summary["beta=0.04"]["verdict"]["verdict"] == "hurts"
    assert summary["beta=0.04"]["verdict"]["holm"] == "hurts"  # a family of one
    assert summary["beta=0.04"]["low"] == 0.01 and summary["beta=0.04"]["high"] == 0.05
    assert summary["beta=0.04"]["auc"] == pytest.approx(statistics.fmean([0.02, 0.05, 0.03,
                                                                          0.01]) / 2)
    assert summarize(rows, "default")[COURSE]["gains"] == [0.5]
    paired = summary["beta=0.04"]["paired"]  # seed by seed: -13, -7, -14, -13 points
    assert paired["seeds"] == [0, 1, 2, 3] and paired["difference"] == pytest.approx(-0.1175)
    assert paired["low"] < -0.11 and paired["high"] > -0.13 and paired["high"] < 0


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



def test_the_grid_takes_the_course_runs_the_pool_already_holds(tmp_path, monkeypatch):
    from helpers.hardware import cpu_kernel_path
    from helpers.lab import course_settings

    monkeypatch.setenv("GRPO_BENCH_DIR", str(tmp_path))
    pooled = [{**_row(COURSE, SEED + i, 0.2, "native"), "kernel": cpu_kernel_path()}
              for i in range(2)]
    pool = {"rows": pooled, "settings": course_settings()}
    (tmp_path / "course_pool.json").write_text(json.dumps(pool))
    calls = []
    monkeypatch.setattr(bench, "one_run", lambda n, s, k, steps=None: calls.append((n, s))
                        or _row(n, s, 0.1, k))
    data = bench.run_grid(bench.plan([COURSE, "beta=0.04"], "native", 3))
    assert sorted(calls) == [("beta=0.04", SEED + i) for i in range(3)] + [(COURSE, SEED + 2)]
    assert len(data["rows"]) == 6
    # A pool made under other settings (an older course) lends nothing.
    pool["settings"] = {**pool["settings"], "smoke_model": "another"}
    (tmp_path / "course_pool.json").write_text(json.dumps(pool))
    assert bench.from_pool(bench.plan([COURSE], "native", 2)) == []

PEFT_RUN = """
import json, sys, tempfile
from pathlib import Path
from helpers.lab import train_and_score
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

    from helpers.lab import train_and_score

    done = subprocess.run([sys.executable, "-c", PEFT_RUN], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    peft = json.loads(done.stdout.strip().splitlines()[-1])
    ours = train_and_score(tmp_path, 0, 1, COURSE, "unsloth", problems=20)
    assert peft["loader"] == "peft"
    assert peft["base"] == ours["base"] > 0
    assert peft["signals"]["correctness"] == ours["signals"]["correctness"]


# ---- The lab's evaluation set, and what its per-problem results allow ------------------------

def test_the_lab_scores_on_a_census_of_the_sums():
    from helpers.lab import coverage, fact_of, lab_problems
    from helpers.synthetic import TRAIN_POOL, synthetic_split

    rows = lab_problems()
    found = coverage(rows)
    assert found == {"problems": 200, "facts": 100, "most_repeats": 2,
                     "effective_facts": pytest.approx(100), "answers": 20}
    heldout = coverage(synthetic_split("test", 200))  # notebooks 05/06's set, unchanged
    assert heldout["facts"] < 100 and heldout["effective_facts"] < 80
    train = {r["question"] for r in synthetic_split("train", TRAIN_POOL)}
    assert not train & {r["question"] for r in rows}
    assert rows == lab_problems()  # the same every time
    assert fact_of(rows[0]) == "10+1"


def test_wording_noise_is_measured_from_the_two_questions_of_each_sum():
    """Runs that differ only by chance on one wording of some sums: the evaluation's share of
    their spread is all of it; runs that differ by whole sums: little of it."""
    import random

    from helpers.lab import lab_problems
    from helpers.lab.design import evaluation_noise

    rows = lab_problems()
    pairs: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        pairs.setdefault(row["answer"].split("<<")[1].split("=")[0], []).append(i)
    rng = random.Random(0)

    def run(seed, flip):
        bits = [1] * 200
        for i, j in pairs.values():
            if flip == "wording" and rng.random() < 0.3:
                bits[rng.choice((i, j))] = 0
            if flip == "sum" and rng.random() < 0.3:
                bits[i] = bits[j] = 0
        gain = sum(bits) / 200 - 0.4
        return {**_row(COURSE, seed, gain, correct="".join(map(str, bits)))}

    wording = evaluation_noise([run(s, "wording") for s in range(SEED, SEED + 8)])
    facts = evaluation_noise([run(s, "sum") for s in range(SEED, SEED + 8)])
    assert 0.6 < wording["course"]["share"] < 1.6
    assert facts["course"]["share"] < 0.1
    assert facts["course"]["random_set_share"] > facts["course"]["share"]


def test_the_summary_leaves_out_the_rows_of_a_retired_no_op():
    """An older grid may hold a no-op's rows: no arm, no family member."""
    seeds = range(SEED, SEED + 4)
    course = [_row(COURSE, s, g) for s, g in zip(seeds, [0.15, 0.12, 0.17, 0.14], strict=True)]
    twin = [{**r, "arm": "loss_type=bnpo"} for r in course]
    beta = [_row("beta=0.04", s, 0.1) for s in seeds]
    summary = summarize(course + twin + beta)
    assert set(summary) == {COURSE, "beta=0.04"}
    assert summary["beta=0.04"]["verdict"]["holm"]  # a family of one


def test_the_stored_grid_recomputes_from_its_rows():
    """runs/bench/ablations.json's summaries are what its rows give today: every arm's gains and
    verdicts, Holm and BH included, and the table notebook 11 prints from them."""
    from helpers.lab import grid_table, load_grid

    stored = load_grid()
    again = summarize(stored["rows"])
    assert set(again) == set(stored["summary"]["native"])
    for name, s in again.items():
        kept = stored["summary"]["native"][name]  # (the file keeps 6 significant digits)
        assert s["gains"] == pytest.approx(kept["gains"], rel=1e-5)
        assert (s["verdict"] is None) == (kept["verdict"] is None), name
        for key, value in (kept["verdict"] or {}).items():
            same = value if isinstance(value, str) else pytest.approx(value, rel=1e-5, abs=1e-9)
            assert s["verdict"][key] == same, (name, key)
    assert all(name in grid_table(stored["summary"]["native"]) for name in again)


def test_the_reference_check_tells_exact_consistent_and_shifted():
    from helpers.lab import reference_check

    stored = [_row(COURSE, SEED + i, g) for i, g in enumerate(
        [0.18, 0.21, 0.16, 0.24, 0.145, 0.19, 0.155, 0.28])]
    assert reference_check(stored[:2], stored)["status"] == "exact"
    moved = [{**r, "correct": "1" * 200, "gain": r["gain"] + 0.01} for r in stored[:2]]
    assert reference_check(moved, stored)["status"] == "consistent"
    shifted = [{**r, "correct": "1" * 200, "gain": r["gain"] + 0.15} for r in stored[:2]]
    found = reference_check(shifted, stored)
    assert found["status"] == "shifted" and found["local_mean"] > found["high"]


def test_the_two_parameter_dead_group_curve():
    """A spread of pass rates across prompts: 0 is the one-parameter formula; at G = 2 the excess
    is twice the variance of the pass rates (Beta: spread x p(1-p))."""
    from helpers.lab import fit_spread

    assert dead_group_share(0.3, 8, 0.0) == pytest.approx(0.3**8 + 0.7**8)
    for p, rho in [(0.4, 0.2), (0.1, 0.05), (0.7, 0.5)]:
        assert dead_group_share(p, 2, rho) == pytest.approx(p**2 + (1 - p) ** 2
                                                            + 2 * rho * p * (1 - p))
        assert dead_group_share(p, 8, rho) > dead_group_share(p, 8)
    points = [(g, p, dead_group_share(p, g, 0.2)) for g in (2, 4, 8) for p in (0.3, 0.4, 0.5)]
    assert fit_spread(points) == pytest.approx(0.2, abs=0.001)


def test_resampled_groups_stack_as_trl_pads_them():
    import torch

    from helpers.lab.engine import _group, _stack

    def batch(prompt_len, completion_len, lengths):
        n = len(lengths)
        mask = torch.tensor([[1] * k + [0] * (completion_len - k) for k in lengths])
        return {"prompt_ids": torch.ones(n, prompt_len, dtype=torch.long),
                "prompt_mask": torch.ones(n, prompt_len, dtype=torch.long),
                "completion_ids": torch.full((n, completion_len), 5), "completion_mask": mask,
                "advantages": torch.arange(n, dtype=torch.float),
                "num_items_in_batch": mask.sum()}

    a, b = batch(3, 4, [4, 2]), batch(5, 2, [2, 1])
    out = _stack([_group(a, 0, 2), _group(b, 0, 2)], pad=0)
    assert out["prompt_ids"].shape == (4, 5) and out["completion_ids"].shape == (4, 4)
    assert out["prompt_mask"][0].tolist() == [0, 0, 1, 1, 1]  # left-padded prompts
    assert out["completion_mask"][2].tolist() == [1, 1, 0, 0]  # right-padded completions
    assert out["num_items_in_batch"].item() == 4 + 2 + 2 + 1
    assert out["advantages"].tolist() == [0.0, 1.0, 0.0, 1.0]


def test_the_design_is_measured_from_the_rows():
    from helpers.lab import design

    rows = [_row(COURSE, SEED + i, 0.15 + 0.01 * (i % 4)) for i in range(8)]
    for name in ("beta=0.04", "loss_type=grpo", "scale_rewards=none"):
        rows += [_row(name, SEED + i, 0.14 + 0.012 * i) for i in range(4)]
    found = design(rows)
    assert found["power"]["mde"] > 0 and found["power"]["family"] == 3
    assert found["blocks"]["residual_df"] == 9 and found["blocks"]["arms"][0] == COURSE
    assert found["coverage"]["census"]["facts"] == 100
    assert design(rows[:1])["power"] is None  # a grid just started saves without a verdict


# ---- A learner's own arm: checked before anything trains ---------------------------------------

def _good(completions, answer, **kwargs):
    return [1.0 if a in str(c) else 0.0 for c, a in zip(completions, answer, strict=True)]


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"overrides": {"lr": 1e-4}}, "has no field 'lr'"),
    ({"overrides": {"learning_rat": 1e-4}}, "did you mean 'learning_rate'"),
    ({"overrides": {"seed": 1}}, "which the lab sets itself"),
    ({"overrides": {"num_generations": 3}}, "cannot train: "),
    ({"lora_rank": 0}, "lora_rank must be a whole number"),
    ({"rewards": [_good]}, "wrap each reward function in a record"),
])
def test_a_bad_arm_is_one_sentence_naming_the_fix(kwargs, said):
    from helpers.lab import ArmError, arm_from

    with pytest.raises(ArmError) as error:
        arm_from("mine", **kwargs)
    message = str(error.value)
    assert said in message and "\n" not in message and message.endswith((".", "?"))


def _raises(completions, **kwargs):
    return [float(str(c)[0]) for c in completions]


def _short(completions, **kwargs):
    return [1.0]


def _nan(completions, **kwargs):
    return [math.nan] * len(completions)


@pytest.mark.parametrize(("func", "said"), [
    (_raises, "Reward _raises raised "),
    (_short, "returned 1 scores for 8 completions"),
    (_nan, "returned nan"),
])
def test_a_broken_reward_fails_before_training(func, said, monkeypatch):
    from helpers.lab import ArmError, arm_from, runs
    from helpers.rewards import Reward

    monkeypatch.setattr(runs, "train_and_score", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(ArmError, match=said) as error:
        arm_from("mine", rewards=Reward(func, 1.0))
    assert "\n" not in str(error.value)


def test_a_good_arm_keeps_what_the_learner_wrote():
    from helpers.lab import arm_from
    from helpers.rewards import REWARDS, Reward

    mine = arm_from("mine", rewards=(*REWARDS, Reward(_good, 0.5)), overrides={"beta": 0.04})
    assert mine.name == "mine" and mine.reference == COURSE
    assert reward_setup(mine)[1] == {"reward_weights": [*(r.weight for r in REWARDS), 0.5]}
    assert mine.overrides == {"beta": 0.04}


# ---- The course's settings key the stored grid and the reference cache ------------------------

def test_a_grid_run_with_other_course_settings_is_stale_and_says_what_changed(monkeypatch):
    from helpers.lab import course_settings, reference, stale_note, stored_reference
    from helpers.lab.reference import StaleGridError

    now = course_settings()
    rows = [{"arm": COURSE, "kernel_path": "native", "seed": SEED, "steps": 60, "correct": "1"}]
    assert stale_note({"settings": json.loads(json.dumps(now)), "rows": rows}) is None
    assert stored_reference({"settings": now, "rows": rows}) == rows
    assert "records no course settings" in stale_note({"rows": rows})
    then = {**now, "grpo": {**now["grpo"], "learning_rate": 5e-3}, "smoke_model": "0" * 16}
    said = stale_note({"settings": then, "rows": rows})
    assert "(grpo.learning_rate, smoke_model changed)" in said and "--fresh" in said
    with pytest.raises(StaleGridError, match="grpo.learning_rate"):
        stored_reference({"settings": then, "rows": rows})
    # The runs a machine keeps for the reference: a new file once the course changes.
    before = reference.reference_cache(60, None)
    monkeypatch.setattr(reference, "course_settings", lambda: then)
    assert reference.reference_cache(60, None) != before


def test_the_committed_grid_was_run_with_the_present_course_settings():
    from helpers.lab import course_settings, load_grid, stale_note

    grid = load_grid()
    assert stale_note(grid) is None and grid["settings"] == course_settings()


def test_a_stale_grid_is_not_resumed(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_BENCH_DIR", str(tmp_path))
    (tmp_path / "ablations.json").write_text(json.dumps({"rows": [{"arm": COURSE}]}))
    with pytest.raises(SystemExit, match=r"records no course settings.*--fresh"):
        bench.Grid(tmp_path / "ablations.json", fresh=False)
    assert bench.Grid(tmp_path / "ablations.json", fresh=True).rows == []


def test_every_knob_has_a_course_value():
    from helpers.lab import course_value

    assert {k: course_value(k) for k in ("importance_sampling_level", "dynamic_sampling",
                                         "lora_rank", "loss_type")} == {
        "importance_sampling_level": "token", "dynamic_sampling": "off",
        "lora_rank": str(SMOKE.lora_rank), "loss_type": "dapo"}
    assert all(course_value(k) for k in KNOBS)
    with pytest.raises(UnknownArmError, match="NOT_CONFIG"):
        course_value("curriculum")


# ---- The reward audit ------------------------------------------------------------------------

def _pays_the_last_answer(completions, answer, **kwargs):
    """Notebook 11's first example: the last <answer> block, so a hedge is paid in full."""
    from helpers.rewards import completion_text, extract_answer

    return [1.0 if extract_answer(completion_text(c)) == g else 0.0
            for c, g in zip(completions, answer, strict=True)]


def _pays_one_answer(completions, answer, **kwargs):
    """The course's correctness by another route: exactly one <answer> block, equal to gold."""
    from helpers.rewards import completion_text

    texts = [completion_text(c) for c in completions]
    return [1.0 if t.count("<answer>") == 1 and f"<answer>{g}</answer>" in t else 0.0
            for t, g in zip(texts, answer, strict=True)]


def test_the_audit_names_a_reward_that_pays_the_hedge(capsys):
    from helpers.lab import PROBES, arm_from, audit_table, reward_audit
    from helpers.rewards import REWARDS, Reward

    found = reward_audit((Reward(_pays_the_last_answer, 2.0), Reward(_pays_one_answer, 1.0),
                          *REWARDS[1:]))
    assert list(found["rewards"]) == ["_pays_the_last_answer", "_pays_one_answer"]  # new only
    assert found["hacks"] == {"_pays_the_last_answer": ["hedge"], "_pays_one_answer": []}
    assert found["correctness"]["right"] == 1 and found["correctness"]["hedge"] == 0
    table = audit_table(found)
    assert len(table.splitlines()) == 2 + len(PROBES) + 2
    assert "_pays_the_last_answer pays for hedge: more than correctness does" in table
    assert "_pays_one_answer pays nothing correctness would not." in table
    arm_from("last", rewards=(Reward(_pays_the_last_answer, 2.0), *REWARDS[1:]))
    assert "pays for hedge" in capsys.readouterr().out
    arm_from("course_like", rewards=REWARDS)  # the course's own rewards: nothing to audit
    assert capsys.readouterr().out == ""


# ---- Every source of randomness from the run's seed, in lab runs -----------------------------

def test_a_lab_run_draws_its_lora_init_from_its_seed(monkeypatch):
    """Two seeds give two LoRA starts and one seed the same start; a lab run passes its seed to
    the LoRA init, the course's scored smoke run keeps SEED's."""
    import unsloth  # noqa: F401  (before trl)

    from helpers.hardware import detect_hardware
    from helpers.lab import engine
    from helpers.launch import load_model, plan_run

    def first_lora_a(seed: int):
        model, _ = load_model(SMOKE, detect_hardware(), plan_run(SMOKE), seed)
        return next(p for n, p in model.named_parameters() if "lora_A" in n).detach().clone()

    one, again, two = first_lora_a(SEED), first_lora_a(SEED), first_lora_a(SEED + 1)
    assert bool((one == again).all()) and not bool((one == two).all())

    seen = []

    def stop(profile, hw, plan, seed):
        seen.append(seed)
        raise KeyboardInterrupt  # only the seed is wanted

    monkeypatch.setattr(engine, "load_model", stop)
    for lab in (True, False):
        with pytest.raises(KeyboardInterrupt):
            engine.train_and_score(ROOT / "unused", SEED + 5, 1, lab=lab)
    assert seen == [SEED + 5, SEED]


def test_importing_the_lab_loads_no_torch():
    """Notebook 11's tables and the grid's summaries come without torch, trl or matplotlib."""
    code = ("import sys, helpers.lab; print(sorted(m for m in ('torch', 'trl', 'transformers', "
            "'matplotlib') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


# ---- The no-op arms: knobs that cannot act on the course's on-policy smoke run -----------------

def test_no_op_arms_match_the_course_and_the_null_arm_differs(tmp_path):
    """bnpo, clip-higher and GSPO's sequence ratio do nothing on one on-policy iteration per batch
    in one process (each arm's `same_as_reference` says why): 1 seed x 10 steps give the course's
    answers, problem by problem, and its rewards step by step. The null arm, the course with its
    completions drawn from another stream, already differs at the first step's rewards: the
    pairs of the paired calibration are not copies."""
    import unsloth  # noqa: F401  (before trl)

    from helpers.lab import NO_OPS, NULL_ARM, train_and_score

    def run(chosen) -> tuple[str, float, list[float]]:
        found = train_and_score(tmp_path / chosen.name, SEED, 10, chosen, problems=40, lab=True)
        rewards = [e["reward"] for e in found["log_history"] if "reward" in e]
        return found["correct"], found["gain"], rewards

    course = run(ARMS[COURSE])
    for chosen in NO_OPS.values():
        assert run(chosen) == course, chosen.name
    null = run(NULL_ARM)
    assert len(null[2]) == len(course[2]) == 10
    assert null[2][0] != course[2][0]


def test_curves_put_each_arm_where_its_generations_put_it():
    """32 completions a step for the course; half for two updates per batch; more for dynamic
    sampling by the batches it drew again: the x-axis of the lab's curves."""
    from helpers.lab import generations_per_step, plot_curves

    rows = [_row(COURSE, 1, 0.1), _row("num_iterations=2", 1, 0.1)]
    rows += [{**_row("dynamic_sampling=on", s, 0.1), "signals": {"extra_generations": x}}
             for s, x in ((1, 0.25), (2, 0.45))]
    assert generations_per_step(rows, COURSE) == 32
    assert generations_per_step(rows, "num_iterations=2") == 16
    assert generations_per_step(rows, "dynamic_sampling=on") == pytest.approx(32 * 1.35)
    ax = plot_curves(rows, [COURSE, "num_iterations=2"])
    ends = [line.get_xdata()[-1] for line in ax.get_lines()[:2]]
    assert ends == pytest.approx([60 * 32 / 1000, 60 * 16 / 1000])


def test_the_curve_table_gives_each_arm_its_final_verdict_and_its_mean_over_the_run():
    from helpers.lab import curve_table

    rows = [_row(COURSE, s, g) for s, g in enumerate([0.15, 0.12, 0.17, 0.14])]
    rows += [_row("learning_rate=3e-4", s, g) for s, g in enumerate([0.02, 0.05, 0.03, 0.01])]
    lines = curve_table(summarize(rows), [COURSE, "learning_rate=3e-4", "steps=120"]).splitlines()
    assert len(lines) == 3  # a header, then the arms the grid ran
    assert lines[1].split()[:4] == [COURSE, "60", "+14.5", "(the"]
    # the curve rises linearly to the final gain, so the mean over the run is half of it
    assert lines[2].split()[:7] == ["learning_rate=3e-4", "60", "+2.8", "hurts", "vs", COURSE,
                                    "+1.4"]
    assert lines[2].split()[7] == "hurts"  # the mean over the run, raw
