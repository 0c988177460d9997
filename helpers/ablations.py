"""What each GRPO setting does: the arms of notebook 11's ablations, one run of an arm, its summary.

An arm changes one knob of the course's smoke run (`KNOBS`); everything else stays as notebook 05
trains it (helpers.grpo_config, helpers.grpo_run). `train_and_score` trains the smoke model once
and scores it on the evaluation notebook's held-out problems; bench/ablations.py runs the whole
grid over seeds, the notebook runs two arms live and reads the grid from runs/bench/ablations.json.
`summarize` turns runs into each arm's gains and its verdict against the course's arm
(helpers.stats.verdict); the tables, the dead-group calculator and the two plots read that.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COURSE = "course"  # the arm that changes nothing: every knob's reference


@dataclass(frozen=True)
class Arm:
    """One setting of one knob: the GRPOConfig fields it changes, or the rewards it trains on."""

    knob: str
    value: str
    overrides: dict[str, Any] = field(default_factory=dict)
    rewards: tuple[str, ...] | None = None  # reward function names; None: the course's five

    @property
    def name(self) -> str:
        return COURSE if self.knob == COURSE else f"{self.knob}={self.value}"


def _arms(knob: str, values: dict[str, dict[str, Any]]) -> dict[str, Arm]:
    return {value: Arm(knob, value, overrides) for value, overrides in values.items()}


# The course's smoke run: loss_type dapo, scale_rewards group, 8 completions per prompt and 32 per
# step, beta 0, learning rate 1e-3, one iteration per batch, 48 completion tokens, five rewards.
KNOBS: dict[str, dict[str, Arm]] = {
    "loss_type": _arms("loss_type", {v: {"loss_type": v} for v in ("grpo", "dr_grpo", "bnpo")}),
    "scale_rewards": _arms("scale_rewards", {"none": {"scale_rewards": "none"}}),
    # 32 completions a step in every arm (the same compute), so fewer per prompt means more
    # prompts: 16 prompts of 2, 8 of 4, 4 of 8.
    "num_generations": _arms("num_generations", {"2": {"num_generations": 2},
                                                 "4": {"num_generations": 4}}),
    "beta": _arms("beta", {"0.04": {"beta": 0.04}}),
    "learning_rate": _arms("learning_rate", {"3e-4": {"learning_rate": 3e-4},
                                             "3e-3": {"learning_rate": 3e-3}}),
    "num_iterations": _arms("num_iterations", {"2": {"num_iterations": 2}}),
    # The smoke model's answers take 29-34 tokens: 32 cuts the longer ones short.
    "max_completion_length": _arms("max_completion_length", {
        "32": {"max_completion_length": 32},
        "32+mask": {"max_completion_length": 32, "mask_truncated_completions": True}}),
    "rewards": {
        "correctness": Arm("rewards", "correctness", rewards=("correctness_reward",)),
        "format": Arm("rewards", "format", rewards=(
            "strict_format_reward", "soft_format_reward", "tag_count_reward")),
    },
}
ARMS: dict[str, Arm] = {COURSE: Arm(COURSE, COURSE)} | {
    arm.name: arm for arms in KNOBS.values() for arm in arms.values()}


class UnknownArmError(ValueError):
    """An arm or knob that KNOBS does not hold."""


def arm(name: str) -> Arm:
    """The arm called `name` ("course", "loss_type=grpo", ...), or one sentence naming the known."""
    if name not in ARMS:
        raise UnknownArmError(f"Unknown arm {name!r}: the known arms are {', '.join(ARMS)}.")
    return ARMS[name]


def knob_arms(knob: str) -> list[Arm]:
    """The course's arm, then every other arm of `knob`."""
    if knob not in KNOBS:
        raise UnknownArmError(f"Unknown knob {knob!r}: the known knobs are {', '.join(KNOBS)}.")
    return [ARMS[COURSE], *KNOBS[knob].values()]


def course_value(knob: str) -> str:
    """What the course's smoke run sets `knob` to, read from the settings notebook 05 uses."""
    if knob == "rewards":
        from helpers.rewards import REWARD_FUNCS, REWARD_WEIGHTS

        return " + ".join(f"{w:g}×{f.__name__.removesuffix('_reward')}"
                          for f, w in zip(REWARD_FUNCS, REWARD_WEIGHTS, strict=True))
    from helpers.grpo_config import grpo_settings
    from helpers.hardware import detect_hardware
    from helpers.profiles import PROFILES

    return str(grpo_settings(PROFILES["smoke"], detect_hardware(), "unused")[knob])


