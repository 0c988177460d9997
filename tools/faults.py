"""Fault injection for the crash tests: named points where a run stops, and what it trained.

scripts/train_grpo.py plugs this in through one hook, `instrument_from_env`, when
$GRPO_FAULT_DIR or --debug-dump-params asks for it (tests/test_faults.py, scripts/fault_soak.py,
tests/test_train_script.py); a normal run never imports it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.grpo_run import Instrument
from helpers.storage import (
    fault_point,
    write_json_atomic,
)


def checksum(tensors: dict[str, Any]) -> str:
    """sha256 of tensors' bytes, in name order: equal only if every value is bit-identical."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def observed(func: Callable[..., list[float]], seen: list[dict[str, Any]]) -> Callable:
    """`func`, unchanged, that also notes what this process scored (same __name__ for trl)."""

    @functools.wraps(func)
    def wrapper(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        seen.append({"completions": len(completions), "answers": list(kwargs.get("answer", []))})
        return func(completions, **kwargs)

    return wrapper


def param_dump_callback(folder: Path, rank: int, world_size: int, seen: list[dict]) -> Any:
    """A TrainerCallback writing this rank's weight/gradient checksums to folder/rank<N>.json."""
    from transformers import TrainerCallback

    def trainable(model: Any, grads: bool) -> dict[str, Any]:
        return {
            n: (p.grad if grads else p) for n, p in model.named_parameters()
            if p.requires_grad and (p.grad is not None or not grads)
        }

    class ParamDump(TrainerCallback):
        """Rewritten after every step, so a run killed mid-way leaves the steps it finished."""

        def __init__(self) -> None:
            self.record: dict[str, Any] = {
                "rank": rank, "world_size": world_size, "pid": os.getpid(), "steps": [],
                "scored": seen,
            }

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                           **kwargs: Any) -> None:
            from accelerate import PartialState

            self.record["start_step"] = state.global_step  # > 0 after a resume
            state = PartialState()
            self.record.update(backend=state.backend, distributed_type=str(state.distributed_type))
            self.record["initial_params"] = checksum(trainable(model, grads=False))
            self.record["config"] = {
                k: getattr(args, k) for k in (
                    "per_device_train_batch_size", "gradient_accumulation_steps",
                    "num_generations", "generation_batch_size", "steps_per_generation",
                )
            }

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None,
                                  **kwargs: Any) -> None:
            grads = trainable(model, grads=True)  # after DDP's all-reduce: the averaged ones
            self.record["steps"].append({
                "grads": checksum(grads),
                "grad_abs_sum": float(sum(g.abs().sum() for g in grads.values())),
            })

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                        **kwargs: Any) -> None:
            step = self.record["steps"][-1]
            step.update(step=state.global_step, params=checksum(trainable(model, grads=False)))
            write_json_atomic(folder / f"rank{rank}.json", self.record)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            write_json_atomic(folder / f"rank{rank}.json", self.record)

    return ParamDump()


FAULT_POINTS = (
    "step",  # mid-step: completions generated, being scored (inside the first reward function)
    "save:model-written",  # checkpoint-N holds the model and tokenizer only
    "save:optimizer-written",  # ... and optimizer.pt, scheduler.pt
    "save:before-trainer-state",  # ... and rng_state.pth: everything but trainer_state.json
    "adapter-swap",  # run/adapter renamed to adapter.old/, the new one not yet in place
    "log-history",  # log_history.json.partial written, not yet renamed over log_history.json
    "after-save",  # right after a whole save: checkpoint, log and adapter
)


DISK_FULL_BYTES = 256 * 1024  # "disk-full": any later write past this size fails halfway


PAUSE_LIMIT_SECONDS = 600  # a paused run exits by itself after this, or when its parent dies


@dataclass(frozen=True)
class FaultPlan:
    """$GRPO_FAULT_DIR (markers, journal), $GRPO_FAULT_AT ('point@step'), $GRPO_FAULT_ACTION."""

    folder: Path
    point: str | None
    step: int | None
    action: str  # "pause": write reached-<rank>.json and wait to be killed; or "disk-full"


