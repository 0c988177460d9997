"""Time and peak memory of building the smoke model, and of loading it with unsloth (4-bit, LoRA).

Each repeat runs in a fresh process with an empty cache, so nothing is reused. Reports medians.
Writes runs/bench/smoke_model.json.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _results import write_result  # noqa: E402 (bench/ is on sys.path)

ROOT = Path(__file__).resolve().parent.parent
REPEATS = 3

CHILD = """
import json, os, resource, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
from helpers.smoke_model import ensure_smoke_model
ensure_smoke_model()
build_s = time.perf_counter() - t0
build_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
from unsloth import FastLanguageModel
from helpers.model import load_kwargs, lora_kwargs
from helpers.profiles import PROFILES
t1 = time.perf_counter()
model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(PROFILES["smoke"]))
model = FastLanguageModel.get_peft_model(model, **lora_kwargs(PROFILES["smoke"]))
load_s = time.perf_counter() - t1
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"build_s": build_s, "build_peak_rss_mb": build_rss,
                  "load_4bit_lora_s": load_s, "peak_rss_mb": peak}}))
"""


def one_run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as cache:
        env = {"GRPO_COURSE_CACHE": cache, "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
        out = subprocess.run(
            [sys.executable, "-c", CHILD.format(root=str(ROOT))],
            capture_output=True, text=True, env=env, check=True,
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> dict[str, float]:
    runs = [one_run() for _ in range(REPEATS)]
    result = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    result["repeats"] = REPEATS
    for key, value in result.items():
        print(f"{key:<20} {value:10.2f}")
    write_result("smoke_model", {"medians": result, "runs": runs})
    return result


if __name__ == "__main__":
    main()
