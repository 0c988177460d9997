"""Where the course is: its root, the committed smoke model, the build cache, and Colab or not.

Paths inside the course are shown relative to its root (`shown`), so stored notebook outputs name
no machine's folders. What a training run writes lives in `helpers.run_folder`; how it is written
so that a kill cannot leave it half-done, in `helpers.storage`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMOKE_MODEL_DIR = ROOT / "models" / "smoke"  # the committed smoke model (helpers.smoke_model)


def cache_root() -> Path:
    """Built artefacts (the smoke model): $GRPO_COURSE_CACHE, else .cache/ at the course root."""
    return Path(os.environ.get("GRPO_COURSE_CACHE") or ROOT / ".cache")


def on_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules


def shown(value: object) -> object:
    """A path inside the course, shown relative to its root (stored outputs stay machine-free)."""
    path = Path(str(value))
    return path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else value
