"""The health check reads held-out accuracy first: a good run is not called bad, a flat one is.

Fixture: tests/fixtures/smoke_heldout_log_history.json is notebook 05's smoke run (beta=0, 60
steps), with `HeldOutAccuracy`'s greedy scores on 200 held-out problems every 15 steps.
"""

import json
from pathlib import Path

import pytest

from helpers.health import health_check, heldout_evidence
from helpers.logs import HELDOUT_KEY, HELDOUT_N_KEY
from tools.output_quotes import stored_text

ROOT = Path(__file__).resolve().parent.parent
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
