"""Does GRPO learn on this machine? The smoke profile's promise, and the run that checks it.

`grpo_gain` trains the smoke model as the training notebook does and scores it as the evaluation
notebook does. `check_smoke_promise` is the promise both the evaluation notebook and
tests/test_learning.py assert. `run_on_kernel_path` repeats the run in a fresh process on another
CPU float kernel path (torch picks its kernels once, at import), so one machine can check the
promise on several of the paths that other machines would take.

This module sits above the model, training and evaluation helpers: none of them imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from helpers.paths import ROOT

# Strict-accuracy points on the 200 held-out problems that GRPO must add on the smoke profile, with
# the paired 95% interval above 0. Measured spread (runs/bench/smoke_model.json): 16 runs, 4 seeds
# on each of 4 CPU kernel paths, gained +12.5 to +24.5; the course's own seed gained +18.0 on the
# native path and +19.5 on torch's default kernels. 10 sits below the lowest by about one paired
# standard error (~3.5 points at these flip counts): a real loss of learning fails, noise does not.
MIN_GAIN_POINTS = 10.0
MIN_PROBLEMS = 200

# Environment variables that select a float kernel path in a fresh process (KERNEL_ENV in
# helpers.hardware). "native" is what torch picks on this CPU (AVX-512 or AVX2 on x86); the others
# take paths other machines take by default: AVX2, torch's scalar "default" kernels, and MKL's
# conditional-numerical-reproducibility mode.
KERNEL_PATHS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
}


class SmokePromiseError(AssertionError):
    """GRPO did not raise the smoke model's held-out accuracy as promised."""


def check_smoke_promise(test: dict[str, Any]) -> str:
    """One line if `test` (a strict evaluation.paired_test) keeps the promise, else an error."""
    from helpers.evaluation import describe_paired

    points = 100 * test["gain"]
    if test["n"] < MIN_PROBLEMS or points < MIN_GAIN_POINTS or test["ci_low"] <= 0:
        raise SmokePromiseError(
            f"GRPO did not raise the smoke model's held-out strict accuracy by {MIN_GAIN_POINTS:g} "
            f"points on {MIN_PROBLEMS}+ problems with the paired interval above 0: "
            f"{describe_paired(test)} Check the training notebook's health check and reward log."
        )
    return (f"Smoke promise kept: {points:+.1f} points on {test['n']} problems, 95% interval "
            f"from {100 * test['ci_low']:+.1f}.")


def grpo_gain(output_dir: Path, seed: int | None = None, max_steps: int | None = None) -> dict:
    """Train the smoke model as the training notebook does; score it as the evaluation one does.

    The caller imports unsloth first. Returns `helpers.evaluation.paired_test` (strict) with both
    accuracies, the training seconds, the mean sampled correctness reward, the log history and
    the CPU kernel path it ran on.
    """
    from unsloth import FastLanguageModel  # first: it patches trl on import

    from trl import GRPOTrainer

    from helpers.data import grpo_train_dataset, load_gsm8k
    from helpers.evaluation import decoding_settings, evaluate, paired_test
    from helpers.export import load_trained
    from helpers.hardware import cpu_kernel_path, detect_hardware, use_one_cpu_thread
    from helpers.model import load_kwargs, lora_kwargs
    from helpers.plotting import KEY_REWARD, REWARD_PREFIX, series
    from helpers.profiles import PROFILES
    from helpers.rewards import REWARD_FUNCS
    from helpers.session import SEED
    from helpers.training import make_grpo_config, save_adapter

    profile, hw = PROFILES["smoke"], detect_hardware()
    use_one_cpu_thread(hw)  # as the notebooks' start() does
    model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(profile))
    model = FastLanguageModel.get_peft_model(model, **lora_kwargs(profile))
    overrides: dict[str, Any] = {"seed": SEED if seed is None else seed, "save_strategy": "no"}
    if max_steps:
        overrides["max_steps"] = max_steps
    config = make_grpo_config(profile, hw, output_dir, **overrides)
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=REWARD_FUNCS, args=config,
        train_dataset=grpo_train_dataset(profile, tokenizer),
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    # The evaluation notebook's path: the saved adapter, loaded back on its base model.
    adapter = save_adapter(model, tokenizer, Path(output_dir))
    model, tokenizer = load_trained(profile, adapter)
    rows = list(load_gsm8k("test", profile))
    results = evaluate(model, tokenizer, rows, decoding_settings(profile), adapter)
    scores = results["scores"]
    _, correct = series(trainer.state.log_history, f"{REWARD_PREFIX}{KEY_REWARD}/mean")
    return {
        **paired_test(results, "strict"),
        "base": scores["base"]["strict"]["accuracy"],
        "trained": scores["trained"]["strict"]["accuracy"],
        "train_seconds": seconds,
        "correctness_mean": sum(correct) / len(correct) if correct else None,
        "kernel": cpu_kernel_path(),
        "log_history": trainer.state.log_history,
    }


