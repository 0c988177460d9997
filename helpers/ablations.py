"""What each GRPO setting does: notebook 11's ablation lab, and a learner's own arm in one cell.

An arm changes one thing in the course's smoke run (`KNOBS`): a GRPOConfig field, the rewards,
the LoRA rank, the step budget, or how dead groups are handled; everything else stays as notebook
05 trains it (helpers.grpo_config, helpers.grpo_run). `train_and_score` trains the smoke model
once and scores it; with `lab=True` it scores on the lab's own census of the 100 sums
(helpers.synthetic.census_split), records held-out accuracy along the run, and keeps each
problem's result. bench/ablations.py runs the grid over seeds; `summarize` judges each arm
against its reference in four words (helpers.stats.verdict), with Holm and Benjamini-Hochberg
adjustments over the grid. `arm_from` and `try_arm` let a learner bring a reward or a setting
and get a verdict against the stored course arm.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from helpers.rewards import Reward, reward_named

COURSE = "course"  # the arm that changes nothing: every knob's reference
CURVE_EVERY = 15  # steps between held-out scores along a lab run (0, 15, 30, ...)


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
    same_as_reference: str = ""  # why it must train as its reference does: an A/A control
    control: str = ""  # a control with a known answer, and what it must show

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
    import torch

    return torch.randint(0, 2, (len(completions),)).float().tolist()


_FORMAT = ("strict_format_reward", "soft_format_reward", "tag_count_reward")
# Why an arm trains exactly as its reference on the smoke run (trl 0.22.2's code, one process).
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
    "loss_type": {**_arms("loss_type", {v: {"loss_type": v} for v in ("grpo", "dr_grpo")}),
                  "bnpo": Arm("loss_type", "bnpo", {"loss_type": "bnpo"},
                              same_as_reference=_ONE_BATCH)},
    "scale_rewards": _arms("scale_rewards", {v: {"scale_rewards": v} for v in ("none", "batch")}),
    # 32 completions a step in every arm (the same compute), so fewer per prompt means more
    # prompts: 16 prompts of 2, 8 of 4, 4 of 8.
    "num_generations": _arms("num_generations", {"2": {"num_generations": 2},
                                                 "4": {"num_generations": 4}}),
    "beta": _arms("beta", {"0.04": {"beta": 0.04}}),
    "learning_rate": {
        **_arms("learning_rate", {"3e-4": {"learning_rate": 3e-4},
                                  "3e-3": {"learning_rate": 3e-3}}),
        # Slower, or worse? Twice the steps, judged against the course's 60.
        "3e-4+120steps": Arm("learning_rate", "3e-4+120steps", {"learning_rate": 3e-4},
                             steps=120),
    },
    "num_iterations": _arms("num_iterations", {"2": ITER2}),
    # Clip-higher (DAPO) and GSPO act only off-policy: on the course's run they are A/A controls,
    # and with two iterations per batch they are judged against num_iterations=2.
    "epsilon_high": {
        "0.28": Arm("epsilon_high", "0.28", {"epsilon_high": 0.28}, same_as_reference=_ON_POLICY),
        "0.28+iter2": Arm("epsilon_high", "0.28+iter2", {"epsilon_high": 0.28, **ITER2},
                          reference="num_iterations=2"),
    },
    "importance_sampling_level": {
        "sequence": Arm("importance_sampling_level", "sequence",
                        {"importance_sampling_level": "sequence"},
                        same_as_reference=_GSPO_ON_POLICY),
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
    "dynamic_sampling": {"on": Arm("dynamic_sampling", "on", dynamic_sampling=True)},
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


class UnknownArmError(ValueError):
    """An arm or knob that KNOBS does not hold."""


class ArmError(ValueError):
    """A learner's arm that cannot train as written: the message names the fix."""


def arm(name: str) -> Arm:
    """The arm called `name` ("course", "loss_type=grpo", ...), or one sentence naming the known."""
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


# What the course sets where grpo_settings has no field for it.
_NOT_IN_SETTINGS = {"importance_sampling_level": "token", "dynamic_sampling": "off"}


def course_value(knob: str) -> str:
    """What the course's smoke run sets `knob` to, read from the settings notebook 05 uses."""
    from helpers.profiles import PROFILES

    if knob == "rewards":
        from helpers.rewards import REWARDS

        return " + ".join(f"{r.weight:g}×{r.name.removesuffix('_reward')}" for r in REWARDS)
    if knob == "lora_rank":
        return str(PROFILES["smoke"].lora_rank)
    if knob in _NOT_IN_SETTINGS:
        return _NOT_IN_SETTINGS[knob]
    from helpers.grpo_config import grpo_settings
    from helpers.hardware import detect_hardware

    return str(grpo_settings(PROFILES["smoke"], detect_hardware(), "unused")[knob])


def reward_setup(chosen: Arm) -> tuple[list[Any] | None, dict[str, Any]]:
    """The reward functions an arm trains on (None: the course's) and their weights' override."""
    if chosen.rewards is None:
        return None, {}
    return ([r.func for r in chosen.rewards],
            {"reward_weights": [float(r.weight) for r in chosen.rewards]})


def arm_overrides(chosen: Arm) -> dict[str, Any]:
    """The GRPOConfig fields an arm sets: its knob, or the weights of the rewards it keeps."""
    return {**chosen.overrides, **reward_setup(chosen)[1]}


# ---- A learner's own arm -----------------------------------------------------------------------

# GRPOConfig fields an arm may not set: the run's own (seed, folder) or set another way.
_RESERVED = {"seed": "the seeds are try_arm's `seeds`", "output_dir": "each run has its own",
             "max_steps": "pass steps=... to arm_from", "reward_weights": "give each Reward its "
             "weight", "save_strategy": "lab runs keep no checkpoints"}


def arm_from(name: str, *, overrides: dict[str, Any] | None = None,
             rewards: Reward | Sequence[Reward] | None = None, lora_rank: int | None = None,
             steps: int | None = None) -> Arm:
    """A learner's own arm, checked before anything trains.

    `overrides` are GRPOConfig fields ({"beta": 0.04}); `rewards` replace the course's five
    (pass `(*REWARDS, Reward(mine, 0.5))` to add one); each reward is called now, as trl will call
    it, on smoke prompts and completions. A problem is an ArmError of one sentence naming the fix.
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
    chosen = Arm(name, "", overrides, rewards, lora_rank, steps)
    _check_config(chosen)
    if rewards is not None:
        probe_rewards(rewards)
    return chosen


def _check_fields(name: str, overrides: dict[str, Any]) -> None:
    from dataclasses import fields

    from trl import GRPOConfig

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
    import tempfile

    from helpers.grpo_config import make_grpo_config
    from helpers.hardware import detect_hardware
    from helpers.profiles import PROFILES

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


def _probe_batch() -> dict[str, list[Any]]:
    """What trl passes a reward on the smoke run: chat prompts, chat completions (a right answer,
    a wrong one, one without tags, an empty one, one cut short, tag spam, a runaway), token ids
    (stand-ins: one per character) and the dataset's `answer` column."""
    from helpers.data import to_grpo_example
    from helpers.synthetic import synthetic_split

    rows = [to_grpo_example(r) for r in synthetic_split("train", 7)]
    texts = []
    for i, row in enumerate(rows):
        gold = row["answer"]
        texts.append([
            f"<reasoning>{gold}</reasoning>\n<answer>{gold}</answer>",
            f"<reasoning>so</reasoning>\n<answer>{int(gold) + 1}</answer>",
            f"The answer is {gold}.",
            "",
            "<reasoning>It has 1",
            "<answer><answer>1</answer></answer>" * 3,
            "7" * 3000,
        ][i])
    return {"prompts": [r["prompt"] for r in rows],
            "completions": [[{"role": "assistant", "content": t}] for t in texts],
            "completion_ids": [[ord(c) % 256 for c in t] for t in texts],
            "answer": [r["answer"] for r in rows]}


