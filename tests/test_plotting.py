"""Plots, health check and completion table on real log_history lists from smoke runs.

Fixtures (tests/fixtures/, captured from real `GRPOTrainer` smoke runs with helpers.rewards):
- smoke_log_history.json: a whole smoke run (beta=0, notebook 05), summary line included.
- smoke_truncated_log_history.json: a whole run of an earlier, untrained smoke model with 32-token
  completions: almost every completion was cut off and most groups had no reward spread.
- smoke_kl_interrupted.json: a beta=0.04 run stopped by a simulated disconnect (has `kl`,
  no summary line).
Partial logs with keys missing are derived from these in the tests.
"""

import json
import math
import random
from pathlib import Path

import pytest

from helpers.callbacks import CompletionSampler, LivePlot
from helpers.health import health_check, trend
from helpers.logs import reward_names, series, training_entries
from helpers.plotting import (
    completion_html,
    completion_table,
    grid_shape,
    panels_for,
    plot_training,
    save_figure,
)
from helpers.rewards import REWARD_FUNCS

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> list[dict]:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture
def full():
    return load("smoke_log_history.json")


@pytest.fixture
def with_kl():
    return load("smoke_kl_interrupted.json")


def without(log: list[dict], *prefixes: str) -> list[dict]:
    return [{k: v for k, v in e.items() if not k.startswith(prefixes)} for e in log]


def titles(log: list[dict]) -> list[str]:
    return [p.title for p in panels_for(log)]


def test_fixture_is_a_real_run_with_the_course_rewards(full):
    names = reward_names(full)  # the course's rewards when it was captured: a new one may follow
    assert names == [f.__name__ for f in REWARD_FUNCS][:len(names)] and len(names) >= 5
    steps = [e["step"] for e in training_entries(full)]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 10
    assert "train_runtime" in full[-1]  # the summary line is in the file, not in the plots


def test_series_skips_missing_and_non_finite_values():
    log = [{"step": 1, "reward": 0.5}, {"step": 2}, {"step": 3, "reward": float("nan")},
           {"step": 4, "reward": 1.0}, {"train_runtime": 3.0, "step": 4}]
    assert series(log, "reward") == ([1, 4], [0.5, 1.0])
    assert series(log, "kl") == ([], [])


def test_full_run_has_every_panel_but_kl(full):
    assert titles(full) == [
        "Total reward (weighted sum)", "Reward components", "Completion length",
        "Truncated completions", "Groups with zero reward spread", "Entropy of the next token",
        "Gradient norm", "Learning rate",
    ]


