"""Held-out evaluation: the base and the trained model, same prompts, same decoding, same scoring.

The base model is the trained one with its LoRA adapter switched off (peft's `disable_adapter()`
in `transformers`, no LoRA request in vLLM), so no second copy of the weights is loaded.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from helpers.data import extract_gold_answer, make_prompt
from helpers.paths import (
    ROOT,
    check_writable,
    fault_point,
    file_problem,
    has_adapter,
    shown,
    usable_adapter,
    write_json_atomic,
)

if TYPE_CHECKING:
    from helpers.profiles import Profile

Mode = Literal["strict", "lenient"]
MODES: tuple[Mode, ...] = ("strict", "lenient")
SIDES = ("base", "trained")
Z_95 = 1.959963984540054  # the normal quantile for a two-sided 95% interval


class AdapterMissingError(FileNotFoundError):
    """Notebook 05 has not saved a LoRA adapter for this profile yet."""


@dataclass(frozen=True)
class DecodingSettings:
    """How completions are generated: one frozen object, shared by the base and trained runs."""

    max_new_tokens: int
    temperature: float = 0.0  # 0 means greedy: the single most likely completion
    top_p: float = 1.0
    num_samples: int = 1  # k of pass@k; more than 1 needs temperature > 0
    seed: int = 3407
    batch_size: int = 32  # transformers path only; padding can shift numerics, so it is fixed too

    def __post_init__(self) -> None:
        if self.num_samples > 1 and self.temperature == 0:
            raise ValueError("pass@k with num_samples > 1 needs sampling: set temperature > 0.")
        if self.max_new_tokens < 1 or self.num_samples < 1 or self.batch_size < 1:
            raise ValueError("max_new_tokens, num_samples and batch_size must all be >= 1.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Generation:
    """One completion: its text, how many tokens it used, and whether it hit the token limit."""

    text: str
    num_tokens: int
    truncated: bool


def decoding_settings(profile: Profile, **overrides: Any) -> DecodingSettings:
    """The profile's evaluation decoding: greedy, with the training completion budget."""
    return DecodingSettings(max_new_tokens=profile.max_completion_length, **overrides)


def build_prompts(tokenizer: Any, questions: Iterable[str]) -> list[str]:
    """The exact prompt strings: the training chat messages through the tokenizer's template."""
    return [
        tokenizer.apply_chat_template(make_prompt(q), tokenize=False, add_generation_prompt=True)
        for q in questions
    ]


def fingerprint(obj: Any) -> str:
    """A short sha256 of prompts or settings, stored with the results to prove they matched."""
    if isinstance(obj, DecodingSettings):
        obj = asdict(obj)
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _progress(total: int, desc: str | None) -> Any:
    """A tqdm bar (plain text, no widgets), a minimal text counter when tqdm is missing, or
    nothing at all when `desc` is None."""
    if desc is None:
        return _TextProgress(total, desc, quiet=True)
    try:
        from tqdm.std import tqdm
    except ImportError:
        return _TextProgress(total, desc)
    return tqdm(total=total, desc=desc, file=sys.stdout, ascii=True, mininterval=5)


class _TextProgress:
    """Prints 'desc: done/total' as batches finish."""

    def __init__(self, total: int, desc: str | None, quiet: bool = False) -> None:
        self.total, self.desc, self.done, self.quiet = total, desc, 0, quiet

    def update(self, n: int) -> None:
        self.done += n
        if not self.quiet:
            print(f"{self.desc}: {self.done}/{self.total}", flush=True)

    def close(self) -> None:
        """Nothing to release."""


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids) if isinstance(ids, list) else {ids}
    return {i for i in ids | {tokenizer.eos_token_id} if i is not None}


