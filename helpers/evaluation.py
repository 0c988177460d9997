"""Held-out evaluation: the base and the trained model, same prompts, same decoding, same scoring.

The base model is the trained one with its LoRA adapter switched off (peft's `disable_adapter()`
in `transformers`, no LoRA request in vLLM), so no second copy of the weights is loaded.
"""

from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from helpers.data import build_prompts, extract_gold_answer, make_prompt
from helpers.paths import ROOT, shown
from helpers.profiles import SEED
from helpers.run_folder import RunFolder, as_run, has_adapter, usable_adapter
from helpers.stats import SIDES, paired_bootstrap, pass_at_k, wilson_interval
from helpers.storage import check_writable, fault_point, file_problem, write_json_atomic

if TYPE_CHECKING:
    from helpers.profiles import Profile

from helpers.rewards import Mode

MODES: tuple[Mode, ...] = ("strict", "lenient")


class AdapterMissingError(FileNotFoundError):
    """Notebook 05 has not saved a LoRA adapter for this profile yet."""


@dataclass(frozen=True)
class DecodingSettings:
    """How completions are generated: one frozen object, shared by the base and trained runs."""

    max_new_tokens: int
    temperature: float = 0.0  # 0 means greedy: the single most likely completion
    top_p: float = 1.0
    num_samples: int = 1  # k of pass@k; more than 1 needs temperature > 0
    seed: int = SEED
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
    return DecodingSettings(**{"max_new_tokens": profile.max_completion_length, **overrides})


def fingerprint(obj: Any) -> str:
    """A short sha256 of prompts or settings, stored with the results to prove they matched."""
    if isinstance(obj, DecodingSettings):
        obj = asdict(obj)
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


class _PassLine:
    """Counts answers as batches finish and prints one line when the pass ends ('desc: 32 answers
    in 0.5 s'); nothing when `desc` is None. No bar: a finished bar stays in a notebook's stored
    output, one per pass."""

    def __init__(self, desc: str | None) -> None:
        self.desc, self.done, self.started = desc, 0, time.perf_counter()

    def update(self, n: int) -> None:
        self.done += n

    def close(self) -> None:
        if self.desc is not None:
            seconds = time.perf_counter() - self.started
            print(f"{self.desc}: {self.done} answers in {seconds:.1f} s", flush=True)


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids) if isinstance(ids, list) else {ids}
    return {i for i in ids | {tokenizer.eos_token_id} if i is not None}


def generate_hf(
    model: Any, tokenizer: Any, prompts: Sequence[str], settings: DecodingSettings,
    desc: str | None,
) -> list[list[Generation]]:
    """Batched `model.generate` with left padding (CPU / smoke; no vLLM); one line titled `desc`
    when the pass ends, or none when it is None."""
    import torch

    eos, bar, results = _eos_ids(model, tokenizer), _PassLine(desc), []
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

    from helpers.loading import abort_unfinished

    abort_unfinished(model)  # what a stopped cell left in vLLM would come back first
    params = SamplingParams(
        temperature=settings.temperature, top_p=settings.top_p, n=settings.num_samples,
        max_tokens=settings.max_new_tokens, seed=settings.seed,
    )
    # Token ids, tokenized as on the transformers path, so vLLM adds no second BOS.
    token_prompts = [
        {"prompt_token_ids": tokenizer(p, add_special_tokens=False)["input_ids"]} for p in prompts
    ]
    bar = _PassLine("vLLM" if progress else None)
    outputs = model.fast_generate(
        token_prompts, sampling_params=params, lora_request=lora_request, use_tqdm=False
    )
    bar.update(len(prompts))
    bar.close()
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
    if generate is generate_side:  # one line for the whole pass, not one per batch
        generate = functools.partial(generate_side, progress=False)
    bar = _PassLine(side if reused < len(prompts) else None)
    answers: list[list[Generation]] = []
    for path, batch, found in zip(paths, batches, saved, strict=True):
        if found is None:
            found = generate(model, tokenizer, batch, settings, side, adapter_dir)
            bar.update(len(batch))
            rows = [[asdict(sample) for sample in samples] for samples in found]
            write_json_atomic(path, {"prompts": fingerprint(batch), "answers": rows})
            fault_point(f"eval:{side}", len(answers) + len(batch))
        answers.extend(found)
    bar.close()
    for stale in store.glob(f"{side}-*"):  # answers for other prompts, decoding or weights
        if stale != folder:
            shutil.rmtree(stale, ignore_errors=True)
    return answers