def reward_setup(chosen: Arm) -> tuple[list[Any] | None, dict[str, Any]]:
    """The reward functions an arm trains on (None: the course's) and their weights' override."""
    if chosen.rewards is None:
        return None, {}
    from helpers.rewards import REWARD_FUNCS, REWARD_WEIGHTS

    weights = {f.__name__: w for f, w in zip(REWARD_FUNCS, REWARD_WEIGHTS, strict=True)}
    funcs = [f for name in chosen.rewards for f in REWARD_FUNCS if f.__name__ == name]
    return funcs, {"reward_weights": [weights[f.__name__] for f in funcs]}


def arm_overrides(chosen: Arm) -> dict[str, Any]:
    """The GRPOConfig fields an arm sets: its knob, or the weights of the rewards it keeps."""
    return {**chosen.overrides, **reward_setup(chosen)[1]}


# trl's log keys of the training signals that explain a result, and the names the rows use.
SIGNALS: dict[str, str] = {
    "zero_std": "frac_reward_zero_std",  # groups whose rewards are all equal: no signal
    "length": "completions/mean_length",
    "truncated": "completions/clipped_ratio",  # completions cut at max_completion_length
    "clipped": "clip_ratio/region_mean",  # tokens whose ratio left [1-ε, 1+ε]
    "kl": "kl",  # logged only when beta > 0
    "correctness": "rewards/correctness_reward/mean",  # the training pass rate p
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


def dead_group_share(p: float, group_size: int) -> float:
    """The share of groups with no spread (all right or all wrong) at pass rate p: p^G + (1-p)^G."""
    if not 0 <= p <= 1 or group_size < 1:
        raise ValueError(f"Need 0 <= p <= 1 and a group size of at least 1, got p={p}, "
                         f"G={group_size}.")
    return p ** group_size + (1 - p) ** group_size


def backend() -> str:
    """"unsloth" where it is installed (notebook 05's loader: CI, a full install), imported here
    so that it comes before trl as it must; else "peft": transformers + peft load the same 4-bit
    base and LoRA (helpers.launch.load_peft), as on Colab's light install, which has no unsloth."""
    import importlib.util

    if importlib.util.find_spec("unsloth") is None:
        return "peft"
    import unsloth  # noqa: F401  (it patches trl and transformers on import)

    return "unsloth"


def train_and_score(output_dir: Path, seed: int | None = None, max_steps: int | None = None,
                    arm_name: str = COURSE, loader: str | None = None,
                    problems: int | None = None) -> dict[str, Any]:
    """Train the smoke model as notebook 05 does, with one arm's change; score it as notebook 06.

    `loader` is "unsloth" (the caller imports unsloth first; the adapter is saved and loaded back
    as notebook 06 does) or "peft" (scored in memory); None: `backend()`. `problems` scores only
    the first so many held-out problems (default: the profile's 200). Returns
    `helpers.stats.paired_test` (strict) with both accuracies, the training seconds, the training
    signals, the log history, the loader and the CPU kernel path it ran on.
    """
    from helpers.data import load_gsm8k
    from helpers.evaluation import decoding_settings, evaluate
    from helpers.grpo_config import make_grpo_config
    from helpers.grpo_run import build_trainer
    from helpers.hardware import cpu_kernel_path, detect_hardware, use_one_cpu_thread
    from helpers.profiles import PROFILES, SEED
    from helpers.resume import save_adapter
    from helpers.run_folder import RunFolder
    from helpers.stats import paired_test

    chosen, loader = arm(arm_name), loader or backend()
    profile, hw = PROFILES["smoke"], detect_hardware()
    use_one_cpu_thread(hw)  # as the notebooks' start() does
    if loader == "unsloth":
        from unsloth import FastLanguageModel  # first: it patches trl on import

        from helpers.loading import load_kwargs, lora_kwargs

        model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(profile))
        model = FastLanguageModel.get_peft_model(model, **lora_kwargs(profile))
    else:
        from helpers.launch import load_peft

        model, tokenizer = load_peft(profile, hw, load_in_4bit=True)
    rewards = reward_setup(chosen)[0]
    overrides: dict[str, Any] = {"seed": SEED if seed is None else seed, "save_strategy": "no",
                                 **arm_overrides(chosen)}
    if max_steps:
        overrides["max_steps"] = max_steps
    config = make_grpo_config(profile, hw, output_dir, **overrides)
    # The run notebook 05 trains, without its callbacks: no figure, samples or checkpoints.
    trainer = build_trainer(model, tokenizer, config, profile, output_dir,
                            sample_completions=False, reward_funcs=rewards)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    adapter = save_adapter(model, tokenizer, RunFolder(output_dir))
    if loader == "unsloth":  # the evaluation notebook's path: the adapter, loaded back
        from helpers.loading import load_trained

        model, tokenizer = load_trained(profile, adapter)
    else:  # as unsloth's for_inference does: out of training mode (checkpointing, no cache)
        model.eval()
    rows = list(load_gsm8k("test", profile))[:problems]
    results = evaluate(model, tokenizer, rows, decoding_settings(profile), adapter)
    scores = results["scores"]
    found = signals(trainer.state.log_history, config.num_generations)
    return {
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


def run_arms(names: Iterable[str], seeds: Iterable[int], max_steps: int, folder: Path,
             problems: int | None = None) -> list[dict[str, Any]]:
    """Each arm at each seed, in this process: one row each (arm, seed, gain, signals), printed
    as it finishes. Notebook 11's live ablation."""
    chosen = [arm(name) for name in names]  # every name checked before the first run
    seeds, rows = list(seeds), []
    for each in chosen:
        for seed in seeds:
            with contextlib.redirect_stdout(io.StringIO()):  # loading banners, per run
                result = train_and_score(folder / f"{each.name}-{seed}", seed, max_steps,
                                         each.name, problems=problems)
            rows.append({"arm": each.name, "knob": each.knob, "seed": seed,
                         "gain": result["gain"], "base": result["base"],
                         "trained": result["trained"], "signals": result["signals"]})
            print(f"{each.name}, seed {seed}: {100 * result['gain']:+.1f} points, "
                  f"zero-spread groups {result['signals'].get('zero_std', 0):.0%}", flush=True)
    return rows


def summarize(rows: Sequence[dict[str, Any]], kernel_path: str = "native") -> dict[str, Any]:
    """Per arm, over its seeds on one kernel path: the gains, their mean and range, the mean of
    each signal, and the verdict against the course's arm (helpers.stats.verdict)."""
    from helpers.stats import verdict

    by_arm: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["seed"]):  # gains in seed order, however run
        if row.get("kernel_path", "native") == kernel_path:
            by_arm.setdefault(row["arm"], []).append(row)
    course = [r["gain"] for r in by_arm.get(COURSE, [])]
    out = {}
    for name, found in by_arm.items():
        gains = [r["gain"] for r in found]
        keys = {k for r in found for k in r.get("signals", {})}
        out[name] = {
            "knob": found[0]["knob"],
            "seeds": len(gains), "gains": gains, "mean": statistics.fmean(gains),
            "low": min(gains), "high": max(gains),
            "signals": {k: statistics.fmean(r["signals"][k] for r in found if k in r["signals"])
                        for k in sorted(keys)},
            "verdict": None if name == COURSE or len(course) < 2 or len(gains) < 2
            else verdict(gains, course),
        }
    return out


