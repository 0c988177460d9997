"""Does GRPO learn on this machine? The runs that check the smoke profile's promise.

`helpers.lab.engine.train_and_score` (its course arm) trains the smoke model through the course's
own trainer (helpers.grpo_run) and scores it as the evaluation notebook does;
`helpers.smoke_promise.check_smoke_promise` is what the evaluation notebook and
tests/test_smoke_promise.py assert of it. `run_on_kernel_path` repeats the run
in a fresh process on another CPU float kernel path (torch picks its kernels once, at import), so
one machine can check the promise on several of the paths that other machines would take.
`MUTATIONS` are deliberate breakages that must make the promise fail.

    python -m tools.smoke_runs --json                 # one run, the course's seed
    python -m tools.smoke_runs --mutation drop_answer # must fail
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from helpers.paths import ROOT

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
# The smoke model's attention in training, in bfloat16. On a CPU with AMX (Intel Sapphire Rapids
# and later), torch 2.13 packs bfloat16 for AMX in this op whatever ATEN_CPU_CAPABILITY says, and
# on the forced "default" or "avx2" path it then stops: "pack_vnni2 is only supported when avx512
# is supported". Such a CPU cannot train the smoke model on those two paths at all.
_ATTENTION_PROBE = """
import torch
q = torch.randn(8, 4, 100, 32, dtype=torch.bfloat16, requires_grad=True)
mask = torch.ones(8, 1, 100, 100, dtype=torch.bool).tril()
torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask).float().sum().backward()
"""
# Another path than the notebooks' native one, in order of preference: the furthest first.
OTHER_PATHS = ("default", "avx2", "mkl-compatible")


@functools.cache  # one probe per path and process
def runs_here(kernel: str) -> bool:
    """Whether this CPU can train the smoke model on `kernel` (see _ATTENTION_PROBE)."""
    env = {**os.environ, **KERNEL_PATHS[kernel]}
    done = subprocess.run([sys.executable, "-c", _ATTENTION_PROBE], env=env,
                          capture_output=True, text=True, timeout=120)
    return done.returncode == 0


def another_kernel_path(preferred: Sequence[str] = OTHER_PATHS) -> str:
    """The first of `preferred` this CPU can run: a float path other than the native one."""
    for kernel in preferred:
        if runs_here(kernel):
            return kernel
    raise RuntimeError(f"This CPU runs none of {', '.join(preferred)}: only its native path.")


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


# Deliberate breakages that must make the promise fail (tests/test_smoke_promise.py,
# GRPO_MUTATION=...).
MUTATIONS: dict[str, Callable[[], None]] = {
    "constant_correctness": _constant_correctness,  # correctness pays 1.0 whatever the answer
    "drop_answer": _drop_answer,  # the training set loses its `answer` column
}


def run_on_kernel_path(
    kernel: str, seed: int | None = None, mutation: str | None = None,
    max_steps: int | None = None, timeout: float = 1200, arm: str | None = None,
    lab: bool = False,
) -> dict[str, Any]:
    """`helpers.lab.engine.train_and_score` (the course's arm, or another `arm`) in a fresh process
    on `kernel` (a KERNEL_PATHS name), without its log history; `lab` scores it as the ablation
    lab does (its census of the sums, a held-out curve, each problem's result).

    A run that fails (a mutation that breaks training, say) raises RuntimeError with the child's
    last lines of output.
    """
    if kernel not in KERNEL_PATHS:
        raise ValueError(f"Unknown kernel path {kernel!r}: use one of {', '.join(KERNEL_PATHS)}.")
    if mutation is not None and mutation not in MUTATIONS:
        raise ValueError(f"Unknown mutation {mutation!r}: use one of {', '.join(MUTATIONS)}.")
    env = {**os.environ, **KERNEL_PATHS[kernel], "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "tools.smoke_runs", "--json"]
    command += [] if seed is None else ["--seed", str(seed)]
    command += [] if mutation is None else ["--mutation", mutation]
    command += [] if max_steps is None else ["--max-steps", str(max_steps)]
    command += [] if arm is None else ["--arm", arm]
    command += ["--lab"] if lab else []
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
    parser.add_argument("--arm", default="course", help="an arm of helpers.lab.ARMS")
    parser.add_argument("--lab", action="store_true",
                        help="score as the ablation lab does (helpers.lab.engine.train_and_score)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args(argv)
    import unsloth  # noqa: F401  (before trl: it patches it)

    from helpers.lab import train_and_score

    if args.mutation:
        MUTATIONS[args.mutation]()
    with tempfile.TemporaryDirectory() as folder:
        gain = train_and_score(Path(folder), args.seed, args.max_steps, args.arm, lab=args.lab)
    gain.pop("log_history")
    if args.json:
        print(json.dumps(gain))
    else:
        print(f"{gain['base']:.1%} -> {gain['trained']:.1%} ({100 * gain['gain']:+.1f} points) "
              f"on {gain['kernel']['capability']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
