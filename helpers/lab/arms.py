"""The lab's arms: one setting of one knob each, moved away from the course's smoke run.

An arm changes one thing in the course's smoke run (`KNOBS`): a GRPOConfig field, the rewards,
the LoRA rank, the step budget, or how dead groups are handled; everything else stays as notebook
05 trains it (helpers.grpo_config, helpers.grpo_run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from helpers.grpo_config import grpo_settings
from helpers.hardware import CPU_ONLY
from helpers.profiles import PROFILES
from helpers.rewards import REWARDS, Reward, reward_named

COURSE = "course"  # the arm that changes nothing: every knob's reference


@dataclass(frozen=True)
class Arm:
    """One setting of one knob, and what it is judged against."""

    knob: str
    value: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)  # GRPOConfig fields
    rewards: tuple[Reward, ...] | None = None  # None: the course's five (helpers.rewards)
    lora_rank: int | None = None  # None: the profile's
    steps: int | None = None  # None: the profile's 60
    dynamic_sampling: bool = False  # replace groups with no reward spread (resample_dead_groups)
    reference: str = COURSE  # the arm it is compared with
    same_as_reference: str = ""  # why it must train as its reference does (NO_OPS)
    control: str = ""  # a control with a known answer, and what it must show
    # How a question becomes the chat, in training and scoring; None: the course's make_prompt
    messages: Callable[[str], list[dict[str, str]]] | None = None
    # 0: completions sampled from the run's seed; else from seed + this, the LoRA start and the
    # data order still from the seed (NULL_ARM)
    sampling_stream: int = 0

    @property
    def name(self) -> str:
        if self.knob == COURSE:
            return COURSE
        return f"{self.knob}={self.value}" if self.value else self.knob


def _arms(knob: str, values: dict[str, dict[str, Any]], **extra: Any) -> dict[str, Arm]:
    return {value: Arm(knob, value, overrides, **extra) for value, overrides in values.items()}


def random_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """A fair coin per completion, from torch's generator (which the run's seed seeds): a reward
    that says nothing about the answer, the "spurious rewards" control (arXiv:2506.10947)."""
    import torch  # heavy: only when a run calls it

    return torch.randint(0, 2, (len(completions),)).float().tolist()


def question_alone(question: str) -> list[dict[str, str]]:
    """The chat without the course's format instructions (no system message): the question as
    the user asks it, the prompt ablation CS336's GRPO assignment asks for."""
    return [{"role": "user", "content": question}]


_FORMAT = ("strict_format_reward", "soft_format_reward", "tag_count_reward")


# Why a no-op trains exactly as the course on the smoke run (trl 0.22.2's code, one process).
_ONE_BATCH = ("one process and no gradient accumulation: bnpo's local batch is dapo's whole "
              "step, so both divide by the same token count")
_ON_POLICY = ("one iteration per batch: the probability ratio is exactly 1, inside any clip "
              "range, so the upper clip bound never acts")
_GSPO_ON_POLICY = ("one iteration per batch: the sequence-level ratio is exactly 1, and its "
                   "gradient on each token equals the token-level one")
ITER2 = {"num_iterations": 2}


