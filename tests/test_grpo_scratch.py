"""helpers.grpo_scratch: each equation on hand-made numbers, then the loss against trl's own."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.grpo_scratch import (
    GRPOSettings,
    Rollout,
    aggregate,
    clipped_surrogate,
    group_advantages,
    grpo_loss,
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

COMPLETION_LEN = 12
NUM_GEN = 4
ACCUM = 2  # the batch below is one of two accumulation chunks


@pytest.fixture(scope="module")
def smoke():
    """The course's tiny offline Qwen2, loaded with plain transformers in float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.smoke_model import ensure_smoke_model

    path = ensure_smoke_model()
    return path, AutoTokenizer.from_pretrained(path)


def _batch(tokenizer, seed: int = 0) -> Rollout:
    """Two prompts x 4 completions with EOS at different places (and one truncated)."""
    gen = torch.Generator().manual_seed(seed)
    enc = tokenizer(["What is 2+3?", "Tom has 7 apples and eats 2. How many are left?"],
                    return_tensors="pt", padding=True)
    prompt_ids = enc["input_ids"].repeat_interleave(NUM_GEN, 0)
    prompt_mask = enc["attention_mask"].repeat_interleave(NUM_GEN, 0)
    ids = torch.randint(3, len(tokenizer), (2 * NUM_GEN, COMPLETION_LEN), generator=gen)
    for row, eos_at in enumerate([3, 11, 5, 0, 7, 2, 9, 99]):
        if eos_at < COMPLETION_LEN:
            ids[row, eos_at] = tokenizer.eos_token_id
            ids[row, eos_at + 1:] = tokenizer.pad_token_id
    return Rollout(prompt_ids, prompt_mask, ids, mask_after_eos(ids, tokenizer.eos_token_id))


def _trainer(path, tokenizer, loss_type: str, beta: float, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    args = GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, fp16=False, report_to="none",
        per_device_train_batch_size=2 * NUM_GEN, num_generations=NUM_GEN,
        max_completion_length=COMPLETION_LEN, loss_type=loss_type, beta=beta,
        epsilon=0.2, epsilon_high=0.28, temperature=0.7, gradient_accumulation_steps=ACCUM,
    )
    data = Dataset.from_list([{"prompt": "hi"}] * 16)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(
        completions), args=args, train_dataset=data, processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = ACCUM  # set by the training loop normally
    return trainer


def _loss_and_grads(model, compute) -> tuple[float, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss = compute()
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return loss.item(), grads


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_loss_and_gradient_equal_trl(smoke, tmp_path, loss_type, beta):
    path, tokenizer = smoke
    trainer = _trainer(path, tokenizer, loss_type, beta, tmp_path)
    model = trainer.model.train()
    batch = _batch(tokenizer)
    settings = GRPOSettings(num_generations=NUM_GEN, max_completion_length=COMPLETION_LEN,
                            temperature=0.7, epsilon=0.2, epsilon_high=0.28, beta=beta,
                            loss_type=loss_type, gradient_accumulation_steps=ACCUM)
    gen = torch.Generator().manual_seed(1)
    advantages = group_advantages(torch.randint(0, 2, (2 * NUM_GEN,), generator=gen).float(),
                                  NUM_GEN)
    with torch.no_grad():
        logps = per_token_logps(model, batch, settings.temperature)
    # An old policy 0.3 nats away, so that some ratios leave [0.8, 1.28] and get clipped.
    old = logps + 0.3 * torch.randn(logps.shape, generator=gen)
    ref = logps + 0.5 * torch.randn(logps.shape, generator=gen) if beta else None
    num_items = batch.completion_mask.sum() * ACCUM  # tokens in the whole generation batch
    inputs = {"prompt_ids": batch.prompt_ids, "prompt_mask": batch.prompt_mask,
              "completion_ids": batch.completion_ids, "completion_mask": batch.completion_mask,
              "advantages": advantages, "old_per_token_logps": old,
              "num_items_in_batch": num_items}
    if beta:
        inputs["ref_per_token_logps"] = ref

    trl_loss, trl_grads = _loss_and_grads(model, lambda: trainer.compute_loss(model, inputs))
    ours_loss, ours_grads = _loss_and_grads(
        model, lambda: grpo_loss(model, batch, advantages, settings, old, ref, num_items)[0])

    assert trl_loss != 0.0
    assert abs(ours_loss - trl_loss) <= 1e-5 * abs(trl_loss)
    assert (ours_grads - trl_grads).norm() <= 1e-4 * trl_grads.norm()


def test_reference_is_the_model_with_its_adapter_disabled(smoke):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    path, tokenizer = smoke
    base = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    batch = _batch(tokenizer)
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
