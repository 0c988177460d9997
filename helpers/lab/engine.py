"""One lab run: train the smoke model as notebook 05 does with one arm's change, and score it as
notebook 06 does (`train_and_score`, which CI's scored smoke run also uses); the held-out curve
along the run, the dead-group counter and DAPO's dynamic sampling that lab runs add.

torch, transformers and trl are imported inside the functions that train: importing the lab
(notebook 11's tables, the grid's summaries) must not load them, and unsloth must come first.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from helpers.data import grpo_train_dataset, load_gsm8k, make_prompt
from helpers.evaluation import decoding_settings, evaluate
from helpers.grpo_config import make_grpo_config
from helpers.hardware import cpu_kernel_path, detect_hardware, use_one_cpu_thread
from helpers.lab.arms import COURSE, Arm, arm, arm_overrides, reward_setup
from helpers.lab.groups import dead_group_share
from helpers.lab.problems import lab_problems
from helpers.launch import load_model, plan_run
from helpers.loading import load_trained
from helpers.logs import HELDOUT_KEY, series
from helpers.profiles import PROFILES, SEED
from helpers.resume import save_adapter
from helpers.run_folder import RunFolder
from helpers.stats import paired_test

CURVE_EVERY = 15  # steps between held-out scores along a lab run (0, 15, 30, ...)


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


def train_dataset(profile: Any, tokenizer: Any,
                  messages: Callable[[str], list[dict[str, str]]]) -> Any:
    """The course's training set (the same problems, in the same order), each question made a
    chat by `messages` instead of the course's make_prompt."""
    course = grpo_train_dataset(profile, tokenizer)
    return course.map(lambda row: {"prompt": messages(row["prompt"][-1]["content"])})


def _curve_callback(tokenizer: Any, rows: list[dict[str, str]], profile: Any,
                    output_dir: Path,
                    messages: Callable[[str], list[dict[str, str]]] = make_prompt) -> Any:
    """The training notebook's held-out callback, every CURVE_EVERY steps between the base score
    (step 0) and the final one, which the evaluation itself takes. It puts the random state back,
    so the run trains exactly as it would without it."""
    from helpers.callbacks import HeldOutAccuracy  # transformers at its top

    class Curve(HeldOutAccuracy):
        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            pass

        def scores_at(self, step: int, max_steps: int) -> bool:
            return step % self.every == 0 and step < max_steps

    return Curve(tokenizer, rows, decoding_settings(profile), output_dir, CURVE_EVERY, messages)


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
    share of groups without correctness spread; the run's seed then draws the LoRA init as well
    as the data order and sampling. Returns `helpers.stats.paired_test` (strict) with
    both accuracies, the training seconds, the training signals, the log history, the loader and
    the CPU kernel path it ran on.
    """
    from helpers.grpo_run import Instrument, build_trainer  # torch and transformers at its top

    chosen = arm_name if isinstance(arm_name, Arm) else arm(arm_name)
    profile, hw = PROFILES["smoke"], detect_hardware()
    if chosen.lora_rank is not None:
        profile = replace(profile, lora_rank=chosen.lora_rank)
    plan = plan_run(profile)
    if loader is not None and loader != plan.backend:
        plan = replace(plan, backend=loader, why=f"{loader}, as asked")
    loader = plan.backend
    use_one_cpu_thread(hw)  # as the notebooks' start() does
    seed = SEED if seed is None else seed
    # A lab run draws everything from its seed, the LoRA init too, so that seeds span every
    # source of randomness; the course's runs (CI's scored smoke run) keep SEED's init.
    model, tokenizer = load_model(profile, hw, plan, seed if lab else SEED)
    rewards = reward_setup(chosen)[0]
    overrides: dict[str, Any] = {"seed": seed, "save_strategy": "no", **arm_overrides(chosen)}
    if max_steps or chosen.steps:
        overrides["max_steps"] = max_steps or chosen.steps
    config = make_grpo_config(profile, hw, output_dir, **overrides)
    scored = lab_problems()[:problems] if lab else None
    messages = chosen.messages or make_prompt
    # The run notebook 05 trains, without its callbacks: no figure, samples or checkpoints.
    trainer = build_trainer(model, tokenizer, config, profile, output_dir, writer=False,
                            adapter=False, samples=False, reward_funcs=rewards,
                            train_dataset=None if chosen.messages is None else
                            train_dataset(profile, tokenizer, messages),
                            instrument=Instrument(callbacks=[_curve_callback(
                                tokenizer, scored, profile, output_dir, messages)]
                                if lab else ()))
    if chosen.sampling_stream:  # the null arm: after the trainer seeded torch with `seed`
        import torch

        torch.manual_seed(seed + chosen.sampling_stream)
    if lab:
        count_dead_correctness(trainer)
    if chosen.dynamic_sampling:
        resample_dead_groups(trainer, config.seed)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    adapter = save_adapter(model, tokenizer, RunFolder(output_dir))
    if loader == "unsloth":  # the evaluation notebook's path: the adapter, loaded back
        model, tokenizer = load_trained(profile, adapter)
    else:  # as unsloth's for_inference does: out of training mode (checkpointing, no cache)
        model.eval()
    rows = scored if lab else list(load_gsm8k("test", profile))[:problems]
    results = evaluate(model, tokenizer, rows, decoding_settings(profile), adapter,
                       messages=messages)
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
        along = [(e["step"], e[HELDOUT_KEY]) for e in trainer.state.log_history
                 if HELDOUT_KEY in e]
        out |= {
            "curve": [[0, out["base"]], *map(list, along), [config.max_steps, out["trained"]]],
            "correct": "".join("1" if p["trained_strict"] else "0" for p in results["problems"]),
            "base_correct": "".join("1" if p["base_strict"] else "0"
                                    for p in results["problems"]),
        }
    return out