GRID_FILE = "runs/bench/ablations.json"


def load_grid(root: Path | None = None) -> dict[str, Any]:
    """The grid bench/ablations.py stored, or one sentence saying how to make it."""
    import json

    from helpers.paths import ROOT

    path = (root or ROOT) / GRID_FILE
    if not path.exists():
        raise FileNotFoundError(f"No {GRID_FILE}: run `python bench/ablations.py` (about an "
                                "hour on two cores; it resumes if stopped).")
    return json.loads(path.read_text())


def _points(value: float) -> str:
    return f"{100 * value:+.1f}"


def grid_table(summary: dict[str, dict[str, Any]]) -> str:
    """Knob by knob: each arm's mean gain, its range over seeds, and its verdict."""
    course = summary[COURSE]
    lines = [f"{'arm':<30}{'seeds':>6}{'mean':>7}  {'range over seeds':<17} verdict against "
             "the course (difference, 95% interval)",
             f"{COURSE:<30}{course['seeds']:>6}{_points(course['mean']):>7}  "
             f"{_points(course['low'])} to {_points(course['high']):<9} (the reference)"]
    for knob in KNOBS:
        for each in KNOBS[knob].values():
            s = summary.get(each.name)
            if s is None:
                continue
            said = s["verdict"]
            against = "(too few seeds for a verdict)" if said is None else (
                f"{said['verdict']} ({_points(said['difference'])} "
                f"[{_points(said['low'])}, {_points(said['high'])}])")
            lines.append(f"{each.name:<30}{s['seeds']:>6}{_points(s['mean']):>7}  "
                         f"{_points(s['low'])} to {_points(s['high']):<9} {against}")
    return "\n".join(lines)


SIGNAL_LABELS = {"zero_std": "no-spread groups", "correctness": "pass rate",
                 "length": "length", "truncated": "truncated", "clipped": "clipped", "kl": "KL"}


