"""helpers.grpo_scratch: each equation on hand-made numbers, then the loss against trl's own."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.grpo_scratch import (
    GRPOSettings,
    Rollout,
    accumulation_chunks,
    aggregate,
    clipped_share,
    clipped_surrogate,
    group_advantages,
    grpo_update,
    k3_kl,
    mask_after_eos,
    per_token_logps,
    probability_ratio,
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


def test_ratio_is_the_probability_ratio():
    p, old = torch.tensor([[0.2, 0.5]]), torch.tensor([[0.4, 0.5]])
    torch.testing.assert_close(probability_ratio(p.log(), old.log()), torch.tensor([[0.5, 1.0]]))


def test_clipped_share_counts_only_the_clipped_side_of_real_tokens():
    ratio = torch.tensor([[0.5, 1.5, 1.0], [0.5, 1.5, 1.5]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # row 1, A > 0: only 1.5 is clipped; row 2, A < 0: only 0.5 (the masked 1.5 never counts)
    share = clipped_share(ratio, torch.tensor([1.0, -1.0]), mask, 0.2, 0.28)
    assert share == pytest.approx(2 / 5)


def test_accumulation_chunks_cover_every_row_once():
    assert accumulation_chunks(8, 4) == [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)]
    assert accumulation_chunks(8, 1) == [slice(0, 8)]
    with pytest.raises(ValueError, match="divide the number of completions"):
        accumulation_chunks(8, 3)


def _tiny_policy_and_batch() -> tuple[torch.nn.Module, Rollout]:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16)
    prompt = torch.randint(2, 16, (4, 3))
    completion = torch.randint(2, 16, (4, 5))
    return Qwen2ForCausalLM(config), Rollout(prompt, torch.ones_like(prompt), completion,
                                             torch.ones_like(completion))


@pytest.mark.parametrize("rewards,moves", [([1.0, 0.0, 0.0, 1.0], True), ([1.0] * 4, False)])
def test_one_update_moves_the_policy_only_when_a_group_has_reward_spread(rewards, moves):
    model, batch = _tiny_policy_and_batch()
    settings = GRPOSettings(num_generations=4, max_completion_length=5, learning_rate=1e-2,
                            gradient_accumulation_steps=2)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.0)
    stats = grpo_update(model, optimizer, batch, torch.tensor(rewards), settings)
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert changed == moves and stats["clip_ratio"] == 0.0  # one pass: ratio 1, nothing clipped
    if moves:  # the right answers became more likely, the wrong ones less
        with torch.no_grad():
            gain = per_token_logps(model, batch).sum(1) - per_token_logps(
                _tiny_policy_and_batch()[0], batch).sum(1)
        assert gain[0] > 0 and gain[3] > 0 and gain[1] < 0 and gain[2] < 0


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
