"""Proof on one batch: helpers.grpo_scratch's loss and gradient equal trl's GRPOTrainer.

Notebook 08 (section 8, the proof) prints the comparison; tests/test_grpo_scratch.py asserts it
for every loss type, with and without the KL term.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from helpers.grpo_scratch import GRPOSettings, Rollout, grpo_loss, mask_after_eos, per_token_logps


def _unused_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """trl's trainer needs a reward function; compute_loss never calls it."""
    return [0.0] * len(completions)


def smoke_batch(tokenizer: Any, num_generations: int = 4, completion_length: int = 12,
                seed: int = 0) -> Rollout:
    """Two prompts x G random completions, EOS at different places (one truncated)."""
    gen = torch.Generator().manual_seed(seed)
    enc = tokenizer(["What is 2+3?", "Tom has 7 apples and eats 2. How many are left?"],
                    return_tensors="pt", padding=True)
    prompt_ids = enc["input_ids"].repeat_interleave(num_generations, 0)
    prompt_mask = enc["attention_mask"].repeat_interleave(num_generations, 0)
    ids = torch.randint(3, len(tokenizer), (2 * num_generations, completion_length), generator=gen)
    for row in range(2 * num_generations - 1):  # the last row keeps no EOS: truncated
        eos_at = int(torch.randint(0, completion_length, (1,), generator=gen))
        ids[row, eos_at] = tokenizer.eos_token_id
        ids[row, eos_at + 1:] = tokenizer.pad_token_id
    return Rollout(prompt_ids, prompt_mask, ids, mask_after_eos(ids, tokenizer.eos_token_id))


def _loss_and_grads(model: Any, compute: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss = compute()
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


def compare_with_trl(loss_type: str, beta: float, output_dir: str,
                     accumulation: int = 2) -> dict[str, float]:
    """Loss and gradient from grpo_loss and from trl's GRPOTrainer.compute_loss, same inputs.

    The smoke model in float32; old log-probs 0.3 nats off the current ones (so some ratios
    clip), a reference 0.5 nats off, temperature 0.7, eps 0.2 / eps_high 0.28, and the batch is
    one of `accumulation` chunks, so each loss type's normalisation is exercised.
    """
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from helpers.grpo_scratch import group_advantages
    from helpers.smoke_model import ensure_smoke_model

    g, length = 4, 12
    path = ensure_smoke_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    args = GRPOConfig(
        output_dir=output_dir, use_cpu=True, bf16=False, fp16=False, report_to="none",
        per_device_train_batch_size=2 * g, num_generations=g, max_completion_length=length,
        loss_type=loss_type, beta=beta, epsilon=0.2, epsilon_high=0.28, temperature=0.7,
        gradient_accumulation_steps=accumulation,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=_unused_reward, args=args,
                          train_dataset=Dataset.from_list([{"prompt": "hi", "answer": "1"}] * 16),
                          processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = accumulation  # the training loop sets it
    model = trainer.model.train()
    settings = GRPOSettings(num_generations=g, max_completion_length=length, temperature=0.7,
                            epsilon=0.2, epsilon_high=0.28, beta=beta, loss_type=loss_type,
                            gradient_accumulation_steps=accumulation)
    batch = smoke_batch(tokenizer, g, length)
    gen = torch.Generator().manual_seed(1)
    advantages = group_advantages(torch.randint(0, 2, (2 * g,), generator=gen).float(), g)
    with torch.no_grad():
        logps = per_token_logps(model, batch, settings.temperature)
    old = logps + 0.3 * torch.randn(logps.shape, generator=gen)
    ref = logps + 0.5 * torch.randn(logps.shape, generator=gen) if beta else None
    num_items = batch.completion_mask.sum() * accumulation  # tokens in the generation batch
    inputs = {"prompt_ids": batch.prompt_ids, "prompt_mask": batch.prompt_mask,
              "completion_ids": batch.completion_ids, "completion_mask": batch.completion_mask,
              "advantages": advantages, "old_per_token_logps": old,
              "num_items_in_batch": num_items}
    if beta:
        inputs["ref_per_token_logps"] = ref
    trl_loss, trl_grads = _loss_and_grads(model, lambda: trainer.compute_loss(model, inputs))
    loss, grads = _loss_and_grads(
        model, lambda: grpo_loss(model, batch, advantages, settings, old, ref, num_items)[0])
    return {"loss_type": loss_type, "beta": beta, "loss_trl": trl_loss, "loss_ours": loss,
            "loss_rel_err": abs(loss - trl_loss) / abs(trl_loss),
            "grad_rel_err": ((grads - trl_grads).norm() / trl_grads.norm()).item()}
