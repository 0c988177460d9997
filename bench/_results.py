"""Where benchmarks write their figures: runs/bench/<name>.json."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_result(name: str, result: object) -> Path:
    """Save `result` as runs/bench/<name>.json and say where."""
    out = ROOT / "runs" / "bench" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return out
