"""The training notebook's held-out accuracy callback: it measures, and it changes nothing."""

from unsloth import FastLanguageModel  # noqa: F401  (first: unsloth patches trl on import)

import pytest
import torch

from helpers.callbacks import HeldOutAccuracy
from helpers.health import health_check
from helpers.logs import HELDOUT_KEY
from helpers.plotting import panels_for

STEPS = 3


def train(tmp_path, with_callback: bool):
    from trl import GRPOTrainer

    from helpers.data import grpo_train_dataset, load_gsm8k
    from helpers.evaluation import decoding_settings
    from helpers.grpo_config import make_grpo_config
    from helpers.hardware import detect_hardware
    from helpers.loading import load_kwargs, lora_kwargs
    from helpers.profiles import PROFILES
    from helpers.rewards import REWARD_FUNCS

    profile, hw = PROFILES["smoke"], detect_hardware()
    model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(profile))
    model = FastLanguageModel.get_peft_model(model, **lora_kwargs(profile))
    config = make_grpo_config(profile, hw, tmp_path / "checkpoints", max_steps=STEPS,
                              save_strategy="no", per_device_train_batch_size=16)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=REWARD_FUNCS,
                          args=config, train_dataset=grpo_train_dataset(profile, tokenizer))
    if with_callback:
        rows = list(load_gsm8k("test", profile, limit=16))
        trainer.add_callback(HeldOutAccuracy(tokenizer, rows, decoding_settings(profile),
                                             tmp_path, every=2))
    torch.manual_seed(0)
    trainer.train()
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    return lora, trainer.state.log_history


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return (train(tmp_path_factory.mktemp("plain"), False),
            train(tmp_path_factory.mktemp("measured"), True))


def test_measuring_leaves_training_exactly_as_it_was(runs):
    (plain, _), (measured, _) = runs
    assert plain.keys() == measured.keys()
    assert all(torch.equal(plain[name], measured[name]) for name in plain)


def test_it_measures_before_the_first_step_every_n_steps_and_at_the_end(runs):
    _, log = runs[1]
    points = [(entry["step"], entry["heldout/n"]) for entry in log if HELDOUT_KEY in entry]
    assert points == [(0, 16), (2, 16), (3, 16)]
    assert all(0.0 <= entry[HELDOUT_KEY] <= 1.0 for entry in log if HELDOUT_KEY in entry)


def test_the_figure_and_the_health_check_show_it(runs):
    _, log = runs[1]
    assert any(panel.keys == (HELDOUT_KEY,) for panel in panels_for(log))
    lines = [str(f) for f in health_check(log) if "Held-out greedy accuracy" in f.text]
    assert len(lines) == 1 and "from step 0 to step 3" in lines[0]
    assert "problems, from step 0 to step 3" in lines[0] and "95% intervals" in lines[0]


def test_the_progress_line_shows_reward_correctness_and_the_last_held_out_score():
    from helpers.callbacks import progress_line

    log = [{"step": 0, HELDOUT_KEY: 0.385}, {"step": 1, "reward": 2.5, "loss": 0.0,
           "rewards/correctness_reward/mean": 0.375}]
    assert progress_line(log, 1, 60, 1.25) == (
        "step 1/60: 1.2 s/step, about 74 s left | reward 2.50, correct 0.38, held-out 38.5% "
        "(step 0)")
    assert progress_line([{"step": 3, "loss": 0.1}], 3, 4, 2.0) == (
        "step 3/4: 2.0 s/step, about 2 s left")
