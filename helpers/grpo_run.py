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
from functools import partial
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


@dataclass(frozen=True)
class CourseCallback:
    """One of notebook 05's callbacks: the settings it is built with, which also describe it.

    `build_trainer` makes it with `make(tokenizer, trainer, **settings)` (`trainer` is None but
    for an `after_trainer` one), and `check_trainer` compares `str(...)` with a trainer's own, so
    what is described is what is built.
    """

    kind: type
    settings: dict[str, Any]
    make: Callable[..., Any]
    after_trainer: bool = False  # it reads the trainer, so it is built after it and comes last

    def __str__(self) -> str:
        return _described(self.kind.__name__, self.settings)

    def build(self, tokenizer: Any, trainer: Any = None) -> Any:
        return self.make(tokenizer, trainer, **self.settings)


def course_callbacks(
    run: RunFolder | Path, profile: Profile, config: GRPOConfig, *, writer: bool = True,
    heldout: bool = True, adapter: bool = True, samples: bool = True,
) -> list[CourseCallback]:
    """Notebook 05's callbacks, in its order: what `build_trainer` builds and `check_trainer`
    expects of a trainer written on the page, compared without building anything.

    `writer` is False on every process but the first (one writer for the figure and the log);
    `heldout` False where one process cannot generate alone (several processes); `adapter` False
    under ZeRO-3, whose sharded LoRA is gathered once at the end instead; `samples` False where
    no completion table is wanted.
    """
    run, steps = as_run(run), config.max_steps
    wanted = [
        (writer and heldout, CourseCallback(
            HeldOutAccuracy, {"every": heldout_every(steps),
                              "problems": profile.heldout_during_training},
            partial(_held_out, profile=profile, run=run))),
        (writer, CourseCallback(LivePlot, {"every": plot_every(steps), "run": run},
                                lambda _, __, **settings: LivePlot(**settings))),
        (adapter, CourseCallback(AdapterCheckpoint, {"run": run},
                                 lambda tokenizer, _, run: AdapterCheckpoint(run, tokenizer))),
        (writer, CourseCallback(StepTimer, {"every_seconds": STEP_TIMER_SECONDS},
                                lambda _, __, **settings: StepTimer(**settings))),
        (samples, CourseCallback(CompletionSampler, {"every": sample_every(steps), "run": run},
                                 lambda _, trainer, **settings: CompletionSampler(trainer,
                                                                                  **settings),
                                 after_trainer=True)),
    ]
    return [callback for keep, callback in wanted if keep]


def _held_out(tokenizer: Any, _: Any, *, every: int, problems: int, profile: Profile,
              run: RunFolder) -> HeldOutAccuracy:
    """Held-out accuracy on the first `problems` of GSM8K's test split, unseen in training."""
    from helpers.data import load_gsm8k
    from helpers.evaluation import decoding_settings

    rows = load_gsm8k("test", profile, limit=problems)
    return HeldOutAccuracy(tokenizer, list(rows), decoding_settings(profile), run, every=every)


def _described(name: str, settings: dict[str, Any]) -> str:
    """`Name(key=value, ...)`; a float as `:g` writes it (60.0 and 60 read the same)."""
    shown = (f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
             for key, value in settings.items())
    return f"{name}({', '.join(shown)})"


def build_trainer(
    model: Any, tokenizer: Any, config: GRPOConfig, profile: Profile, run: RunFolder | Path, *,
    train_dataset: Any = None, writer: bool = True, heldout: bool = True, adapter: bool = True,
    samples: bool = True, instrument: Instrument | None = None,
    reward_funcs: Sequence[Any] | None = None,
) -> GRPOTrainer:
    """trl's GRPOTrainer for the course's run: its data, rewards and weights, and notebook 05's
    callbacks, built from `course_callbacks` (which says what the flags do).

    `reward_funcs` replaces the course's rewards (notebook 11's reward arms; the config's
    reward_weights must match them)."""
    from trl import GRPOTrainer

    from helpers.data import grpo_train_dataset
    from helpers.rewards import REWARD_FUNCS

    instrument = instrument or Instrument()
    rewards = list(REWARD_FUNCS if reward_funcs is None else reward_funcs)
    if instrument.wrap_first_reward is not None:
        rewards[0] = instrument.wrap_first_reward(rewards[0])
    ours = course_callbacks(run, profile, config, writer=writer, heldout=heldout,
                            adapter=adapter, samples=samples)
    callbacks = [c.build(tokenizer) for c in ours if not c.after_trainer]
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
    for late in (c for c in ours if c.after_trainer):  # CompletionSampler: the newest batch
        trainer.add_callback(late.build(tokenizer, trainer))
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
        return _described(name, {"every": callback.every, "run": callback.run})
    if isinstance(callback, AdapterCheckpoint):
        return _described(name, {"run": callback.run})
    if isinstance(callback, StepTimer):
        return _described(name, {"every_seconds": float(callback.every_seconds)})
    if isinstance(callback, CompletionSampler):
        return _described(name, {"every": callback.every, "run": callback.run})
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

    expected = [str(callback) for callback in course_callbacks(run, profile, trainer.args)]
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
