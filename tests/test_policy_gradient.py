"""The policy-gradient notebook's one step: a real update on the smoke model moves what it claims.

One update of REINFORCE with the group's mean as baseline must raise the best completion's
log-probability and lower the worst one's; a group without reward spread must move nothing; the
loss must be the hand formula; and bad input must get a sentence that names the fix.
"""

import pytest
import torch

from helpers.grpo_scratch import group_advantages
from helpers.policy_gradient import (
    accuracy_on,
    best_and_worst,
    compare_with_reinforce_loss,
    first_group_where,
    group_table,
    grpo_gradient_agreement,
    load_smoke_policy,
    one_update,
    practice,
    reinforce_loss,
    sample_group,
)
from helpers.synthetic import synthetic_split

G, SEED, LR = 8, 0, 1e-3  # the notebook's defaults


@pytest.fixture(scope="module")
def policy():
    torch.set_num_threads(1)  # the smoke model's matrices are too small to split
    return load_smoke_policy()


@pytest.fixture(scope="module")
def mixed(policy):
    """The notebook's group: the first training problem with right and wrong answers."""
    model, tokenizer = policy
    _, group = first_group_where(model, tokenizer, synthetic_split("train", 20), G, SEED)
    return group


def fresh_model():
    model, _ = load_smoke_policy()
    return model


def test_the_search_returns_a_group_with_right_and_wrong_answers(mixed):
    assert len(mixed.texts) == G and mixed.rewards.shape == (G,)
    assert any(mixed.correct) and not all(mixed.correct)


def test_the_same_seed_samples_the_same_group(policy, mixed):
    model, tokenizer = policy
    row = next(r for r in synthetic_split("train", 20) if mixed.question == r["question"])
    again = sample_group(model, tokenizer, row, G, SEED)
    assert again.texts == mixed.texts


def test_one_update_raises_the_best_and_lowers_the_worst(mixed):
    advantages = group_advantages(mixed.rewards, G)
    best, worst = best_and_worst(advantages)
    assert mixed.correct[best] and not mixed.correct[worst]
    update = one_update(fresh_model(), mixed.batch, advantages, LR)
    assert update.logps_after[best] > update.logps_before[best]
    assert update.logps_after[worst] < update.logps_before[worst]


def test_flipped_advantages_move_the_other_way(mixed):
    advantages = group_advantages(mixed.rewards, G)
    best, worst = best_and_worst(advantages)
    update = one_update(fresh_model(), mixed.batch, -advantages, LR)
    assert update.change[best] < 0 < update.change[worst]


def test_the_loss_is_the_hand_formula():
    logps = torch.tensor([-1.0, -2.0, -3.0], requires_grad=True)
    advantages = torch.tensor([1.0, 0.0, -1.0])
    loss = reinforce_loss(logps, advantages)
    # -(1 * -1 + 0 * -2 + -1 * -3) / 3 = -2/3; d loss / d logp_i = -A_i / 3
    assert loss.item() == pytest.approx(-2 / 3)
    loss.backward()
    assert torch.allclose(logps.grad, torch.tensor([-1 / 3, 0.0, 1 / 3]))


def test_no_gradient_reaches_the_advantages():
    logps = torch.tensor([-1.0, -2.0], requires_grad=True)
    advantages = torch.tensor([0.5, -0.5], requires_grad=True)
    reinforce_loss(logps, advantages).backward()
    assert advantages.grad is None


def test_a_group_without_reward_spread_leaves_the_weights_unchanged(mixed):
    model = fresh_model()
    flat = group_advantages(torch.full_like(mixed.rewards, 4.0), G)
    assert torch.equal(flat, torch.zeros(G))
    before = [p.detach().clone() for p in model.parameters()]
    update = one_update(model, mixed.batch, flat, LR)
    assert update.loss == 0
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    assert torch.equal(update.logps_after, update.logps_before)


