"""GRPO from scratch vs trl's GRPOTrainer: step time and peak RSS, same tiny model and batch.

Both train the smoke model (plain transformers, float32, full fine-tuning) on the same 4 prompts
x 4 generations of 32 tokens, loss dapo, beta 0, one CPU thread each, each in a fresh process.
Then the RSS that each memory trick saves (helpers.memory_probe.measure_memory_tricks, which
notebook 08 runs at a smaller size). Writes runs/bench/grpo_vs_trl.json.

    python -m bench.grpo_vs_trl
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

from bench._results import write_result
from helpers.paths import ROOT

STEPS = 8  # the first step (warm-up) is not timed
NUM_GENERATIONS, BATCH, COMPLETION_LEN, LR = 4, 16, 32, 1e-5
# The memory tricks need a model whose optimiser state and activations outweigh RSS noise (~17M).
TRICK_SIZES = {"hidden": 512, "layers": 4, "batch": 8, "completion_length": 128}


def length_reward(completions: list, **kwargs) -> list[float]:
    """A cheap reward, so that the benchmark times the trainers, not the checker."""
    return [len(str(c)) / 100.0 for c in completions]


def _setup():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.data import make_prompt
    from helpers.smoke_model import ensure_smoke_model
    from helpers.synthetic import generate_problems

    torch.set_num_threads(1)
    torch.manual_seed(0)
    path = ensure_smoke_model()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = [make_prompt(row["question"]) for row in generate_problems(64, seed=0)]
    return model, tokenizer, prompts


def child_ours() -> list[float]:
    import time

    from helpers.grpo_scratch import GRPOSettings, make_optimizer, prepare_model, train_step

    model, tokenizer, prompts = _setup()
    settings = GRPOSettings(num_generations=NUM_GENERATIONS, max_completion_length=COMPLETION_LEN,
                            learning_rate=LR, loss_type="dapo")
    model = prepare_model(model, settings)
    optimizer = make_optimizer(model, settings)
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
             for p in prompts]
    per_step = BATCH // NUM_GENERATIONS
    times = []
    for step in range(STEPS):
        start = time.perf_counter()
        batch = texts[step * per_step:(step + 1) * per_step]
        train_step(model, tokenizer, optimizer, batch, [length_reward], settings)
        times.append(time.perf_counter() - start)
    return times[1:]


def child_trl(out_dir: str) -> list[float]:
    import time

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer, prompts = _setup()
    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            stamps[-1] = time.perf_counter() - stamps[-1]

    args = GRPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, fp16=False, report_to="none",
        per_device_train_batch_size=BATCH, num_generations=NUM_GENERATIONS,
        max_completion_length=COMPLETION_LEN, max_prompt_length=160, learning_rate=LR,
        loss_type="dapo", beta=0.0, max_steps=STEPS, logging_steps=1, save_strategy="no",
        disable_tqdm=True, gradient_checkpointing=False, seed=0, dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[length_reward], args=args,
                          train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                          processing_class=tokenizer, callbacks=[Stamp()])
    trainer.train()
    return stamps[1:]


def run_child(kind: str) -> dict[str, float]:
    """One trainer in a fresh process: median step time and the process's peak RSS."""
    out = subprocess.run([sys.executable, "-m", "bench.grpo_vs_trl", "--child", kind],
                         capture_output=True, text=True, check=False, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> dict[str, object]:
    from helpers.memory_probe import measure_memory_tricks

    ours, trl = run_child("ours"), run_child("trl")
    tricks = measure_memory_tricks(**TRICK_SIZES)
    result = {
        "step_time_ratio": ours["step_s"] / trl["step_s"],
        "peak_rss_ratio": ours["peak_rss_mb"] / trl["peak_rss_mb"],
        "ours": ours, "trl": trl,
        "setup": {"model": "smoke (float32, full fine-tuning)", "completions_per_step": BATCH,
                  "num_generations": NUM_GENERATIONS, "max_completion_length": COMPLETION_LEN,
                  "timed_steps": STEPS - 1, "torch_threads": 1},
        "memory_tricks": tricks,
        "memory_tricks_setup": {**TRICK_SIZES, "note": "training memory: peak RSS during two "
                                "GRPO updates minus RSS before the model was built"},
    }
    print(f"step time: ours {ours['step_s']:.3f} s, trl {trl['step_s']:.3f} s "
          f"-> ratio {result['step_time_ratio']:.2f}")
    print(f"peak RSS : ours {ours['peak_rss_mb']:.0f} MB, trl {trl['peak_rss_mb']:.0f} MB "
          f"-> ratio {result['peak_rss_ratio']:.2f}")
    for name, row in tricks.items():
        print(f"{name:34s} training {row['training_mb']:5.0f} MB  saved {row['saved_mb']:+5.0f} MB"
              f"  step {row['step_s']:.2f} s")
    write_result("grpo_vs_trl", result)
    return result


def _child(kind: str) -> None:
    import resource
    import tempfile

    if kind == "ours":
        times = child_ours()
    else:
        with tempfile.TemporaryDirectory() as tmp:
            times = child_trl(tmp)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"step_s": statistics.median(times), "peak_rss_mb": peak,
                      "step_times": times}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        main()
