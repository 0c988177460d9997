"""GRPO from scratch: the whole algorithm in plain PyTorch, one function per equation.

Notebook 08 shows each piece beside its equation; notebook 09 trains with `train_step` on a toy
task. tests/test_grpo_scratch.py proves that the loss and its gradient equal trl 0.22.2's
`GRPOTrainer.compute_loss` for the loss types grpo, dr_grpo and dapo, with and without the KL
term. Names follow trl's GRPOConfig so the two read alike.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

LossType = Literal["grpo", "dr_grpo", "dapo"]
RewardFunc = Callable[..., list[float | None]]


@dataclass(frozen=True)
class GRPOSettings:
    """Every knob of the algorithm; the names are trl's GRPOConfig names."""

    num_generations: int = 8  # G: completions sampled per prompt
    max_completion_length: int = 16
    temperature: float = 1.0
    epsilon: float = 0.2  # clip range: ratio kept in [1 - epsilon, 1 + epsilon_high]
    epsilon_high: float | None = None  # None: epsilon (DAPO's "clip-higher" sets it larger)
    beta: float = 0.0  # KL weight; 0 needs no reference model at all
    loss_type: LossType = "dapo"
    scale_rewards: bool = True  # False: Dr. GRPO's advantages r - mean, no division by std
    num_iterations: int = 1  # mu: optimiser passes over one batch of rollouts
    gradient_accumulation_steps: int = 1  # memory trick 1: backward in chunks, one step
    gradient_checkpointing: bool = False  # memory trick 2: recompute activations in backward
    optim: Literal["adamw_torch", "adamw_8bit"] = "adamw_torch"  # memory trick 3
    learning_rate: float = 1e-4
    max_grad_norm: float = 1.0


@dataclass
class Rollout:
    """G completions per prompt, stacked group by group, with their masks."""

    prompt_ids: torch.Tensor  # (B, P), left-padded
    prompt_mask: torch.Tensor  # (B, P)
    completion_ids: torch.Tensor  # (B, C)
    completion_mask: torch.Tensor  # (B, C): 1 up to and including the first EOS

    def rows(self, index: slice) -> Rollout:
        """The same rollout restricted to rows `index` (one gradient-accumulation chunk)."""
        return Rollout(*(t[index] for t in (self.prompt_ids, self.prompt_mask,
                                             self.completion_ids, self.completion_mask)))


def group_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: bool = True, eps: float = 1e-4
) -> torch.Tensor:
    """A_i = (r_i - mean(group)) / (std(group) + eps), for rewards stored group by group."""
    if num_generations < 2 or rewards.numel() % num_generations:
        raise ValueError(
            f"{rewards.numel()} rewards cannot be split into groups of {num_generations}: "
            "num_generations must be >= 2 and divide the number of completions."
        )
    grouped = rewards.view(-1, num_generations)
    advantages = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards:
        # Bessel-corrected std and eps=1e-4, as trl. Equal rewards give 0 / eps = 0, never NaN.
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + eps)
    return advantages.flatten()


def mask_after_eos(completion_ids: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """1 for every token up to and including the first EOS, 0 after it (padding)."""
    is_eos = completion_ids == eos_token_id
    length = completion_ids.size(1)
    first_eos = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), length)
    positions = torch.arange(length, device=completion_ids.device).expand_as(completion_ids)
    return (positions <= first_eos.unsqueeze(1)).int()


def per_token_logps(model: Any, batch: Rollout, temperature: float = 1.0) -> torch.Tensor:
    """log pi(o_t | q, o_<t) for every completion token, from logits divided by temperature."""
    input_ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    attention_mask = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1)
    n = batch.completion_ids.size(1)
    # The logit at position t predicts token t+1: keep n+1 logits, drop the last one.
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=n + 1, use_cache=False
    ).logits[:, :-1, :] / temperature
    # log softmax of the chosen token only: z_o - logsumexp(z), without a (B, C, V) log-prob tensor.
    chosen = logits.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    return chosen - torch.stack([row.logsumexp(dim=-1) for row in logits])


def probability_ratio(logps: torch.Tensor, old_logps: torch.Tensor) -> torch.Tensor:
    """rho = pi_theta / pi_old per token, computed from log-probs: exp(logp - old_logp)."""
    return torch.exp(logps - old_logps)


def clipped_surrogate(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
) -> torch.Tensor:
    """-min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A), per token."""
    ratio = probability_ratio(logps, old_logps)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    a = advantages.unsqueeze(1)  # one advantage per completion, shared by all its tokens
    return -torch.min(ratio * a, clipped * a)


