"""helpers.diagrams: each diagram draws what it claims, from the course's own code, and saves."""

from __future__ import annotations

import pytest
import torch

from helpers import diagrams
from helpers.grpo_scratch import clipped_surrogate, group_advantages
from helpers.run_folder import DRIVE_RUNS


def texts(fig) -> str:
    """Every piece of text drawn in the figure, titles and legends included, in one string."""
    found = [t.get_text() for t in fig.findobj(lambda o: hasattr(o, "get_text"))]
    return "\n".join(found)


def test_the_grpo_loop_shows_every_stage_and_the_real_advantages():
    fig = diagrams.grpo_step_loop()
    drawn = texts(fig)
    for stage in ("prompt", "policy", "4 samples", "rewards", "advantages", "update", "no critic"):
        assert stage in drawn, f"the step loop lost its {stage!r} label"
    expected = group_advantages(torch.tensor(diagrams.EXAMPLE_REWARDS), 4)
    for advantage in expected.tolist():
        assert f"{advantage:+.2f}" in drawn


def test_the_grpo_loop_refuses_a_reward_per_group_instead_of_per_completion():
    with pytest.raises(ValueError, match="one reward per completion"):
        diagrams.grpo_step_loop(("a", "b", "c"), (1.0, 0.0))


def test_lora_counts_the_trained_share_of_the_weight():
    drawn = texts(diagrams.lora_on_4bit(hidden=1000, rank=10))
    assert "1000 × 1000" in drawn and "1000 × 10" in drawn and "10 × 1000" in drawn
    assert "1.00M weights, no gradient" in drawn
    assert "0.02M weights" in drawn and "(2.0% of W)" in drawn  # 2 * 1000 * 10 / 1000**2
    assert "4-bit" in drawn and "frozen" in drawn
    with pytest.raises(ValueError, match="rank"):
        diagrams.lora_on_4bit(hidden=8, rank=8)


def test_the_handoff_names_three_runtimes_and_the_drive_folder_the_code_uses():
    drawn = texts(diagrams.drive_handoff())
    assert drawn.count("Colab runtime (its own)") == 3
    assert DRIVE_RUNS.as_posix() in drawn and "adapter/" in drawn
    for role in diagrams.NOTEBOOK_ROLES:
        assert role in drawn
    with pytest.raises(ValueError, match="in that order"):
        diagrams.drive_handoff(("only one",))


@pytest.mark.parametrize("advantage,ratios,expected", [
    (+1.0, [0.5, 1.0, 1.1, 1.5], [0.5, 1.0, 1.1, 1.2]),  # capped at 1 + eps_high: no more push
    (-1.0, [0.5, 0.9, 1.0, 1.5], [-0.8, -0.9, -1.0, -1.5]),  # floored at 1 - eps: pessimistic
])
def test_the_clipped_objective_is_clipped_surrogate_at_known_ratios(advantage, ratios, expected):
    values = diagrams.clipped_objective_values(ratios, advantage, 0.2, 0.2)
    assert values == pytest.approx(expected)
    logps = torch.tensor([ratios]).log()
    loss = clipped_surrogate(logps, torch.zeros_like(logps), torch.tensor([advantage]), 0.2, 0.2)
    assert values == pytest.approx((-loss[0]).tolist())


def objective_curve(ax) -> tuple[list[float], list[float]]:
    line = next(line for line in ax.get_lines() if "objective" in line.get_label())
    return list(line.get_xdata()), list(line.get_ydata())


def test_the_clipped_objective_plots_those_values_for_both_signs():
    fig = diagrams.clipped_objective(epsilon_low=0.2, epsilon_high=0.28)
    left, right = fig.axes
    for ax, advantage in ((left, 1.0), (right, -1.0)):
        xs, ys = objective_curve(ax)
        assert list(ys) == pytest.approx(
            diagrams.clipped_objective_values(list(xs), advantage, 0.2, 0.28))
        assert "clip range [0.8, 1.28]" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert max(objective_curve(left)[1]) == pytest.approx(1.28)  # capped at 1 + eps_high
    assert max(objective_curve(right)[1]) == pytest.approx(-0.8)  # floored ratio, times A = -1


def test_write_all_saves_every_diagram_as_a_stable_png(tmp_path):
    paths = diagrams.write_all(tmp_path)
    assert [p.name for p in paths] == [f"{name}.png" for name in diagrams.DIAGRAMS]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    again = diagrams.write_all(tmp_path / "again")
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in again]


def test_the_committed_pngs_are_the_current_diagrams(tmp_path):
    fresh = diagrams.write_all(tmp_path)
    for path in fresh:
        committed = diagrams.FIGURES_DIR / path.name
        assert committed.exists(), f"{committed.name} is missing: run `python -m helpers.diagrams`"
        assert committed.read_bytes() == path.read_bytes(), (
            f"docs/figures/{path.name} is not what helpers/diagrams.py draws now: "
            "run `python -m helpers.diagrams` and commit the PNGs")
