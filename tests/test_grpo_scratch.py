"""helpers.grpo_scratch: each equation on hand-made numbers, then the loss against trl's own."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.grpo_scratch import (
    aggregate,
    clipped_surrogate,
    group_advantages,
    k3_kl,
    mask_after_eos,
    per_token_logps,
    reference_logps,
)


def test_advantages_on_hand_computed_groups():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    # Group 1: mean 0.5, Bessel std sqrt(1/3); group 2: all equal.
    expected = [0.5 / (math.sqrt(1 / 3) + 1e-4), -0.5 / (math.sqrt(1 / 3) + 1e-4)]
    adv = group_advantages(rewards, num_generations=4)
    torch.testing.assert_close(adv[:4], torch.tensor([expected[0], expected[1]] * 2)[[0, 1, 1, 0]])
    assert torch.equal(adv[4:], torch.zeros(4))  # all-equal rewards: zero, not NaN
    assert not torch.isnan(group_advantages(torch.zeros(8), 4)).any()


def test_advantages_without_std_scaling_and_bad_groups():
    adv = group_advantages(torch.tensor([3.0, 1.0, 5.0, 5.0]), 2, scale_rewards=False)
    assert adv.tolist() == [1.0, -1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(torch.ones(4), 3)
    with pytest.raises(ValueError, match=">= 2"):
        group_advantages(torch.ones(4), 1)


def test_clipping_on_constructed_ratios():
    ratios = torch.tensor([[0.5, 0.9, 1.0, 1.1, 1.5]])
    logps = torch.log(ratios)
    old = torch.zeros_like(logps)
    # A > 0: the ratio is capped at 1 + eps_high (1.3 here), never below its own value.
    pos = -clipped_surrogate(logps, old, torch.tensor([2.0]), 0.2, 0.3)
    torch.testing.assert_close(pos, 2.0 * torch.tensor([[0.5, 0.9, 1.0, 1.1, 1.3]]))
    # A < 0: the ratio is floored at 1 - eps (0.8): min() picks the more pessimistic term.
    neg = -clipped_surrogate(logps, old, torch.tensor([-1.0]), 0.2, 0.3)
    torch.testing.assert_close(neg, -torch.tensor([[0.8, 0.9, 1.0, 1.1, 1.5]]))


def test_clipped_tokens_get_no_gradient():
    logps = torch.log(torch.tensor([[0.5, 1.0, 1.5]])).requires_grad_()
    loss = clipped_surrogate(logps, torch.zeros(1, 3), torch.tensor([1.0]), 0.2, 0.2).sum()
    loss.backward()
    assert logps.grad[0, 0] != 0 and logps.grad[0, 1] != 0 and logps.grad[0, 2] == 0


def test_k3_kl_is_zero_at_equal_policies_and_positive_otherwise():
    logps = torch.tensor([[-1.0, -2.0, -0.5]])
    assert torch.equal(k3_kl(logps, logps), torch.zeros_like(logps))
    assert (k3_kl(logps, logps + torch.tensor([[0.3, -0.3, 1.0]])) > 0).all()


def test_mask_covers_up_to_first_eos_only():
    eos = 9
    ids = torch.tensor([[1, 2, eos, 0, 0], [1, eos, 3, eos, 0], [1, 2, 3, 4, 5], [eos, 0, 0, 0, 0]])
    assert mask_after_eos(ids, eos).tolist() == [
        [1, 1, 1, 0, 0],
        [1, 1, 0, 0, 0],  # tokens after the first EOS are masked even if they are not padding
        [1, 1, 1, 1, 1],  # truncated: no EOS, every token counts
        [1, 0, 0, 0, 0],
    ]


def test_aggregation_ignores_masked_tokens():
    loss = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate(loss, mask, "grpo", 3).item() == pytest.approx((1.5 + 3.0) / 2)
    assert aggregate(loss, mask, "dr_grpo", 3).item() == pytest.approx(6.0 / (2 * 3))
    assert aggregate(loss, mask, "dapo", 3, num_items_in_batch=3).item() == pytest.approx(2.0)
    assert aggregate(loss, mask, "grpo", 3, gradient_accumulation_steps=2).item() == (
        pytest.approx(4.5 / 4)
    )
    with pytest.raises(ValueError, match="num_items_in_batch"):
        aggregate(loss, mask, "dapo", 3)


# ---- Equivalence with trl 0.22.2's GRPOTrainer.compute_loss --------------------------------


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_loss_and_gradient_equal_trl(tmp_path, loss_type, beta):
    from helpers.trl_compare import compare_with_trl

    result = compare_with_trl(loss_type, beta, str(tmp_path))
    assert result["loss_trl"] != 0.0
    assert result["loss_rel_err"] <= 1e-5, result
    assert result["grad_rel_err"] <= 1e-4, result


def test_reference_is_the_model_with_its_adapter_disabled():
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.smoke_model import ensure_smoke_model
    from helpers.trl_compare import smoke_batch

    path = ensure_smoke_model()
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    batch = smoke_batch(AutoTokenizer.from_pretrained(path))
    with torch.no_grad():
        base_logps = per_token_logps(base, batch)
    lora = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                           init_lora_weights=False))
    with torch.no_grad():
        policy_logps = per_token_logps(lora, batch)
    assert not torch.allclose(policy_logps, base_logps)  # the adapter changes the policy
    torch.testing.assert_close(reference_logps(lora, batch, 1.0), base_logps)
    with pytest.raises(ValueError, match="ref_model"):
        reference_logps(torch.nn.Linear(2, 2), batch, 1.0)
