"""Check a learner's version of a GRPO piece against the course's, on random inputs.

Notebook 08 has the learner write each piece of the loss in an editable cell, then calls
`check(mine, reference)`. It runs both on the same random inputs (including the corner cases
that matter: an all-equal group, a masked token, a clipped ratio), compares the values and the
gradients, and prints "matches" or the first difference, in one sentence. It never raises, so a
wrong version is something to fix, not a crashed notebook. tests/test_shown_code.py replays the
notebook's own versions, so the copies on the page cannot drift from helpers/grpo_scratch.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from helpers import grpo_scratch
from helpers.grpo_scratch import GRPOSettings, Rollout, mask_after_eos

ATOL, RTOL = 1e-6, 1e-5  # float32 arithmetic in a different order stays far inside these


@dataclass
class Case:
    """One call: positional and keyword arguments, which tensors get gradients, and a label."""

    label: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    grad: tuple[int, ...] = ()  # positions in args of the float tensors to differentiate
    model: Any = None  # a model among args: its parameters' gradients are compared too


def _fresh(case: Case) -> tuple[tuple[Any, ...], list[torch.Tensor]]:
    """Copies of the arguments, so one call cannot change what the other sees."""
    args, leaves = [], []
    for i, arg in enumerate(case.args):
        if isinstance(arg, torch.Tensor):
            arg = arg.detach().clone().requires_grad_(i in case.grad)
            if i in case.grad:
                leaves.append(arg)
        args.append(arg)
    return tuple(args), leaves


def _value(out: Any) -> Any:
    """A helper may return (value, stats): the value is what a learner's version must match."""
    return out[0] if isinstance(out, tuple) else out


def _as_tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)


def _run(func: Callable[..., Any], case: Case) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """The output and the gradients of a fixed weighted sum of it (None: no gradient flowed)."""
    args, leaves = _fresh(case)
    params = [p for p in case.model.parameters()] if case.model is not None else []
    for p in params:
        p.grad = None
    out = _as_tensor(_value(func(*args, **case.kwargs)))
    grads: list[torch.Tensor | None] = []
    if (leaves or params) and out.requires_grad:
        weights = torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).view_as(out)
        (out * weights).sum().backward()
    if leaves or params:
        grads = [leaf.grad for leaf in leaves] + [p.grad for p in params]
    for p in params:
        p.grad = None
    return out.detach(), grads


def _show(t: torch.Tensor) -> str:
    if t.dim() == 0:
        return f"{t.item():.4g}"
    flat = t.flatten()
    shown = ", ".join(f"{v:.4g}" for v in flat[:6].tolist())
    return f"[{shown}{', ...' if flat.numel() > 6 else ''}]"


def _difference(what: str, mine: torch.Tensor, ref: torch.Tensor, ref_name: str) -> str | None:
    """One sentence on how two tensors differ, or None when they agree."""
    if mine.shape != ref.shape:
        return f"{what} has shape {tuple(mine.shape)}, but {ref_name}'s has {tuple(ref.shape)}"
    mine, ref = mine.double(), ref.double()
    if torch.allclose(mine, ref, atol=ATOL, rtol=RTOL, equal_nan=True):
        return None
    gap = (mine - ref).abs().nan_to_num(float("inf"))
    at = tuple(int(i) for i in torch.unravel_index(gap.argmax(), gap.shape)) if gap.dim() else ()
    return (f"{what} is {_show(mine)} where {ref_name} gives {_show(ref)} "
            f"(largest difference {gap.max().item():.3g}"
            + (f", at position {at})" if at else ")"))


def differences(mine: Callable[..., Any], reference: Callable[..., Any],
                cases: Sequence[Case]) -> list[str]:
    """Every way `mine` differs from `reference` on `cases`: value, shape, gradient, or error."""
    name = reference.__name__
    found = []
    for number, case in enumerate(cases, start=1):
        where = f"on case {number} ({case.label})"
        ref_out, ref_grads = _run(reference, case)
        try:
            out, grads = _run(mine, case)
        except Exception as error:  # the learner's code: report it, never crash the page
            found.append(f"{where} yours raised {type(error).__name__}: {error}")
            continue
        problem = _difference("your result", out, ref_out, name)
        if problem is None and len(grads) == len(ref_grads):
            for index, (g, ref_g) in enumerate(zip(grads, ref_grads, strict=True)):
                ref_g = torch.zeros_like(ref_out) if ref_g is None else ref_g
                if g is None:
                    g = torch.zeros_like(ref_g)
                    if ref_g.abs().max() > 0:
                        problem = ("no gradient flows through yours (a .detach(), .item() or a "
                                   f"new tensor cuts it), but {name}'s has one")
                        break
                label = ("the gradient of the model's weights" if index >= len(case.grad)
                         else f"the gradient with respect to argument {case.grad[index] + 1}")
                problem = _difference(label + " (values match)", g, ref_g, name)
                if problem:
                    break
        if problem:
            found.append(f"{where} {problem}")
    return found


def check(mine: Callable[..., Any], reference: Callable[..., Any],
          cases: Sequence[Case] | None = None) -> None:
    """Print "matches" or the first difference from `reference`, in one sentence (never raises)."""
    cases = cases if cases is not None else CASES[reference.__name__]()
    found = differences(mine, reference, cases)
    if not found:
        compared = ("values and gradients" if any(c.grad or c.model is not None for c in cases)
                    else "values")
        count = "1 random case" if len(cases) == 1 else f"{len(cases)} random cases"
        print(f"{mine.__name__} matches {reference.__name__} on {count} ({compared}).")
        return
    others = len(found) - 1
    more = ("" if not others else " (1 more case differs too)" if others == 1
            else f" ({others} more cases differ too)")
    print(f"{mine.__name__} does not match {reference.__name__}: {found[0]}{more}.")