def clipped_share(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
) -> float:
    """trl's clip_ratio: the share of real tokens on the clipped side (they get no gradient)."""
    a = advantages.unsqueeze(1)
    clipped = ((ratio < 1 - epsilon_low) & (a < 0)) | ((ratio > 1 + epsilon_high) & (a > 0))
    return ((clipped * mask).sum() / mask.sum().clamp(min=1)).item()


def k3_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || pi_ref): exp(d) - d - 1 with d = ref - logp; >= 0."""
    d = ref_logps - logps
    return torch.exp(d) - d - 1


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: LossType,
    max_completion_length: int,
    num_items_in_batch: int | torch.Tensor | None = None,
    gradient_accumulation_steps: int = 1,
) -> torch.Tensor:
    """Reduce the per-token loss to one number, exactly as trl 0.22.2's loss types do."""
    masked = per_token_loss * mask
    if loss_type == "grpo":  # mean over each sequence's tokens, then over sequences
        loss = (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "dr_grpo":  # a constant denominator: no length bias
        loss = masked.sum() / (per_token_loss.size(0) * max_completion_length)
    elif loss_type == "dapo":  # mean over every token of the whole generation batch
        if num_items_in_batch is None:
            raise ValueError("loss_type='dapo' needs num_items_in_batch (tokens in the batch).")
        return masked.sum() / num_items_in_batch  # already a whole-batch mean: no / accumulation
    else:
        raise ValueError(f"Unknown loss_type {loss_type!r}: choose grpo, dr_grpo or dapo.")
    return loss / gradient_accumulation_steps


def grpo_loss(
    model: Any,
    batch: Rollout,
    advantages: torch.Tensor,
    settings: GRPOSettings,
    old_logps: torch.Tensor | None = None,
    ref_logps: torch.Tensor | None = None,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO objective for one chunk of rollouts: clipped surrogate, plus beta * KL."""
    logps = per_token_logps(model, batch, settings.temperature)
    # With one pass per rollout, pi_old is the current policy: ratio 1, but the gradient flows.
    old = logps.detach() if old_logps is None else old_logps
    eps_high = settings.epsilon if settings.epsilon_high is None else settings.epsilon_high
    per_token_loss = clipped_surrogate(logps, old, advantages, settings.epsilon, eps_high)
    mask = batch.completion_mask
    stats = {}
    if settings.beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta > 0 needs ref_logps: compute them with reference_logps().")
        kl = k3_kl(logps, ref_logps)
        per_token_loss = per_token_loss + settings.beta * kl
        stats["kl"] = ((kl * mask).sum() / mask.sum().clamp(min=1)).item()
    loss = aggregate(per_token_loss, mask, settings.loss_type, settings.max_completion_length,
                     num_items_in_batch, settings.gradient_accumulation_steps)
    ratio = probability_ratio(logps.detach(), old)
    stats["clip_ratio"] = clipped_share(ratio, advantages, mask, settings.epsilon, eps_high)
    return loss, stats


def reference_logps(
    model: Any, batch: Rollout, temperature: float, ref_model: Any | None = None
) -> torch.Tensor:
    """log pi_ref per token: `ref_model`, or for a LoRA model the same model, adapter off."""
    if ref_model is None and not hasattr(model, "disable_adapter"):
        raise ValueError(
            "beta > 0 needs a reference policy: pass ref_model=..., or train a LoRA (PeftModel), "
            "whose reference is the same model with its adapter disabled (no extra memory)."
        )
    adapter_off = model.disable_adapter() if ref_model is None else contextlib.nullcontext()
    with torch.no_grad(), adapter_off:
        return per_token_logps(ref_model or model, batch, temperature)


def rollout(model: Any, tokenizer: Any, prompts: Sequence[str], settings: GRPOSettings) -> Rollout:
    """Sample G completions per prompt with `generate`; rows are stored group by group."""
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    prompt_ids = enc["input_ids"].repeat_interleave(settings.num_generations, dim=0)
    prompt_mask = enc["attention_mask"].repeat_interleave(settings.num_generations, dim=0)
    was_training = model.training
    model.eval()  # generation wants the KV cache, which gradient checkpointing turns off
    out = model.generate(
        input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=True, top_k=0, top_p=1.0,
        temperature=settings.temperature, max_new_tokens=settings.max_completion_length,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    model.train(was_training)
    completion_ids = out[:, prompt_ids.size(1):]
    mask = mask_after_eos(completion_ids, tokenizer.eos_token_id)
    return Rollout(prompt_ids, prompt_mask, completion_ids, mask)


def score(
    texts: list[str], reward_funcs: Sequence[RewardFunc], weights: Sequence[float], **columns: Any
) -> torch.Tensor:
    """Weighted sum of the reward functions (trl's signature); None counts as no reward."""
    rewards = torch.zeros(len(texts))
    for func, weight in zip(reward_funcs, weights, strict=True):
        values = [math.nan if v is None else float(v) for v in func(completions=texts, **columns)]
        rewards += weight * torch.tensor(values).nan_to_num(0.0)
    return rewards


def make_optimizer(model: Any, settings: GRPOSettings) -> torch.optim.Optimizer:
    """AdamW in float32, or bitsandbytes' 8-bit AdamW (its states take 1 byte, not 4, each)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if settings.optim == "adamw_8bit":
        import bitsandbytes as bnb

        return bnb.optim.AdamW8bit(params, lr=settings.learning_rate, weight_decay=0.0)
    return torch.optim.AdamW(params, lr=settings.learning_rate, weight_decay=0.0)


def prepare_model(model: Any, settings: GRPOSettings) -> Any:
    """Switch activation checkpointing on or off, and put the model in training mode."""
    if settings.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif getattr(model, "is_gradient_checkpointing", False):
        model.gradient_checkpointing_disable()
    return model.train()


def accumulation_chunks(num_rows: int, gradient_accumulation_steps: int) -> list[slice]:
    """Row slices of equal size, one backward pass each: activations for 1/k of the batch."""
    k = gradient_accumulation_steps
    if k < 1 or num_rows % k:
        raise ValueError(f"{num_rows} completions do not split into {k} accumulation chunks: "
                         "make gradient_accumulation_steps divide the number of completions.")
    size = num_rows // k
    return [slice(i, i + size) for i in range(0, num_rows, size)]


def grpo_update(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: Rollout,
    rewards: torch.Tensor,
    settings: GRPOSettings,
    ref_model: Any | None = None,
) -> dict[str, float]:
    """One GRPO update on sampled completions and their rewards: num_iterations optimiser steps."""
    advantages = group_advantages(rewards, settings.num_generations, settings.scale_rewards)
    num_items = batch.completion_mask.sum()  # tokens in the whole batch: dapo's denominator
    old_logps = None  # one pass: pi_old is the current policy, ratio 1 (grpo_loss detaches)
    if settings.num_iterations > 1:  # several passes: freeze pi_old before the first step
        with torch.no_grad():
            old_logps = per_token_logps(model, batch, settings.temperature)
    ref_logps = None
    if settings.beta != 0.0:
        ref_logps = reference_logps(model, batch, settings.temperature, ref_model)
    chunks = accumulation_chunks(batch.completion_ids.size(0), settings.gradient_accumulation_steps)
    losses, stats = [], {}
    for _ in range(settings.num_iterations):
        for rows in chunks:
            loss, stats = grpo_loss(
                model, batch.rows(rows), advantages[rows], settings,
                None if old_logps is None else old_logps[rows],
                None if ref_logps is None else ref_logps[rows], num_items,
            )
            loss.backward()  # gradients add up over chunks: one optimiser step per pass
            losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {"loss": sum(losses) / settings.num_iterations, **stats}


def train_step(
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    prompts: Sequence[str],
    reward_funcs: Sequence[RewardFunc],
    settings: GRPOSettings,
    reward_weights: Sequence[float] | None = None,
    ref_model: Any | None = None,
    **columns: Sequence[Any],
) -> dict[str, float]:
    """One GRPO step: sample G completions per prompt, score them, then grpo_update."""
    g = settings.num_generations
    batch = rollout(model, tokenizer, prompts, settings)
    texts = tokenizer.batch_decode(batch.completion_ids, skip_special_tokens=True)
    # trl's reward signature: one value per completion, every dataset column repeated G times
    per_completion = {k: [v for v in vals for _ in range(g)] for k, vals in columns.items()}
    prompts_g = [p for p in prompts for _ in range(g)]
    rewards = score(texts, reward_funcs, reward_weights or [1.0] * len(reward_funcs),
                    prompts=prompts_g, **per_completion)
    stats = grpo_update(model, optimizer, batch, rewards, settings, ref_model)
    spread = rewards.view(-1, g).std(dim=1)
    return {"reward": rewards.mean().item(), "reward_std": spread.mean().item(),
            "frac_reward_zero_std": (spread < 1e-6).float().mean().item(),
            "completion_length": batch.completion_mask.sum(1).float().mean().item(), **stats}