def probe_rewards(rewards: Sequence[Reward]) -> None:
    """Call each reward as trl will, before training: an ArmError if one raises, returns the
    wrong number of scores, or a score that is not a finite number (None, "not applicable",
    is allowed)."""
    from transformers import TrainerState

    batch = _probe_batch()
    n = len(batch["completions"])
    for reward in rewards:
        try:
            scores = reward.func(**batch, trainer_state=TrainerState(max_steps=60))
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


# ---- One run -----------------------------------------------------------------------------------

def lab_problems() -> list[dict[str, str]]:
    """The lab's evaluation set: every sum of the smoke task, once per template of its sign."""
    from helpers.synthetic import census_split

    return census_split()


def fact_of(row: dict[str, str]) -> str:
    """The sum a problem asks for ("12+3"), read from its gold reasoning."""
    return row["answer"].split("<<", 1)[1].split("=", 1)[0]


# trl's log keys of the training signals that explain a result, and the names the rows use.
SIGNALS: dict[str, str] = {
    "zero_std": "frac_reward_zero_std",  # groups whose weighted total reward has no spread
    "zero_std_correctness": "correctness_zero_std",  # ... whose correctness has none (lab runs)
    "length": "completions/mean_length",
    "truncated": "completions/clipped_ratio",  # completions cut at max_completion_length
    "clipped": "clip_ratio/region_mean",  # tokens whose ratio left [1-ε, 1+ε_high]
    "kl": "kl",  # logged only when beta > 0
    "correctness": "rewards/correctness_reward/mean",  # the training pass rate p
    "extra_generations": "dynamic_sampling/extra_generations",  # resampled batches a step
}


def signals(log_history: Sequence[dict[str, Any]], num_generations: int) -> dict[str, float]:
    """Each signal's mean over the run's steps, and the zero-spread share that the steps' pass
    rates p predict for groups of `num_generations` if every problem had the same p."""
    from helpers.logs import series

    out: dict[str, float] = {}
    for name, key in SIGNALS.items():
        _, values = series(log_history, key)
        if values:
            out[name] = statistics.fmean(values)
    _, passes = series(log_history, SIGNALS["correctness"])
    if passes:
        out["zero_std_predicted"] = statistics.fmean(
            dead_group_share(p, num_generations) for p in passes)
    return out


def _curve_callback(tokenizer: Any, rows: list[dict[str, str]], profile: Any,
                    output_dir: Path) -> Any:
    """The training notebook's held-out callback, every CURVE_EVERY steps between the base score
    (step 0) and the final one, which the evaluation itself takes. It puts the random state back,
    so the run trains exactly as it would without it."""
    from helpers.callbacks import HeldOutAccuracy
    from helpers.evaluation import decoding_settings

    class Curve(HeldOutAccuracy):
        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            pass

        def scores_at(self, step: int, max_steps: int) -> bool:
            return step % self.every == 0 and step < max_steps

    return Curve(tokenizer, rows, decoding_settings(profile), output_dir, CURVE_EVERY)


def count_dead_correctness(trainer: Any) -> None:
    """Log `correctness_zero_std` each step: the share of groups whose correctness reward has no
    spread, the quantity the dead-group calculator predicts (trl's own `frac_reward_zero_std`
    reads the weighted total of all rewards, which the format rewards keep alive)."""
    names = list(trainer.reward_func_names)
    if "correctness_reward" not in names:
        return
    column, size, calculate = names.index("correctness_reward"), trainer.num_generations, \
        trainer._calculate_rewards

    def counted(inputs: Any, prompts: Any, completions: Any, ids: Any) -> Any:
        rewards = calculate(inputs, prompts, completions, ids)
        groups = rewards[:, column].view(-1, size)
        dead = (groups.max(dim=1).values == groups.min(dim=1).values).float().mean().item()
        trainer._metrics["train"]["correctness_zero_std"].append(dead)
        return rewards

    trainer._calculate_rewards = counted


