"""Where things are written. Nothing here touches the disk."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    """Built artefacts (the smoke model): $GRPO_COURSE_CACHE, else .cache/ at the course root."""
    return Path(os.environ.get("GRPO_COURSE_CACHE") or ROOT / ".cache")


def run_dir(profile_name: str) -> Path:
    """A profile's training run: checkpoints, adapter, logs, figures. Notebooks 04-06 share it.

    `make course` points $GRPO_RUN_DIR at runs/<timestamp>/; otherwise runs/course/.
    """
    return Path(os.environ.get("GRPO_RUN_DIR") or ROOT / "runs" / "course") / profile_name


def shown(value: object) -> object:
    """A path inside the course, shown relative to its root (stored outputs stay machine-free)."""
    path = Path(str(value))
    return path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else value
