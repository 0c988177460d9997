"""helpers.toy_r1: the toy task's tokenizer, data, checker, and that GRPO really moves the model."""

from __future__ import annotations

import copy

import pytest
import torch

from helpers import toy_r1
from helpers.grpo_scratch import GRPOSettings, make_optimizer, prepare_model, train_step
from helpers.toy_r1 import CharTokenizer, Problem


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
    row = toy_r1.memory_probe_in_subprocess(hidden=32, layers=1, batch=4, completion_length=8,
                                            settings=GRPOSettings(optim="adamw_8bit"), steps=1)
    assert row["peak_rss_mb"] >= row["baseline_rss_mb"] > 0 and row["params_m"] > 0
    assert row["training_mb"] == pytest.approx(row["peak_rss_mb"] - row["baseline_rss_mb"])


def test_peak_rss_sees_a_temporary_allocation():
    with toy_r1.PeakRss() as rss:
        block = torch.ones(64 * 2**20 // 4)  # 64 MB, touched, then freed inside the block
        del block
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
