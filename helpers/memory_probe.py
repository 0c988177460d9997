"""What each memory trick saves: peak RSS of a few GRPO updates, one fresh process per setting.

Notebook 08 (section 9, "What each memory trick saves") and bench/grpo_vs_trl.py measure gradient
accumulation, activation checkpointing and 8-bit AdamW with `measure_memory_tricks`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from typing import Any

import torch

from helpers.grpo_scratch import (
    GRPOSettings,
    Rollout,
    accumulation_chunks,
    grpo_loss,
    make_optimizer,
    prepare_model,
)
from helpers.paths import ROOT

VOCAB_SIZE = 72  # the toy task's character vocabulary (helpers.toy_r1.CharTokenizer)


class PeakRss:
    """Highest resident memory (MB) seen while the block runs, polled from /proc every 2 ms.

    getrusage's ru_maxrss cannot do this: it is the process's all-time peak, and importing
    torch, transformers and bitsandbytes already peaks above a small model's whole training step.
    """

    def __init__(self) -> None:
        self.peak_mb = self.start_mb = _rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.002):
            self.peak_mb = max(self.peak_mb, _rss_mb())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, _rss_mb())


def _rss_mb() -> float:
    """Current resident set size in MB (Linux /proc; elsewhere the all-time peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_probe(hidden: int, layers: int, batch: int, completion_length: int,
                 settings: GRPOSettings, steps: int = 2) -> dict[str, float]:
    """Training memory (peak RSS above the loaded libraries) of `steps` GRPO updates."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if settings.optim == "adamw_8bit":
        import bitsandbytes  # noqa: F401  (imported before the baseline, like torch)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=VOCAB_SIZE, hidden_size=hidden,
                         intermediate_size=4 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=completion_length + 32)
    prompt = torch.randint(4, 40, (batch, 16))
    completion = torch.randint(4, 40, (batch, completion_length))
    data = Rollout(prompt, torch.ones_like(prompt), completion, torch.ones_like(completion))
    advantages = torch.randn(batch)
    chunks = accumulation_chunks(batch, settings.gradient_accumulation_steps)
    with PeakRss() as rss:
        model = prepare_model(Qwen2ForCausalLM(config), settings)
        optimizer = make_optimizer(model, settings)
        start = time.perf_counter()
        for _ in range(steps):
            for rows in chunks:
                loss, _ = grpo_loss(model, data.rows(rows), advantages[rows], settings,
                                    num_items_in_batch=completion.numel())
                loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        step_s = (time.perf_counter() - start) / steps
    return {"training_mb": rss.peak_mb - rss.start_mb, "peak_rss_mb": rss.peak_mb,
            "baseline_rss_mb": rss.start_mb, "step_s": step_s,
            "params_m": sum(p.numel() for p in model.parameters()) / 1e6}


def memory_probe_in_subprocess(**kwargs: Any) -> dict[str, float]:
    """Run memory_probe in a fresh Python, so one setting's peak cannot hide another's."""
    settings = kwargs.pop("settings", GRPOSettings())
    payload = json.dumps({**kwargs, "settings": settings.__dict__})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "helpers.memory_probe", payload],
                         capture_output=True, text=True, check=False, cwd=ROOT, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"memory probe failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


MEMORY_TRICKS = {
    "baseline": {},
    "gradient_accumulation (4 chunks)": {"gradient_accumulation_steps": 4},
    "gradient_checkpointing": {"gradient_checkpointing": True},
    "adamw_8bit": {"optim": "adamw_8bit"},
}


def measure_memory_tricks(hidden: int = 256, layers: int = 4, batch: int = 16,
                          completion_length: int = 128) -> dict[str, dict[str, float]]:
    """Training memory with each trick switched on alone, each in its own process."""
    results = {}
    for name, switch in MEMORY_TRICKS.items():
        settings = GRPOSettings(**switch)
        results[name] = memory_probe_in_subprocess(
            hidden=hidden, layers=layers, batch=batch, completion_length=completion_length,
            settings=settings)
    base = results["baseline"]["training_mb"]
    for row in results.values():
        row["saved_mb"] = base - row["training_mb"]
    return results


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m helpers.memory_probe '<json kwargs of memory_probe>'")
    args = json.loads(sys.argv[1])
    args["settings"] = GRPOSettings(**args["settings"])
    print(json.dumps(memory_probe(**args)))