def resample_dead_groups(trainer: Any, seed: int, rounds: int = 4) -> None:
    """DAPO's dynamic sampling, which trl 0.22.2 lacks: a group whose weighted rewards have no
    spread is dropped and replaced by a group of a new prompt, sampled again up to `rounds` times
    a step; the batch keeps its size (dead groups fill what is still missing). Each step then
    trains on as many live groups as it can, at the cost of extra generation, which is logged
    as `dynamic_sampling/extra_generations`."""
    import random

    import torch

    size, weights, last = trainer.num_generations, trainer.reward_weights, {}
    calculate, generate = trainer._calculate_rewards, trainer._generate_and_score_completions
    pool, rng = trainer.train_dataset, random.Random(seed)
    pad = trainer.processing_class.pad_token_id

    def stash(inputs: Any, prompts: Any, completions: Any, ids: Any) -> Any:
        rewards = calculate(inputs, prompts, completions, ids)
        last["total"] = (rewards * weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
        return rewards

    def live_groups() -> list[bool]:
        spread = last["total"].view(-1, size).std(dim=1)
        return (~torch.isclose(spread, torch.zeros_like(spread))).tolist()

    def refilled(inputs: list[dict[str, Any]]) -> dict[str, Any]:
        batch = generate(inputs)
        wanted = len(inputs) // size
        alive = live_groups()
        kept = [_group(batch, g, size) for g in range(wanted) if alive[g]]
        dead = [_group(batch, g, size) for g in range(wanted) if not alive[g]]
        extra = 0
        while len(kept) < wanted and extra < rounds:
            extra += 1
            picks = rng.sample(range(len(pool)), wanted)
            more = generate([dict(pool[i]) for i in picks for _ in range(size)])
            kept += [_group(more, g, size) for g, ok in enumerate(live_groups()) if ok]
        trainer._metrics["train"]["dynamic_sampling/extra_generations"].append(float(extra))
        return _stack((kept + dead)[:wanted], pad)

    trainer._calculate_rewards = stash
    trainer._generate_and_score_completions = refilled


def _group(batch: dict[str, Any], g: int, size: int) -> dict[str, Any]:
    """Group g's rows of a generated batch (every tensor with a row per completion)."""
    return {k: v[g * size:(g + 1) * size] for k, v in batch.items() if k != "num_items_in_batch"}


def _stack(groups: list[dict[str, Any]], pad: int) -> dict[str, Any]:
    """Groups from several generations as one batch: prompts padded on the left and completions
    on the right, as trl pads them; the token count the dapo loss divides by, recounted."""
    import torch
    import torch.nn.functional as F

    prompt = max(g["prompt_ids"].shape[1] for g in groups)
    completion = max(g["completion_ids"].shape[1] for g in groups)
    left = {"prompt_ids": pad, "prompt_mask": 0}
    right = {"completion_ids": pad, "completion_mask": 0, "old_per_token_logps": 0.0,
             "ref_per_token_logps": 0.0}
    out = {}
    for key in groups[0]:
        parts = []
        for g in groups:
            value = g[key]
            if key in left:
                value = F.pad(value, (prompt - value.shape[1], 0), value=left[key])
            elif key in right:
                value = F.pad(value, (0, completion - value.shape[1]), value=right[key])
            parts.append(value)
        out[key] = torch.cat(parts)
    out["num_items_in_batch"] = out["completion_mask"].sum()
    return out


def train_and_score(output_dir: Path, seed: int | None = None, max_steps: int | None = None,
                    arm_name: str | Arm = COURSE, loader: str | None = None,
                    problems: int | None = None, lab: bool = False) -> dict[str, Any]:
    """Train the smoke model as notebook 05 does, with one arm's change; score it as notebook 06.

    `loader` is "unsloth" (the adapter is saved and loaded back as notebook 06 does) or "peft"
    (scored in memory); None: what `helpers.launch.plan_run` picks here. `problems` scores only
    the first so many problems. Without `lab`, the evaluation notebook's 200 held-out problems;
    with it, the lab's census (`lab_problems`), held-out accuracy every CURVE_EVERY steps
    (`curve`), each problem's result (`correct`, `base_correct`: "0"/"1" per problem) and the
    share of groups without correctness spread. Returns `helpers.stats.paired_test` (strict) with
    both accuracies, the training seconds, the training signals, the log history, the loader and
    the CPU kernel path it ran on.
    """
    from helpers.data import load_gsm8k
    from helpers.evaluation import decoding_settings, evaluate
    from helpers.grpo_config import make_grpo_config
    from helpers.grpo_run import Instrument, build_trainer
    from helpers.hardware import cpu_kernel_path, detect_hardware, use_one_cpu_thread
    from helpers.launch import load_model, plan_run
    from helpers.profiles import PROFILES, SEED
    from helpers.resume import save_adapter
    from helpers.run_folder import RunFolder
    from helpers.stats import paired_test

    chosen = arm_name if isinstance(arm_name, Arm) else arm(arm_name)
    profile, hw = PROFILES["smoke"], detect_hardware()
    if chosen.lora_rank is not None:
        profile = replace(profile, lora_rank=chosen.lora_rank)
    plan = plan_run(profile)
    if loader is not None and loader != plan.backend:
        plan = replace(plan, backend=loader, why=f"{loader}, as asked")
    loader = plan.backend
    use_one_cpu_thread(hw)  # as the notebooks' start() does
    model, tokenizer = load_model(profile, hw, plan)
    rewards = reward_setup(chosen)[0]
    overrides: dict[str, Any] = {"seed": SEED if seed is None else seed, "save_strategy": "no",
                                 **arm_overrides(chosen)}
    if max_steps or chosen.steps:
        overrides["max_steps"] = max_steps or chosen.steps
    config = make_grpo_config(profile, hw, output_dir, **overrides)
    scored = lab_problems()[:problems] if lab else None
    # The run notebook 05 trains, without its callbacks: no figure, samples or checkpoints.
    trainer = build_trainer(model, tokenizer, config, profile, output_dir, writer=False,
                            adapter=False, samples=False, reward_funcs=rewards,
                            instrument=Instrument(callbacks=[_curve_callback(
                                tokenizer, scored, profile, output_dir)] if lab else ()))
    if lab:
        count_dead_correctness(trainer)
    if chosen.dynamic_sampling:
        resample_dead_groups(trainer, config.seed)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    adapter = save_adapter(model, tokenizer, RunFolder(output_dir))
    if loader == "unsloth":  # the evaluation notebook's path: the adapter, loaded back
        from helpers.loading import load_trained

        model, tokenizer = load_trained(profile, adapter)
    else:  # as unsloth's for_inference does: out of training mode (checkpointing, no cache)
        model.eval()
    rows = scored if lab else list(load_gsm8k("test", profile))[:problems]
    results = evaluate(model, tokenizer, rows, decoding_settings(profile), adapter)
    scores = results["scores"]
    found = signals(trainer.state.log_history, config.num_generations)
    out = {
        **paired_test(results, "strict"),
        "base": scores["base"]["strict"]["accuracy"],
        "trained": scores["trained"]["strict"]["accuracy"],
        "train_seconds": seconds,
        "correctness_mean": found.get("correctness"),
        "signals": found,
        "loader": loader,
        "kernel": cpu_kernel_path(),
        "log_history": trainer.state.log_history,
    }
    if lab:
        from helpers.logs import HELDOUT_KEY

        along = [(e["step"], e[HELDOUT_KEY]) for e in trainer.state.log_history
                 if HELDOUT_KEY in e]
        out |= {
            "curve": [[0, out["base"]], *map(list, along), [config.max_steps, out["trained"]]],
            "correct": "".join("1" if p["trained_strict"] else "0" for p in results["problems"]),
            "base_correct": "".join("1" if p["base_strict"] else "0"
                                    for p in results["problems"]),
        }
    return out


# ---- Summaries: per arm over seeds, and the grid as one family of tests -------------------------

def area_under_curve(curve: Sequence[Sequence[float]], base: float) -> float:
    """The mean held-out gain over a run: the area under (step, accuracy - base) by the trapezoid
    rule, divided by the steps. A knob that only learns later scores lower here than at the end."""
    points = sorted((float(s), float(a) - base) for s, a in curve)
    if len(points) < 2 or points[-1][0] == points[0][0]:
        raise ValueError(f"Need held-out scores at two steps at least, got {points}.")
    steps = zip(points, points[1:], strict=False)
    area = sum((s2 - s1) * (g1 + g2) / 2 for (s1, g1), (s2, g2) in steps)
    return area / (points[-1][0] - points[0][0])


def a_a_check(runs: Sequence[dict[str, Any]], reference: Sequence[dict[str, Any]]) -> str:
    """An A/A arm against its reference: "identical on every seed" when each shared seed gave the
    very same answers, else whether Welch's test tells them apart ("not different", "different")."""
    from helpers.stats import ALPHA, welch

    same = {r["seed"]: r for r in reference}
    shared = [r for r in runs if r["seed"] in same]
    if shared and all(r["gain"] == same[r["seed"]]["gain"]
                      and r.get("correct") == same[r["seed"]].get("correct") for r in shared):
        return "identical on every seed"
    p = welch([r["gain"] for r in runs], [r["gain"] for r in reference])["p"]
    return "not different" if p >= ALPHA else "different"


def summarize(rows: Sequence[dict[str, Any]], kernel_path: str = "native") -> dict[str, Any]:
    """Per arm, over its seeds on one kernel path: the gains, their mean and range, the area
    under the held-out curve, each signal's mean, and the verdict against its reference
    (helpers.stats.verdict), raw and adjusted over the grid's family of tests (Holm: the chance
    of any false verdict at most 5%; Benjamini-Hochberg: at most 5% of the verdicts called
    false). A/A arms are checked apart (`a_a`) and stay out of the family."""
    from helpers.stats import benjamini_hochberg, holm, say, verdict

    by_arm: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["seed"]):  # gains in seed order, however run
        if row.get("kernel_path", "native") == kernel_path:
            by_arm.setdefault(row["arm"], []).append(row)
    out: dict[str, Any] = {}
    for name, found in by_arm.items():
        chosen = ARMS.get(name)
        gains = [r["gain"] for r in found]
        reference = None if name == COURSE else found[0].get("reference") or (
            chosen.reference if chosen else COURSE)
        against = by_arm.get(reference, []) if reference else []
        aucs = [area_under_curve(r["curve"], r["base"]) for r in found if r.get("curve")]
        keys = sorted({k for r in found for k in r.get("signals", {})})
        s: dict[str, Any] = {
            "knob": found[0]["knob"], "steps": found[0].get("steps"), "reference": reference,
            "seeds": len(gains), "gains": gains, "mean": statistics.fmean(gains),
            "low": min(gains), "high": max(gains),
            "aucs": aucs, "auc": statistics.fmean(aucs) if aucs else None,
            **{k: statistics.fmean(r[k] for r in found) for k in ("fixed", "broken")
               if all(k in r for r in found)},
            "signals": {k: statistics.fmean(r["signals"][k] for r in found if k in r["signals"])
                        for k in keys},
            "same_as_reference": chosen.same_as_reference if chosen else "",
            "control": chosen.control if chosen else "",
            "verdict": None if len(against) < 2 or len(gains) < 2 else
            verdict(gains, [r["gain"] for r in against]),
        }
        ref_aucs = [area_under_curve(r["curve"], r["base"]) for r in against if r.get("curve")]
        if s["verdict"] and len(aucs) >= 2 and len(ref_aucs) >= 2:
            s["verdict_auc"] = verdict(aucs, ref_aucs)
        if s["verdict"] and s["same_as_reference"]:
            s["a_a"] = a_a_check(found, against)
        out[name] = s
    family = [n for n, s in out.items() if s["verdict"] and not s["same_as_reference"]]
    for method, adjust in (("holm", holm), ("bh", benjamini_hochberg)):
        ps = adjust([out[n]["verdict"]["p"] for n in family])
        qs = adjust([out[n]["verdict"]["p_equivalence"] for n in family])
        for n, p, q in zip(family, ps, qs, strict=True):
            said = out[n]["verdict"]
            said |= {f"p_{method}": p, f"p_equivalence_{method}": q,
                     method: say(p, q, said["difference"])}
    return out