def test_the_training_figure_fills_its_grid_and_its_legends_cover_no_line():
    import numpy as np

    run = load("smoke_heldout_log_history.json")  # notebook 05's run, held-out panel included
    fig = plot_training(run)
    assert len(fig.axes) == 9 and grid_shape(9) == (3, 3)  # nine panels, no empty slot
    assert {"Entropy of the next token", "Gradient norm"} <= {ax.get_title() for ax in fig.axes}
    assert all(-n % grid_shape(n)[0] == 0 for n in (6, 8, 9, 10, 12))
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # lays the legends out where the saved PNG has them
    legends = [ax for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 3  # reward, components, length
    for ax in legends:
        box = ax.get_legend().get_window_extent(renderer)
        for line in ax.lines:
            points = ax.transData.transform(np.column_stack(line.get_data()))
            inside = [(x, y) for x, y in points if box.contains(x, y)]
            assert not inside, f"{ax.get_title()}: the legend covers {line.get_label()}"


def test_kl_panel_appears_when_beta_is_positive(with_kl):
    assert "KL to the reference model" in titles(with_kl)


def test_partial_logs_drop_their_missing_panels(full):
    no_rewards = without(full, "rewards/", "reward", "frac_reward_zero_std")
    assert titles(no_rewards) == ["Completion length", "Truncated completions",
                                  "Entropy of the next token", "Gradient norm", "Learning rate"]
    only_lr = [{"step": e["step"], "learning_rate": e["learning_rate"]}
               for e in training_entries(full)]
    assert titles(only_lr) == ["Learning rate"]
    fig = plot_training(no_rewards)
    assert len(fig.axes) == 5


@pytest.mark.parametrize("log", [[], [{"train_runtime": 1.0}]])
def test_empty_log_still_draws_a_figure(log):
    fig = plot_training(log)
    assert len(fig.axes) == 1 and fig.axes[0].texts


def test_saved_figure_is_a_png(full, tmp_path):
    path = save_figure(full, tmp_path / "figures" / "training.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reward_panel_draws_the_spread_band(full):
    fig = plot_training(full)
    reward_ax = fig.axes[0]
    assert reward_ax.collections, "the ± reward_std band is missing"
    _, values = series(full, "reward")
    line = reward_ax.lines[0]
    assert list(line.get_ydata()) == pytest.approx(values)


def test_reward_panel_adds_a_rolling_mean_that_averages_the_last_steps(full):
    from helpers.plotting import ROLLING_STEPS, rolling_mean

    assert rolling_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    _, values = series(full, "reward")
    lines = plot_training(full).axes[0].lines
    if len(values) >= 2 * ROLLING_STEPS:
        assert list(lines[1].get_ydata()) == pytest.approx(rolling_mean(values, ROLLING_STEPS))
    else:
        assert len(lines) == 1


def test_health_check_explains_loss_zero_with_beta_zero(full):
    text = "\n".join(str(f) for f in health_check(full))
    assert "beta=0" in text and "Watch the reward" in text


def test_health_check_flags_the_real_truncated_run():
    warnings = [f.text for f in health_check(load("smoke_truncated_log_history.json")) if not f.ok]
    assert any("cut off at max_completion_length" in w for w in warnings)
    assert any(w.startswith("correctness_reward never fired") for w in warnings)


def test_health_check_flags_truncation_and_zero_spread():
    log = [{"step": s, "completions/clipped_ratio": 1.0, "frac_reward_zero_std": 1.0,
            "reward": 0.0, "reward_std": 0.0, "rewards/correctness_reward/mean": 0.0,
            "loss": 0.0} for s in range(1, 10)]
    warnings = [f.text for f in health_check(log) if not f.ok]
    assert any("cut off at max_completion_length" in w for w in warnings)
    assert any("zero reward spread" in w for w in warnings)
    assert any("did not rise" in w for w in warnings)
    assert any("correctness_reward never fired" in w for w in warnings)


def test_health_check_sees_a_rising_reward_and_nan_gradients():
    log = [{"step": s, "reward": s / 10, "reward_std": 0.2, "grad_norm": 1.0}
           for s in range(1, 10)]
    log[4]["grad_norm"] = float("nan")
    found = health_check(log)
    assert any(f.ok and "rose" in f.text for f in found)
    assert any(not f.ok and "NaN" in f.text for f in found)


def noisy_rising_log(steps: int = 100, seed: int = 0) -> list[dict]:
    """A run whose total and correctness rewards climb slowly under step-to-step noise (SD 0.5)."""
    rng = random.Random(seed)
    log = []
    for step in range(1, steps + 1):
        correct = min(1.0, max(0.0, 0.2 + 0.003 * step + rng.gauss(0, 0.1)))
        log.append({"step": step, "reward": 1.5 + 0.015 * step + rng.gauss(0, 0.5),
                    "rewards/correctness_reward/mean": correct,
                    "rewards/tag_count_reward/mean": 0.9 + rng.gauss(0, 0.05)})
    return log


def shuffled(log: list[dict], seed: int = 1) -> list[dict]:
    """The same per-step values in a random order: any trend is gone, the noise is the same."""
    entries = [dict(e) for e in log]
    rng = random.Random(seed)
    for key in ("reward", "rewards/correctness_reward/mean"):
        values = [e[key] for e in entries]
        rng.shuffle(values)
        for entry, value in zip(entries, values, strict=True):
            entry[key] = value
    return entries


def test_reward_rose_is_a_statement_a_shuffled_log_fails():
    rising = noisy_rising_log()
    assert any(f.ok and f.text.startswith("The reward rose") for f in health_check(rising))
    assert trend(series(rising, "reward")[1]).rose
    for seed in range(1, 6):  # the same values in any shuffled order show no trend
        found = health_check(shuffled(rising, seed))
        assert not any("rose" in f.text and f.ok for f in found), seed
        assert any(not f.ok and "did not rise clearly" in f.text for f in found), seed


def test_the_old_noise_run_no_longer_passes_as_a_rise(full):
    # The stored smoke run of issue 12: reward 0.75 -> 1.05 on noise; the old check said "rose".
    assert not any(f.ok and "reward rose" in f.text for f in health_check(full))


def test_trend_needs_three_steps():
    with pytest.raises(ValueError, match="at least 3"):
        trend([1.0, 2.0])


def test_correctness_flat_while_format_rises_is_a_warning():
    rng = random.Random(2)
    log = [{"step": s, "reward": 1.0 + 0.02 * s,
            "rewards/correctness_reward/mean": 0.05 + rng.gauss(0, 0.02),
            "rewards/tag_count_reward/mean": 0.2 + 0.01 * s} for s in range(1, 40)]
    warnings = [f.text for f in health_check(log) if not f.ok]
    assert any("stayed flat while tag_count_reward rose" in w for w in warnings)


def test_correctness_that_rises_is_reported_with_its_average():
    found = health_check(noisy_rising_log())
    assert any(f.ok and f.text.startswith("correctness_reward averaged") and "rose" in f.text
               for f in found)


def test_health_check_on_an_empty_log_says_so():
    (finding,) = health_check([])
    assert not finding.ok and "No training steps" in finding.text


def test_health_check_runs_on_the_partial_kl_log(with_kl):
    found = health_check(with_kl)
    assert found
    assert not any("loss hovered around 0" in f.text for f in found)  # kl is logged: beta > 0


class FakeTrainer:
    """Only what CompletionSampler reads: trl 0.22's `_logs` layout (see grpo_trainer.py)."""

    reward_func_names = ["correctness_reward", "tag_count_reward"]
    reward_weights = [2.0, 0.5]

    def __init__(self):
        self._logs = {
            "prompt": ["<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nWhat is 2+2?"
                       "<|im_end|>\n<|im_start|>assistant\n"] * 2,
            "completion": ["<answer>4</answer>", "five"],
            "rewards": {"correctness_reward": [1.0, 0.0], "tag_count_reward": [0.5, float("nan")]},
            "advantages": [0.7, -0.7],
        }


class State:
    def __init__(self, step, max_steps=30, log_history=()):
        self.global_step, self.max_steps, self.log_history = step, max_steps, list(log_history)


def test_completion_sampler_keeps_rows_with_weighted_totals(tmp_path):
    sampler = CompletionSampler(FakeTrainer(), tmp_path, every=10, per_step=4)
    for step in range(1, 12):
        sampler.on_log(None, State(step), None, logs={"loss": 0.0})
    assert sorted({r["step"] for r in sampler.rows}) == [1, 10]
    first = sampler.rows[0]
    assert first["question"] == "What is 2+2?"
    assert first["total"] == pytest.approx(2.0 * 1.0 + 0.5 * 0.5)
    assert sampler.rows[1]["total"] == pytest.approx(0.0)  # NaN ("not applicable") is skipped
    table = completion_table(sampler.rows)
    assert list(table.columns[:3]) == ["step", "question", "completion"]
    assert list(table["completion"]) == ["<answer>4</answer>", "five", "<answer>4</answer>", "five"]
    # Rows are on disk, so a resumed run picks them up.
    again = CompletionSampler(FakeTrainer(), tmp_path)
    assert again.rows == json.loads((tmp_path / "completions.json").read_text())


def test_completion_sampler_without_trl_logs_gives_no_rows(tmp_path):
    sampler = CompletionSampler(object(), tmp_path, every=1)
    sampler.on_log(None, State(1), None, logs={})
    assert sampler.rows == [] and completion_table([]).empty


def test_completion_html_shows_whole_completions_with_their_answer_end():
    long = "<reasoning>\n" + "step " * 80 + "\n</reasoning>\n<answer>\n42\n</answer>"
    rows = [{"step": 1, "question": "Q " * 60, "completion": long, "total": 2.5}]
    html = completion_html(rows).data
    assert "&lt;answer&gt;<br>42<br>&lt;/answer&gt;" in html  # the end, escaped, lines kept
    assert "step " * 80 in html and "..." not in html and "…" not in html
    assert "No completions" in completion_html([]).data


def test_live_plot_headless_writes_log_and_figure(full, tmp_path):
    live = LivePlot(tmp_path, every=5)
    state = State(30, 30, full)
    live.on_log(None, state, None)  # no Jupyter kernel here: no display, no error
    live.on_save(None, state, None)
    assert json.loads((tmp_path / "log_history.json").read_text()) == full
    assert live.figure_path.exists()
    assert not math.isnan(json.loads((tmp_path / "log_history.json").read_text())[0]["step"])


def test_runs_side_by_side_draw_one_line_per_run_in_each_panel():
    from helpers.logs import HELDOUT_KEY
    from helpers.plotting import COMPARED, ROLLING_STEPS, plot_runs, rolling_mean

    logs = {"course": load("smoke_heldout_log_history.json"),
            "other": load("smoke_log_history.json")}
    fig = plot_runs(logs)
    assert [ax.get_title().split(",")[0] for ax in fig.axes] == [
        "Held-out accuracy (greedy", "Total reward (weighted sum)", "Entropy of the next token"]
    assert len(COMPARED) == len(fig.axes) and COMPARED[0] == HELDOUT_KEY
    held, reward = fig.axes[0].get_lines(), fig.axes[1].get_lines()
    assert [line.get_label() for line in held] == ["course", "other"]
    assert list(held[0].get_ydata()) == series(logs["course"], HELDOUT_KEY)[1]
    assert len(held[1].get_ydata()) == 0  # the second log has no held-out scores
    smoothed = rolling_mean(series(logs["other"], "reward")[1], ROLLING_STEPS)
    assert list(reward[1].get_ydata()) == pytest.approx(smoothed)
