"""The course's trainer callbacks: a long Colab run that is safe to lose and easy to watch.

- `AdapterCheckpoint` saves the LoRA adapter into the run folder at every checkpoint, so notebooks
  06-07 can use a run that a disconnect cut short.
- `StepTimer` measures seconds per step and shows the time left with the step's reward: trl 0.22.2
  logs no step time.
- `HeldOutAccuracy` scores greedy accuracy on held-out problems during training.
- `LivePlot` redraws the training figure and saves it, with the log, into the run folder.
- `CompletionSampler` keeps a few sampled completions with their rewards and advantages.

`helpers.grpo_run.build_trainer` builds the set notebook 05 and the script use.
"""

from __future__ import annotations

import io
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from helpers.logs import HELDOUT_KEY, KEY_REWARD, REWARD_PREFIX, LogHistory
from helpers.plotting import plot_training, save_figure
from helpers.resume import save_adapter, saved_adapter_step
from helpers.run_folder import RunFolder, as_run

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class AdapterCheckpoint(TrainerCallback):
    """On every checkpoint (and at the end), write the run's adapter/ with the step it holds.

    on_save runs after the trainer has written the whole checkpoint; save_adapter swaps the new
    adapter in, so 06 and 07 never read a half-written one. After a resume it also brings the
    adapter up to the checkpoint just loaded, in case a kill stopped the last swap.
    """

    def __init__(self, run: RunFolder | Path, tokenizer: Any) -> None:
        self.run = as_run(run)
        self.tokenizer = tokenizer

    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any):
        if state.is_world_process_zero and model is not None:
            save_adapter(model, self.tokenizer, self.run, state.global_step, state.max_steps)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any):
        resumed = state.global_step > 0
        if resumed and state.is_world_process_zero and model is not None and (
            saved_adapter_step(self.run) != state.global_step
        ):
            save_adapter(model, self.tokenizer, self.run, state.global_step, state.max_steps)


class StepTimer(TrainerCallback):
    """Seconds per optimizer step (median of the last `window`), the time left, and how it goes.

    Its line gives the step's reward and correctness (and held-out accuracy when measured):
    in a notebook one line, redrawn after every step; elsewhere printed at the first step, then
    every `every_seconds`, and at the last. Each logged entry in log_history also gets
    `time/step_seconds` (trl 0.22.2 logs no step time).
    """

    def __init__(self, every_seconds: float = 60.0, window: int = 10) -> None:
        self.every_seconds = every_seconds
        self.window = window
        self.durations: list[float] = []
        self._started: float | None = None
        self._printed = 0.0
        self._line: Any = None  # the notebook display handle

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._started is not None:
            self.durations.append(time.perf_counter() - self._started)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any):
        if not self.durations or not state.log_history or "train_runtime" in (logs or {}):
            return
        state.log_history[-1]["time/step_seconds"] = round(self.durations[-1], 3)
        line = progress_line(state.log_history, state.global_step, state.max_steps,
                             self.seconds_per_step)
        display = notebook_display()
        if display is not None:
            if self._line is None:
                self._line = display({"text/plain": line}, raw=True, display_id=True)
            else:
                self._line.update({"text/plain": line}, raw=True)
            return
        now, last = time.perf_counter(), state.global_step >= state.max_steps
        if len(self.durations) == 1 or last or now - self._printed >= self.every_seconds:
            self._printed = now
            print(line, flush=True)

    @property
    def seconds_per_step(self) -> float:
        """The median of the last `window` steps: robust to one slow step (a checkpoint save)."""
        return statistics.median(self.durations[-self.window :]) if self.durations else 0.0


def progress_line(log_history: list[dict], step: int, max_steps: int, seconds: float) -> str:
    """'step 12/60: 1.3 s/step, about 1 min left | reward 2.61, correct 0.41, held-out 45.5%'."""
    latest = log_history[-1]
    parts = [f"{name} {latest[key]:.2f}" for name, key in (
        ("reward", "reward"), ("correct", f"{REWARD_PREFIX}{KEY_REWARD}/mean")) if key in latest]
    heldout = [e for e in log_history if HELDOUT_KEY in e]
    if heldout:
        parts.append(f"held-out {heldout[-1][HELDOUT_KEY]:.1%} (step {heldout[-1]['step']})")
    eta = format_eta(step, max_steps, seconds)
    return f"{eta} | {', '.join(parts)}" if parts else eta