def family(summary: dict[str, Any]) -> list[str]:
    """The arms tested against a reference, A/A controls aside: the family Holm and BH adjust."""
    return [n for n, s in summary.items() if s["verdict"] and not s["same_as_reference"]]


GRID_FILE = "runs/bench/ablations.json"


def load_grid(root: Path | None = None) -> dict[str, Any]:
    """The grid bench/ablations.py stored, or one sentence saying how to make it."""
    from helpers.paths import ROOT

    path = (root or ROOT) / GRID_FILE
    if not path.exists():
        raise FileNotFoundError(f"No {GRID_FILE}: run `python -m bench.ablations` (a few hours "
                                "on two cores; it resumes if stopped).")
    return json.loads(path.read_text())


def _points(value: float) -> str:
    return f"{100 * value:+.1f}"


def _p(value: float) -> str:
    return "<0.001" if value < 0.001 else f"{value:.3f}"


GRID_COLUMNS = ("arm", "seeds", "mean", "range", "difference [95%]", "p", "verdict", "Holm", "BH")


def grid_rows(summary: dict[str, Any]) -> list[list[str]]:
    """Knob by knob: each arm's mean gain, its range over seeds, the difference from its
    reference with Welch's 95% interval and p-value, and the verdict raw, after Holm and after
    Benjamini-Hochberg over the grid's family of tests (an A/A control: its check instead); one
    list of GRID_COLUMNS' cells per arm, the reference first."""
    course = summary[COURSE]
    rows = [[COURSE, str(course["seeds"]), _points(course["mean"]),
             f"{_points(course['low'])} to {_points(course['high'])}", "(the reference)",
             "", "", "", ""]]
    names = [a.name for arms in KNOBS.values() for a in arms.values()]
    names += [n for n in summary if n != COURSE and n not in ARMS]  # a learner's arms
    for name in names:
        s = summary.get(name)
        if s is None:
            continue
        shown = name if s["reference"] in (None, COURSE) else f"{name} (vs {s['reference']})"
        cells = [shown, str(s["seeds"]), _points(s["mean"]),
                 f"{_points(s['low'])} to {_points(s['high'])}"]
        said = s["verdict"]
        if said is None:
            rows.append([*cells, "(too few seeds for a verdict)", "", "", "", ""])
            continue
        against = f"{_points(said['difference'])} [{_points(said['low'])}, {_points(said['high'])}]"
        adjusted = (["A/A control", s.get("a_a", "")] if s["same_as_reference"]
                    else [said.get("holm", ""), said.get("bh", "")])
        rows.append([*cells, against, _p(said["p"]), said["verdict"], *adjusted])
    return rows


