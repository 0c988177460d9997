"""A learner's own arm in one cell: `arm_from` checks it before anything trains, and audits what
a new reward pays on probe completions (right, wrong, a hedge, tag spam, a runaway, ...) beside
the course's correctness reward."""

from __future__ import annotations

import contextlib
import difflib
import io
import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

from helpers.data import to_grpo_example
from helpers.grpo_config import make_grpo_config
from helpers.hardware import detect_hardware
from helpers.lab.arms import ARMS, Arm, ArmError, arm_overrides
from helpers.profiles import PROFILES
from helpers.rewards import REWARDS, Reward, correctness_reward
from helpers.synthetic import synthetic_split

# GRPOConfig fields an arm may not set: the run's own (seed, folder) or set another way.
_RESERVED = {"seed": "the seeds are try_arm's `seeds`", "output_dir": "each run has its own",
             "max_steps": "pass steps=... to arm_from", "reward_weights": "give each Reward its "
             "weight", "save_strategy": "lab runs keep no checkpoints"}


def arm_from(name: str, *, overrides: dict[str, Any] | None = None,
             rewards: Reward | Sequence[Reward] | None = None, lora_rank: int | None = None,
             steps: int | None = None,
             messages: Callable[[str], list[dict[str, str]]] | None = None) -> Arm:
    """A learner's own arm, checked before anything trains.

    `overrides` are GRPOConfig fields ({"beta": 0.04}); `rewards` replace the course's five
    (pass `(*REWARDS, Reward(mine, 0.5))` to add one); each reward is called now, as trl will call
    it, on smoke prompts and completions, and a reward the course does not have is audited
    (`reward_audit`: what it pays for, and any hack). `messages` turns a question into the chat
    the model trains and is scored on (`helpers.lab.question_alone`: without the format
    instructions). A problem is an ArmError of one sentence naming the fix.
    """
    if not isinstance(name, str) or not name or "=" in name or name in ARMS:
        raise ArmError(f"Name your arm with a new word (not {name!r}): the grid's arms already "
                       f"use {', '.join(list(ARMS)[:4])}, ...")
    overrides = dict(overrides or {})
    _check_fields(name, overrides)
    if isinstance(rewards, Reward):
        rewards = (rewards,)
    elif rewards is not None:
        rewards = tuple(rewards)
        for r in rewards:
            if not isinstance(r, Reward):
                raise ArmError(f"Arm {name!r}: wrap each reward function in a record, "
                               f"Reward(my_reward, 1.0), not {type(r).__name__}.")
        if not rewards:
            raise ArmError(f"Arm {name!r}: give at least one Reward, or leave rewards out to "
                           "keep the course's five.")
    if messages is not None:
        _check_messages(name, messages)
    chosen = Arm(name, "", overrides, rewards, lora_rank, steps, messages=messages)
    _check_config(chosen)
    if rewards is not None:
        probe_rewards(rewards)
        audit = reward_audit(rewards)
        if audit["rewards"]:
            print(audit_table(audit))
    return chosen


def _check_messages(name: str, messages: Any) -> None:
    """A prompt function must return the chat trl takes, ending in the question as the user's."""
    question = "What is 2 + 3?"
    fix = ("write it as def mine(question): return [{'role': 'user', 'content': question}], "
           "with any system message first")
    try:
        chat = messages(question)
    except Exception as error:  # noqa: BLE001  (the learner's function: any failure, one line)
        raise ArmError(f"Arm {name!r}: messages({question!r}) raised "
                       f"{type(error).__name__}: {error}; {fix}.") from None
    if not (isinstance(chat, list) and chat and all(
            isinstance(m, dict) and set(m) == {"role", "content"} and isinstance(m["content"], str)
            for m in chat)) or chat[-1]["role"] != "user" or question not in chat[-1]["content"]:
        raise ArmError(f"Arm {name!r}: messages({question!r}) returned {chat!r:.80}, not a list "
                       f"of role/content messages ending in the question; {fix}.")


def _check_fields(name: str, overrides: dict[str, Any]) -> None:
    from trl import GRPOConfig  # heavy, and after unsloth: only when an arm is checked

    known = {f.name for f in fields(GRPOConfig)}
    for key in overrides:
        if key in _RESERVED:
            raise ArmError(f"Arm {name!r} sets {key!r}, which the lab sets itself: "
                           f"{_RESERVED[key]}.")
        if key not in known:
            near = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"did you mean {near[0]!r}?" if near else "see trl's GRPOConfig for the knobs."
            raise ArmError(f"Arm {name!r}: trl 0.22.2's GRPOConfig has no field {key!r}; {hint}")


def _check_config(chosen: Arm) -> None:
    """Build the arm's GRPOConfig as a run will: a value trl or the course refuses, in one line."""
    if chosen.lora_rank is not None and (isinstance(chosen.lora_rank, bool)
                                         or not isinstance(chosen.lora_rank, int)
                                         or chosen.lora_rank < 1):
        raise ArmError(f"Arm {chosen.name!r}: lora_rank must be a whole number of at least 1, "
                       f"got {chosen.lora_rank!r}.")
    if chosen.steps is not None and (not isinstance(chosen.steps, int) or chosen.steps < 1):
        raise ArmError(f"Arm {chosen.name!r}: steps must be a whole number of at least 1, "
                       f"got {chosen.steps!r}.")
    extra = {"max_steps": chosen.steps} if chosen.steps else {}
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        try:
            make_grpo_config(PROFILES["smoke"], detect_hardware(), folder,
                             **arm_overrides(chosen), **extra)
        except (TypeError, ValueError) as error:
            said = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise ArmError(f"Arm {chosen.name!r} cannot train: {said}") from None


