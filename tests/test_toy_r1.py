"""helpers.toy_r1: the toy task, its checker, the step budgets, the cache, and that GRPO learns."""

from __future__ import annotations

import copy
import mmap
import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest
import torch

from helpers import memory_probe, toy_r1
from helpers.grpo_scratch import GRPOSettings, make_optimizer, prepare_model, train_step
from helpers.toy_r1 import CharTokenizer, Problem, ToyRecipe


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """A 1M-parameter model runs no faster on two threads, and far slower on a busy machine."""
    with toy_r1.torch_threads(1):
        yield


@pytest.fixture(scope="module")
def tok():
    return CharTokenizer()


def test_every_digit_is_one_token_and_tags_are_whole(tok):
    ids = tok.encode("<answer>-105</answer>")
    assert len(ids) == 1 + 4 + 1
    assert tok.batch_decode(torch.tensor([ids + [tok.eos_token_id, tok.pad_token_id]])) == [
        "<answer>-105</answer>"
    ]
    with pytest.raises(ValueError, match="not in the toy vocabulary"):
        tok.encode("What is 2*3?!")


def test_tokenizer_pads_on_the_left(tok):
    enc = tok(["What is 10+10?", "9"])
    assert enc["input_ids"].shape == (2, 14)
    assert enc["attention_mask"][1].tolist() == [0] * 13 + [1]
    assert enc["input_ids"][1, :13].eq(tok.pad_token_id).all()


def test_split_is_fixed_and_disjoint():
    train, heldout = toy_r1.split_problems()
    assert len(train) + len(heldout) == 100 * 100 * 2 and len(heldout) == toy_r1.HELDOUT_SIZE
    assert not {p.question for p in heldout} & {p.question for p in train}
    assert toy_r1.split_problems()[1] == heldout
    assert Problem("12-30=", "-18") in train + heldout


def test_correctness_reward_uses_the_strict_answer_format():
    completions = ["<answer>85</answer>", "85", "<answer>84</answer>", "<answer>-18</answer>"]
    rewards = toy_r1.correctness_reward(completions, answer=["85", "85", "85", "-18"])
    assert rewards == [1.0, 0.0, 0.0, 1.0]


def test_sft_batch_masks_target_and_eos_only(tok):
    batch = toy_r1.sft_batch(tok, ["What is 10+10?", "What is 99-10?"],
                             ["<answer>20</answer>", "<answer>89</answer>"])
    assert batch.completion_mask.sum(1).tolist() == [5, 5]  # tag, 2 digits, tag, EOS
    batch = toy_r1.sft_batch(tok, ["What is 10+10?", "What is 10-90?"],
                             ["<answer>20</answer>", "<answer>-80</answer>"])
    assert batch.completion_mask.tolist() == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]


def test_sft_learns_a_few_problems(tok):
    model = toy_r1.build_model(tok, seed=0)
    problems = [Problem("12+30=", "42"), Problem("50-61=", "-11")]
    batch = toy_r1.sft_batch(tok, [p.question for p in problems], [p.target for p in problems])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = [toy_r1.sft_step(model, optimizer, batch) for _ in range(60)]
    # Measured on 4 CPU kernel paths (native, AVX2, default, MKL_CBWR=COMPATIBLE): the last loss was
    # 0.029% of the first on each, accuracy 1.0; 10% leaves a wide margin for other paths.
    assert losses[-1] < 0.1 * losses[0]
    assert toy_r1.accuracy(model, tok, problems) == 1.0


def sevens_reward(completions: list[str], **kwargs) -> list[float]:
    """A reward a random model can climb: the share of sevens in the completion."""
    return [c.count("7") / 8 for c in completions]


def test_grpo_raises_a_learnable_reward(tok):
    torch.manual_seed(0)
    model = toy_r1.build_model(tok, seed=0)
    settings = GRPOSettings(num_generations=4, max_completion_length=8, learning_rate=3e-3)
    model = prepare_model(model, settings)
    optimizer = make_optimizer(model, settings)
    prompts = ["What is 10+10?", "What is 55-12?"]
    rewards = [train_step(model, tok, optimizer, prompts, [sevens_reward], settings)["reward"]
               for _ in range(25)]
    # The same 4 kernel paths all rose by 0.95 (of 1.0): 0.2 is far below any path's spread.
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.2


def length_reward(completions: list[str], **kwargs) -> list[float]:
    """A reward with spread even for a random model, so every group has a gradient."""
    return [len(c) / 8 for c in completions]


