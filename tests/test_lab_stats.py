"""The ablation lab's statistics (helpers.stats): t and F tails, Welch, four-way verdicts with
an equivalence margin, Holm and Benjamini-Hochberg, power, seeds as blocks, and a sequential
design whose false-positive rate a simulation holds at 5%."""

import math

import pytest

from helpers.stats import (
    VERDICTS,
    benjamini_hochberg,
    beta_regularized,
    blocked_anova,
    equivalence_p,
    f_survival,
    holm,
    minimum_detectable_effect,
    sequential_step,
    simulate_sequential,
    t_cdf,
    t_quantile,
    verdict,
    welch,
)

# The first ablation grid (commit 8a1b07b, runs/bench/ablations.json then), gains in points in
# seed order, which the review notes/ablation-5.md recomputed with SciPy.
OLD_COURSE = [18.0, 21.0, 16.0, 24.0, 14.5, 19.0, 15.5, 28.0]
OLD_ARMS = {
    "beta=0.04": [15.0, 23.0, 20.0, 17.5], "learning_rate=3e-3": [0.5, 17.0, 16.0, 5.0],
    "learning_rate=3e-4": [12.5, 13.5, 13.5, 12.0], "loss_type=bnpo": [18.0, 21.0, 16.0, 24.0],
    "loss_type=dr_grpo": [20.0, 18.5, 19.5, 18.0], "loss_type=grpo": [17.5, 15.5, 18.0, 19.5],
    "max_completion_length=32": [14.0, 23.0, 20.0, 15.5],
    "max_completion_length=32+mask": [10.5, 22.0, 21.5, 15.0],
    "num_generations=2": [22.5, 16.0, 23.0, 23.5], "num_generations=4": [10.0, 22.5, 18.5, 21.0],
    "num_iterations=2": [9.5, 19.5, 13.5, 19.5], "rewards=correctness": [19.5, 23.0, 23.0, 24.5],
    "rewards=format": [-2.0, 4.0, 1.5, -4.0], "scale_rewards=none": [15.5, 15.0, 15.0, 17.5],
}


def test_t_and_f_tails_match_closed_forms():
    assert t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-12)  # Cauchy: 1/2 + atan(1)/pi
    assert t_cdf(2.0, 2) == pytest.approx(0.5 + 2 / (2 * math.sqrt(6)), abs=1e-12)
    assert t_cdf(-2.0, 2) == pytest.approx(1 - t_cdf(2.0, 2), abs=1e-12)
    assert t_cdf(2.228, 10) == pytest.approx(0.975, abs=1e-4)  # the printed table
    assert f_survival(3.89, 2, 12) == pytest.approx((1 + 2 * 3.89 / 12) ** -6, abs=1e-12)
    assert beta_regularized(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-12)  # 1-(0.6^4+4*.4*.6^3)
    assert t_quantile(0.975, 3) == pytest.approx(3.1824, abs=2e-4)
    assert t_quantile(0.80, 10) == pytest.approx(0.8791, abs=2e-4)


def test_holm_and_bh_match_their_definitions():
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert holm([0.5]) == [0.5] and benjamini_hochberg([0.2, 0.9]) == pytest.approx([0.4, 0.9])


def test_the_first_grid_recomputes_as_the_review_did():
    """notes/ablation-5.md, table 1.1 (SciPy): one "hurts" survives Holm, both survive BH."""
    names = sorted(OLD_ARMS)
    found = {n: welch(OLD_ARMS[n], OLD_COURSE) for n in names}
    holm_p = dict(zip(names, holm([found[n]["p"] for n in names]), strict=True))
    bh_q = dict(zip(names, benjamini_hochberg([found[n]["p"] for n in names]), strict=True))
    lr = "learning_rate=3e-4"
    assert found[lr]["p"] == pytest.approx(0.0046, abs=5e-5)
    assert holm_p[lr] == pytest.approx(0.060, abs=5e-4)
    assert bh_q[lr] == pytest.approx(0.032, abs=5e-4)
    assert holm_p["rewards=format"] < 0.001 and bh_q["rewards=format"] < 0.001
    assert [n for n in names if holm_p[n] < 0.05] == ["rewards=format"]
    said = verdict(OLD_ARMS["loss_type=dr_grpo"], OLD_COURSE, margin=5.0)
    assert (round(said["low90"], 1), round(said["high90"], 1)) == (-3.7, 2.7)
    assert said["verdict"] == "equivalent"
    assert verdict(OLD_ARMS["learning_rate=3e-3"], OLD_COURSE, margin=5.0)["verdict"] == \
        "inconclusive"  # -9.9 points: not "within" anything


def test_four_verdicts():
    course = [0.15, 0.12, 0.17, 0.14]
    assert verdict([0.22, 0.24, 0.21, 0.23], course)["verdict"] == "helps"
    assert verdict([0.02, 0.05, 0.03, 0.01], course)["verdict"] == "hurts"
    assert verdict([0.145, 0.15, 0.14, 0.155], course)["verdict"] == "equivalent"
    wide = verdict([0.35, -0.05, 0.30, 0.00], course)
    assert wide["verdict"] == "inconclusive" and wide["low"] < 0 < wide["high"]
    assert set(VERDICTS) == {"helps", "hurts", "equivalent", "inconclusive"}


def test_equivalence_is_the_90_percent_interval_inside_the_margin():
    said = verdict([0.145, 0.15, 0.14, 0.155], [0.15, 0.12, 0.17, 0.14])
    inside = -0.05 < said["low90"] and said["high90"] < 0.05
    assert (said["p_equivalence"] < 0.05) == inside
    se, df = 0.01, 6.0
    edge = 0.05 - t_quantile(0.95, df) * se  # a difference whose 90% interval touches +5 points
    assert equivalence_p(edge, se, df) == pytest.approx(0.05, abs=1e-6)