# The course's smoke run: loss_type dapo, scale_rewards group, 8 completions per prompt and 32 per
# step, beta 0, learning rate 1e-3, one iteration per batch, 48 completion tokens, temperature 1,
# LoRA rank 16, five rewards.
KNOBS: dict[str, dict[str, Arm]] = {
    "loss_type": _arms("loss_type", {v: {"loss_type": v} for v in ("grpo", "dr_grpo")}),
    "scale_rewards": _arms("scale_rewards", {v: {"scale_rewards": v} for v in ("none", "batch")}),
    # 32 completions a step in every arm (the same compute), so fewer per prompt means more
    # prompts: 16 prompts of 2, 8 of 4, 4 of 8.
    "num_generations": _arms("num_generations", {"2": {"num_generations": 2},
                                                 "4": {"num_generations": 4}}),
    "beta": _arms("beta", {"0.04": {"beta": 0.04}}),
    "learning_rate": {
        **_arms("learning_rate", {"3e-4": {"learning_rate": 3e-4},
                                  "3e-3": {"learning_rate": 3e-3}}),
        # Slower, or worse? Twice the steps, judged against the course's own 120.
        "3e-4+120steps": Arm("learning_rate", "3e-4+120steps", {"learning_rate": 3e-4},
                             steps=120, reference="steps=120"),
    },
    # Two updates per batch of generations: at 60 steps half the course's generations, at 120
    # the same number.
    "num_iterations": {**_arms("num_iterations", {"2": ITER2}),
                       "2+120steps": Arm("num_iterations", "2+120steps", ITER2, steps=120)},
    # Clip-higher (DAPO) and GSPO act only off-policy (on the course's run they are NO_OPS):
    # with two iterations per batch they are judged against num_iterations=2.
    "epsilon_high": {
        "0.28+iter2": Arm("epsilon_high", "0.28+iter2", {"epsilon_high": 0.28, **ITER2},
                          reference="num_iterations=2"),
    },
    # No clipping at all on the second pass (the ratio may go anywhere): does losing the trust
    # region explain sequence+iter2's loss? Its sequence-level ratio, a geometric mean over the
    # answer's tokens, almost never leaves [0.8, 1.2], where single tokens' ratios do.
    "clip": {
        "off+iter2": Arm("clip", "off+iter2", {"epsilon": 1.0, "epsilon_high": 1000.0, **ITER2},
                         reference="num_iterations=2"),
    },
    "importance_sampling_level": {
        "sequence+iter2": Arm("importance_sampling_level", "sequence+iter2",
                              {"importance_sampling_level": "sequence", **ITER2},
                              reference="num_iterations=2"),
    },
    # The smoke model's answers take 29-34 tokens: 32 cuts the longer ones short.
    "max_completion_length": _arms("max_completion_length", {
        "32": {"max_completion_length": 32},
        "32+mask": {"max_completion_length": 32, "mask_truncated_completions": True}}),
    "temperature": _arms("temperature", {"0.7": {"temperature": 0.7}}),
    "lora_rank": {"1": Arm("lora_rank", "1", lora_rank=1)},
    # Resampling dead groups costs about 0.35 extra batches a step: judged against the course at
    # the same number of generations (81 steps).
    "dynamic_sampling": {"on": Arm("dynamic_sampling", "on", dynamic_sampling=True,
                                   reference="steps=81")},
    # The course for longer: the compute-matched references of the arms that generate more.
    "steps": {v: Arm("steps", v, steps=int(v)) for v in ("81", "120")},
    # The format instructions out of the prompt, in training and in scoring: notebook 06 measures
    # them as the largest single lever on a real model. Without them the smoke model rarely
    # writes the format (2% strict at the start), so there the course's shaped rewards and
    # correctness alone can differ: the start where a reward idea can show its effect.
    "prompt": {
        "question": Arm("prompt", "question", messages=question_alone),
        "question+correctness": Arm("prompt", "question+correctness", messages=question_alone,
                                    rewards=(reward_named("correctness_reward"),),
                                    reference="prompt=question"),
    },
    "rewards": {
        "correctness": Arm("rewards", "correctness", rewards=(reward_named("correctness_reward"),)),
        "format": Arm("rewards", "format", rewards=tuple(reward_named(n) for n in _FORMAT),
                      control="pays only for the tags the model already writes: must hurt"),
        "random": Arm("rewards", "random", rewards=(Reward(random_reward, 2.0, "1 or 0",
                                                           "a fair coin"),),
                      control="a reward that says nothing about the answer: must hurt"),
    },
}


ARMS: dict[str, Arm] = {COURSE: Arm(COURSE, COURSE)} | {
    arm.name: arm for arms in KNOBS.values() for arm in arms.values()}
# Settings that cannot act on the course's run: each trains bit for bit as the course
# (`same_as_reference` says why; tests/test_ablations.py checks it on 1 seed x 10 steps), so they
# are tests, not arms of the grid. runs/bench/ablations.json may still hold their old rows.
NO_OPS: dict[str, Arm] = {a.name: a for a in (
    Arm("loss_type", "bnpo", {"loss_type": "bnpo"}, same_as_reference=_ONE_BATCH),
    Arm("epsilon_high", "0.28", {"epsilon_high": 0.28}, same_as_reference=_ON_POLICY),
    Arm("importance_sampling_level", "sequence", {"importance_sampling_level": "sequence"},
        same_as_reference=_GSPO_ON_POLICY))}