def generate_hf(
    model: Any, tokenizer: Any, prompts: Sequence[str], settings: DecodingSettings,
    desc: str | None,
) -> list[list[Generation]]:
    """Batched `model.generate` with left padding (CPU / smoke; no vLLM); a progress bar titled
    `desc`, or none when it is None."""
    import torch

    eos, bar, results = _eos_ids(model, tokenizer), _progress(len(prompts), desc), []
    torch.manual_seed(settings.seed)
    for start in range(0, len(prompts), settings.batch_size):
        batch = list(prompts[start : start + settings.batch_size])
        # The chat template already holds any BOS token: add no special tokens twice.
        enc = tokenizer(
            batch, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        ).to(model.device)
        sampling = {"temperature": settings.temperature, "top_p": settings.top_p}
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=settings.max_new_tokens,
                do_sample=not settings.greedy,
                **({} if settings.greedy else sampling),
                num_return_sequences=settings.num_samples,
                pad_token_id=tokenizer.pad_token_id,
            )
        new_tokens = out[:, enc["input_ids"].shape[1] :].tolist()
        for i in range(len(batch)):
            samples = new_tokens[i * settings.num_samples : (i + 1) * settings.num_samples]
            results.append([_to_generation(ids, eos, tokenizer) for ids in samples])
        bar.update(len(batch))
    bar.close()
    return results


def _to_generation(ids: list[int], eos: set[int], tokenizer: Any) -> Generation:
    stop = next((i for i, token in enumerate(ids) if token in eos), None)
    kept = ids if stop is None else ids[: stop + 1]
    text = tokenizer.decode(kept, skip_special_tokens=True)
    return Generation(text=text, num_tokens=len(kept), truncated=stop is None)


def generate_vllm(
    model: Any, tokenizer: Any, prompts: Sequence[str], settings: DecodingSettings,
    lora_request: Any, progress: bool = True,
) -> list[list[Generation]]:
    """unsloth's vLLM engine (`fast_generate`, GPU); `lora_request=None` is the base model."""
    from vllm import SamplingParams

    params = SamplingParams(
        temperature=settings.temperature, top_p=settings.top_p, n=settings.num_samples,
        max_tokens=settings.max_new_tokens, seed=settings.seed,
    )
    # Token ids, tokenized as on the transformers path, so vLLM adds no second BOS.
    token_prompts = [
        {"prompt_token_ids": tokenizer(p, add_special_tokens=False)["input_ids"]} for p in prompts
    ]
    outputs = model.fast_generate(
        token_prompts, sampling_params=params, lora_request=lora_request, use_tqdm=progress
    )
    return [
        [Generation(o.text, len(o.token_ids), o.finish_reason == "length") for o in out.outputs]
        for out in outputs
    ]


def generate_side(
    model: Any, tokenizer: Any, prompts: Sequence[str], settings: DecodingSettings,
    side: str, adapter_dir: Path, progress: bool = True,
) -> list[list[Generation]]:
    """Generate for 'base' (adapter off) or 'trained' (adapter on), on vLLM if it is loaded."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    if getattr(model, "vllm_engine", None) is not None:
        lora = model.load_lora(str(adapter_dir)) if side == "trained" else None
        return generate_vllm(model, tokenizer, prompts, settings, lora, progress)
    if not hasattr(model, "disable_adapter"):
        raise TypeError("Evaluation needs the peft model with its adapter: see load_trained.")
    desc = side if progress else None
    if side == "trained":
        return generate_hf(model, tokenizer, prompts, settings, desc=desc)
    with model.disable_adapter():
        return generate_hf(model, tokenizer, prompts, settings, desc=desc)


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval for a proportion: sound near 0% and 100% and for small n."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"Need 0 <= successes <= n and n > 0, got {successes}/{n}.")
    p = successes / n
    denom = 1 + z**2 / n
    center = (p + z**2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): P(at least one of k draws from the n is correct)."""
    if not 0 <= num_correct <= num_samples or not 1 <= k <= num_samples:
        raise ValueError(f"Need 0 <= c <= n and 1 <= k <= n, got n={num_samples}, "
                         f"c={num_correct}, k={k}.")
    if num_samples - num_correct < k:
        return 1.0
    return 1.0 - math.comb(num_samples - num_correct, k) / math.comb(num_samples, k)