def test_a_verdict_says_what_it_could_have_found_and_what_it_leaves_possible():
    """An inconclusive verdict comes with its MDE (from its own spread) and the largest effect
    its interval allows: a wide one allows a large effect, a tight one only a small one."""
    course = [0.15, 0.12, 0.17, 0.14]
    wide = verdict([0.35, -0.05, 0.30, 0.00], course)
    assert wide["mde"] == pytest.approx(minimum_detectable_effect(wide["se"], wide["df"]))
    assert wide["largest"] == pytest.approx(max(-wide["low"], wide["high"]))
    tight = verdict([0.145, 0.15, 0.14, 0.155], course)
    assert tight["largest"] < 0.05 < wide["largest"] and tight["mde"] < wide["mde"]
    same = verdict([0.1, 0.1], [0.1, 0.1])  # no spread: nothing to find, nothing left open
    assert same["mde"] == 0.0 and same["largest"] == 0.0


def test_the_minimum_detectable_effect_has_its_power():
    se, df = 0.03, 10
    mde = minimum_detectable_effect(se, df)
    assert mde == pytest.approx((t_quantile(0.975, df) + t_quantile(0.8, df)) * se)
    # power at that effect, with the non-central t approximated by a shifted t: 80%
    power = 1 - t_cdf(t_quantile(0.975, df) - mde / se, df)
    assert power == pytest.approx(0.80, abs=1e-9)


def test_seeds_as_blocks_match_a_least_squares_fit():
    import numpy as np

    table = [[0.10, 0.14, 0.12, 0.20], [0.08, 0.15, 0.10, 0.17], [0.13, 0.12, 0.11, 0.22]]
    found = blocked_anova(table)
    rows, cols = len(table), len(table[0])
    design = [[1.0] + [float(i == a) for a in range(1, rows)] + [float(j == b)
                                                                  for b in range(1, cols)]
              for i in range(rows) for j in range(cols)]
    y = np.array([v for r in table for v in r])
    coef, *_ = np.linalg.lstsq(np.array(design), y, rcond=None)
    residual = y - np.array(design) @ coef
    assert found["residual_variance"] == pytest.approx(float(residual @ residual) / 6)
    assert found["residual_df"] == 6 and found["seed_df"] == 3
    assert found["seed_p"] == pytest.approx(f_survival(found["seed_f"], 3, 6))


def test_the_sequential_design_holds_its_false_positive_rate_at_5_percent():
    """4, then 8, then 16 seeds while inconclusive, against 8 reference seeds, with no real
    effect and a spread so large that equivalence never stops it early: the worst case."""
    reps = 2500
    held = simulate_sequential(0.0, 1.0, 8, reps, seed=11)
    false = held["helps"] + held["hurts"]
    assert false <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / reps)
    naive = simulate_sequential(0.0, 1.0, 8, reps, seed=11, alpha=0.05)
    assert naive["helps"] + naive["hurts"] > 0.07  # three looks at 5% each: too many
    assert held["mean_seeds"] > 12  # most runs went on to 16 seeds


def test_the_sequential_design_stops_when_it_knows():
    reference = [0.19, 0.15, 0.22, 0.18, 0.20, 0.17, 0.21, 0.16]
    found, more = sequential_step([0.02, 0.01, 0.03, 0.00], reference)
    assert found["verdict"] == "hurts" and more is None
    found, more = sequential_step([0.30, 0.05, 0.25, 0.10], reference)
    assert found["verdict"] == "inconclusive" and more == 8
    found, more = sequential_step([0.30, 0.05, 0.25, 0.10] * 4, reference)
    assert more is None  # the last look


def test_the_paired_difference_takes_the_seed_out():
    """Paired by seed on the shared seeds, with a t interval on n - 1 df: by hand on a small
    case, and on the stored grid, where the summary keeps it beside each verdict (GSPO's
    sequence ratio with two iterations against num_iterations=2: -6.5 [-13.6, +0.6])."""
    from helpers.lab import load_grid
    from helpers.stats import paired_difference

    found = paired_difference({1: 3.0, 2: 5.0, 3: 4.0, 9: 0.0}, {1: 1.0, 2: 2.0, 3: 3.0})
    assert found["seeds"] == [1, 2, 3] and found["df"] == 2
    assert found["difference"] == pytest.approx(2.0)
    half = t_quantile(0.975, 2) * 1.0 / math.sqrt(3)  # the differences 2, 3, 1: sd 1
    assert (found["low"], found["high"]) == pytest.approx((2.0 - half, 2.0 + half))
    with pytest.raises(ValueError, match="at least two seeds"):
        paired_difference({1: 0.1}, {1: 0.2, 2: 0.3})

    rows = [r for r in load_grid()["rows"] if r["kernel_path"] == "native"]

    def gains(name):
        return {r["seed"]: r["gain"] for r in rows if r["arm"] == name}

    gspo = paired_difference(gains("importance_sampling_level=sequence+iter2"),
                             gains("num_iterations=2"))
    assert len(gspo["seeds"]) == 4
    assert [round(100 * gspo[k], 1) for k in ("difference", "low", "high")] == [-6.5, -13.6, 0.6]
    stored = load_grid()["summary"]["native"]["importance_sampling_level=sequence+iter2"]
    assert stored["paired"]["difference"] == pytest.approx(gspo["difference"], rel=1e-5)
