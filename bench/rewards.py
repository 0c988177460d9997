"""Reward throughput: completions per second for 1,000 realistic GSM8K completions.

The batch mixes what a model really writes during GRPO: correct and wrong answers in the taught
format, chatty or truncated ones, \\boxed{} answers, tag spam, and a few runaway completions,
half of them as chat messages. Each function is timed over the whole batch (median of REPEATS,
after one warm-up pass). Writes runs/bench/rewards.json.

    .venv/bin/python -m bench.rewards
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from bench._results import write_result
from helpers.profiles import PROFILES
from helpers.rewards import REWARD_FUNCS, completion_text, is_correct
from helpers.synthetic import generate_problems

NUM_COMPLETIONS = 1_000
REPEATS = 5
SEED = 0


def realistic_completion(rng: random.Random, row: dict[str, str]) -> str:
    """One completion in the style of a model mid-training, built from a GSM8K-schema row."""
    reasoning, gold = row["answer"].rsplit("####", 1)
    gold = gold.strip()
    steps = reasoning.strip()
    wrong = str(int(gold) + rng.choice([-10, -1, 1, 2, 100]))
    kind = rng.choices(
        ["good", "wrong", "chatty", "truncated", "boxed", "spam", "runaway", "thousands"],
        weights=[35, 25, 10, 10, 5, 5, 5, 5],
    )[0]
    taught = f"<reasoning>\n{steps}\n</reasoning>\n<answer>\n{{}}\n</answer>"
    if kind == "good":
        return taught.format(gold)
    if kind == "wrong":
        return taught.format(wrong)
    if kind == "chatty":
        return "Let me think about this.\n" + taught.format(gold) + "\nI hope this helps!"
    if kind == "truncated":
        return f"<reasoning>\n{steps}\nSo the total is"
    if kind == "boxed":
        return f"{steps}\nThe answer is $\\boxed{{{gold}}}$."
    if kind == "spam":
        return f"<answer>{gold}</answer>" * rng.randint(5, 40)
    if kind == "runaway":
        return f"<reasoning>\n{steps}\n" + "and then " * rng.randint(500, 3_000)
    return taught.format(f"{int(gold) * 1000:,}")


def build_batch(n: int, seed: int) -> tuple[list[Any], list[str]]:
    """`n` completions (every other one as chat messages) and their gold answers."""
    rng = random.Random(seed)
    rows = generate_problems(n, seed=seed)
    completions: list[Any] = []
    for i, row in enumerate(rows):
        text = realistic_completion(rng, row)
        completions.append([{"role": "assistant", "content": text}] if i % 2 else text)
    golds = [row["answer"].rsplit("####", 1)[1].strip() for row in rows]
    return completions, golds


def timed(fn: Any) -> float:
    """Median seconds of REPEATS calls of `fn()`."""
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> dict[str, Any]:
    completions, golds = build_batch(NUM_COMPLETIONS, SEED)
    texts = [completion_text(c) for c in completions]
    for func in REWARD_FUNCS:  # warm-up: sympy and regex caches
        func(completions, answer=golds)

    per_function = {}
    for func in REWARD_FUNCS:
        seconds = timed(lambda f=func: f(completions, answer=golds))
        per_function[func.__name__] = NUM_COMPLETIONS / seconds
    all_seconds = timed(lambda: [f(completions, answer=golds) for f in REWARD_FUNCS])
    pairs = list(zip(texts, golds, strict=True))
    lenient_seconds = timed(lambda: [is_correct(t, g, "lenient") for t, g in pairs])

    t4 = PROFILES["t4"]
    per_step = t4.per_device_train_batch_size * t4.gradient_accumulation_steps
    result = {
        "completions_per_s": NUM_COMPLETIONS / all_seconds,
        "per_function_completions_per_s": per_function,
        "lenient_is_correct_per_s": NUM_COMPLETIONS / lenient_seconds,
        "num_completions": NUM_COMPLETIONS,
        "mean_completion_chars": statistics.fmean(len(t) for t in texts),
        "repeats": REPEATS,
        "t4_completions_per_step": per_step,
    }
    print(f"{'all reward functions':<28} {result['completions_per_s']:>10,.0f} completions/s")
    for name, rate in per_function.items():
        print(f"  {name:<26} {rate:>10,.0f} completions/s")
    print(f"{'is_correct (lenient)':<28} {result['lenient_is_correct_per_s']:>10,.0f} texts/s")
    step_ms = per_step * all_seconds / NUM_COMPLETIONS * 1e3
    print(
        f"A t4-profile step scores {per_step} completions: {step_ms:.1f} ms of rewards, "
        "against tens of seconds of generation."
    )
    write_result("rewards", result)
    return result


if __name__ == "__main__":
    main()