class HeldOutAccuracy(TrainerCallback):
    """Greedy strict accuracy on held-out problems, before the first step and every `every` steps.

    Each measurement goes into `state.log_history` as `heldout/strict` (helpers.plotting draws it,
    log_history.json keeps it). The random state is put back afterwards, so a run trains exactly
    as it would without this callback. On a GPU with vLLM the adapter is saved and served to vLLM,
    as the evaluation notebook does; elsewhere `model.generate` runs with the adapter on.
    """

    def __init__(self, tokenizer: Any, rows: list[dict[str, str]], settings: Any,
                 run: RunFolder | Path, every: int,
                 messages: Callable[[str], list[dict[str, str]]] | None = None) -> None:
        from helpers.data import build_prompts, extract_gold_answer, make_prompt

        self.tokenizer, self.settings, self.every = tokenizer, settings, max(1, every)
        self.rows = rows
        # Scored on the prompts the run trains on (a lab arm may change them).
        self.prompts = build_prompts(tokenizer, [row["question"] for row in rows],
                                     messages or make_prompt)
        self.golds = [extract_gold_answer(row["answer"]) for row in rows]
        self.adapter_dir = as_run(run).heldout_adapter

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
        if not any(HELDOUT_KEY in entry for entry in state.log_history):  # not on a resume
            self.measure(model, state)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
        if self.scores_at(state.global_step, state.max_steps):
            self.measure(model, state)

    def scores_at(self, step: int, max_steps: int) -> bool:
        """Every `every` steps and at the last; a periodic score less than half a period before
        the last is left out, so no two scores come a few steps apart (148 and 150 of 150)."""
        if step >= max_steps:
            return True
        return step % self.every == 0 and max_steps - step >= self.every / 2

    def measure(self, model: Any, state: Any) -> float:
        """Score the model now; append {step, heldout/strict, heldout/n} to the log."""
        import torch

        from helpers.evaluation import generate_side, score

        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        training = model.training
        model.eval()
        try:
            if getattr(model, "vllm_engine", None) is not None:
                # vLLM reads the adapter from disk; unsloth gives each load a new LoRA id, so the
                # same folder serves every measurement (unsloth_zoo vllm_utils.load_lora).
                model.save_pretrained(str(self.adapter_dir))
            outputs = generate_side(model, self.tokenizer, self.prompts, self.settings, "trained",
                                    self.adapter_dir, progress=False)  # the progress line says it
        finally:
            model.train(training)
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state_all(cuda_rng)
        accuracy = score(outputs, self.golds)["strict"]["accuracy"]
        state.log_history.append({"step": state.global_step, HELDOUT_KEY: accuracy,
                                  "heldout/n": len(self.golds)})
        return accuracy


def format_eta(step: int, max_steps: int, seconds_per_step: float) -> str:
    """'step 12/150: 14.2 s/step, about 33 min left' (the ETA a step timer prints)."""
    left = max(0, max_steps - step) * seconds_per_step
    eta = f"{left / 60:.0f} min" if left >= 90 else f"{left:.0f} s"
    return f"step {step}/{max_steps}: {seconds_per_step:.1f} s/step, about {eta} left"


