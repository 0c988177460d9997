"""One policy-gradient step on one question: REINFORCE, with the group's mean reward as baseline.

The policy-gradient notebook runs it on the smoke model, on a CPU, in seconds, then repeats it on
fresh groups (`practice`) until the question is answered right far more often. The course trains
with `num_iterations=1` and `beta=0`, so GRPO's probability ratio is exactly 1 and its clip never
acts: the gradient it follows is this one's, up to how tokens are averaged. Sampling, per-token
log-probabilities and group advantages come from helpers.grpo_scratch; nothing is written twice.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from helpers.data import build_prompts, extract_gold_answer
from helpers.grpo_scratch import (
    GRPOSettings,
    Rollout,
    group_advantages,
    grpo_loss,
    per_token_logps,
    rollout,
    score,
)
from helpers.profiles import SMOKE
from helpers.rewards import REWARD_FUNCS, REWARD_WEIGHTS, correctness_reward

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Group:
    """G completions sampled for one question, decoded and scored as training scores them."""

    question: str
    gold: str
    batch: Rollout  # token ids and masks: what the log-probabilities are computed on
    texts: list[str]
    rewards: torch.Tensor  # the course's five rewards, weighted and summed, one per completion
    correct: list[bool]  # correctness_reward alone, for the reader

    def has_right_and_wrong(self) -> bool:
        """Whether the group holds at least one right and one wrong answer."""
        return any(self.correct) and not all(self.correct)


@dataclass(frozen=True)
class Update:
    """What one optimiser step did: the loss it followed, log pi of each completion around it."""

    loss: float
    logps_before: torch.Tensor
    logps_after: torch.Tensor

    @property
    def change(self) -> torch.Tensor:
        """log pi after the step minus before it, per completion."""
        return self.logps_after - self.logps_before


def load_smoke_policy() -> tuple[Any, Any]:
    """The committed smoke model and its tokenizer, loaded by plain transformers on the CPU."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.smoke_model import ensure_smoke_model

    folder = ensure_smoke_model()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval(), tokenizer  # eval: no dropout, so the same input gives the same log pi


def sample_group(
    model: Any,
    tokenizer: Any,
    row: dict[str, str],
    group_size: int,
    seed: int,
    max_new_tokens: int = SMOKE.max_completion_length,
) -> Group:
    """`group_size` completions for one GSM8K-schema row at temperature 1 (seeded), scored."""
    if group_size < 2:
        raise ValueError(
            f"group_size={group_size}: a group needs at least 2 completions, because the group's "
            "mean is the baseline each one is compared with. Pass group_size >= 2."
        )
    gold = extract_gold_answer(row["answer"])
    settings = GRPOSettings(num_generations=group_size, max_completion_length=max_new_tokens)
    torch.manual_seed(seed)
    batch = rollout(model, tokenizer, build_prompts(tokenizer, [row["question"]]), settings)
    texts = tokenizer.batch_decode(batch.completion_ids, skip_special_tokens=True)
    golds = [gold] * group_size
    rewards = score(texts, REWARD_FUNCS, REWARD_WEIGHTS, answer=golds)
    correct = [value == 1.0 for value in correctness_reward(texts, answer=golds)]
    return Group(row["question"], gold, batch, texts, rewards, correct)


def first_group_where(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict[str, str]],
    group_size: int,
    seed: int,
    wanted: Callable[[Group], bool] = Group.has_right_and_wrong,
) -> tuple[int, Group]:
    """The first row, in order, whose seeded group is `wanted`: a deterministic search."""
    for index, row in enumerate(rows):
        group = sample_group(model, tokenizer, row, group_size, seed)
        if wanted(group):
            return index, group
    raise ValueError(
        f"None of the {len(rows)} problems gave a group of the kind wanted (seed {seed}): "
        "pass more problems, or another seed."
    )


def sequence_logps(model: Any, batch: Rollout) -> torch.Tensor:
    """log pi(o_i | q) per completion: its tokens' log-probabilities summed, padding left out."""
    return (per_token_logps(model, batch) * batch.completion_mask).sum(dim=1)