def test_grpo_with_the_course_settings_has_the_same_gradient_direction(policy, mixed):
    model, _ = policy
    advantages = group_advantages(mixed.rewards, G)
    cosine, scale = grpo_gradient_agreement(model, mixed.batch, advantages)
    assert cosine == pytest.approx(1.0, abs=1e-6)
    # dapo divides by the batch's tokens, this loss by the G completions
    assert scale == pytest.approx(G / mixed.batch.completion_mask.sum().item(), rel=1e-4)


def test_the_loss_checker_names_a_wrong_loss():
    same = compare_with_reinforce_loss(lambda lp, a: -(a.detach() * lp).mean())
    assert same.startswith("matches")
    assert compare_with_reinforce_loss(lambda lp, a: (a * lp).mean()).startswith("differs")
    assert "no gradient" in compare_with_reinforce_loss(lambda lp, a: torch.tensor(0.0))


def test_the_table_has_one_row_per_completion_with_tags_as_text(mixed):
    advantages = group_advantages(mixed.rewards, G)
    update = one_update(fresh_model(), mixed.batch, advantages, LR)
    rows = group_table(mixed, advantages, update).splitlines()[2:]
    assert len(rows) == G
    assert sum("(best)" in r for r in rows) == 1 and sum("(worst)" in r for r in rows) == 1
    assert all("<" not in r and "\n" not in r for r in rows)  # markdown would eat raw tags


def test_a_group_needs_two_completions(policy):
    model, tokenizer = policy
    row = synthetic_split("train", 1)[0]
    for size in (1, 0):
        with pytest.raises(ValueError, match="at least 2 completions"):
            sample_group(model, tokenizer, row, size, SEED)


def test_bad_loss_input_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="non-empty 1-D tensor"):
        reinforce_loss(torch.tensor([]), torch.tensor([]))
    with pytest.raises(ValueError, match="one advantage per completion"):
        reinforce_loss(torch.zeros(3), torch.zeros(2))


def test_bad_update_input_is_refused_with_the_fix(mixed):
    advantages = group_advantages(mixed.rewards, G)
    with pytest.raises(ValueError, match="must be > 0"):
        one_update(fresh_model(), mixed.batch, advantages, lr=0.0)
    with pytest.raises(ValueError, match="does not depend on logps"):
        one_update(fresh_model(), mixed.batch, advantages, LR, loss_fn=lambda lp, a: a.sum())


def test_a_search_that_finds_nothing_says_what_to_change(policy):
    model, tokenizer = policy
    with pytest.raises(ValueError, match="pass more problems, or another seed"):
        first_group_where(model, tokenizer, synthetic_split("train", 2), G, SEED,
                          wanted=lambda group: False)


def test_a_few_dozen_steps_on_one_question_make_it_answered_right_more_often(policy, mixed):
    _, tokenizer = policy
    row = next(r for r in synthetic_split("train", 20) if mixed.question == r["question"])
    learner = fresh_model()
    before = accuracy_on(learner, tokenizer, row, 32, seed=SEED + 1000)
    per_step = practice(learner, tokenizer, row, 30, G, SEED, lr=LR)
    after = accuracy_on(learner, tokenizer, row, 32, seed=SEED + 1000)
    assert len(per_step) == 30 and all(0 <= a <= 1 for a in per_step)
    assert after >= before + 0.3, (before, after)
    assert sum(per_step[-5:]) > sum(per_step[:5]), per_step


def test_the_loop_without_its_minus_sign_unlearns(policy, mixed):
    _, tokenizer = policy
    row = next(r for r in synthetic_split("train", 20) if mixed.question == r["question"])
    learner = fresh_model()
    before = accuracy_on(learner, tokenizer, row, 32, seed=SEED + 1000)
    practice(learner, tokenizer, row, 10, G, SEED, lr=LR,
             loss_fn=lambda logps, adv: (adv.detach() * logps).mean())
    assert accuracy_on(learner, tokenizer, row, 32, seed=SEED + 1000) < before
