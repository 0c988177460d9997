"""The smoke model: build time and memory, warm-start accuracy, and what GRPO adds over seeds.

Build and load: each repeat runs in a fresh process with an empty cache, so nothing is reused;
medians are reported. Then the warm-started model's greedy strict accuracy on the 200 held-out
problems, and, with `--seeds N`, the learning test's run (helpers.smoke_model.grpo_gain: notebook
04's training, notebook 05's evaluation) for GRPO seeds 0..N-1, one after another.
Writes runs/bench/smoke_model.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
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


SEEDS_CHILD = """
import json, sys, tempfile
sys.path.insert(0, {root!r})
from unsloth import FastLanguageModel  # noqa: F401
import torch
torch.set_num_threads(1)
from helpers.smoke_model import grpo_gain
with tempfile.TemporaryDirectory() as out:
    gain = grpo_gain(out, seed={seed})
gain.pop("log_history")
print(json.dumps(gain))
"""

ACCURACY_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
import torch
torch.set_num_threads(1)
from transformers import AutoModelForCausalLM, AutoTokenizer
from helpers.data import extract_gold_answer, load_gsm8k
from helpers.evaluation import build_prompts, decoding_settings, generate_hf, score
from helpers.profiles import PROFILES
from helpers.smoke_model import ensure_smoke_model
profile = PROFILES["smoke"]
path = ensure_smoke_model()
model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
rows = list(load_gsm8k("test", profile))
prompts = build_prompts(tokenizer, [row["question"] for row in rows])
generations = generate_hf(model, tokenizer, prompts, decoding_settings(profile), "warm start")
report = score(generations, [extract_gold_answer(row["answer"]) for row in rows])
print(json.dumps({{"n": report["n"], "strict": report["strict"]["accuracy"],
                  "format": report["format_rate"]}}))
"""


def child_json(code: str) -> dict:
    """Run `code` in a fresh interpreter and parse the JSON on its last line of output."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(seeds: int = 0) -> dict[str, float]:
    runs = [one_run() for _ in range(REPEATS)]
    result = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    result["repeats"] = REPEATS
    for key, value in result.items():
        print(f"{key:<20} {value:10.2f}")
    warm = child_json(ACCURACY_CHILD.format(root=str(ROOT)))
    print(f"warm start: {warm['strict']:.1%} strict on {warm['n']} held-out problems")
    learning = []
    # Two seeds at a time, one thread each (the machine has two cores); times are under that load.
    with ThreadPoolExecutor(2) as pool:
        gains = pool.map(lambda seed: child_json(SEEDS_CHILD.format(root=str(ROOT), seed=seed)),
                         range(seeds))
    for seed, gain in enumerate(gains):
        learning.append({"seed": seed, **gain})
        print(f"seed {seed}: {gain['base']:.1%} -> {gain['trained']:.1%} "
              f"({100 * gain['gain']:+.1f} points, CI {100 * gain['ci_low']:+.1f} to "
              f"{100 * gain['ci_high']:+.1f}), {gain['fixed']} fixed, {gain['broken']} broken, "
              f"{gain['train_seconds']:.0f} s of training", flush=True)
    if learning:
        points = [100 * run["gain"] for run in learning]
        print(f"gain over {seeds} seeds: min {min(points):+.1f}, median "
              f"{statistics.median(points):+.1f}, max {max(points):+.1f} points")
    write_result("smoke_model", {"medians": result, "runs": runs, "warm_start": warm,
                                 "learning": learning})
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=0, help="GRPO seeds to train (~minutes each)")
    main(parser.parse_args().seeds)
