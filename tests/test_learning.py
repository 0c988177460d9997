"""End to end: GRPO through the course path must raise the smoke model's held-out accuracy.

This trains with notebook 04's helpers and profile and scores with notebook 05's evaluation, so
broken reward wiring, a wrong reward weight, a truncation bug or a lost `answer` column fails it.

Known to fail today (issue 12): on the smoke model (23% strict before GRPO), runs of 30 to 200
steps at learning rates 3e-4 to 2e-3 changed held-out strict accuracy by -6.5 to +1.0 points, and
+3.5 on a weaker warm start; sampled correctness stayed flat. The mark is strict: once a recipe
learns, this test passes, the mark turns that into a failure, and the mark must go.
"""

from unsloth import FastLanguageModel  # noqa: F401  (first: unsloth patches trl on import)

import os

import pytest

from helpers.smoke_model import grpo_gain

# Strict accuracy points on 200 held-out problems. Provisional: set it from the spread over seeds
# (`python bench/smoke_model.py --seeds 5`) once a recipe learns; notebook 05 aims at +10.
MIN_GAIN_POINTS = 5.0
# While the recipe is known not to learn, the run (about 70 s) is opt-in, so CI does not pay for a
# known failure: GRPO_LEARNING_TEST=1 runs it. Drop both marks once it passes.
pytestmark = [
    pytest.mark.skipif(
        not os.environ.get("GRPO_LEARNING_TEST"),
        reason="issue 12: known not to learn yet; set GRPO_LEARNING_TEST=1 to run it (~70 s)",
    ),
    pytest.mark.xfail(
        strict=True, reason="issue 12: GRPO does not yet raise the smoke model's held-out accuracy"
    ),
]


@pytest.fixture(scope="module")
def gain(tmp_path_factory):
    return grpo_gain(tmp_path_factory.mktemp("learning"))


def test_grpo_raises_held_out_strict_accuracy(gain):
    points = 100 * (gain["trained"] - gain["base"])
    summary = (f"base {gain['base']:.1%} -> trained {gain['trained']:.1%} on {gain['n']} problems, "
               f"{gain['fixed']} fixed, {gain['broken']} broken")
    assert points >= MIN_GAIN_POINTS, f"GRPO gained only {points:+.1f} points: {summary}"
    assert gain["ci_low"] > 0, f"the paired 95% interval includes 0: {summary}"


def test_correctness_fired_and_rose_during_training(gain):
    from helpers.plotting import KEY_REWARD, REWARD_PREFIX, series, trend

    _, correct = series(gain["log_history"], f"{REWARD_PREFIX}{KEY_REWARD}/mean")
    assert correct and max(correct) > 0, "correctness_reward never fired"
    rise = trend(correct)
    assert rise.rose, f"correctness_reward did not rise clearly: p = {rise.p_value:.3f}"
