"""Trainer callbacks that make a long Colab run safe to lose and easy to wait for.

- `AdapterCheckpoint` saves the LoRA adapter into the run folder at every checkpoint, so notebooks
  06-07 can use a run that a disconnect cut short.
- `StepTimer` measures seconds per step and shows the time left with the step's reward: trl 0.22.2
  logs no step time.
- `HeldOutAccuracy` scores greedy accuracy on held-out problems during training.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from helpers.plotting import HELDOUT_KEY, KEY_REWARD, REWARD_PREFIX, notebook_display
from helpers.training import format_eta, save_adapter, saved_adapter_step


class AdapterCheckpoint(TrainerCallback):
    """On every checkpoint (and at the end), write run_dir/adapter with the step it holds.

    on_save runs after the trainer has written the whole checkpoint; save_adapter swaps the new
    adapter in, so 06 and 07 never read a half-written one. After a resume it also brings the
    adapter up to the checkpoint just loaded, in case a kill stopped the last swap.
    """

    def __init__(self, run_dir: Path, tokenizer: Any) -> None:
        self.run_dir = Path(run_dir)
        self.tokenizer = tokenizer

    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any):
        if state.is_world_process_zero and model is not None:
            save_adapter(model, self.tokenizer, self.run_dir, state.global_step, state.max_steps)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any):
        resumed = state.global_step > 0
        if resumed and state.is_world_process_zero and model is not None and (
            saved_adapter_step(self.run_dir) != state.global_step
        ):
            save_adapter(model, self.tokenizer, self.run_dir, state.global_step, state.max_steps)


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
                 run_dir: Path, every: int) -> None:
        from helpers.data import extract_gold_answer
        from helpers.evaluation import build_prompts

        self.tokenizer, self.settings, self.every = tokenizer, settings, max(1, every)
        self.prompts = build_prompts(tokenizer, [row["question"] for row in rows])
        self.golds = [extract_gold_answer(row["answer"]) for row in rows]
        self.adapter_dir = Path(run_dir) / "heldout-adapter"

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
        if not any(HELDOUT_KEY in entry for entry in state.log_history):  # not on a resume
            self.measure(model, state)

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
        if state.global_step % self.every == 0 or state.global_step >= state.max_steps:
            self.measure(model, state)

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