def _constant_correctness() -> None:
    import helpers.rewards

    def correctness_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return [1.0] * len(completions)

    helpers.rewards.REWARD_FUNCS = [
        correctness_reward if f.__name__ == "correctness_reward" else f
        for f in helpers.rewards.REWARD_FUNCS
    ]


def _drop_answer() -> None:
    import helpers.data

    original = helpers.data.grpo_train_dataset
    helpers.data.grpo_train_dataset = lambda *a: original(*a).remove_columns(["answer"])


# Deliberate breakages that must make the promise fail (tests/test_learning.py, GRPO_MUTATION=...).
MUTATIONS: dict[str, Callable[[], None]] = {
    "constant_correctness": _constant_correctness,  # correctness pays 1.0 whatever the answer
    "drop_answer": _drop_answer,  # the training set loses its `answer` column
}


def run_on_kernel_path(
    kernel: str, seed: int | None = None, mutation: str | None = None,
    max_steps: int | None = None, timeout: float = 1200,
) -> dict[str, Any]:
    """`grpo_gain` in a fresh process on `kernel` (a KERNEL_PATHS name), without its log history.

    A run that fails (a mutation that breaks training, say) raises RuntimeError with the child's
    last lines of output.
    """
    if kernel not in KERNEL_PATHS:
        raise ValueError(f"Unknown kernel path {kernel!r}: use one of {', '.join(KERNEL_PATHS)}.")
    if mutation is not None and mutation not in MUTATIONS:
        raise ValueError(f"Unknown mutation {mutation!r}: use one of {', '.join(MUTATIONS)}.")
    env = {**os.environ, **KERNEL_PATHS[kernel], "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "helpers.learning", "--json"]
    command += [] if seed is None else ["--seed", str(seed)]
    command += [] if mutation is None else ["--mutation", mutation]
    command += [] if max_steps is None else ["--max-steps", str(max_steps)]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise RuntimeError(f"The {kernel} run failed (exit {done.returncode}):\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train and evaluate the smoke model once.")
    parser.add_argument("--seed", type=int, default=None, help="GRPO seed (default: the course's)")
    parser.add_argument("--mutation", choices=sorted(MUTATIONS), default=None)
    parser.add_argument("--max-steps", type=int, default=None, help="default: the profile's")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args(argv)
    import unsloth  # noqa: F401  (before trl: it patches it)

    if args.mutation:
        MUTATIONS[args.mutation]()
    with tempfile.TemporaryDirectory() as folder:
        gain = grpo_gain(Path(folder), seed=args.seed, max_steps=args.max_steps)
    gain.pop("log_history")
    if args.json:
        print(json.dumps(gain))
    else:
        print(f"{gain['base']:.1%} -> {gain['trained']:.1%} ({100 * gain['gain']:+.1f} points) "
              f"on {gain['kernel']['capability']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
