"""The health check reads held-out accuracy first: a good run is not called bad, a flat one is.

Fixture: tests/fixtures/smoke_heldout_log_history.json is notebook 05's smoke run (beta=0, 60
steps), with `HeldOutAccuracy`'s greedy scores on 200 held-out problems every 15 steps.
"""

import json
import math

import pytest

from helpers.health import health_check, heldout_evidence
from helpers.logs import HELDOUT_KEY, HELDOUT_N_KEY
from helpers.paths import ROOT
from tools.output_quotes import stored_text

FIXTURE = ROOT / "tests" / "fixtures" / "smoke_heldout_log_history.json"


@pytest.fixture
def run():
    return json.loads(FIXTURE.read_text())


def with_heldout(log: list[dict], scores: list[float], n: int | None) -> list[dict]:
    """The same run with its held-out measurements replaced by `scores` on `n` problems."""
    entries = [dict(e) for e in log]
    measured = [e for e in entries if HELDOUT_KEY in e]
    assert len(measured) == len(scores)
    for entry, score in zip(measured, scores, strict=True):
        entry[HELDOUT_KEY] = score
        if n is None:
            entry.pop(HELDOUT_N_KEY, None)
        else:
            entry[HELDOUT_N_KEY] = n
    return entries


def lines(log: list[dict]) -> list[str]:
    return [str(f) for f in health_check(log)]


def test_the_fixture_is_a_run_whose_sampled_reward_stayed_flat_while_held_out_rose(run):
    held = heldout_evidence(run)
    assert held is not None and held.n == 200 and held.change > 10 and held.rose
    text = "\n".join(lines(run))
    assert "did not rise clearly" in text  # the sampled reward is flat: the case this is about


def test_the_smoke_run_gives_no_warning_and_no_learning_rate_advice(run):
    found = lines(run)
    assert not [line for line in found if line.startswith("WARN")], found
    assert not any("learning_rate" in line for line in found)
    assert any(line.startswith("OK") and "Information, not a problem" in line for line in found)


def test_a_flat_held_out_curve_gets_the_warning_and_the_learning_rate_advice(run):
    flat = with_heldout(run, [0.385, 0.38, 0.39, 0.385, 0.39], n=200)
    found = lines(flat)
    warnings = [line for line in found if line.startswith("WARN")]
    assert any("Held-out greedy accuracy" in w and "within its noise" in w for w in warnings)
    assert any("reward did not rise clearly" in w and "change learning_rate" in w
               for w in warnings)


def rising(log: list[dict], key: str = "reward") -> list[dict]:
    """The same run with `key` at its first value for 6 steps, then 0.5 higher to the end."""
    entries = [dict(e) for e in log]
    steps = [e for e in entries if key in e]
    for i, entry in enumerate(steps):
        entry[key] = 1.0 + (0.5 if i >= 6 else 0.0) + 0.01 * (i % 3)
    return entries


def test_a_rise_that_comes_early_and_levels_off_is_a_rise(run):
    """Most of a GRPO run's gain comes in its first steps: the start against the last third
    sees it, where the first third against the last does not."""
    from helpers.health import trend
    from helpers.logs import series

    _, values = series(rising(run), "reward")
    found = trend(values)
    assert found.rose and found.first == pytest.approx(1.01) and found.last > 1.5
    thirds = len(values) // 3
    assert sum(values[:thirds]) / thirds > 1.3  # the first third already holds most of the rise


def test_a_reward_that_rises_while_held_out_does_not_sounds_the_alarm(run):
    hacked = with_heldout(rising(run), [0.385, 0.37, 0.36, 0.375, 0.38], n=200)
    alarms = [line for line in lines(hacked) if "reward hacking" in line]
    assert len(alarms) == 1 and alarms[0].startswith("WARN")
    assert not [line for line in lines(rising(run)) if "reward hacking" in line]  # held-out rose


def test_held_out_accuracy_that_falls_beyond_its_noise_is_a_warning(run):
    fallen = with_heldout(run, [0.385, 0.30, 0.22, 0.18, 0.15], n=200)
    found = [line for line in lines(fallen) if line.startswith("WARN Held-out")]
    assert len(found) == 1 and "fell beyond its noise" in found[0]


def test_a_rise_within_the_noise_of_32_problems_is_not_taken_as_learning(run):
    # +12.5 points on 32 problems (the t4 profile's held-out set): the intervals overlap.
    small = with_heldout(run, [0.375, 0.4375, 0.4375, 0.5, 0.5], n=32)
    assert not heldout_evidence(small).rose
    assert any(line.startswith("WARN") and "learning_rate" in line for line in lines(small))


def test_a_log_without_the_problem_count_cannot_judge_its_noise(run):
    unsized = with_heldout(run, [0.385, 0.515, 0.525, 0.555, 0.565], n=None)
    assert not heldout_evidence(unsized).rose
    assert any(line.startswith("WARN") and "cannot tell a rise from noise" in line
               for line in lines(unsized))


def test_notebook_05_stored_health_check_has_no_warn_line():
    cells = json.loads((ROOT / "notebooks" / "05_grpo_training.ipynb").read_text())["cells"]
    (cell,) = [c for c in cells if c["cell_type"] == "code"
               and "findings = health_check(trainer.state.log_history)" in "".join(c["source"])]
    printed = stored_text(cell)
    assert "Held-out greedy accuracy" in printed
    assert "WARN" not in printed and "learning_rate" not in printed, printed


def test_notebook_05s_stored_failing_run_is_warned_and_its_fix_is_not():
    """Section 8 reads runs/bench/failing_run.json: the learning rate 10x too high must be
    flagged, by held-out accuracy falling, and the course's run beside it must not."""
    runs = json.loads((ROOT / "runs" / "bench" / "failing_run.json").read_text())["runs"]
    assert runs["too_high"]["learning_rate"] == 10 * runs["course"]["learning_rate"]
    broken = [line for line in lines(runs["too_high"]["log"]) if line.startswith("WARN")]
    assert any("fell beyond its noise" in line for line in broken), broken
    assert any(line.startswith("WARN The reward fell") and "learning_rate too high" in line
               for line in broken), broken
    held = [e[HELDOUT_KEY] for e in runs["too_high"]["log"] if HELDOUT_KEY in e]
    assert held[0] > 0.3 and held[1:] == [0.0] * (len(held) - 1)  # as section 8 says
    # ... and its entropy ends near a uniform guess over the smoke model's 474 tokens
    entropy = [e["entropy"] for e in runs["too_high"]["log"] if "entropy" in e]
    vocab = json.loads((ROOT / "models" / "smoke" / "config.json").read_text())["vocab_size"]
    assert vocab == 474 and min(entropy[-len(entropy) // 3:]) > 0.9 * math.log(vocab)
    assert not [line for line in lines(runs["course"]["log"]) if line.startswith("WARN")]