def grid_table(summary: dict[str, Any]) -> str:
    """`grid_rows` as aligned text, for a notebook's output."""
    rows = [list(GRID_COLUMNS), *grid_rows(summary)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(GRID_COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def grid_markdown(summary: dict[str, Any]) -> str:
    """`grid_rows` as a markdown table (docs/results.md holds a copy; a test compares them)."""
    lines = ["| " + " | ".join(GRID_COLUMNS) + " |", "|" + "---|" * len(GRID_COLUMNS)]
    for row in grid_rows(summary):
        row = [f"`{row[0]}`", *row[1:]]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# ---- The design, measured: power, seeds as blocks, the evaluation's noise, dead groups ---------

def _pooled_sd(summary: dict[str, Any], names: Sequence[str]) -> float | None:
    """The seed spread pooled over arms (each arm's variance around its own mean)."""
    found = [summary[n]["gains"] for n in names if n in summary and len(summary[n]["gains"]) > 1]
    df = sum(len(g) - 1 for g in found)
    if not df:
        return None
    return math.sqrt(sum((len(g) - 1) * statistics.variance(g) for g in found) / df)


def _plain(summary: dict[str, Any], steps: int | None = None) -> list[str]:
    """The course and the arms that are neither A/A nor controls (at the profile's steps)."""
    from helpers.profiles import PROFILES

    steps = steps or PROFILES["smoke"].max_steps
    return [n for n, s in summary.items() if not s["same_as_reference"] and not s["control"]
            and (s.get("steps") or steps) == steps]


def power(summary: dict[str, Any], arm_seeds: int = 4) -> dict[str, Any] | None:
    """The smallest effect the grid finds 80% of the time: one arm's `arm_seeds` against the
    course's seeds by Welch's test (at 5%, and at Holm's strictest level over the family), with
    the seed spread pooled over the plain arms; and how many seeds per arm a smaller one needs."""
    from helpers.stats import ALPHA, minimum_detectable_effect, welch_df

    sd = _pooled_sd(summary, _plain(summary))
    if sd is None or COURSE not in summary or summary[COURSE]["seeds"] < 2:
        return None
    n_ref, m = summary[COURSE]["seeds"], max(1, len(family(summary)))
    se = sd * math.sqrt(1 / arm_seeds + 1 / n_ref)
    df = welch_df(sd, arm_seeds, n_ref)
    per_seeds = {}
    for n in (4, 8, 16, 32):  # n seeds on each side
        per_seeds[str(n)] = minimum_detectable_effect(sd * math.sqrt(2 / n), 2 * n - 2)
    return {"sd": sd, "arm_seeds": arm_seeds, "reference_seeds": n_ref, "se": se, "df": df,
            "mde": minimum_detectable_effect(se, df),
            "mde_holm": minimum_detectable_effect(se, df, ALPHA / m), "family": m,
            "mde_equal_seeds": per_seeds}


def blocks(rows: Sequence[dict[str, Any]], seeds: int = 4) -> dict[str, Any] | None:
    """Seeds as blocks: the plain arms x their first `seeds` shared seeds in one two-way analysis
    (helpers.stats.blocked_anova); a contrast of two arms then loses the seed's common part,
    and its smallest detectable effect follows from the residual spread."""
    from helpers.profiles import SEED
    from helpers.stats import blocked_anova, minimum_detectable_effect

    summary = summarize(rows)
    wanted = list(range(SEED, SEED + seeds))
    table, names = [], []
    for name in _plain(summary):
        by_seed = {r["seed"]: r["gain"] for r in rows
                   if r["arm"] == name and r.get("kernel_path", "native") == "native"}
        if all(s in by_seed for s in wanted):
            table.append([by_seed[s] for s in wanted])
            names.append(name)
    if len(table) < 3:
        return None
    found = blocked_anova(table)
    se = math.sqrt(2 * found["residual_variance"] / seeds)
    return {**found, "arms": names, "seeds": wanted,
            "residual_sd": math.sqrt(found["residual_variance"]),
            "se": se, "mde": minimum_detectable_effect(se, found["residual_df"])}


def coverage(rows: Sequence[dict[str, str]]) -> dict[str, Any]:
    """How a problem set covers the 100 sums: distinct sums, the most repeats of one, the
    effective number of equally weighted sums (1 / sum of squared shares), distinct answers."""
    from collections import Counter

    from helpers.data import extract_gold_answer

    counts = Counter(fact_of(r) for r in rows)
    shares = [c / len(rows) for c in counts.values()]
    return {"problems": len(rows), "facts": len(counts), "most_repeats": max(counts.values()),
            "effective_facts": 1 / sum(s * s for s in shares),
            "answers": len({extract_gold_answer(r["answer"]) for r in rows})}


def evaluation_noise(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """How much of the seed spread is the evaluation's own.

    On the census every sum is asked twice, in two wordings. A run that gets one wording right and
    the other wrong, where other runs do not, shows wording noise: what a fresh census of the same
    sums would reshuffle. Its variance over the 200 problems, v/200 for a run's accuracy, is the
    evaluation's part of the seed spread; the rest is training. A random 200-problem set (the
    evaluation notebook's kind) adds the sampling of sums, estimated from the runs x sums spread.
    Pooled over the plain arms with three runs or more (and for the course alone).
    """
    problems = lab_problems()
    by_fact: dict[str, list[int]] = {}
    for i, row in enumerate(problems):
        by_fact.setdefault(fact_of(row), []).append(i)
    pairs = [tuple(ix) for ix in by_fact.values() if len(ix) == 2]
    n_facts = len(pairs)
    summary = summarize(rows)
    parts = {}
    for name in _plain(summary):
        runs = [r for r in rows if r["arm"] == name and r.get("kernel_path", "native") == "native"
                and len(r.get("correct", "")) == len(problems)]
        if len(runs) >= 3:
            parts[name] = _noise_parts(runs, pairs)
    if not parts:
        return None
    # A random set of 200 from 100 sums: E[sum of squared shares] against the census' 1/100.
    n = len(problems)
    extra = 1 / n + (1 - 1 / n) / n_facts - 1 / n_facts

    def report(found: Sequence[dict[str, float]]) -> dict[str, float]:
        weight = sum(f["runs"] - 1 for f in found)
        seed_var = sum((f["runs"] - 1) * f["seed_var"] for f in found) / weight
        wording = sum((f["runs"] - 1) * f["wording"] for f in found) / weight
        facts = sum((f["runs"] - 1) * f["facts"] for f in found) / weight
        census = wording / n  # a run's accuracy over n problems, each wording on its own
        random_set = census + extra * facts
        return {"runs": sum(f["runs"] for f in found), "seed_sd": math.sqrt(seed_var),
                "evaluation_sd": math.sqrt(census), "share": census / seed_var,
                "random_set_sd": math.sqrt(random_set), "random_set_share": random_set / seed_var}

    return {"pooled": report(list(parts.values())),
            **({"course": report([parts[COURSE]])} if COURSE in parts else {}),
            "arms": sorted(parts), "facts": n_facts}


def _noise_parts(runs: Sequence[dict[str, Any]], pairs: Sequence[tuple[int, ...]]
                 ) -> dict[str, float]:
    """One arm's runs x problems: the seed variance of accuracy, the per-problem wording variance
    v, and the runs x sums interaction variance (both net of what all runs share)."""
    r = len(runs)
    x = [[int(c) for c in run["correct"]] for run in runs]
    diffs = [[x[k][i] - x[k][j] for i, j in pairs] for k in range(r)]
    mean_diff = [statistics.fmean(d[f] for d in diffs) for f in range(len(pairs))]
    squares = sum((diffs[k][f] - mean_diff[f]) ** 2 for k in range(r) for f in range(len(pairs)))
    wording = squares / (r * len(pairs)) / (2 * (1 - 1 / r))
    means = [[(x[k][i] + x[k][j]) / 2 for i, j in pairs] for k in range(r)]
    row = [statistics.fmean(m) for m in means]
    col = [statistics.fmean(means[k][f] for k in range(r)) for f in range(len(pairs))]
    grand = statistics.fmean(row)
    residual = sum((means[k][f] - row[k] - col[f] + grand) ** 2
                   for k in range(r) for f in range(len(pairs))) / ((r - 1) * (len(pairs) - 1))
    accuracy = [statistics.fmean(v) for v in x]
    return {"runs": r, "seed_var": statistics.variance(accuracy), "wording": wording,
            "facts": max(0.0, residual - wording / 2)}


def dead_group_share(p: float, group_size: int, spread: float = 0.0) -> float:
    """The share of groups with no spread (all right or all wrong) at pass rate p.

    With one pass rate for every problem (spread 0) it is p^G + (1-p)^G. Problems differ: with
    their pass rates spread as a Beta distribution of mean p and intraclass correlation `spread`
    (0: all alike; 1: each problem always or never solved), it is the beta-binomial chance of 0 or
    G right answers, which is higher.
    """
    if not 0 <= p <= 1 or group_size < 1 or not 0 <= spread < 1:
        raise ValueError(f"Need 0 <= p <= 1, a group size of at least 1 and 0 <= spread < 1, got "
                         f"p={p}, G={group_size}, spread={spread}.")
    if spread == 0 or p in (0, 1):
        return p ** group_size + (1 - p) ** group_size
    a, b = p * (1 - spread) / spread, (1 - p) * (1 - spread) / spread

    def log_beta(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    base = log_beta(a, b)
    return (math.exp(log_beta(a, b + group_size) - base)
            + math.exp(log_beta(a + group_size, b) - base))


def fit_spread(points: Sequence[tuple[int, float, float]]) -> float:
    """The spread (intraclass correlation) whose curves best fit measured (G, p, share) points,
    by least squares on a grid of 0.001."""
    grid = [i / 1000 for i in range(0, 951)]
    return min(grid, key=lambda rho: sum((dead_group_share(p, g, rho) - share) ** 2
                                         for g, p, share in points))


def group_size(name: str) -> int:
    """Completions per prompt in an arm's runs."""
    from helpers.profiles import PROFILES

    chosen = ARMS.get(name)
    return (chosen.overrides if chosen else {}).get("num_generations",
                                                    PROFILES["smoke"].num_generations)


DEAD_GROUP_ARMS = (COURSE, "num_generations=4", "num_generations=2", "rewards=correctness")


def dead_group_points(rows: Sequence[dict[str, Any]], names: Sequence[str] = DEAD_GROUP_ARMS,
                      kernel_path: str = "native") -> list[tuple[str, int, float, float]]:
    """(arm, G, the run's mean training pass rate, its measured share of groups with no
    correctness spread) for each lab run of `names` on one kernel path."""
    return [(r["arm"], group_size(r["arm"]), r["signals"]["correctness"],
             r["signals"]["zero_std_correctness"])
            for r in rows if r["arm"] in names and r.get("kernel_path", "native") == kernel_path
            and "zero_std_correctness" in r.get("signals", {})]


def dead_group_fit(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The calculator tested on the grid: the spread fitted on the course's runs (G = 8), then
    per arm the mean pass rate, the measured share without correctness spread, trl's share on
    the weighted total, and what each formula predicts at that pass rate."""
    points = dead_group_points(rows)
    course = [(g, p, m) for name, g, p, m in points if name == COURSE]
    if not course:
        return None
    spread = fit_spread(course)
    arms = {}
    for name in DEAD_GROUP_ARMS:
        mine = [(g, p, m) for n, g, p, m in points if n == name]
        if not mine:
            continue
        g, p = mine[0][0], statistics.fmean(x[1] for x in mine)
        trl = [r["signals"]["zero_std"] for r in rows if r["arm"] == name
               and r.get("kernel_path", "native") == "native" and "zero_std" in r["signals"]]
        arms[name] = {"group_size": g, "pass_rate": p,
                      "measured": statistics.fmean(x[2] for x in mine),
                      "trl_total": statistics.fmean(trl),
                      "one_parameter": dead_group_share(p, g),
                      "two_parameter": dead_group_share(p, g, spread)}
    return {"spread": spread, "fitted_on": COURSE, "arms": arms}


def reference_check(local: Sequence[dict[str, Any]],
                    stored: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Does this machine reproduce the stored course arm? "exact" when every local seed gave the
    stored answers; "consistent" when the local runs' mean lies in the 95% prediction interval
    of the mean of as many new stored-machine runs; else "shifted": this machine's kernels move
    the reference, and a verdict must use a reference run here."""
    from helpers.stats import t_quantile

    if not local or len(stored) < 2:
        raise ValueError("Need local runs and at least two stored runs to compare.")
    same = {r["seed"]: r for r in stored}
    exact = all(r["seed"] in same and r["gain"] == same[r["seed"]]["gain"]
                and r.get("correct") == same[r["seed"]].get("correct") for r in local)
    gains = [r["gain"] for r in stored]
    mean, n, m = statistics.fmean(gains), len(gains), len(local)
    half = t_quantile(0.975, n - 1) * statistics.stdev(gains) * math.sqrt(1 / n + 1 / m)
    local_mean = statistics.fmean(r["gain"] for r in local)
    status = "exact" if exact else ("consistent" if abs(local_mean - mean) <= half
                                    else "shifted")
    return {"status": status, "local_mean": local_mean, "stored_mean": mean,
            "low": mean - half, "high": mean + half, "local_seeds": [r["seed"] for r in local]}


def design(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the grid can tell apart and how well it measures: the power of its comparisons,
    seeds as blocks, the evaluation's share of the spread, the dead-group calculator's test,
    the evaluation sets' coverage, and the reference check replayed on the other kernel path."""
    from helpers.synthetic import synthetic_split

    native = [r for r in rows if r.get("kernel_path", "native") == "native"]
    summary = summarize(native)
    course = [r for r in native if r["arm"] == COURSE]
    replays = {}
    for kernel in sorted({r["kernel_path"] for r in rows} - {"native"}):
        theirs = sorted((r for r in rows if r["arm"] == COURSE and r["kernel_path"] == kernel),
                        key=lambda r: r["seed"])
        if theirs and len(course) >= 2:
            replays[kernel] = {"first_two": reference_check(theirs[:2], course),
                               "all": reference_check(theirs, course)}
    return {"power": power(summary), "blocks": blocks(native),
            "evaluation": evaluation_noise(native), "dead_groups": dead_group_fit(native),
            "coverage": {"census": coverage(lab_problems()),
                         "heldout": coverage(synthetic_split("test", 200))},
            "reference_check": replays}


# ---- Your own arm: runs on this machine, the reference check, the verdict ----------------------

def _seconds(value: float) -> str:
    return f"{value / 60:.1f} min" if value >= 90 else f"{value:.0f} s"


def _child(chosen: Arm, seed: int, steps: int | None, problems: int | None, send: Any) -> None:
    """One run in a forked process: its row, or the error in one line, sent back."""
    import tempfile

    try:
        with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(
                io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = train_and_score(Path(folder), seed, steps, chosen, problems=problems,
                                     lab=True)
        result.pop("log_history")
        send.send(result)
    except BaseException as error:  # noqa: BLE001  (any failure goes back to the parent)
        send.send({"error": f"{type(error).__name__}: {error}"})
    finally:
        send.close()


def lab_row(chosen: Arm, seed: int, result: dict[str, Any], seconds: float,
            kernel_path: str = "native") -> dict[str, Any]:
    """A run as the grid stores it (bench/ablations.py's rows)."""
    from helpers.profiles import PROFILES

    keep = ("gain", "base", "trained", "ci_low", "ci_high", "fixed", "broken", "n",
            "train_seconds", "signals", "kernel", "curve", "correct", "base_correct")
    return {"arm": chosen.name, "knob": chosen.knob, "seed": seed, "kernel_path": kernel_path,
            "reference": chosen.reference, "steps": result["curve"][-1][0]
            if result.get("curve") else chosen.steps or PROFILES["smoke"].max_steps,
            "run_seconds": seconds, **{k: result[k] for k in keep if k in result}}


def run_seeds(chosen: Arm, seeds: Sequence[int], steps: int | None = None, workers: int = 2,
              typical_seconds: float | None = None,
              problems: int | None = None) -> list[dict[str, Any]]:
    """Train and score `chosen` at each seed as the grid does, `workers` at a time, each run in a
    forked process (a reward written in a notebook cell goes with it): a line per finished run
    with the time left, and the runs' rows. `problems` scores only the first so many."""
    import multiprocessing
    from multiprocessing.connection import wait

    import torch

    if torch.cuda.is_available():  # CUDA does not survive a fork: one run at a time, in here
        return _runs_here(chosen, seeds, steps, problems)
    context = multiprocessing.get_context("fork")
    todo, running, rows, took = list(seeds), {}, [], []
    total, start = len(todo), time.perf_counter()
    if typical_seconds:
        rounds = math.ceil(total / workers)
        print(f"{chosen.name}: {total} runs, {workers} at a time; about "
              f"{_seconds(rounds * typical_seconds)}", flush=True)
    while todo or running:
        while todo and len(running) < workers:
            seed = todo.pop(0)
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child,
                                      args=(chosen, seed, steps, problems, send))
            process.start()
            send.close()
            running[receive] = (seed, process, time.perf_counter())
        for receive in wait(list(running)):
            seed, process, began = running.pop(receive)
            try:
                result = receive.recv()
            except EOFError:
                result = {"error": f"the process stopped (exit code {process.exitcode})"}
            process.join()
            if "error" in result:
                for _, other, _ in running.values():
                    other.terminate()
                raise RuntimeError(f"{chosen.name}, seed {seed}: {result['error']}")
            took.append(time.perf_counter() - began)
            rows.append(lab_row(chosen, seed, result, took[-1]))
            left = math.ceil((len(todo) + len(running)) / workers) * statistics.median(took)
            print(f"[{len(rows)}/{total}] {chosen.name}, seed {seed}: "
                  f"{100 * result['gain']:+.1f} points ({result['fixed']} fixed, "
                  f"{result['broken']} broken) in {took[-1]:.0f} s; "
                  + (f"about {_seconds(left)} left" if todo or running else
                     f"all done in {_seconds(time.perf_counter() - start)}"), flush=True)
    return sorted(rows, key=lambda r: r["seed"])


def _runs_here(chosen: Arm, seeds: Sequence[int], steps: int | None,
               problems: int | None) -> list[dict[str, Any]]:
    """The runs one after the other in this process (a GPU runtime), a line each."""
    import tempfile

    rows = []
    for k, seed in enumerate(seeds, 1):
        began = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder, \
                contextlib.redirect_stdout(io.StringIO()):
            result = train_and_score(Path(folder), seed, steps, chosen, problems=problems,
                                     lab=True)
        rows.append(lab_row(chosen, seed, result, time.perf_counter() - began))
        print(f"[{k}/{len(seeds)}] {chosen.name}, seed {seed}: {100 * result['gain']:+.1f} "
              f"points in {rows[-1]['run_seconds']:.0f} s", flush=True)
    return rows


def stored_reference(grid: dict[str, Any] | None = None, steps: int | None = None,
                     kernel_path: str = "native") -> list[dict[str, Any]]:
    """The grid's course runs (at the profile's steps, on one kernel path)."""
    from helpers.profiles import PROFILES

    grid = grid or load_grid()
    steps = steps or PROFILES["smoke"].max_steps
    return sorted((r for r in grid["rows"] if r["arm"] == COURSE and r["kernel_path"] ==
                   kernel_path and r.get("steps", steps) == steps and r.get("correct")),
                  key=lambda r: r["seed"])


def reference_cache(steps: int, problems: int | None) -> Path:
    """Where this machine's own course runs are kept: one file per kernel path and lab set."""
    import hashlib

    from helpers.evaluation import fingerprint
    from helpers.hardware import cpu_kernel_path
    from helpers.paths import cache_root

    scored = lab_problems()[:problems]
    key = hashlib.sha256(json.dumps([cpu_kernel_path(), steps, fingerprint(scored)],
                                    sort_keys=True).encode()).hexdigest()[:12]
    return cache_root() / "lab" / f"course-{key}.json"


def local_reference(stored: Sequence[dict[str, Any]], steps: int, workers: int = 2,
                    seeds: int = 2, unstored: int = 4, problems: int | None = None
                    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None, str]:
    """The reference for a verdict on this machine, and why.

    At the grid's own steps, `seeds` course runs here are checked against the stored ones
    (`reference_check`): if this machine reproduces them (exactly, or within the prediction
    interval) the stored runs are the reference; if its kernels shift them, two more local runs
    make a local reference of four. At other steps the stored runs do not apply: the course runs
    here, on `unstored` seeds. Local runs are kept in .cache/lab/, so each runs once per machine.
    """
    from helpers.profiles import SEED

    path = reference_cache(steps, problems)
    saved = json.loads(path.read_text()) if path.exists() else []
    need = seeds if stored else unstored

    def local(n: int) -> list[dict[str, Any]]:
        have = {r["seed"] for r in saved}
        missing = [SEED + i for i in range(n) if SEED + i not in have]
        if missing:
            print("The course's arm, here, for the reference:", flush=True)
            saved.extend(run_seeds(ARMS[COURSE], missing, steps, workers, problems=problems))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(saved))
        return sorted((r for r in saved if r["seed"] < SEED + n), key=lambda r: r["seed"])

    mine = local(need)
    if not stored:
        return mine, None, (f"The reference: the course's arm run here on {len(mine)} seeds, "
                            f"{steps} steps each (the stored grid's runs do not apply).")
    check = reference_check(mine, stored)
    if check["status"] == "shifted":
        mine = local(4)
        return mine, check, (
            f"Reference check: the course's arm gained {_points(check['local_mean'])} points "
            f"here on {seeds} seeds, outside the {_points(check['low'])} to "
            f"{_points(check['high'])} the stored runs predict: this machine's kernels shift "
            f"it, so the reference is the course's arm run here ({len(mine)} seeds).")
    how = ("gave exactly the stored answers" if check["status"] == "exact" else
           f"gained {_points(check['local_mean'])} points, inside the {_points(check['low'])} "
           f"to {_points(check['high'])} the stored runs predict")
    return list(stored), check, (f"Reference check: the course's arm {how} on {seeds} seeds "
                                 f"here, so the reference is the stored course arm "
                                 f"({len(stored)} seeds).")


def try_arm(chosen: Arm, seeds: int = 4, steps: int | None = None, workers: int = 2,
            sequential: bool = False, grid: dict[str, Any] | None = None,
            problems: int | None = None) -> dict[str, Any]:
    """Your arm against the course's, over seeds, on this machine: a verdict in four words.

    Runs `seeds` seeds (with `sequential`: 4, then 8, then 16 while the verdict is still
    "inconclusive", each look at a stricter level so that a false "helps" or "hurts" stays at 5%
    over the three looks: helpers.stats.sequential_step). The reference is the stored course arm
    if this machine reproduces it (`local_reference`), else the course's arm run here; so it
    is for other `steps` or fewer `problems` (a quick look: only the first so many scored).
    """
    from helpers.profiles import PROFILES, SEED
    from helpers.stats import SEQUENTIAL_LOOKS, sequential_step, verdict

    steps = steps or chosen.steps or PROFILES["smoke"].max_steps
    try:
        grid = grid or load_grid()
    except FileNotFoundError:
        grid = {"rows": []}
    stored = [] if problems else stored_reference(grid, steps)
    reference, _, note = local_reference(stored, steps, workers, unstored=max(2, seeds),
                                         problems=problems)
    print(note, flush=True)
    typical = statistics.median(r["run_seconds"] for r in reference)
    first = SEQUENTIAL_LOOKS[0] if sequential else seeds
    rows = run_seeds(chosen, range(SEED, SEED + first), steps, workers, typical, problems)
    ref_gains = [r["gain"] for r in reference]
    while True:
        gains = [r["gain"] for r in rows]
        if not sequential:
            found = verdict(gains, ref_gains)
            break
        found, more = sequential_step(gains, ref_gains)
        if more is None:
            break
        print(f"Still inconclusive at {len(rows)} seeds: {more - len(rows)} more.", flush=True)
        rows += run_seeds(chosen, range(SEED + len(rows), SEED + more), steps, workers,
                          typical, problems)
    print(verdict_line(chosen.name, found, len(rows), len(ref_gains)), flush=True)
    return {"arm": chosen.name, "rows": rows, "reference": reference, "verdict": found,
            "note": note}


def verdict_line(name: str, found: dict[str, Any], seeds: int, reference: int) -> str:
    """One sentence: the verdict, the difference with its interval, and what was compared."""
    from helpers.stats import EQUIVALENCE_MARGIN

    interval = (f", 95% interval {_points(found['low'])} to {_points(found['high'])}"
                if "low" in found else "")
    return (f"{name}: {found['verdict']} ({_points(found['difference'])} points against the "
            f"course's arm{interval}, p = {found['p']:.3f}; {seeds} seeds against {reference}; "
            f"equivalent means within ±{100 * EQUIVALENCE_MARGIN:.0f} points).")


# ---- Tables and plots for the notebook ---------------------------------------------------------

def design_lines(summary: dict[str, Any], found: dict[str, Any]) -> str:
    """What the grid can tell apart, printed beside its table: the equivalence margin, the size
    of the family, and the smallest effect it finds 80% of the time, arm by arm and with seeds
    as blocks."""
    from helpers.stats import EQUIVALENCE_MARGIN

    tested = family(summary)
    aa = [n for n, s in summary.items() if s["same_as_reference"] and s["verdict"]]
    lines = [f"Equivalence margin: ±{100 * EQUIVALENCE_MARGIN:.0f} points (\"equivalent\": the "
             "90% interval lies inside it).",
             f"Family: {len(tested)} arms tested; Holm holds the chance of any false helps or "
             "hurts at 5%, Benjamini-Hochberg the share of false ones among those called at 5%; "
             f"{len(aa)} A/A controls apart."]
    p, b = found.get("power"), found.get("blocks")
    if p:
        lines.append(f"Smallest effect found 80% of the time: {100 * p['mde']:.1f} points for "
                     f"{p['arm_seeds']} seeds against the course's {p['reference_seeds']} "
                     f"(seed spread {100 * p['sd']:.1f} points, pooled), "
                     f"{100 * p['mde_holm']:.1f} at Holm's strictest level.")
    if b:
        lines.append(f"Seeds as blocks ({len(b['arms'])} arms x {len(b['seeds'])} seeds): the "
                     f"seed effect F = {b['seed_f']:.1f} (p = {b['seed_p']:.3f}); residual "
                     f"spread {100 * b['residual_sd']:.1f} points on {b['residual_df']} df; "
                     f"smallest effect {100 * b['mde']:.1f} points.")
    return "\n".join(lines)


SIGNAL_LABELS = {"zero_std": "dead (trl)", "zero_std_correctness": "dead (correct)",
                 "correctness": "pass rate", "length": "length", "truncated": "truncated",
                 "clipped": "clipped", "kl": "KL", "extra_generations": "extra gens"}


def signal_table(summary: dict[str, Any], knob: str) -> str:
    """The training signals of a knob's arms (means over steps and seeds), beside their gains."""
    names = [a.name for a in knob_arms(knob) if a.name in summary]
    keys = [k for k in SIGNAL_LABELS if any(k in summary[n]["signals"] for n in names)]
    lines = [f"{'arm':<41}{'gain':>6}" + "".join(f"{SIGNAL_LABELS[k]:>15}" for k in keys)]
    for name in names:
        found = summary[name]["signals"]
        cells = []
        for k in keys:
            value = found.get(k)
            text = "-" if value is None else (
                f"{value:.1f} tokens" if k == "length" else f"{value:.5f}" if k == "kl" else
                f"{value:.2f}" if k == "extra_generations" else f"{value:.1%}")
            cells.append(f"{text:>15}")
        lines.append(f"{name:<41}{_points(summary[name]['mean']):>6}" + "".join(cells))
    return "\n".join(lines)


def curve_table(summary: dict[str, Any], names: Sequence[str]) -> str:
    """Final gain, the area under the held-out curve (the mean gain over the run) and its
    verdict against the reference, for the named arms."""
    lines = [f"{'arm':<32}{'steps':>6}{'final':>7}{'mean over run':>15}  verdict on the mean"]
    for name in names:
        s = summary.get(name)
        if s is None or s["auc"] is None:
            continue
        said = s.get("verdict_auc")
        text = "(the reference)" if said is None else (
            f"{said['verdict']} ({_points(said['difference'])} "
            f"[{_points(said['low'])}, {_points(said['high'])}])")
        lines.append(f"{name:<32}{s['steps'] or '':>6}{_points(s['mean']):>7}"
                     f"{_points(s['auc']):>15}  {text}")
    return "\n".join(lines)


def mean_curve(rows: Sequence[dict[str, Any]], name: str,
               kernel_path: str = "native") -> list[tuple[int, float]]:
    """An arm's held-out gain at each scored step, averaged over its runs."""
    by_step: dict[int, list[float]] = {}
    for r in rows:
        if r["arm"] == name and r.get("kernel_path", "native") == kernel_path and r.get("curve"):
            for step, accuracy in r["curve"]:
                by_step.setdefault(int(step), []).append(accuracy - r["base"])
    return sorted((s, statistics.fmean(v)) for s, v in by_step.items())


def plot_curves(rows: Sequence[dict[str, Any]], names: Sequence[str], ax: Any = None) -> Any:
    """Held-out gain along the run, averaged over seeds, for the named arms."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 3.6))[1]
    for k, name in enumerate(names):
        points = mean_curve(rows, name)
        ax.plot([s for s, _ in points], [100 * g for _, g in points], "o-", color=f"C{k}",
                label=name, markersize=4)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("held-out gain (points)")
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax


VERDICT_COLORS = {"helps": "tab:green", "hurts": "tab:red", "equivalent": "tab:blue",
                  "inconclusive": "tab:gray"}


def plot_ablation(summary: dict[str, Any], ax: Any = None) -> Any:
    """Each arm's gain on every seed (dots) and its mean (a bar), coloured by its verdict after
    Holm's adjustment; the course's arm first, with its mean as a line across the plot."""
    import matplotlib.pyplot as plt

    names = [COURSE] + [a.name for arms in KNOBS.values() for a in arms.values()
                        if a.name in summary]
    ax = ax or plt.subplots(figsize=(10, 4))[1]
    course = summary.get(COURSE)
    if course:
        ax.axhline(100 * course["mean"], color="black", linestyle="--", linewidth=0.8,
                   label="course's mean")
    for i, name in enumerate(names):
        s = summary[name]
        said = s["verdict"] or {}
        color = "black" if name == COURSE else "tab:purple" if s["same_as_reference"] else \
            VERDICT_COLORS.get(said.get("holm", said.get("verdict")), "tab:gray")
        ax.bar(i, 100 * s["mean"], width=0.6, color=color, alpha=0.35)
        ax.plot([i] * len(s["gains"]), [100 * g for g in s["gains"]], "o", color=color,
                markersize=3.5)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)), names, rotation=50, ha="right", fontsize=7)
    ax.set_ylabel("held-out gain (points)")
    ax.set_title("Gain per seed, coloured by the verdict after Holm: green helps, red hurts, "
                 "blue equivalent, grey inconclusive, purple A/A", fontsize=9)
    ax.legend(fontsize=8, loc="lower left")
    ax.figure.tight_layout()
    return ax


def plot_dead_groups(rows: Sequence[dict[str, Any]], spread: float,
                     group_sizes: Sequence[int] = (2, 4, 8), ax: Any = None) -> Any:
    """The dead-group calculator against the grid: for each G, p^G + (1-p)^G (solid) and the
    two-parameter curve with the fitted spread (dashed) against the pass rate p; each run a dot
    at its mean training pass rate and its measured share of groups with no correctness spread,
    the very quantity both curves give."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 3.8))[1]
    grid = [i / 200 for i in range(1, 200)]
    points = dead_group_points(rows)
    for k, g in enumerate(group_sizes):
        color = f"C{k}"
        ax.plot(grid, [100 * dead_group_share(p, g) for p in grid], color=color,
                label=f"G = {g}: p^G + (1-p)^G")
        ax.plot(grid, [100 * dead_group_share(p, g, spread) for p in grid], "--", color=color,
                label=f"G = {g}: spread {spread:.2f}")
        mine = [(p, m) for _, size, p, m in points if size == g]
        if mine:
            ax.plot([p for p, _ in mine], [100 * m for _, m in mine], "o", color=color,
                    markeredgecolor="black", markersize=5)
    ax.set_xlabel("pass rate p (share of training answers that are right)")
    ax.set_ylabel("groups with no correctness spread (%)")
    ax.set_xlim(0.2, 0.6)
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, ncols=3)
    ax.figure.tight_layout()
    return ax


def t4_cost(seeds: int = 4, arms: int = 1) -> tuple[int, int]:
    """T4 minutes (low, high) of training for `arms` x `seeds` runs of the `t4` profile, from
    its own estimate of seconds per step (helpers.profiles): the cost of one arm on a GPU."""
    from helpers.profiles import PROFILES, expected_t4_minutes

    low, high = expected_t4_minutes(PROFILES["t4"]) or (0, 0)
    return low * seeds * arms, high * seeds * arms