def score(generations: Sequence[Sequence[Generation]], golds: Sequence[str]) -> dict[str, Any]:
    """Accuracy (95% Wilson CI) per mode, format compliance, lengths and truncation."""
    from helpers.rewards import extract_answer, is_correct

    if len(generations) != len(golds) or not golds:
        raise ValueError(f"{len(generations)} generations for {len(golds)} gold answers.")
    n, firsts = len(golds), [samples[0] for samples in generations]
    report: dict[str, Any] = {"n": n}
    for mode in MODES:
        pairs = zip(firsts, golds, strict=True)
        hits = sum(is_correct(g.text, gold, mode=mode) for g, gold in pairs)
        low, high = wilson_interval(hits, n)
        report[mode] = {"correct": hits, "accuracy": hits / n, "ci_low": low, "ci_high": high}
        k = len(generations[0])
        if k > 1:
            per_problem = [
                pass_at_k(k, sum(is_correct(s.text, gold, mode=mode) for s in samples), k)
                for samples, gold in zip(generations, golds, strict=True)
            ]
            report[mode][f"pass@{k}"] = sum(per_problem) / n
    lengths = sorted(g.num_tokens for g in firsts)
    report["format_rate"] = sum(extract_answer(g.text) is not None for g in firsts) / n
    report["truncation_rate"] = sum(g.truncated for g in firsts) / n
    report["mean_tokens"] = sum(lengths) / n
    report["tokens_p10_p50_p90_max"] = [
        *(lengths[min(n - 1, int(q * n))] for q in (0.1, 0.5, 0.9)), lengths[-1]
    ]
    return report


def _change(base_ok: bool, trained_ok: bool) -> str:
    return {(False, True): "fixed", (True, False): "broken"}.get(
        (base_ok, trained_ok), "both right" if base_ok else "both wrong"
    )


def per_problem_rows(
    questions: Sequence[str], golds: Sequence[str],
    base: Sequence[Sequence[Generation]], trained: Sequence[Sequence[Generation]],
) -> list[dict[str, Any]]:
    """One row per problem: question, gold, both answers, and how correctness changed per mode."""
    from helpers.rewards import extract_answer, is_correct

    rows = []
    for i, (question, gold, b, t) in enumerate(zip(questions, golds, base, trained, strict=True)):
        row: dict[str, Any] = {"id": i, "question": question, "gold": gold}
        for side, gen in (("base", b[0]), ("trained", t[0])):
            row[f"{side}_answer"] = extract_answer(gen.text)
            row[f"{side}_completion"] = gen.text
            row[f"{side}_tokens"], row[f"{side}_truncated"] = gen.num_tokens, gen.truncated
        for mode in MODES:
            base_ok = is_correct(b[0].text, gold, mode=mode)
            trained_ok = is_correct(t[0].text, gold, mode=mode)
            row[f"base_{mode}"], row[f"trained_{mode}"] = base_ok, trained_ok
            row[f"change_{mode}"] = _change(base_ok, trained_ok)
        rows.append(row)
    return rows


Generate = Callable[..., list[list[Generation]]]


def model_fingerprint(side: str, adapter_dir: Path) -> str:
    """What one side's answers depend on besides prompts and decoding: its weights.

    trained: the adapter's bytes; base: the base model the adapter names (the adapter is off).
    """
    config, weights = adapter_dir / "adapter_config.json", adapter_dir / "adapter_model.safetensors"
    if side == "trained" and weights.is_file():
        return hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
    if side == "base" and config.is_file():
        return fingerprint(json.loads(config.read_text()).get("base_model_name_or_path"))
    return fingerprint([side, str(adapter_dir)])


def answers_folder(
    store: Path, side: str, prompts: Sequence[str], settings: DecodingSettings, adapter_dir: Path
) -> Path:
    """Where one side's answers are kept: a folder per side, prompts, decoding and weights."""
    key = fingerprint([fingerprint(list(prompts)), fingerprint(settings),
                       model_fingerprint(side, adapter_dir)])
    return store / f"{side}-{key}"


def _saved_batch(path: Path, prompts: Sequence[str]) -> list[list[Generation]] | None:
    """A batch saved by an earlier run for exactly these prompts, or None."""
    if file_problem(path):
        return None
    saved = json.loads(path.read_text())
    if saved.get("prompts") != fingerprint(list(prompts)) or len(saved["answers"]) != len(prompts):
        return None
    return [[Generation(**sample) for sample in samples] for samples in saved["answers"]]


