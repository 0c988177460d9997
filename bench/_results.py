"""Where benchmarks write their figures: runs/bench/<name>.json, committed (tools/cited_numbers)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from helpers.paths import ROOT

SIGNIFICANT_DIGITS = 6  # beyond this a rerun's float noise would make every line a diff


def rounded(value: object) -> object:
    """`value` with every float rounded to SIGNIFICANT_DIGITS, recursively."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {str(key): rounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(item) for item in value]
    return value


def dumps(result: object) -> str:
    """Diff-friendly JSON: sorted keys, two-space indent, rounded floats, final newline."""
    return json.dumps(rounded(result), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def machine() -> dict[str, object]:
    """When and on what the figures were taken: CPU count and load matter on a shared machine."""
    return {"cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 1),
            "date": datetime.now(UTC).strftime("%Y-%m-%d")}


def bench_dir() -> Path:
    """runs/bench/, or $GRPO_BENCH_DIR (where tests/test_bench.py runs the stand-ins)."""
    return Path(os.environ.get("GRPO_BENCH_DIR") or ROOT / "runs" / "bench")


def write_result(name: str, result: object) -> Path:
    """Save `result` (with `machine()` when it is a dict) as runs/bench/<name>.json; say where."""
    if isinstance(result, dict):
        result = {**result, "machine": machine()}
    out = bench_dir() / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dumps(result))
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return out