# Probe completions, by name: what a reward pays for each (gold: the problem's answer).
PROBES: dict[str, Callable[[str], str]] = {
    "right": lambda gold: f"<reasoning>{gold}</reasoning>\n<answer>{gold}</answer>",
    "wrong": lambda gold: f"<reasoning>so</reasoning>\n<answer>{int(gold) + 1}</answer>",
    "hedge": lambda gold: (f"<reasoning>so</reasoning>\n<answer>{int(gold) + 1}</answer>"
                           f"<answer>{gold}</answer>"),  # two answers, the right one last
    "no tags": lambda gold: f"The answer is {gold}.",
    "empty": lambda gold: "",
    "cut": lambda gold: "<reasoning>It has 1",
    "tag spam": lambda gold: "<answer><answer>1</answer></answer>" * 3,
    "runaway": lambda gold: "7" * 3000,
}
# The probes a reward must not pay for as it pays for a right answer ("no tags" is right).
NOT_RIGHT = ("wrong", "hedge", "empty", "cut", "tag spam", "runaway")


def _probe_batch() -> dict[str, list[Any]]:
    """What trl passes a reward on the smoke run, one row per probe (PROBES): chat prompts, chat
    completions, token ids (stand-ins: one per character) and the dataset's `answer` column."""
    rows = [to_grpo_example(r) for r in synthetic_split("train", len(PROBES))]
    texts = [make(row["answer"]) for make, row in zip(PROBES.values(), rows, strict=True)]
    return {"prompts": [r["prompt"] for r in rows],
            "completions": [[{"role": "assistant", "content": t}] for t in texts],
            "completion_ids": [[ord(c) % 256 for c in t] for t in texts],
            "answer": [r["answer"] for r in rows]}


def probe_rewards(rewards: Sequence[Reward]) -> None:
    """Call each reward as trl will, before training: an ArmError if one raises, returns the
    wrong number of scores, or a score that is not a finite number (None, "not applicable",
    is allowed)."""
    batch = _probe_batch()
    n = len(batch["completions"])
    for reward in rewards:
        try:
            scores = _call(reward, batch)
        except Exception as error:  # a learner's function: any failure is reported, not raised
            raise ArmError(f"Reward {reward.name} raised {type(error).__name__}({error}) on a "
                           "smoke completion; make it return a number for every completion, "
                           "0.0 where it does not apply.") from None
        if not isinstance(scores, (list, tuple)) or len(scores) != n:
            got = f"{len(scores)} scores" if isinstance(scores, (list, tuple)) else \
                f"a {type(scores).__name__}"
            raise ArmError(f"Reward {reward.name} returned {got} for {n} completions; return a "
                           "list with one score per completion, in order.")
        for score in scores:
            if score is None:
                continue
            if isinstance(score, bool) or not isinstance(score, (int, float)) \
                    or not math.isfinite(score):
                raise ArmError(f"Reward {reward.name} returned {score!r}; every score must be a "
                               "finite number (or None where it does not apply).")


def _call(reward: Reward, batch: dict[str, list[Any]]) -> Any:
    """A reward called as trl 0.22.2 calls it, with the trainer's state."""
    from transformers import TrainerState  # heavy: only when a reward is probed

    return reward.func(**batch, trainer_state=TrainerState(max_steps=60))


def _shares(scores: Sequence[float | None]) -> dict[str, float]:
    """Each probe's score as a share of what the reward pays the right answer (None counts 0; a
    reward that pays the right answer nothing: any positive score is a full share)."""
    paid = dict(zip(PROBES, (s or 0.0 for s in scores), strict=True))
    top = paid["right"]
    return {k: v / top if top > 0 else (1.0 if v > 0 else 0.0) for k, v in paid.items()}


def reward_audit(rewards: Sequence[Reward]) -> dict[str, Any]:
    """What each reward the course does not have pays on the probes (PROBES), beside the course's
    correctness reward, as shares of its pay for a right answer; `hacks` names, per reward, the
    not-right probes it pays a larger share of than correctness does."""
    batch = _probe_batch()
    course = {r.func for r in REWARDS}
    correct = _shares(correctness_reward(**batch))
    audited, hacks = {}, {}
    for reward in rewards:
        if reward.func in course:
            continue
        found = _shares(_call(reward, batch))
        audited[reward.name] = found
        hacks[reward.name] = [k for k in NOT_RIGHT if found[k] > correct[k] + 1e-9]
    return {"correctness": correct, "rewards": audited, "hacks": hacks}


def audit_table(audit: dict[str, Any]) -> str:
    """`reward_audit` as text: a row per probe, a column per reward, then the hacks by name."""
    names = ["correctness_reward", *audit["rewards"]]
    columns = [audit["correctness"], *audit["rewards"].values()]
    width = max(len(n) for n in names) + 2
    lines = ["Paid, as a share of a right answer's pay:",
             f"{'probe':<10}" + "".join(f"{n:>{width}}" for n in names)]
    for probe in PROBES:
        lines.append(f"{probe:<10}" + "".join(f"{c[probe]:>{width}.0%}" for c in columns))
    for name, found in audit["hacks"].items():
        lines.append(f"{name} pays " + (f"for {', '.join(found)}: more than correctness does, "
                                         "so training can learn that instead of the answer."
                                         if found else "nothing correctness would not."))
    return "\n".join(lines)