def describe_reuse(side: str, reused: int, total: int, folder: Path) -> str:
    """What a side's pass is about to do with the answers an earlier run saved."""
    where = f"{folder.parent.parent.name}/{folder.parent.name}/{folder.name}"
    if reused == total:
        return (f"{side}: reusing all {total} answers saved in {where} (same prompts, decoding "
                "and weights).")
    if reused:
        return (f"{side}: reusing {reused} of {total} answers saved in {where} by a run that "
                f"stopped; generating the other {total - reused}.")
    return f"{side}: generating {total} answers, saved batch by batch in {where}."


def generate_or_reuse(
    model: Any, tokenizer: Any, prompts: Sequence[str], settings: DecodingSettings, side: str,
    adapter_dir: Path, generate: Generate, store: Path,
) -> list[list[Generation]]:
    """One side's answers, a batch at a time; each batch is saved as it finishes, and reused.

    So a kill during the trained pass keeps the base pass and the trained batches done so far.
    Each batch is generated on its own (sampled decoding seeds each batch alike), so a resumed
    pass draws what an unbroken one would.
    """
    folder = answers_folder(store, side, prompts, settings, adapter_dir)
    size = settings.batch_size
    batches = [list(prompts[start : start + size]) for start in range(0, len(prompts), size)]
    paths = [folder / f"{i * size:06d}.json" for i in range(len(batches))]
    saved = [_saved_batch(path, batch) for path, batch in zip(paths, batches, strict=True)]
    reused = sum(len(batch) for batch, found in zip(batches, saved, strict=True) if found)
    print(describe_reuse(side, reused, len(prompts), folder), flush=True)
    answers: list[list[Generation]] = []
    for path, batch, found in zip(paths, batches, saved, strict=True):
        if found is None:
            found = generate(model, tokenizer, batch, settings, side, adapter_dir)
            rows = [[asdict(sample) for sample in samples] for samples in found]
            write_json_atomic(path, {"prompts": fingerprint(batch), "answers": rows})
            fault_point(f"eval:{side}", len(answers) + len(batch))
        answers.extend(found)
    for stale in store.glob(f"{side}-*"):  # answers for other prompts, decoding or weights
        if stale != folder:
            shutil.rmtree(stale, ignore_errors=True)
    return answers


def evaluate(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, str]], settings: DecodingSettings,
    adapter_dir: Path, generate: Generate = generate_side, store: Path | None = None,
) -> dict[str, Any]:
    """Base and trained on the same rows: one prompt list, one settings object, one scorer.

    With `store` (notebook 05: run/eval/answers), answers are saved per model and per batch, and
    a rerun reuses them, saying so.
    """
    questions = [row["question"] for row in rows]
    golds = [extract_gold_answer(row["answer"]) for row in rows]
    prompts = build_prompts(tokenizer, questions)  # built once: both sides get these very strings
    if store is not None:
        check_writable(store)
    outputs = {
        side: generate(model, tokenizer, prompts, settings, side, adapter_dir) if store is None
        else generate_or_reuse(model, tokenizer, prompts, settings, side, adapter_dir, generate,
                               store)
        for side in SIDES
    }
    return {
        "settings": asdict(settings),
        "settings_fingerprint": fingerprint(settings),
        "prompts_fingerprint": fingerprint(prompts),
        "example_prompt": prompts[0],
        "scores": {side: score(outputs[side], golds) for side in SIDES},
        "problems": per_problem_rows(questions, golds, outputs["base"], outputs["trained"]),
    }


def gains(results: dict[str, Any]) -> dict[str, float]:
    """Accuracy gains in points: lenient is reasoning; strict minus lenient is format."""
    base, trained = results["scores"]["base"], results["scores"]["trained"]
    strict = trained["strict"]["accuracy"] - base["strict"]["accuracy"]
    lenient = trained["lenient"]["accuracy"] - base["lenient"]["accuracy"]
    return {"strict": 100 * strict, "lenient": 100 * lenient, "format": 100 * (strict - lenient)}


def flips(results: dict[str, Any], mode: Mode = "strict") -> dict[str, list[dict[str, Any]]]:
    """Problems the training fixed and problems it broke, in `mode`."""
    rows = results["problems"]
    return {kind: [r for r in rows if r[f"change_{mode}"] == kind] for kind in ("fixed", "broken")}