def signal_table(summary: dict[str, dict[str, Any]], knob: str) -> str:
    """The training signals of a knob's arms (means over steps and seeds), beside their gains."""
    names = [a.name for a in knob_arms(knob) if a.name in summary]
    keys = [k for k in SIGNAL_LABELS if any(k in summary[n]["signals"] for n in names)]
    lines = [f"{'arm':<30}{'gain':>6}" + "".join(f"{SIGNAL_LABELS[k]:>18}" for k in keys)]
    for name in names:
        found = summary[name]["signals"]
        cells = []
        for k in keys:
            value = found.get(k)
            text = "-" if value is None else (f"{value:.1f} tokens" if k == "length" else
                                              f"{value:.5f}" if k == "kl" else f"{value:.1%}")
            cells.append(f"{text:>18}")
        lines.append(f"{name:<30}{_points(summary[name]['mean']):>6}" + "".join(cells))
    return "\n".join(lines)


def dead_group_points(rows: Sequence[dict[str, Any]],
                      kernel_path: str = "native") -> list[tuple[int, float, float]]:
    """(G, mean training pass rate, measured no-spread share) for each run of the
    num_generations arms and the course's, on one kernel path: what the calculator is tested on."""
    from helpers.profiles import PROFILES

    sizes = {COURSE: PROFILES["smoke"].num_generations} | {
        a.name: a.overrides["num_generations"] for a in KNOBS["num_generations"].values()}
    return [(sizes[r["arm"]], r["signals"]["correctness"], r["signals"]["zero_std"])
            for r in rows if r["arm"] in sizes and r.get("kernel_path") == kernel_path]


def t4_cost(seeds: int = 4, arms: int = 1) -> tuple[int, int]:
    """T4 minutes (low, high) of training for `arms` x `seeds` runs of the `t4` profile, from
    its own estimate of seconds per step (helpers.profiles): the cost of one arm on a GPU."""
    from helpers.profiles import PROFILES, expected_t4_minutes

    low, high = expected_t4_minutes(PROFILES["t4"]) or (0, 0)
    return low * seeds * arms, high * seeds * arms


def plot_ablation(summary: dict[str, dict[str, Any]], ax: Any = None) -> Any:
    """Each arm's gain on every seed (dots) and its mean (a bar), grouped by knob; the course's
    arm first, with its seed range shaded across the plot so an arm can be read against it."""
    import matplotlib.pyplot as plt

    names = sorted(summary, key=lambda n: (n != "course", summary[n]["knob"]))
    ax = ax or plt.subplots(figsize=(9, 3.8))[1]
    course = summary.get("course")
    if course:
        ax.axhspan(100 * course["low"], 100 * course["high"], color="tab:gray", alpha=0.15,
                   label="course's seeds, lowest to highest")
    colors = {"helps": "tab:green", "hurts": "tab:red"}
    for i, name in enumerate(names):
        s = summary[name]
        said = (s["verdict"] or {}).get("verdict")
        color = colors.get(said, "tab:blue")
        ax.bar(i, 100 * s["mean"], width=0.6, color=color, alpha=0.35)
        ax.plot([i] * len(s["gains"]), [100 * g for g in s["gains"]], "o", color=color,
                markersize=4)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("held-out gain (points)")
    ax.set_title("Gain over the base model per seed; green helps, red hurts, blue: within "
                 "the seed spread", fontsize=9)
    ax.legend(fontsize=8, loc="lower left")
    ax.figure.tight_layout()
    return ax


def plot_dead_groups(measured: Sequence[tuple[int, float, float]],
                     group_sizes: Sequence[int] = (2, 4, 8, 16), ax: Any = None) -> Any:
    """p^G + (1-p)^G against the pass rate p for each group size G, with measured runs laid over
    it: `measured` holds (G, mean training pass rate, measured share of zero-spread groups)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 3.8))[1]
    grid = [i / 200 for i in range(201)]
    for k, g in enumerate(group_sizes):
        color = f"C{k}"
        ax.plot(grid, [100 * dead_group_share(p, g) for p in grid], color=color, label=f"G = {g}")
        points = [(p, share) for size, p, share in measured if size == g]
        if points:
            ax.plot([p for p, _ in points], [100 * s for _, s in points], "o",
                    color=color, markeredgecolor="black", label=f"G = {g}, measured runs")
    ax.set_xlabel("pass rate p (share of completions that are right)")
    ax.set_ylabel("groups with no spread (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, ncols=2)
    ax.figure.tight_layout()
    return ax
