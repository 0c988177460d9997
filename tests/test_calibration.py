"""The A/A calibration (helpers/lab/calibration.py): on pools whose truth is known, the rates it
measures are the ones the tests promise, and a verdict that broke its promise would show."""

import random

import pytest

from helpers.lab import calibration
from helpers.stats import verdict


def normal_pool(seed: int = 0, n: int = 40, sd: float = 0.05, mean: float = 0.15) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(mean, sd) for _ in range(n)]


def test_the_word_is_the_verdicts_word():
    gains, rng = normal_pool(), random.Random(1)
    for _ in range(200):
        arm, reference = calibration.split(gains, 4, None, rng)
        moved = [g + 0.05 for g in arm]
        assert calibration.word(arm, reference) == verdict(arm, reference)["verdict"]
        assert calibration.word(moved, reference) == verdict(moved, reference)["verdict"]


def test_splits_share_no_run():
    rng = random.Random(2)
    for reference_seeds in (None, 8):
        arm, reference = calibration.split(list(range(40)), 4, reference_seeds, rng)
        assert len(arm) == 4 and len(reference) == (reference_seeds or 36)
        assert not set(arm) & set(reference)


def test_on_normal_runs_the_false_rates_are_near_their_five_percent():
    """Welch and TOST are exact for normal runs: over several pools the A/A rates sit near 5%
    (each pool's own draw moves them, hence the mean of five)."""
    found = [calibration.aa_rates(normal_pool(s), 400) for s in range(5)]
    assert 0.025 < sum(r["false_difference"] for r in found) / 5 < 0.075
    assert sum(r["false_equivalent"] for r in found) / 5 < 0.075


def test_holm_keeps_a_pseudo_grids_false_verdicts_near_five_percent():
    found = calibration.family_rates(normal_pool(3), 400)
    assert found["arms"] == 8  # 40 runs: 8 for the reference, eight arms of 4
    assert found["raw"]["any_false"] > 0.15  # eight tests at 5% each: far more than 5%
    assert found["holm"]["any_false"] < 0.09


def test_a_verdict_that_ignores_the_reference_spread_is_caught(monkeypatch):
    """Welch with the arm's variance alone (a plausible slip) calls far too many differences."""
    import statistics

    from helpers.stats import equivalence_p, t_cdf

    def broken(arm, reference, margin=0.05):
        diff = statistics.fmean(arm) - statistics.fmean(reference)
        se = statistics.stdev(arm) / len(arm) ** 0.5 / 3
        return {"difference": diff, "se": se, "df": 3, "p": 2 * t_cdf(-abs(diff) / se, 3),
                "p_equivalence": equivalence_p(diff, se, 3, margin)}

    monkeypatch.setattr(calibration, "tests", broken)
    assert calibration.aa_rates(normal_pool(), 400)["false_difference"] > 0.2


def test_the_pool_intervals_are_wider_than_the_splits():
    gains = normal_pool(4)
    rates = calibration.aa_rates(gains, 400)
    spans = calibration.bootstrap_intervals(gains, 40, 100)
    low, high = spans["false_difference"]
    wilson = rates["false_difference_interval"]
    assert low <= rates["false_difference"] <= high
    assert high - low > wilson[1] - wilson[0]


def test_a_pool_too_small_says_how_to_grow_it():
    with pytest.raises(ValueError, match="--pool 40"):
        calibration.aa_rates([0.1, 0.2, 0.3, 0.4, 0.5], 10)


def test_the_paired_word_is_the_paired_t_test_and_its_tost():
    """Four differences all near -8 points: a paired "hurts"; all within a point of 0: paired
    "equivalent", though Welch on gains that far apart from seed to seed could say neither."""
    assert calibration.paired_word([-0.08, -0.075, -0.085, -0.08]) == "hurts"
    assert calibration.paired_word([0.01, -0.005, 0.0, 0.005]) == "equivalent"
    assert calibration.paired_word([0.1, -0.1, 0.05, -0.05]) == "inconclusive"


def test_on_normal_differences_the_paired_false_rates_are_near_their_five_percent():
    """The paired t test is exact for normal differences: over several null arms its A/A rates
    sit near 5%, and the bootstrap over the null arm's seeds brackets each one."""
    found = [calibration.paired_aa_rates(normal_pool(s, sd=0.04, mean=0), 400) for s in range(5)]
    assert 0.025 < sum(r["false_difference"] for r in found) / 5 < 0.075
    assert sum(r["false_equivalent"] for r in found) / 5 < 0.075
    spans = calibration.bootstrap_intervals(normal_pool(9, sd=0.04, mean=0), 40, 100,
                                            rates=calibration.paired_aa_rates)
    assert spans["false_difference"][0] < spans["false_difference"][1]


def test_a_null_arm_too_small_says_how_to_grow_it():
    with pytest.raises(ValueError, match="bench.calibration"):
        calibration.paired_aa_rates([0.01, -0.02, 0.0, 0.03], 10)