def test_every_switch_runs_one_step(tok):
    """Accumulation, checkpointing, 8-bit AdamW, mu > 1, KL: each switch gives a finite step."""
    model = toy_r1.build_model(tok, seed=1)
    ref = copy.deepcopy(model).eval()
    settings = GRPOSettings(num_generations=4, max_completion_length=8, num_iterations=2,
                            gradient_accumulation_steps=2, gradient_checkpointing=True,
                            optim="adamw_8bit", beta=0.1, loss_type="grpo", epsilon_high=0.28)
    model = prepare_model(model, settings)
    assert model.is_gradient_checkpointing
    before = [p.detach().clone() for p in model.parameters()]
    stats = train_step(model, tok, make_optimizer(model, settings), ["What is 10+10?"] * 2,
                       [length_reward], settings, ref_model=ref)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values()), stats
    assert "kl" in stats and stats["kl"] >= 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_memory_probe_in_its_own_process():
    row = memory_probe.memory_probe_in_subprocess(hidden=32, layers=1, batch=4, completion_length=8,
                                            settings=GRPOSettings(optim="adamw_8bit"), steps=1)
    assert row["peak_rss_mb"] >= row["baseline_rss_mb"] > 0 and row["params_m"] > 0
    assert row["training_mb"] == pytest.approx(row["peak_rss_mb"] - row["baseline_rss_mb"])


def test_peak_rss_sees_a_temporary_allocation():
    size = 64 * 2**20
    with memory_probe.PeakRss() as rss:
        # Fresh anonymous pages, not malloc: a long-lived test process can serve 64 MB from heap
        # memory it freed earlier and still holds, and then RSS does not move (CI saw that).
        pages = mmap.mmap(-1, size)
        for offset in range(0, size, mmap.PAGESIZE):
            pages[offset] = 1  # touched, so resident
        time.sleep(0.1)  # many of the poller's 2 ms turns: it cannot promise a shorter peak
        pages.close()
    assert rss.peak_mb - rss.start_mb > 40


@pytest.mark.parametrize("text,gold", [
    ("<answer>85</answer>", "85"), ("<answer> 085 </answer>", "85"),
    ("<answer>85.0</answer>", "85"),
    ("<answer>-18</answer>", "-18"), ("<answer>18</answer>", "-18"), ("85", "85"),
    ("<answer>8<answer>5</answer>", "85"), ("<answer>85</answer><answer>85</answer>", "85"),
    ("<answer></answer>", "0"), ("<answer>85</answer", "85"), ("x<answer>+7</answer>y", "7"),
    ("<answer>1,000</answer>", "1000"), ("<answer>eighty</answer>", "80"),
])
def test_fast_checker_agrees_with_the_course_checker(text, gold):
    from helpers.rewards import is_correct

    assert toy_r1.correct([text], [gold]) == [is_correct(text, gold, "strict")]


def test_random_reward_ignores_the_answer_and_is_seeded():
    right, wrong = ["<answer>85</answer>"] * 400, ["<answer>1</answer>"] * 400
    first = toy_r1.random_reward(0)(right, answer=["85"] * 400)
    assert first == toy_r1.random_reward(0)(wrong, answer=["85"] * 400)  # same draws, any answer
    assert set(first) == {0.0, 1.0} and 0.4 < sum(first) / 400 < 0.6
    assert first != toy_r1.random_reward(1)(right, answer=["85"] * 400)


TINY = ToyRecipe(cold_start_target=1.1, cold_start_max_steps=3, cold_start_check_every=1,
                 sft_batch=8, rl_steps=2, prompts_per_step=2)


def test_cold_start_is_cached_by_recipe_and_seed(tok, tmp_path):
    train = toy_r1.split_problems()[0]
    model, stats = toy_r1.cached_cold_start(tok, train, 0, TINY, root=tmp_path)
    assert stats["steps"] == 3 and not stats["reached"] and not stats["cached"]
    again, stats2 = toy_r1.cached_cold_start(tok, train, 0, TINY, root=tmp_path)
    assert stats2["cached"] and stats2["steps"] == 3
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 again.state_dict().values(), strict=True))
    assert TINY.cold_start_key(0) != TINY.cold_start_key(1)
    assert TINY.cold_start_key(0) != ToyRecipe(cold_start_max_steps=4).cold_start_key(0)
    assert TINY.cold_start_key(0) == replace(TINY, rl_steps=99).cold_start_key(0)


def test_a_cold_start_being_built_elsewhere_is_waited_for(tmp_path):
    lock = tmp_path / "x.lock"
    assert toy_r1._take_lock(lock) and lock.read_text() == str(os.getpid())
    assert not toy_r1._take_lock(lock)  # held by a live process (this one): wait
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    lock.write_text(dead)
    assert not toy_r1._take_lock(lock) and not lock.exists()  # a dead builder's lock is removed
    assert toy_r1._take_lock(lock)


def test_cold_start_stops_at_its_gate(tok):
    model = toy_r1.build_model(tok, seed=0)
    gate = replace(TINY, cold_start_target=0.0, cold_start_check_every=2, cold_start_max_steps=50)
    stats = toy_r1.cold_start(model, tok, toy_r1.split_problems()[0], 0, gate)
    assert stats["steps"] == 2 and stats["reached"]


