"""The GRPO run assembled once: trl's trainer from a profile, a run folder and the callbacks.

Notebook 05 writes this run on the page, its `GRPOTrainer(...)` and callbacks in view, and
`check_trainer` keeps the page equal to `build_trainer`, which everything else calls:
scripts/train_grpo.py, the smoke promise's runs (tools/smoke_runs.py) and `make gpu-check`.

trl is imported inside the functions: `import unsloth` must come first, so that on a GPU
`trl.GRPOTrainer` is unsloth's patched one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from helpers.callbacks import (
    AdapterCheckpoint,
    CompletionSampler,
    HeldOutAccuracy,
    LivePlot,
    StepTimer,
)
from helpers.grpo_config import heldout_every
from helpers.profiles import TrainingConfigError
from helpers.run_folder import RunFolder, as_run

if TYPE_CHECKING:
    from trl import GRPOConfig, GRPOTrainer

    from helpers.profiles import Profile

STEP_TIMER_SECONDS = 60.0  # outside a notebook, a progress line at most this often


def plot_every(max_steps: int) -> int:
    """Redraw the live figure about ten times a run."""
    return max(1, max_steps // 10)


def sample_every(max_steps: int) -> int:
    """Keep sampled completions about three times a run (and at the first and last step)."""
    return max(1, max_steps // 3)


@dataclass(frozen=True)
class Instrument:
    """What a test harness adds to a run (tools/faults.py): never part of a learner's run."""

    wrap_first_reward: Callable[[Callable], Callable] | None = None
    callbacks: Sequence[Any] = field(default_factory=tuple)
    patch_trainer: Callable[[Any], None] | None = None


def course_callbacks(
    run: RunFolder | Path, profile: Profile, config: GRPOConfig, *, writer: bool = True,
    heldout: bool = True, adapter: bool = True, samples: bool = True,
) -> list[str]:
    """Notebook 05's callbacks, in its order, each as `Name(setting=value, ...)`: what
    `build_trainer` builds (tests/test_grpo_run.py holds the two equal) and `check_trainer`
    expects of a trainer written on the page, compared without building anything.

    `writer` is False on every process but the first (one writer for the figure and the log);
    `heldout` False where one process cannot generate alone (several processes); `adapter` False
    under ZeRO-3, whose sharded LoRA is gathered once at the end instead; `samples` False where
    no completion table is wanted.
    """
    run, steps = as_run(run), config.max_steps
    wanted = [
        (writer and heldout, "HeldOutAccuracy",
         {"every": heldout_every(steps), "problems": profile.heldout_during_training}),
        (writer, "LivePlot", {"every": plot_every(steps), "run": run.root}),
        (adapter, "AdapterCheckpoint", {"run": run.root}),
        (writer, "StepTimer", {"every_seconds": f"{STEP_TIMER_SECONDS:g}"}),
        (samples, "CompletionSampler", {"every": sample_every(steps), "path": run.samples}),
    ]
    return [_described(name, settings) for keep, name, settings in wanted if keep]


def _described(name: str, settings: dict[str, Any]) -> str:
    return f"{name}({', '.join(f'{key}={value}' for key, value in settings.items())})"


