"""unsloth patches transformers, trl and peft on import, so it must be imported before them."""

import unsloth  # noqa: F401
