"""The bytes a t4-shaped run writes to Google Drive, counted on a fake Drive.

A stand-in trainer writes what transformers 4.56.2 writes into checkpoint-N (helpers/resume.py
lists it) and rotates with the t4 config's save_total_limit; the course's own callbacks
(AdapterCheckpoint, HeldOutAccuracy on its vLLM path, LivePlot's saves) run for real on a run
folder under a fake Drive mount. Big files are stood in by files SCALE times smaller. After every
event the Drive tree is read, so every file version written is counted, including those later
replaced or deleted: Drive keeps those in its bin or as revisions, against the quota.

"Before" is the code at 751d924: its HeldOutAccuracy wrote heldout-adapter/ into the run folder
(on Drive) and also scored at step 148 of 150; the rest of the run's writes were the same.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from helpers.callbacks import AdapterCheckpoint, HeldOutAccuracy, LivePlot
from helpers.grpo_config import grpo_settings, heldout_every
from helpers.hardware import TESLA_T4
from helpers.profiles import PROFILES
from helpers.run_folder import run_dir

SCALE = 1000  # stand-in files are this many times smaller than the real ones
MB = 1e6
# Real sizes on the t4 profile: the fp32 LoRA adapter (r=32 on 7 projections x 28 layers of
# Qwen2.5-1.5B: ~37M parameters), 8-bit Adam's two states for it, Qwen2.5's tokenizer files.
ADAPTER_BYTES = 148 * MB
OPTIMIZER_BYTES = 75 * MB
TOKENIZER_BYTES = 11.4 * MB
SCALED = {"adapter_model.safetensors", "optimizer.pt", "tokenizer.json"}
SMALL = {"scheduler.pt": 1_500, "rng_state.pth": 14_500, "scaler.pt": 1_400,
         "training_args.bin": 7_000, "adapter_config.json": 900}


def write_scaled_safetensors(path: Path, real_bytes: float) -> None:
    save_file({"lora": torch.zeros(int(real_bytes / SCALE), dtype=torch.uint8)}, str(path))


class StandInModel:
    """What the callbacks call on unsloth's PEFT model, writing stand-in files."""

    training, vllm_engine = True, object()

    def save_pretrained(self, folder: str) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        write_scaled_safetensors(Path(folder) / "adapter_model.safetensors", ADAPTER_BYTES)
        (Path(folder) / "adapter_config.json").write_text('{"r": 32}'.ljust(SMALL[
            "adapter_config.json"]))

    def eval(self) -> None: ...

    def train(self, mode: bool = True) -> None: ...


class StandInTokenizer:
    def save_pretrained(self, folder: str) -> None:
        (Path(folder) / "tokenizer.json").write_bytes(b"t" * int(TOKENIZER_BYTES / SCALE))


@dataclass
class DriveLedger:
    """Every file version seen under `root`: (inode, mtime_ns, size) -> (name, size)."""

    root: Path
    versions: dict[tuple[int, int, int], tuple[str, int]] = field(default_factory=dict)

    def present(self) -> dict[tuple[int, int, int], tuple[str, int]]:
        found = {}
        for folder, _, files in os.walk(self.root):
            for name in files:
                stat = os.stat(os.path.join(folder, name))
                found[(stat.st_ino, stat.st_mtime_ns, stat.st_size)] = (name, stat.st_size)
        return found

    def scan(self) -> None:
        self.versions.update(self.present())

    @staticmethod
    def real(entries) -> float:
        return sum(size * SCALE if name in SCALED else size for name, size in entries)

    def written(self) -> float:
        return self.real(self.versions.values())

    def kept(self) -> float:
        return self.real(self.present().values())