def fault_plan(env: Mapping[str, str]) -> FaultPlan | None:
    """The fault a test asked for in the environment, or None (a normal run)."""
    if not env.get("GRPO_FAULT_DIR"):
        return None
    point, _, step = env.get("GRPO_FAULT_AT", "").partition("@")
    action = env.get("GRPO_FAULT_ACTION", "pause")
    if point and point not in FAULT_POINTS and not point.startswith(("eval:", "export:")):
        raise ValueError(f"Unknown fault point {point!r}: use one of {', '.join(FAULT_POINTS)}.")
    return FaultPlan(Path(env["GRPO_FAULT_DIR"]), point or None, int(step) if step else None,
                     action)


def fault_hook(plan: FaultPlan, rank: int) -> Callable[[str, int | None], None]:
    """What happens at a fault point: nothing, unless it is the planned one."""

    def hook(point: str, step: int | None) -> None:
        if point != plan.point or (plan.step is not None and step != plan.step):
            return
        if plan.action == "disk-full":  # a real write failure, part of the file on disk
            import resource  # Unix only, like the fault tests
            import signal

            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so write() fails with EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (DISK_FULL_BYTES, resource.RLIM_INFINITY))
            return
        reached = {"point": point, "step": step, "pid": os.getpid(), "rank": rank}
        parent = os.getppid()
        write_json_atomic(plan.folder / f"reached-{rank}.json", reached)
        print(f"[fault] paused at {point} (step {step}), waiting to be killed", flush=True)
        for _ in range(PAUSE_LIMIT_SECONDS * 5):  # never outlive the test that paused it
            if os.getppid() != parent:
                break
            time.sleep(0.2)
        os._exit(3)

    return hook


def paused_mid_step(func: Callable) -> Callable:
    """`func` (a reward function), with the 'step' fault point before it (same __name__)."""

    @functools.wraps(func)
    def wrapper(completions: Sequence[Any], **kwargs: Any) -> list[float]:
        state = kwargs.get("trainer_state")
        fault_point("step", state.global_step + 1 if state is not None else None)
        return func(completions, **kwargs)

    return wrapper


def mark_save_phases(trainer: Any) -> None:
    """Fault points between the phases of transformers' Trainer._save_checkpoint (4.56.2)."""

    def around(name: str, before: str | None, after: str | None) -> None:
        original = getattr(trainer, name)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if before:
                fault_point(before, trainer.state.global_step)
            result = original(*args, **kwargs)
            if after:
                fault_point(after, trainer.state.global_step)
            return result

        setattr(trainer, name, wrapper)

    around("_save_optimizer_and_scheduler", "save:model-written", "save:optimizer-written")
    around("_save_rng_state", None, "save:before-trainer-state")


def fault_journal(folder: Path, rank: int) -> Any:
    """A TrainerCallback appending each trained step (and its weights' checksum) to a journal,
    and marking the 'after-save' point."""
    from transformers import TrainerCallback

    def note(**entry: Any) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / f"journal-{rank}.jsonl").open("a") as f:
            f.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")

    class Journal(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            note(event="start", step=state.global_step)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                        **kwargs: Any) -> None:
            params = {n: p for n, p in model.named_parameters() if p.requires_grad}
            note(event="step", step=state.global_step, params=checksum(params))

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            fault_point("after-save", state.global_step)

    return Journal()


def instrument_from_env(env: Mapping[str, str], rank: int, world_size: int,
                        dump_params: Path | None = None) -> Instrument | None:
    """The one hook scripts/train_grpo.py plugs in: the fault plan of $GRPO_FAULT_DIR (a pause
    point or a full disk, with a journal of trained steps) and --debug-dump-params' checksums."""
    from helpers.storage import add_fault_hook

    plan = fault_plan(env)
    if plan is None and dump_params is None:
        return None
    wraps: list[Callable[[Callable], Callable]] = []
    callbacks: list[Any] = []
    if dump_params is not None:
        seen: list[dict[str, Any]] = []
        wraps.append(lambda func: observed(func, seen))
        callbacks.append(param_dump_callback(dump_params, rank, world_size, seen))
    if plan is not None:
        add_fault_hook(fault_hook(plan, rank))
        wraps.append(paused_mid_step)
        callbacks.append(fault_journal(plan.folder, rank))

    def wrap(func: Callable) -> Callable:
        for step in wraps:
            func = step(func)
        return func

    return Instrument(wrap_first_reward=wrap, callbacks=tuple(callbacks),
                      patch_trainer=mark_save_phases if plan is not None else None)