def evaluate(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, str]], settings: DecodingSettings,
    adapter_dir: Path, generate: Generate = generate_side, store: Path | None = None,
    messages: Callable[[str], list[dict[str, str]]] = make_prompt,
) -> dict[str, Any]:
    """Base and trained on the same rows: one prompt list, one settings object, one scorer.

    With `store` (notebook 06: the run folder's `answers`), answers are saved per model and per
    batch, and a rerun reuses them, saying so. `messages`: how a question becomes the chat (the
    lab's prompt arm leaves out the format instructions).
    """
    questions = [row["question"] for row in rows]
    golds = [extract_gold_answer(row["answer"]) for row in rows]
    prompts = build_prompts(tokenizer, questions, messages)  # one list, for both sides
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


# How training samples its groups: notebook 06 scores base and trained this way too, beside greedy.
SAMPLED_TEMPERATURE = 1.0
SAMPLED_ANSWERS = 4  # answers per problem


def sampled_settings(settings: DecodingSettings, num_samples: int = SAMPLED_ANSWERS
                     ) -> DecodingSettings:
    """`settings` sampled the way training samples: temperature 1, `num_samples` answers each."""
    return replace(settings, temperature=SAMPLED_TEMPERATURE, top_p=1.0, num_samples=num_samples)


def right_shares(generations: Sequence[Sequence[Generation]], golds: Sequence[str],
                 mode: Mode = "strict") -> list[float]:
    """Per problem, the share of its sampled answers that are right."""
    from helpers.rewards import is_correct

    return [sum(is_correct(s.text, gold, mode=mode) for s in samples) / len(samples)
            for samples, gold in zip(generations, golds, strict=True)]


def majority_right(samples: Sequence[Generation], gold: str, mode: Mode = "strict") -> bool:
    """maj@k: is the answer the samples give most often right? Ties go to the one seen first;
    samples with no answer abstain, and votes count equal strings (spaces aside)."""
    from helpers.rewards import final_answer, same_answer

    votes = Counter(" ".join(span.split()) for s in samples
                    if (span := final_answer(s.text, mode)))
    return bool(votes) and same_answer(votes.most_common(1)[0][0], gold)


def _paired(base: Sequence[float], trained: Sequence[float]) -> dict[str, Any]:
    """Both sides' means over problems, the gain, and its paired 95% bootstrap interval."""
    low, high = paired_bootstrap(base, trained)
    base_mean, trained_mean = sum(base) / len(base), sum(trained) / len(trained)
    return {"base": base_mean, "trained": trained_mean, "gain": trained_mean - base_mean,
            "ci_low": low, "ci_high": high}