def build_trainer(
    model: Any, tokenizer: Any, config: GRPOConfig, profile: Profile, run: RunFolder | Path, *,
    train_dataset: Any = None, writer: bool = True, heldout: bool = True, adapter: bool = True,
    samples: bool = True, instrument: Instrument | None = None,
    reward_funcs: Sequence[Any] | None = None,
) -> GRPOTrainer:
    """trl's GRPOTrainer for the course's run: its data, rewards and weights, and notebook 05's
    callbacks (`course_callbacks` says which, and what the flags do).

    `reward_funcs` replaces the course's rewards (notebook 11's reward arms; the config's
    reward_weights must match them)."""
    from trl import GRPOTrainer

    from helpers.data import grpo_train_dataset, load_gsm8k
    from helpers.evaluation import decoding_settings
    from helpers.rewards import REWARD_FUNCS

    run, steps = as_run(run), config.max_steps
    instrument = instrument or Instrument()
    rewards = list(REWARD_FUNCS if reward_funcs is None else reward_funcs)
    if instrument.wrap_first_reward is not None:
        rewards[0] = instrument.wrap_first_reward(rewards[0])
    callbacks: list[Any] = []
    if writer and heldout:
        rows = load_gsm8k("test", profile, limit=profile.heldout_during_training)  # unseen
        callbacks.append(HeldOutAccuracy(tokenizer, list(rows), decoding_settings(profile), run,
                                         every=heldout_every(steps)))
    if writer:
        callbacks.append(LivePlot(run, every=plot_every(steps)))
    if adapter:
        callbacks.append(AdapterCheckpoint(run, tokenizer))
    if writer:
        callbacks.append(StepTimer(every_seconds=STEP_TIMER_SECONDS))
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=rewards,
        args=config,
        train_dataset=grpo_train_dataset(profile, tokenizer) if train_dataset is None
        else train_dataset,
        callbacks=[*callbacks, *instrument.callbacks],
    )
    if (progress := notebook_progress_callback()) is not None:
        trainer.remove_callback(progress)  # a table of the loss alone
    if samples:  # it reads the trainer's newest generation batch, so it comes last
        trainer.add_callback(CompletionSampler(trainer, run, every=sample_every(steps)))
    if instrument.patch_trainer is not None:
        instrument.patch_trainer(trainer)
    return trainer


def notebook_progress_callback() -> type | None:
    """transformers' notebook progress table, or None where IPython is missing: its module imports
    IPython, and transformers adds the table only inside a notebook, which needs IPython anyway."""
    try:
        from transformers.utils.notebook import NotebookProgressCallback
    except ImportError:
        return None
    return NotebookProgressCallback


def describe_callback(callback: Any) -> str | None:
    """A course callback as `course_callbacks` writes it; None for trl's own."""
    name = type(callback).__name__
    if isinstance(callback, HeldOutAccuracy):
        return _described(name, {"every": callback.every, "problems": len(callback.golds)})
    if isinstance(callback, LivePlot):
        return _described(name, {"every": callback.every, "run": callback.run.root})
    if isinstance(callback, AdapterCheckpoint):
        return _described(name, {"run": callback.run.root})
    if isinstance(callback, StepTimer):
        return _described(name, {"every_seconds": f"{callback.every_seconds:g}"})
    if isinstance(callback, CompletionSampler):
        return _described(name, {"every": callback.every, "path": callback.path})
    return None


def trainer_callbacks(trainer: Any) -> list[str]:
    """The course's callbacks on a trainer, described, in order."""
    found = (describe_callback(c) for c in trainer.callback_handler.callbacks)
    return [text for text in found if text is not None]


def check_trainer(trainer: Any, run: RunFolder | Path, profile: Profile) -> str:
    """One line naming any change of `trainer`'s rewards from the course's; stop unless its
    callbacks are the ones build_trainer assembles (held-out scoring on the profile's problems).

    The config is held equal to the script's by tests/test_train_script.py, and a learner's
    edits to it are said by compare_with_course; a reward change is said here, the same way.
    """
    from helpers.rewards import REWARD_FUNCS

    expected = course_callbacks(run, profile, trainer.args)
    if trainer_callbacks(trainer) != expected:  # trl itself holds reward_weights to the rewards
        raise TrainingConfigError(
            f"This trainer is not the run helpers.grpo_run.build_trainer assembles for the "
            f"{profile.name} profile: callbacks {trainer_callbacks(trainer)} instead of "
            f"{expected}. Set them back, or change course_callbacks and build_trainer in "
            "helpers/grpo_run.py for every caller."
        )
    ours = [f.__name__ for f in trainer.reward_funcs]
    course = [f.__name__ for f in REWARD_FUNCS]
    if ours == course:
        return "check_trainer: the course's rewards and callbacks, as scripts/train_grpo.py has."
    return (f"check_trainer: the course's callbacks; your rewards {ours} (course: {course}). "
            "This run trains with yours; scripts/train_grpo.py keeps the course's.")
