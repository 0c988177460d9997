"""The GRPO run assembled once: build_trainer gives notebook 05's trainer, check_trainer holds the
page to it, and a test harness plugs in through one hook."""

from __future__ import annotations

import unsloth  # noqa: F401  (first: it patches trl)
from unsloth import FastLanguageModel

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.callbacks import HeldOutAccuracy, StepTimer
from helpers.grpo_config import make_grpo_config
from helpers.grpo_run import (
    Instrument,
    build_trainer,
    check_trainer,
    course_callbacks,
    describe_callback,
    trainer_callbacks,
)
from helpers.hardware import detect_hardware
from helpers.loading import load_kwargs, lora_kwargs
from helpers.profiles import PROFILES, TrainingConfigError
from helpers.run_folder import RunFolder

SMOKE = PROFILES["smoke"]


@pytest.fixture(scope="module")
def loaded():
    model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(SMOKE))
    return FastLanguageModel.get_peft_model(model, **lora_kwargs(SMOKE)), tokenizer


def engine_trainer(loaded, folder: Path, **kwargs):
    model, tokenizer = loaded
    run = RunFolder(folder)
    config = make_grpo_config(SMOKE, detect_hardware(), run.checkpoints, max_steps=8)
    return build_trainer(model, tokenizer, config, SMOKE, run, **kwargs), run


def expected(run: RunFolder, config, **flags) -> list[str]:
    """The course's callbacks for this run, as check_trainer expects them."""
    return [str(c) for c in course_callbacks(run, SMOKE, config, **flags)]


def test_each_callback_is_built_from_the_settings_that_describe_it(tmp_path: Path):
    """No model: with every setting changed, what is built still reads as its description."""
    config = SimpleNamespace(max_steps=30)
    for callback in course_callbacks(tmp_path / "a", SMOKE, config, heldout=False):
        moved = replace(callback, settings={
            key: tmp_path / "b" if key == "run" else value * 2
            for key, value in callback.settings.items()})
        assert describe_callback(moved.build(None, trainer=object())) == str(moved)


def test_the_engine_builds_notebook_05s_callbacks_in_its_order(loaded, tmp_path: Path):
    trainer, run = engine_trainer(loaded, tmp_path)
    assert [text.split("(")[0] for text in trainer_callbacks(trainer)] == [
        "HeldOutAccuracy", "LivePlot", "AdapterCheckpoint", "StepTimer", "CompletionSampler"]
    held_out = next(c for c in trainer.callback_handler.callbacks
                    if isinstance(c, HeldOutAccuracy))
    assert held_out.every == 2 and len(held_out.golds) == SMOKE.heldout_during_training
    assert held_out.adapter_dir == run.heldout_adapter
    assert trainer_callbacks(trainer) == expected(run, trainer.args)
    check_trainer(trainer, run, SMOKE)  # the engine's own trainer passes its check


def test_the_check_compares_without_building_or_loading_anything(loaded, tmp_path, monkeypatch):
    import helpers.callbacks
    import helpers.data

    trainer, run = engine_trainer(loaded, tmp_path)

    def refuse(*args, **kwargs):
        raise AssertionError("check_trainer built a callback or loaded held-out problems")

    monkeypatch.setattr(helpers.data, "load_gsm8k", refuse)
    for name in ("HeldOutAccuracy", "LivePlot", "AdapterCheckpoint", "StepTimer"):
        monkeypatch.setattr(getattr(helpers.callbacks, name), "__init__", refuse)
    check_trainer(trainer, run, SMOKE)


@pytest.mark.parametrize(("flags", "names"), [
    ({"writer": False}, ["AdapterCheckpoint", "CompletionSampler"]),  # another process of several
    ({"heldout": False}, ["LivePlot", "AdapterCheckpoint", "StepTimer", "CompletionSampler"]),
    ({"adapter": False, "samples": False}, ["HeldOutAccuracy", "LivePlot", "StepTimer"]),
    ({"writer": False, "adapter": False, "samples": False}, []),  # notebook 11's runs
])
def test_the_flags_pick_the_same_callbacks_to_build_and_to_expect(loaded, tmp_path, flags, names):
    trainer, run = engine_trainer(loaded, tmp_path, **flags)
    built = trainer_callbacks(trainer)
    assert [text.split("(")[0] for text in built] == names
    assert built == expected(run, trainer.args, **flags)


def test_the_courses_own_trainer_is_named_as_the_course(loaded, tmp_path: Path):
    trainer, run = engine_trainer(loaded, tmp_path)
    assert check_trainer(trainer, run, SMOKE) == (
        "check_trainer: the course's rewards and callbacks, as scripts/train_grpo.py has.")