def notebook_display() -> Callable[..., Any] | None:
    """IPython's `display` inside a Jupyter kernel; None in a script or a test."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return None
    shell = get_ipython()
    return display if shell is not None and hasattr(shell, "kernel") else None


class LivePlot(TrainerCallback):
    """Redraws the training figure every `every` logged steps; saves figure and log on save/end.

    In Jupyter it updates one display in place; headless it only writes files.
    """

    def __init__(self, run: RunFolder | Path, every: int = 1) -> None:
        self.run = as_run(run)
        self.every = max(1, every)
        self.figure_path = self.run.figure
        self._fig: Figure | None = None
        self._handle: Any = None

    @property
    def displayed(self) -> bool:
        """Whether the figure was drawn in this notebook (not headless, not if nothing trained)."""
        return self._handle is not None

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if state.global_step % self.every == 0 or state.global_step >= state.max_steps:
            self.redraw(state.log_history)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.persist(state.log_history)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.redraw(state.log_history)
        self.persist(state.log_history)

    def redraw(self, log_history: LogHistory) -> None:
        """Update the figure in the notebook (one display, replaced in place); no-op headless."""
        display = notebook_display()
        if display is None:
            return
        from IPython.display import Image

        self._fig = plot_training(log_history, self._fig)
        buffer = io.BytesIO()
        self._fig.savefig(buffer, format="png", dpi=70)
        image = Image(data=buffer.getvalue(), format="png")
        if self._handle is None:
            self._handle = display(image, display_id=True)
        else:
            self._handle.update(image)

    def persist(self, log_history: LogHistory) -> None:
        """Write log_history.json and the figure into the run folder."""
        from helpers.resume import save_log_history

        save_log_history(log_history, self.run)
        save_figure(log_history, self.figure_path)


class CompletionSampler(TrainerCallback):
    """Keeps a few sample completions with their rewards at every `every`-th logged step.

    trl 0.22's GRPOTrainer keeps the last generation batch in `trainer._logs` (prompt,
    completion, per-function rewards, advantages); this copies a slice of it after each log.
    Rows are kept on this object, so there is no global state, and written to
    the run folder (`RunFolder.samples`) so they survive a resume.
    """

    def __init__(self, trainer: Any, run: RunFolder | Path, every: int = 10,
                 per_step: int = 4) -> None:
        self.trainer = trainer
        self.run = as_run(run)
        self.path = self.run.samples
        self.every = max(1, every)
        self.per_step = per_step
        self.rows: list[dict[str, Any]] = (
            json.loads(self.path.read_text()) if self.path.exists() else []
        )

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        step = state.global_step
        if step == 0 or "train_runtime" in (logs or {}):
            return
        if step % self.every and step != 1 and step < state.max_steps:
            return
        self.rows = [r for r in self.rows if r["step"] < step] + self.capture(step)
        from helpers.storage import write_json_atomic  # a kill mid-write must not break the resume

        write_json_atomic(self.path, self.rows)

    def capture(self, step: int) -> list[dict[str, Any]]:
        """Rows for the newest generation batch: one group's completions and rewards."""
        logs = getattr(self.trainer, "_logs", None)
        if not logs or not logs.get("completion"):
            return []
        names = list(getattr(self.trainer, "reward_func_names", logs["rewards"].keys()))
        weights = getattr(self.trainer, "reward_weights", None)
        weights = [float(w) for w in weights] if weights is not None else [1.0] * len(names)
        prompts, completions = list(logs["prompt"]), list(logs["completion"])
        rewards = {name: list(logs["rewards"][name]) for name in names}
        advantages = list(logs["advantages"])
        rows = []
        for i in range(min(self.per_step, len(completions))):
            per_func = {name: rewards[name][i] for name in names}
            pairs = zip(weights, per_func.values(), strict=True)
            total = sum(w * v for w, v in pairs if math.isfinite(v))
            rows.append({
                "step": step,
                "question": _last_user_turn(prompts[i]),
                "completion": completions[i],
                **per_func,
                "total": total,
                "advantage": advantages[i] if i < len(advantages) else float("nan"),
            })
        return rows


def _last_user_turn(prompt: Any) -> str:
    """The question from a chat prompt (text or messages), without the system prompt."""
    if isinstance(prompt, list):
        users = [m["content"] for m in prompt if m.get("role") == "user"]
        return users[-1] if users else str(prompt)
    text = str(prompt)
    for marker in ("<|im_start|>user\n", "<|start_header_id|>user<|end_header_id|>\n\n"):
        if marker in text:
            text = text.rsplit(marker, 1)[1]
    return text.split("<|", 1)[0].strip()