def reinforce_loss(logps: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Mean of -A_i * log pi(o_i): stepping down it raises log pi if A > 0, lowers it if A < 0."""
    if logps.ndim != 1 or logps.numel() == 0:
        raise ValueError(
            f"logps has shape {tuple(logps.shape)}: pass one summed log-probability per "
            "completion (a non-empty 1-D tensor, see sequence_logps)."
        )
    if advantages.shape != logps.shape:
        raise ValueError(
            f"{advantages.numel()} advantages for {logps.numel()} completions: pass one "
            "advantage per completion, in the same order."
        )
    return -(advantages.detach() * logps).mean()


def one_update(
    model: Any,
    batch: Rollout,
    advantages: torch.Tensor,
    lr: float,
    loss_fn: LossFn = reinforce_loss,
) -> Update:
    """One plain gradient step, w <- w - lr * grad of loss_fn(log pi, A), on `model` in place."""
    if lr <= 0:
        raise ValueError(f"lr={lr}: the learning rate must be > 0 (flip the advantages instead).")
    # SGD without momentum or weight decay: the step is exactly -lr * gradient, so a zero
    # gradient (all advantages 0) moves nothing. Training uses AdamW, which rescales each weight.
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr)
    logps = sequence_logps(model, batch)
    loss = loss_fn(logps, advantages)
    if not loss.requires_grad:
        raise ValueError("loss_fn returned a loss that does not depend on logps, so there is no "
                         "gradient to step along: build the loss from the logps it is given.")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        after = sequence_logps(model, batch)
    return Update(loss.item(), logps.detach(), after)


def compare_with_reinforce_loss(loss_fn: LossFn, seed: int = 0) -> str:
    """One line: does `loss_fn` give reinforce_loss's value and gradient on random inputs?"""
    generator = torch.Generator().manual_seed(seed)
    logps = (-20 * torch.rand(6, generator=generator)).requires_grad_()
    advantages = torch.randn(6, generator=generator)
    expected = reinforce_loss(logps, advantages)
    (expected_grad,) = torch.autograd.grad(expected, logps)
    got = loss_fn(logps, advantages)
    if not got.requires_grad:
        return "differs from reinforce_loss: no gradient reaches logps, so no step can follow it"
    (got_grad,) = torch.autograd.grad(got, logps, allow_unused=True, materialize_grads=True)
    if torch.allclose(got, expected) and torch.allclose(got_grad, expected_grad):
        return "matches reinforce_loss (value and gradient, on random inputs)"
    return (f"differs from reinforce_loss: loss {got.item():+.4f} vs {expected.item():+.4f}; "
            f"gradient {got_grad.numpy().round(3)} vs {expected_grad.numpy().round(3)}")


def _gradient(model: Any, loss: torch.Tensor) -> torch.Tensor:
    """The gradient of `loss` with respect to every trainable weight, as one flat vector."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)
    return torch.cat([g.flatten() for g in grads])


def grpo_gradient_agreement(
    model: Any, batch: Rollout, advantages: torch.Tensor
) -> tuple[float, float]:
    """Cosine and norm ratio of GRPO's gradient (the course's settings) to reinforce_loss's."""
    settings = GRPOSettings(
        num_generations=batch.completion_ids.size(0),
        max_completion_length=batch.completion_ids.size(1),
        loss_type="dapo", beta=0.0, num_iterations=1, epsilon=0.2,  # as the training notebook
    )
    grpo, _ = grpo_loss(model, batch, advantages, settings,
                        num_items_in_batch=batch.completion_mask.sum())
    ours = reinforce_loss(sequence_logps(model, batch), advantages)
    # float64: a float32 dot product over a million weights is off in the fourth decimal.
    g_grpo, g_ours = _gradient(model, grpo).double(), _gradient(model, ours).double()
    cosine = torch.nn.functional.cosine_similarity(g_grpo, g_ours, dim=0).item()
    return cosine, (g_grpo.norm() / g_ours.norm()).item()


def best_and_worst(advantages: torch.Tensor) -> tuple[int, int]:
    """Row numbers of the highest and the lowest advantage (the first one on a tie)."""
    return int(advantages.argmax()), int(advantages.argmin())


def before_and_after(update: Update, best: int, worst: int) -> str:
    """Two lines: log pi of the best and the worst completion around the step, and the factor."""
    lines = []
    for name, row in (("best", best), ("worst", worst)):
        before, after = update.logps_before[row].item(), update.logps_after[row].item()
        lines.append(f"{name:<5} (completion {row}): log π {before:7.2f} -> {after:7.2f}, "
                     f"probability x{math.exp(after - before):.3g}")
    return "\n".join(lines)


def _cell(text: str) -> str:
    """A completion as one markdown table cell: tags shown as text, line breaks as ⏎."""
    return html.escape(text).replace("|", "\\|").replace("\n", "⏎")


def group_table(group: Group, advantages: torch.Tensor, update: Update) -> str:
    """The group as a markdown table: completion, right, reward, advantage, log pi around a step."""
    best, worst = best_and_worst(advantages)
    header = "| # | completion | right | reward | advantage | log π before | log π after | change |"
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for i, text in enumerate(group.texts):
        tag = " (best)" if i == best else " (worst)" if i == worst else ""
        before, after = update.logps_before[i].item(), update.logps_after[i].item()
        lines.append(
            f"| {i}{tag} | {_cell(text)} | {'yes' if group.correct[i] else 'no'} | "
            f"{group.rewards[i].item():.2f} | {advantages[i].item():+.2f} | {before:.2f} | "
            f"{after:.2f} | {after - before:+.2f} |"
        )
    return "\n".join(lines)


def accuracy_on(model: Any, tokenizer: Any, row: dict[str, str], samples: int, seed: int) -> float:
    """Share of right answers among `samples` seeded completions to one question (temperature 1)."""
    return sum(sample_group(model, tokenizer, row, samples, seed).correct) / samples


def practice(
    model: Any,
    tokenizer: Any,
    row: dict[str, str],
    steps: int,
    group_size: int,
    seed: int,
    lr: float,
    loss_fn: LossFn = reinforce_loss,
) -> list[float]:
    """`steps` updates on one question, each on a fresh group: sample, score, advantages, step.

    Returns the share of right answers in each step's group, measured before its update.
    """
    accuracies = []
    for step in range(steps):
        group = sample_group(model, tokenizer, row, group_size, seed + 1 + step)
        accuracies.append(sum(group.correct) / group_size)
        advantages = group_advantages(group.rewards, num_generations=group_size)
        one_update(model, group.batch, advantages, lr=lr, loss_fn=loss_fn)
    return accuracies