# ---- Random cases for each piece of notebook 08 ---------------------------------------------

def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def advantage_cases(seed: int = 0) -> list[Case]:
    """Rewards in groups, with an all-equal group, with and without std scaling."""
    gen = _generator(seed)
    cases = []
    for g, groups in ((2, 3), (4, 2), (8, 3)):
        rewards = torch.randint(0, 3, (g * groups,), generator=gen).float()
        rewards[:g] = 1.0  # the first group all equal: advantages exactly 0
        for scale in (True, False):
            cases.append(Case(f"{groups} groups of {g}, scale_rewards={scale}", (rewards, g),
                              {"scale_rewards": scale}))
    return cases


def _logps(shape: tuple[int, int], gen: torch.Generator,
           spread: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities below 0, and noise to move a second set of them by about `spread`."""
    return -torch.rand(shape, generator=gen) * 3 - 0.05, torch.randn(shape, generator=gen) * spread


def ratio_cases(seed: int = 0) -> list[Case]:
    """Log-probs of 3 completions x 5 tokens, old ones 0.5 nats away: ratios around 1."""
    gen = _generator(seed)
    logps, noise = _logps((3, 5), gen)
    return [Case("3 completions x 5 tokens", (logps, logps + noise), grad=(0,))]


def surrogate_cases(seed: int = 0) -> list[Case]:
    """Ratios on both sides of the clip range, advantages of both signs, eps_high > eps_low."""
    gen = _generator(seed)
    logps, noise = _logps((4, 6), gen)
    advantages = torch.tensor([1.2, -0.7, 0.0, -1.5])
    return [Case(f"4 completions x 6 tokens, eps {low}/{high}",
                 (logps, logps + noise, advantages, low, high), grad=(0,))
            for low, high in ((0.2, 0.2), (0.2, 0.28))]


def k3_cases(seed: int = 0) -> list[Case]:
    """Reference log-probs above and below the policy's."""
    gen = _generator(seed)
    logps, noise = _logps((3, 5), gen, spread=1.0)
    return [Case("3 completions x 5 tokens", (logps, logps + noise), grad=(0,))]


def aggregate_cases(seed: int = 0) -> list[Case]:
    """Every loss type, a short and a long completion, padding, and accumulation chunks."""
    gen = _generator(seed)
    loss = torch.randn(4, 6, generator=gen)
    mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0],
                         [1, 0, 0, 0, 0, 0]])
    cases = []
    for loss_type in ("grpo", "dr_grpo", "dapo"):
        for steps in (1, 2):
            cases.append(Case(f"loss_type={loss_type!r}, gradient_accumulation_steps={steps}",
                              (loss, mask, loss_type, 6),
                              {"num_items_in_batch": int(mask.sum()) * steps,
                               "gradient_accumulation_steps": steps}, grad=(0,)))
    return cases


def tiny_policy(seed: int = 0, vocab: int = 24) -> Any:
    """A random 2-layer Qwen2 small enough to check a loss in milliseconds."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=16, intermediate_size=32,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=32, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).float()


def random_rollout(gen: torch.Generator, rows: int = 4, prompt: int = 3, completion: int = 6,
                   vocab: int = 24, eos: int = 1) -> Rollout:
    """Random prompts and completions; each completion stops at a random EOS, the last never."""
    ids = torch.randint(2, vocab, (rows, completion), generator=gen)
    for row in range(rows - 1):
        stop = int(torch.randint(1, completion, (1,), generator=gen))
        ids[row, stop] = eos
    prompt_ids = torch.randint(2, vocab, (rows, prompt), generator=gen)
    return Rollout(prompt_ids, torch.ones_like(prompt_ids), ids, mask_after_eos(ids, eos))


def loss_cases(seed: int = 0) -> list[Case]:
    """A tiny policy on a random rollout, each loss type, with a moved old policy and a KL term."""
    gen = _generator(seed)
    model = tiny_policy(seed)
    batch = random_rollout(gen)
    advantages = torch.tensor([1.0, -0.5, 0.8, -1.3])
    with torch.no_grad():
        logps = grpo_scratch.per_token_logps(model, batch)
    old = logps + torch.randn(logps.shape, generator=gen) * 0.3  # some ratios leave the range
    ref = logps + torch.randn(logps.shape, generator=gen) * 0.5
    num_items = int(batch.completion_mask.sum())
    cases = []
    for loss_type, beta, eps_high in (("dapo", 0.0, None), ("grpo", 0.04, 0.28),
                                      ("dr_grpo", 0.04, None)):
        settings = GRPOSettings(loss_type=loss_type, beta=beta, epsilon_high=eps_high,
                                max_completion_length=batch.completion_ids.size(1))
        cases.append(Case(f"loss_type={loss_type!r}, beta={beta}, old policy moved",
                          (model, batch, advantages, settings, old, ref, num_items), model=model))
    settings = GRPOSettings(max_completion_length=batch.completion_ids.size(1))
    cases.append(Case("loss_type='dapo', one pass: old = current", (model, batch, advantages,
                                                                     settings, None, None,
                                                                     num_items), model=model))
    return cases


CASES: dict[str, Callable[[], list[Case]]] = {
    "group_advantages": advantage_cases, "probability_ratio": ratio_cases,
    "clipped_surrogate": surrogate_cases, "k3_kl": k3_cases, "aggregate": aggregate_cases,
    "grpo_loss": loss_cases,
}