def test_learning_rate_decays_linearly_to_zero_over_the_budget():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    next_lr = toy_r1._schedule(optimizer, 4, decay=True)
    rates = []
    for _ in range(4):
        optimizer.step()
        next_lr()
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx([0.75, 0.5, 0.25, 0.0])
    toy_r1._schedule(optimizer, 4, decay=False)()
    assert optimizer.param_groups[0]["lr"] == 0.0  # a constant schedule changes nothing


def test_budgets_are_updates_not_seconds(tok):
    train = toy_r1.split_problems()[0]
    model = toy_r1.build_model(tok, seed=0)
    assert len(toy_r1.run_grpo(copy.deepcopy(model), tok, train, 0, TINY)) == TINY.rl_steps
    assert toy_r1.run_sft(copy.deepcopy(model), tok, train, 0, TINY) == TINY.rl_steps


def test_rft_trains_once_per_step_on_distinct_accepted_answers(tok):
    problems = [Problem("12+30=", "42"), Problem("50-61=", "-11")]
    model = toy_r1.build_model(tok, seed=0)
    batch = toy_r1.sft_batch(tok, [p.question for p in problems], [p.target for p in problems])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        toy_r1.sft_step(model, optimizer, batch)
    recipe = replace(TINY, rl_steps=3)
    log = toy_r1.run_rft(copy.deepcopy(model), tok, problems, 0, recipe)
    assert log["sampled"] == 3 * 2 * recipe.grpo.num_generations
    assert log["accepted"] > log["trained_on"] > 0  # duplicates of a question count once
    assert log["updates"] == 3 and log["trained_on"] <= 3 * 2
    pooled = toy_r1.run_rft(copy.deepcopy(model), tok, problems, 0, recipe, pool=64)
    assert pooled["updates"] == 0  # fewer than 64 accepted: the first version never updated
    summary = toy_r1.rft_summary(log, model, tok)
    assert summary["already_solved_share"] == 1.0 and 0 < summary["unique_question_share"] <= 1


def test_the_weak_cold_start_runs_grpo_from_its_own_cached_cold_start(tok, tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_COURSE_CACHE", str(tmp_path))
    train, heldout = toy_r1.split_problems()
    recipe = replace(TINY, weak_cold_start_target=1.05)  # unreachable: stops at max steps
    weak = toy_r1.weak_cold_start_run(tok, train, heldout[:16], 0, recipe)
    assert weak["target"] == 1.05 and weak["cold_start"]["steps"] == TINY.cold_start_max_steps
    assert 0 <= weak["acc_before"] <= 1 and 0 <= weak["acc_after_grpo"] <= 1
    assert 0 <= weak["zero_spread_first_20"] <= 1
    keys = {path.name for path in tmp_path.glob("toy-r1-cold-start-*.pt")}
    weak_recipe = replace(recipe, cold_start_target=1.05,
                          cold_start_check_every=recipe.weak_cold_start_check_every)
    assert keys == {f"toy-r1-cold-start-{weak_recipe.cold_start_key(0)}.pt"}
    assert recipe.cold_start_key(0) not in next(iter(keys))  # apart from the recipe's own


def test_run_seed_records_the_weak_arm_only_when_asked(tok, tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_COURSE_CACHE", str(tmp_path))
    plain = toy_r1.run_seed(0, TINY, controls=False)
    assert "weak_cold_start" not in plain and "zero_spread_first_20" in plain
    weak = toy_r1.run_seed(0, TINY, controls=False, weak_cold_start=True)
    assert weak["weak_cold_start"]["target"] == TINY.weak_cold_start_target
    table = toy_r1.cold_start_table([weak])
    assert table.count("\n") == 3 and "weak (10% target)" in table and "the recipe's" in table


def test_first_update_columns_follow_the_learning_rate_whatever_the_dict_order():
    row = {"seed": 2, "acc_before": 0.342, "acc_after_one_sft_update": {"0.001": 0.096,
                                                                       "0.0001": 0.35}}
    table = toy_r1.first_update_table([row])
    assert table.splitlines()[0] == ("| seed | cold start | one SFT update, lr 0.0001 "
                                     "| one SFT update, lr 0.001 |")
    assert table.splitlines()[2] == "| 2 | 34.2% | 35.0% | 9.6% |"


def test_the_margins_behind_the_verdict_are_computed_and_ordered():
    rows = [{"acc_before": 0.30, "acc_after_grpo": 0.45, "acc_after_sft_control": 0.65,
             "acc_after_rft": 0.50, "acc_after_random_reward": 0.05},
            {"acc_before": 0.20, "acc_after_grpo": 0.35, "acc_after_sft_control": 0.75,
             "acc_after_rft": 0.40, "acc_after_random_reward": 0.15}]
    lines = toy_r1.grpo_margins(rows).splitlines()
    assert lines[0] == "Held-out accuracy, mean of 2 seeds:"
    assert lines[1:] == ["  GRPO against the cold start: +15.0 points",
                         "  extra SFT against GRPO: +30.0 points",
                         "  RFT against GRPO: +5.0 points",
                         "  the random-reward control against GRPO: -30.0 points"]
    assert "this run" in toy_r1.grpo_margins(rows[:1])