def sampled_accuracy(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, str]], settings: DecodingSettings,
    adapter_dir: Path, generate: Generate = generate_side,
) -> dict[str, Any]:
    """Base and trained sampled on the same prompts through `evaluate`'s generation path, strict:
    each side's mean share of right samples, maj@k and pass@k, each gain paired by problem."""
    if settings.greedy:
        raise ValueError("sampled_accuracy needs sampling: pass sampled_settings(settings).")
    golds = [extract_gold_answer(row["answer"]) for row in rows]
    prompts = build_prompts(tokenizer, [row["question"] for row in rows])
    if generate is generate_side:  # one line per side below, counting every sample
        generate = functools.partial(generate_side, progress=False)
    k = settings.num_samples
    shares, majority, passed = {}, {}, {}
    for side in SIDES:
        started = time.perf_counter()
        generations = generate(model, tokenizer, prompts, settings, side, adapter_dir)
        print(f"{side}, sampled: {len(prompts) * k} answers ({k} a problem) in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        shares[side] = right_shares(generations, golds)
        majority[side] = [majority_right(s, gold) for s, gold in zip(generations, golds,
                                                                     strict=True)]
        passed[side] = [pass_at_k(k, round(share * k), k) for share in shares[side]]
    return {"settings": asdict(settings), "n": len(rows),
            **_paired(shares["base"], shares["trained"]), "per_problem": shares,
            "maj": {**_paired(majority["base"], majority["trained"]), "per_problem": majority},
            "pass": {**_paired(passed["base"], passed["trained"]), "per_problem": passed}}


def sharpening(sampled: dict[str, Any], results: dict[str, Any]) -> dict[str, float]:
    """Greedy gain minus sampled gain, paired by problem, with its 95% bootstrap interval: above
    0, training made the most likely answer right more often than it raised the right samples."""
    greedy = {side: [float(row[f"{side}_strict"]) for row in results["problems"]]
              for side in SIDES}
    shares = sampled["per_problem"]
    greedy_gain = [t - b for b, t in zip(greedy["base"], greedy["trained"], strict=True)]
    sampled_gain = [t - b for b, t in zip(shares["base"], shares["trained"], strict=True)]
    found = _paired(sampled_gain, greedy_gain)
    return {"difference": found["gain"], "ci_low": found["ci_low"], "ci_high": found["ci_high"]}


def _row(label: str, found: dict[str, Any], interval: bool = True) -> str:
    line = (f"{label:<24}{found['base']:>7.1%}{found['trained']:>9.1%}  "
            f"{100 * found['gain']:+.1f} points")
    if interval:
        line += (f" (paired 95% interval {100 * found['ci_low']:+.1f} to "
                 f"{100 * found['ci_high']:+.1f})")
    return line


def describe_sampled(sampled: dict[str, Any], results: dict[str, Any]) -> str:
    """Greedy, sampled, maj@k and pass@k accuracy, base and trained, and the paired test of
    whether training sharpened the most likely answer more than it raised the right samples."""
    greedy = {side: results["scores"][side]["strict"]["accuracy"] for side in SIDES}
    temperature = results["settings"]["temperature"]
    first = "greedy, 1 answer" if temperature == 0 else f"T={temperature:g}, 1st answer"
    k, hot = sampled["settings"]["num_samples"], f"T={sampled['settings']['temperature']:g}"
    rose = ("rose beyond its noise" if sampled["ci_low"] > 0 else "fell beyond its noise"
            if sampled["ci_high"] < 0 else "did not move beyond its noise")
    sharper = sharpening(sampled, results)
    if sharper["ci_low"] > 0:
        reading = "training sharpened the most likely answer more than it raised the right samples"
    elif sharper["ci_high"] < 0:
        reading = "the samples gained more than the most likely answer"
    else:
        reading = "the two gains cannot be told apart"
    return "\n".join([
        f"{sampled['n']} problems, strict     base  trained  gain",
        _row(first, {**greedy, "gain": greedy["trained"] - greedy["base"]}, interval=False),
        _row(f"sampled, {hot}, {k} answers", sampled),
        _row(f"maj@{k}, {hot}", sampled["maj"]),
        _row(f"pass@{k}, {hot}", sampled["pass"]),
        f"The sampled accuracy {rose}. Greedy gain minus sampled gain, paired by problem: "
        f"{100 * sharper['difference']:+.1f} points (95% interval {100 * sharper['ci_low']:+.1f} "
        f"to {100 * sharper['ci_high']:+.1f}): {reading}.",
    ])


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


def save_results(results: dict[str, Any], run: RunFolder | Path) -> tuple[Path, Path]:
    """Write the results (everything, JSON) and the per-problem table (CSV), each atomically."""
    json_path, csv_path = as_run(run).results, as_run(run).problems
    write_json_atomic(json_path, results)
    partial = csv_path.with_name(csv_path.name + ".partial")
    with partial.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results["problems"][0]))
        writer.writeheader()
        writer.writerows(results["problems"])
    partial.replace(csv_path)
    return json_path, csv_path


def load_results(run: RunFolder | Path) -> dict[str, Any] | None:
    """The results a previous evaluation saved in `run`, or None (also when not whole)."""
    path = as_run(run).results
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


def require_adapter(run: RunFolder | Path) -> Path:
    """The whole adapter notebook 05 saved in `run`, or a clear error saying how to make it."""
    if not has_adapter(run):
        raise AdapterMissingError(
            f"No trained LoRA adapter in {shown(as_run(run).adapter)}: run notebook 05 first (or "
            "scripts/train_grpo.py) with this profile, or pass the run's adapter folder."
        )
    return usable_adapter(run)


def latest_results(profile_name: str, runs: Path = ROOT / "runs") -> Path:
    """The newest evaluation of a <runs>/*/<profile> run (what `make course` wrote last)."""
    folders = [RunFolder(path) for path in runs.glob(f"*/{profile_name}")]
    found = [run.results for run in folders if run.results.is_file()]
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