# The course with only its completions drawn from another stream: at each seed the course's LoRA
# start and data order, other samples. It changes nothing on average, so against the course on the
# same seeds it is the null arm that measures how often a verdict paired by seed goes wrong
# (bench/calibration.py runs it on the pool's seeds). Not an arm of the grid.
NULL_ARM = Arm("sampling", "redrawn", sampling_stream=1_000_003)


class UnknownArmError(ValueError):
    """An arm or knob that KNOBS does not hold."""


class ArmError(ValueError):
    """A learner's arm that cannot train as written: the message names the fix."""


def arm(name: str) -> Arm:
    """The arm called `name` ("course", "loss_type=grpo", ...), or one sentence naming the known."""
    if name == NULL_ARM.name:
        return NULL_ARM
    if name not in ARMS:
        raise UnknownArmError(f"Unknown arm {name!r}: the known arms are {', '.join(ARMS)}.")
    return ARMS[name]


def knob_arms(knob: str) -> list[Arm]:
    """The course's arm, then every other arm of `knob` (and any reference they name)."""
    if knob not in KNOBS:
        raise UnknownArmError(f"Unknown knob {knob!r}: the known knobs are {', '.join(KNOBS)}.")
    found = [ARMS[COURSE]]
    for each in KNOBS[knob].values():
        found += [a for a in (ARMS[each.reference], each) if a not in found]
    return found


def _course_rewards() -> str:
    return " + ".join(f"{r.weight:g}×{r.name.removesuffix('_reward')}" for r in REWARDS)


def _course_clip() -> str:
    """The range PPO's clip holds the probability ratio to: 1 - epsilon to 1 + epsilon_high."""
    s = grpo_settings(PROFILES["smoke"], CPU_ONLY, "unused")
    return f"ratio {1 - s['epsilon']:g}-{1 + s['epsilon_high']:g}"


# The course's value of each knob that is no GRPOConfig field, declared beside the arms that move
# it (course_value reads the others from the settings notebook 05 uses).
NOT_CONFIG: dict[str, Callable[[], str]] = {
    "rewards": _course_rewards,
    "lora_rank": lambda: str(PROFILES["smoke"].lora_rank),
    "dynamic_sampling": lambda: "off",  # resample_dead_groups: the lab's own, never the course's
    "steps": lambda: str(PROFILES["smoke"].max_steps),
    "prompt": lambda: "instructions",  # helpers.data.make_prompt: SYSTEM_PROMPT, then the question
    "clip": _course_clip,
}


def course_value(knob: str) -> str:
    """What the course's smoke run sets `knob` to: its declared value (NOT_CONFIG), the settings
    notebook 05 uses, or trl's default for a GRPOConfig field those leave unset."""
    if knob in NOT_CONFIG:
        return NOT_CONFIG[knob]()
    settings = grpo_settings(PROFILES["smoke"], CPU_ONLY, "unused")
    if knob in settings:
        return str(settings[knob])
    from trl import GRPOConfig  # heavy, and after unsloth: only for a field the course leaves

    default = {f.name: f.default for f in fields(GRPOConfig)}.get(knob)
    if default is None:
        raise UnknownArmError(f"Knob {knob!r} is no GRPOConfig field: declare the course's value "
                              "in helpers.lab.arms.NOT_CONFIG.")
    return str(default)


def reward_setup(chosen: Arm) -> tuple[list[Any] | None, dict[str, Any]]:
    """The reward functions an arm trains on (None: the course's) and their weights' override."""
    if chosen.rewards is None:
        return None, {}
    return ([r.func for r in chosen.rewards],
            {"reward_weights": [float(r.weight) for r in chosen.rewards]})


def arm_overrides(chosen: Arm) -> dict[str, Any]:
    """The GRPOConfig fields an arm sets: its knob, or the weights of the rewards it keeps."""
    return {**chosen.overrides, **reward_setup(chosen)[1]}


def group_size(name: str) -> int:
    """Completions per prompt in an arm's runs."""
    chosen = ARMS.get(name)
    return (chosen.overrides if chosen else {}).get("num_generations",
                                                    PROFILES["smoke"].num_generations)
