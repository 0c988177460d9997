"""trl's log history: the keys the course reads, and the series drawn from it."""

from __future__ import annotations

import math
from typing import Any

LogHistory = list[dict[str, Any]]


REWARD_PREFIX = "rewards/"


HELDOUT_KEY = "heldout/strict"  # greedy strict accuracy on held-out problems (HeldOutAccuracy)
HELDOUT_N_KEY = "heldout/n"  # how many held-out problems each measurement scored


def training_entries(log_history: LogHistory) -> LogHistory:
    """The per-step entries: drops the final summary line (train_runtime, train_loss...)."""
    return [e for e in log_history if "step" in e and "train_runtime" not in e]


def series(log_history: LogHistory, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, skipping entries without it and non-finite values."""
    steps, values = [], []
    for entry in training_entries(log_history):
        value = entry.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            steps.append(int(entry["step"]))
            values.append(float(value))
    return steps, values


def reward_names(log_history: LogHistory) -> list[str]:
    """The reward functions that were logged (`rewards/<name>/mean`), in first-seen order."""
    names: list[str] = []
    for entry in log_history:
        for key in entry:
            if key.startswith(REWARD_PREFIX) and key.endswith("/mean"):
                name = key[len(REWARD_PREFIX) : -len("/mean")]
                if name not in names:
                    names.append(name)
    return names


KEY_REWARD = "correctness_reward"  # the reward that matters; the others shape the format