def mcnemar_p(fixed: int, broken: int) -> float:
    """Exact two-sided McNemar p-value: under "no change", each flip is a fair coin."""
    if fixed < 0 or broken < 0:
        raise ValueError(f"Flip counts must be >= 0, got fixed={fixed}, broken={broken}.")
    n = fixed + broken
    tail = sum(math.comb(n, k) for k in range(min(fixed, broken) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_bootstrap(
    base: Sequence[bool], trained: Sequence[bool], resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile interval of trained minus base accuracy, resampling problems as pairs."""
    import numpy as np

    if len(base) != len(trained) or not base:
        raise ValueError(f"Need two equal, non-empty lists of outcomes, got {len(base)} and "
                         f"{len(trained)}.")
    diff = np.asarray(trained, dtype=float) - np.asarray(base, dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(diff), size=(resamples, len(diff)))
    low, high = np.percentile(diff[picks].mean(axis=1), [2.5, 97.5])
    return float(low), float(high)


def paired_test(results: dict[str, Any], mode: Mode = "strict") -> dict[str, Any]:
    """The paired comparison: flips each way, the gain with a bootstrap 95% CI, McNemar's p."""
    rows = results["problems"]
    base = [bool(r[f"base_{mode}"]) for r in rows]
    trained = [bool(r[f"trained_{mode}"]) for r in rows]
    fixed = sum(t and not b for b, t in zip(base, trained, strict=True))
    broken = sum(b and not t for b, t in zip(base, trained, strict=True))
    low, high = paired_bootstrap(base, trained)
    return {
        "mode": mode, "n": len(rows), "fixed": fixed, "broken": broken,
        "gain": (fixed - broken) / len(rows), "ci_low": low, "ci_high": high,
        "mcnemar_p": mcnemar_p(fixed, broken),
    }


def describe_paired(test: dict[str, Any]) -> str:
    """One sentence: the paired gain, its interval, the flips and whether it is more than noise."""
    verdict = (
        "the interval excludes 0: a real change" if test["ci_low"] > 0 or test["ci_high"] < 0
        else "the interval includes 0: not shown to differ"
    )
    return (
        f"{test['mode']}: {100 * test['gain']:+.1f} points on {test['n']} problems "
        f"(paired bootstrap 95% CI {100 * test['ci_low']:+.1f} to {100 * test['ci_high']:+.1f}); "
        f"{test['fixed']} fixed, {test['broken']} broken, McNemar p = {test['mcnemar_p']:.2g}; "
        f"{verdict}."
    )


def summary_table(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per model: the numbers the notebook and README show, rounded for reading."""
    table = []
    for side in SIDES:
        s = results["scores"][side]
        row: dict[str, Any] = {"model": side, "n": s["n"]}
        for mode in MODES:
            m = s[mode]
            row[f"{mode} acc %"] = round(100 * m["accuracy"], 1)
            row[f"{mode} 95% CI"] = f"{100 * m['ci_low']:.1f}-{100 * m['ci_high']:.1f}"
        row["format %"] = round(100 * s["format_rate"], 1)
        row["truncated %"] = round(100 * s["truncation_rate"], 1)
        row["mean tokens"] = round(s["mean_tokens"], 1)
        table.append(row)
    return table


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """A GitHub markdown table from a list of same-keyed dicts (for the README)."""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def save_results(results: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write results.json (everything) and problems.csv (the per-problem table), each atomically."""
    json_path, csv_path = out_dir / "results.json", out_dir / "problems.csv"
    write_json_atomic(json_path, results)
    partial = csv_path.with_name(csv_path.name + ".partial")
    with partial.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results["problems"][0]))
        writer.writeheader()
        writer.writerows(results["problems"])
    partial.replace(csv_path)
    return json_path, csv_path


def load_results(out_dir: Path) -> dict[str, Any] | None:
    """The results.json a previous run saved in `out_dir`, or None (also when it is not whole)."""
    path = out_dir / "results.json"
    return None if file_problem(path) else json.loads(path.read_text())


def compare_runs(previous: dict[str, Any] | None, current: dict[str, Any]) -> str:
    """One line per model and mode: how accuracy moved since the previous saved evaluation."""
    if previous is None:
        return "No previous evaluation saved here: this run is the first."
    same = all(
        previous.get(key) == current[key] for key in ("settings_fingerprint", "prompts_fingerprint")
    )
    lines = ["Same prompts and decoding as the previous run." if same else
             "The previous run used different prompts or decoding: compare with care."]
    for side in SIDES:
        for mode in MODES:
            old = 100 * previous["scores"][side][mode]["accuracy"]
            new = 100 * current["scores"][side][mode]["accuracy"]
            lines.append(f"{side:>7} {mode:>7}: {old:5.1f}% -> {new:5.1f}%")
    return "\n".join(lines)


def require_adapter(run: Path) -> Path:
    """The whole adapter notebook 05 saved in `run`, or a clear error saying how to make it."""
    if not has_adapter(run):
        raise AdapterMissingError(
            f"No trained LoRA adapter in {shown(run / 'adapter')}: run notebook 05 first (or "
            "scripts/train_grpo.py) with this profile, or pass the run's adapter folder."
        )
    return usable_adapter(run)


def plot_before_after(results: dict[str, Any], ax: Any = None) -> Any:
    """Grouped bars, base vs trained: strict, lenient and format rates, with 95% Wilson bars."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(7, 3.8))[1]
    labels = ["strict\n(right number,\ntaught format)", "lenient\n(right number\nanywhere)",
              "format\n(an <answer>\nspan at all)"]
    width = 0.38
    for offset, side in ((-width / 2, "base"), (width / 2, "trained")):
        s = results["scores"][side]
        hits = [s["strict"]["correct"], s["lenient"]["correct"], round(s["format_rate"] * s["n"])]
        rates = [100 * h / s["n"] for h in hits]
        bounds = [wilson_interval(h, s["n"]) for h in hits]
        err = [[r - 100 * lo for r, (lo, _) in zip(rates, bounds, strict=True)],
               [100 * hi - r for r, (_, hi) in zip(rates, bounds, strict=True)]]
        bars = ax.bar([i + offset for i in range(3)], rates, width, yerr=err, capsize=4, label=side)
        ax.bar_label(bars, fmt="%.0f%%", padding=2, fontsize=8)
    ax.set_xticks(range(3), labels)
    ax.set_ylabel("% of problems")
    ax.set_ylim(0, 105)
    ax.set_title(f"Held-out problems, n = {results['scores']['base']['n']} (95% Wilson intervals)")
    ax.legend()
    return ax


def plot_lengths(results: dict[str, Any], ax: Any = None) -> Any:
    """Histogram of completion lengths per model, with the token limit where truncation starts."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 3))[1]
    limit = results["settings"]["max_new_tokens"]
    bins = range(0, limit + 2, max(1, limit // 16))
    for side in SIDES:
        lengths = [row[f"{side}_tokens"] for row in results["problems"]]
        ax.hist(lengths, bins=bins, alpha=0.55, label=side)
    ax.axvline(limit, color="black", linestyle="--", label="token limit: truncated")
    ax.set_xlabel("completion length (tokens)")
    ax.set_ylabel("problems")
    ax.legend()
    return ax


def latest_results(profile_name: str, runs: Path = ROOT / "runs") -> Path:
    """The newest <runs>/*/<profile>/eval/results.json (what `make course` wrote last)."""
    found = list(runs.glob(f"*/{profile_name}/eval/results.json"))
    if not found:
        raise FileNotFoundError(
            f"No {profile_name} evaluation under {runs.name}/: run `make course` (or notebook 06)."
        )
    return max(found, key=lambda path: (path.stat().st_mtime, str(path)))


def results_markdown(results: dict[str, Any]) -> str:
    """The before/after table with one line saying how it was measured."""
    s = results["settings"]
    how = "greedy" if s["temperature"] == 0 else f"temperature {s['temperature']}"
    return (
        f"{markdown_table(summary_table(results))}\n\n"
        f"Same prompts for both models, {how} decoding, at most {s['max_new_tokens']} new tokens; "
        "95% Wilson intervals."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print a saved evaluation as a markdown table.")
    parser.add_argument("results", nargs="?", type=Path, help="results.json (default: newest)")
    parser.add_argument("--profile", default="smoke", help="profile whose newest run to read")
    args = parser.parse_args(argv)
    path = args.results or latest_results(args.profile)
    print(f"<!-- from {shown(path.resolve())} -->")
    print(results_markdown(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
