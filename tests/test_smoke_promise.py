"""End to end: GRPO through the course path must raise the smoke model's held-out accuracy.

This trains with the training notebook's helpers and profile and scores with the evaluation
notebook's evaluation (helpers.lab.engine.train_and_score), so broken reward wiring, a wrong
reward weight, a truncation bug or a lost `answer` column fails it.

It runs in a fresh process on another CPU float kernel path than the notebooks: `make test`
executes the training and evaluation notebooks on the native path, and the evaluation notebook
asserts the same promise (helpers.smoke_promise.check_smoke_promise) there, so together the
promise is checked on two paths without training the same run twice. Other paths, or several:
    GRPO_LEARNING_KERNELS="native default" pytest tests/test_smoke_promise.py
To see it fail, add a mutation (tools.smoke_runs.MUTATIONS):
    GRPO_MUTATION=constant_correctness   correctness_reward pays 1.0 whatever the answer
    GRPO_MUTATION=drop_answer            the training set loses its `answer` column
"""

import os

import pytest

from helpers.smoke_promise import check_smoke_promise
from tools.smoke_runs import KERNEL_PATHS, another_kernel_path, run_on_kernel_path

# Paths asked for by name, or None: torch's scalar kernels where this CPU can train on them, else
# the next path it can run (tools.smoke_runs.another_kernel_path, probed when the run starts, not
# at collection: CPUs with AMX cannot run "default" or "avx2").
KERNELS = os.environ.get("GRPO_LEARNING_KERNELS", "").split() or [None]


@pytest.fixture(scope="module", params=KERNELS, ids=lambda name: name or "another-path")
def kernel(request) -> str:
    if request.param is None:
        return another_kernel_path()
    if request.param not in KERNEL_PATHS:
        raise ValueError(f"GRPO_LEARNING_KERNELS names {request.param!r}: use {list(KERNEL_PATHS)}")
    return request.param


@pytest.fixture(scope="module")
def gain(kernel):
    return run_on_kernel_path(kernel, mutation=os.environ.get("GRPO_MUTATION"))


def test_grpo_keeps_the_smoke_promise(gain):
    print(check_smoke_promise(gain))  # +10 points on 200 problems, the interval above 0


def test_it_ran_on_the_kernel_path_asked_for(gain, kernel):
    wanted = KERNEL_PATHS[kernel]
    ran = gain["kernel"]
    assert all(ran[name] == value for name, value in wanted.items()), ran
    if wanted.get("ATEN_CPU_CAPABILITY"):
        assert ran["capability"] == wanted["ATEN_CPU_CAPABILITY"].upper(), ran


def test_correctness_fired_with_a_spread_to_learn_from(gain):
    """The reward that matters paid some completions and not others, so groups had a spread.

    Not "it rose": at temperature 1 and 32 completions a step, sampled correctness moves a few
    points in 60 steps, within its noise, while greedy held-out accuracy gains (README's table).
    """
    mean = gain["correctness_mean"]
    assert mean is not None, "no correctness_reward in the log: is it among the reward functions?"
    assert 0.05 < mean < 0.95, (
        f"correctness_reward averaged {mean:.2f}: it must pay some completions and not others, or "
        "GRPO's groups have nothing to tell apart"
    )