def test_a_changed_reward_is_named_and_trains(loaded, tmp_path: Path):
    """Notebook 05's rewards can change where it trains: check_trainer names the change the way
    compare_with_course names a config edit, and two steps train with the new reward."""
    from helpers.rewards import correctness_reward, strict_format_reward

    def brevity_reward(completions, **kwargs):
        return [-len(str(c)) / 1000 for c in completions]

    model, tokenizer = loaded
    run = RunFolder(tmp_path)
    config = make_grpo_config(SMOKE, detect_hardware(), run.checkpoints, max_steps=2,
                              reward_weights=[2.0, 0.5, 0.1], save_strategy="no")
    rewards = [correctness_reward, strict_format_reward, brevity_reward]
    trainer = build_trainer(model, tokenizer, config, SMOKE, run, reward_funcs=rewards)
    line = check_trainer(trainer, run, SMOKE)
    assert "your rewards ['correctness_reward', 'strict_format_reward', 'brevity_reward']" in line
    assert "'numeric_reward'" in line.split("(course:")[1]
    trainer.remove_callback(HeldOutAccuracy)  # scored elsewhere; here only the reward matters
    trainer.train()
    logged = [e for e in trainer.state.log_history if "rewards/brevity_reward/mean" in e]
    assert [e["step"] for e in logged] == [1, 2]
    assert all(e["rewards/brevity_reward/mean"] < 0 for e in logged)


def test_a_trainer_without_held_out_scoring_is_refused_by_name(loaded, tmp_path: Path):
    trainer, run = engine_trainer(loaded, tmp_path)
    trainer.remove_callback(HeldOutAccuracy)
    with pytest.raises(TrainingConfigError, match=r"not the run .*build_trainer.*HeldOutAccuracy"):
        check_trainer(trainer, run, SMOKE)


def test_other_settings_of_a_callback_are_refused_too(loaded, tmp_path: Path):
    trainer, run = engine_trainer(loaded, tmp_path)
    trainer.remove_callback(StepTimer)
    trainer.add_callback(StepTimer(every_seconds=5))
    with pytest.raises(TrainingConfigError, match="StepTimer"):
        check_trainer(trainer, run, SMOKE)


def test_a_harness_plugs_in_through_one_hook(loaded, tmp_path: Path):
    seen: list[str] = []

    def wrap(func):
        def wrapper(completions, **kwargs):
            seen.append(func.__name__)
            return func(completions, **kwargs)

        wrapper.__name__ = func.__name__
        return wrapper

    marker = StepTimer(every_seconds=999)
    harness = Instrument(wrap_first_reward=wrap, callbacks=(marker,),
                         patch_trainer=lambda trainer: seen.append("patched"))
    trainer, _ = engine_trainer(loaded, tmp_path, instrument=harness)
    assert marker in trainer.callback_handler.callbacks and seen == ["patched"]
    trainer.reward_funcs[0](["<answer>1</answer>"], answer=["#### 1"])
    assert seen == ["patched", "correctness_reward"]


@pytest.mark.parametrize(("max_steps", "scored"), [
    (60, [15, 30, 45, 60]),  # the smoke profile: every quarter
    (150, [37, 74, 111, 150]),  # t4: not 148 and then 150 again
    (3, [1, 2, 3]),
])
def test_held_out_scores_are_spread_over_the_run(max_steps: int, scored: list[int]):
    from helpers.grpo_config import heldout_every

    scorer = HeldOutAccuracy.__new__(HeldOutAccuracy)  # the schedule only: no model, no data
    scorer.every = heldout_every(max_steps)
    assert [s for s in range(1, max_steps + 1) if scorer.scores_at(s, max_steps)] == scored


def test_the_trainer_builds_without_ipython(loaded, tmp_path: Path, monkeypatch):
    """transformers.utils.notebook imports IPython, which a bare GPU install (locks/t4.txt without
    Jupyter, an offline cluster node) lacks: build_trainer must not need it there."""
    import sys

    monkeypatch.setitem(sys.modules, "transformers.utils.notebook", None)  # ImportError
    trainer, run = engine_trainer(loaded, tmp_path)
    assert trainer_callbacks(trainer) == expected(run, trainer.args)


def test_every_trainer_a_notebook_trains_directly_aborts_vllms_leftovers_first():
    """A stopped cell can leave requests in vLLM's engine (helpers.loading.abort_unfinished);
    train_or_resume aborts them, so a cell that calls `<x>trainer.train()` itself (notebook 05's
    Solution 2) must abort them before it, or trl's next rollout returns too few completions."""
    import json
    import re

    from helpers.paths import ROOT

    direct = re.compile(r"^(\s*)(\w*trainer)\.train\(", re.M)
    found = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            for match in direct.finditer(source) if cell["cell_type"] == "code" else ():
                before = source[: match.start()]
                found.append((path.name, match[2], "abort_unfinished(" in before))
    assert ("05_grpo_training.ipynb", "kl_trainer", True) in found
    assert [f for f in found if not f[2]] == []
