"""helpers.checking: a learner's right version matches, a wrong one is named in one sentence."""

from __future__ import annotations

import torch

from helpers import grpo_scratch
from helpers.checking import CASES, check, differences


def test_every_course_piece_matches_itself_on_its_cases():
    for name, cases in CASES.items():
        reference = getattr(grpo_scratch, name)
        assert differences(reference, reference, cases()) == [], name


def test_the_cases_reach_the_corners_that_matter():
    advantages = CASES["group_advantages"]()
    assert any(not group_advantages_of(c).any() for c in advantages)  # an all-equal group
    surrogate = CASES["clipped_surrogate"]()[0]
    logps, old = surrogate.args[0], surrogate.args[1]
    ratio = torch.exp(logps - old)
    assert (ratio > 1.2).any() and (ratio < 0.8).any()  # both sides of the clip range
    losses = CASES["grpo_loss"]()
    assert {c.args[3].loss_type for c in losses} == {"grpo", "dr_grpo", "dapo"}
    assert any(c.args[3].beta > 0 for c in losses) and any(c.args[4] is None for c in losses)


def group_advantages_of(case):
    return grpo_scratch.group_advantages(*case.args, **case.kwargs)[: case.args[1]]


def max_instead_of_min(logps, old_logps, advantages, epsilon_low, epsilon_high):
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    a = advantages.unsqueeze(1)
    return -torch.max(ratio * a, clipped * a)  # the optimistic side: clipping no longer bounds


def test_a_wrong_clipped_term_is_reported_with_the_case_and_the_numbers(capsys):
    check(max_instead_of_min, grpo_scratch.clipped_surrogate)
    message = capsys.readouterr().out
    assert message.startswith("max_instead_of_min does not match clipped_surrogate: on case 1 ")
    assert "largest difference" in message and "at position" in message
    assert message.count("\n") == 1  # one sentence, one line


def detached_k3(logps, ref_logps):
    d = (ref_logps - logps).detach()  # right values, but the penalty no longer trains anything
    return torch.exp(d) - d - 1


def test_right_values_with_a_cut_gradient_are_caught(capsys):
    check(detached_k3, grpo_scratch.k3_kl)
    assert "no gradient flows through yours" in capsys.readouterr().out


def population_std(rewards, num_generations, scale_rewards=True, eps=1e-4):
    grouped = rewards.view(-1, num_generations)
    advantages = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards:
        advantages = advantages / (grouped.std(dim=1, keepdim=True, unbiased=False) + eps)
    return advantages.flatten()


def test_a_subtle_difference_is_still_caught_and_counted(capsys):
    found = differences(population_std, grpo_scratch.group_advantages,
                        CASES["group_advantages"]())
    assert len(found) == 3  # the three scale_rewards=True cases; the unscaled ones agree
    check(population_std, grpo_scratch.group_advantages)
    assert "(2 more cases differ too)" in capsys.readouterr().out


def test_errors_and_shapes_are_reported_not_raised(capsys):
    def broken(logps, old_logps):
        raise KeyError("oops")

    def first_tokens_only(logps, old_logps):
        return torch.exp(logps - old_logps)[:, :2]

    check(broken, grpo_scratch.probability_ratio)
    assert "yours raised KeyError: 'oops'" in capsys.readouterr().out
    check(first_tokens_only, grpo_scratch.probability_ratio)
    assert "has shape (3, 2), but probability_ratio's has (3, 5)" in capsys.readouterr().out


def test_a_matching_version_says_so(capsys):
    def mine(logps, ref_logps):
        d = ref_logps - logps
        return d.exp() - d - 1

    check(mine, grpo_scratch.k3_kl)
    assert capsys.readouterr().out == (
        "mine matches k3_kl on 1 random case (values and gradients).\n")


def test_a_loss_without_accumulation_scaling_is_caught():
    def no_accumulation(model, batch, advantages, settings, old_logps=None, ref_logps=None,
                        num_items_in_batch=None):
        loss, _ = grpo_scratch.grpo_loss(model, batch, advantages, settings, old_logps,
                                         ref_logps, num_items_in_batch)
        return loss * 2 if settings.loss_type == "grpo" else loss

    found = differences(no_accumulation, grpo_scratch.grpo_loss, CASES["grpo_loss"]())
    assert len(found) == 1 and "loss_type='grpo'" in found[0]