def simulate_run(drive: Path, local: Path, monkeypatch, before: bool) -> DriveLedger:
    """A 150-step t4 run's writes, event by event, in the trainer's order."""
    import helpers.evaluation as evaluation

    monkeypatch.setenv("GRPO_DRIVE_MOUNT", str(drive))
    monkeypatch.setenv("GRPO_EXPORT_DIR", str(local))
    monkeypatch.setattr("helpers.run_folder.on_colab", lambda: True)
    monkeypatch.delenv("GRPO_RUN_DIR", raising=False)
    monkeypatch.setattr(evaluation, "generate_side", lambda *a, **k: ["<answer>1</answer>"] * 32)
    monkeypatch.setattr(evaluation, "score",
                        lambda outputs, golds: {"strict": {"accuracy": 0.5}})
    run = run_dir("t4", use_drive=True)
    assert run.root.is_relative_to(drive)
    settings = grpo_settings(PROFILES["t4"], TESLA_T4, run.checkpoints)
    steps, every, limit = settings["max_steps"], settings["save_steps"], settings[
        "save_total_limit"]
    model, tokenizer = StandInModel(), StandInTokenizer()
    held_out = HeldOutAccuracy.__new__(HeldOutAccuracy)  # no prompts needed: generation is faked
    held_out.tokenizer, held_out.settings, held_out.rows = tokenizer, None, []
    held_out.prompts, held_out.golds = [], ["1"] * 32
    held_out.every = heldout_every(steps)
    held_out.adapter_dir = run.root / "heldout-adapter" if before else run.heldout_adapter
    if before:  # 751d924 scored every `every` steps and at the last, 148 and 150 alike
        held_out.scores_at = lambda step, last: step % held_out.every == 0 or step >= last
    callbacks = [held_out, LivePlot(run), AdapterCheckpoint(run, tokenizer)]
    state = SimpleNamespace(global_step=0, max_steps=steps, log_history=[],
                            is_world_process_zero=True)
    ledger = DriveLedger(drive)
    run.checkpoints.mkdir(parents=True)
    held_out.on_train_begin(None, state, None, model=model)
    ledger.scan()
    for step in range(1, steps + 1):
        state.global_step = step
        state.log_history.append({"step": step, "loss": 0.0, "reward": 1.0})
        for callback in callbacks:
            callback.on_step_end(None, state, None, model=model)
        ledger.scan()
        if step % every and step < steps:
            continue
        checkpoint = run.checkpoints / f"checkpoint-{step}"  # transformers' _save_checkpoint
        model.save_pretrained(str(checkpoint))
        tokenizer.save_pretrained(str(checkpoint))
        write_scaled_safetensors(checkpoint / "optimizer.pt", OPTIMIZER_BYTES)  # size only
        for name, size in SMALL.items():
            if not (checkpoint / name).exists():
                (checkpoint / name).write_bytes(b"x" * size)
        (checkpoint / "trainer_state.json").write_text(str(state.log_history))
        ledger.scan()
        for old in sorted(run.checkpoints.glob("checkpoint-*"),
                          key=lambda p: int(p.name.split("-")[1]))[:-limit]:
            for path in sorted(old.iterdir()):
                path.unlink()
            old.rmdir()
        for callback in callbacks:
            callback.on_save(None, state, None, model=model)
        ledger.scan()
    return ledger


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory):
    found = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for when in ("before", "after"):
            root = tmp_path_factory.mktemp(when)
            found[when] = simulate_run(root / "drive", root / "local", monkeypatch,
                                       before=when == "before")
    return found


def test_a_t4_run_writes_to_drive_no_more_than_its_checkpoints_and_adapter_swaps(ledgers, capsys):
    settings = grpo_settings(PROFILES["t4"], TESLA_T4, "out")
    saves = settings["max_steps"] // settings["save_steps"]
    checkpoint = ADAPTER_BYTES + OPTIMIZER_BYTES + TOKENIZER_BYTES + sum(SMALL.values())
    swap = ADAPTER_BYTES + TOKENIZER_BYTES + SMALL["adapter_config.json"]
    bound = saves * (checkpoint + swap) + 5 * MB  # + the log and the figure, rewritten per save
    before, after = ledgers["before"], ledgers["after"]
    with capsys.disabled():
        for when, ledger in ledgers.items():
            written, kept = ledger.written(), ledger.kept()
            print(f"\nt4-shaped run, {when}: {written / 1e9:.2f} GB written to Drive, "
                  f"{kept / 1e9:.2f} GB kept, {(written - kept) / 1e9:.2f} GB to its bin or "
                  f"revisions (bound: {bound / 1e9:.2f} GB)")
    assert after.written() <= bound
    assert before.written() - after.written() >= 5 * ADAPTER_BYTES  # five held-out rewrites
    names = {name for name, _ in after.versions.values()}
    assert "optimizer.pt" in names and "scaler.pt" in names  # the resume's files are there
    kept = 2 * checkpoint + swap  # save_total_limit checkpoints and one adapter
    assert after.kept() == pytest.approx(kept, rel=0.02)
