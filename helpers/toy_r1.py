"""Toy R1: DeepSeek-R1's recipe (cold-start SFT, then GRPO) on two-digit arithmetic, on a CPU.

The task is "47+38=" answered as `<answer>85</answer>`. A character-level tokenizer
makes every digit one token, and a ~1M-parameter Qwen2 is fully fine-tuned. The cold start
teaches the format but stops at ~30% training accuracy, so GRPO has right answers to reinforce.
Two controls get the same wall time: more SFT on the labels, and rejection-sampling fine-tuning
(RFT: SFT on the model's own samples that the checker accepts, the same information GRPO sees).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from helpers.data import ANSWER_END, ANSWER_START, normalize_number
from helpers.grpo_scratch import (
    GRPOSettings,
    Rollout,
    grpo_loss,
    make_optimizer,
    mask_after_eos,
    per_token_logps,
    prepare_model,
    rollout,
    train_step,
)
from helpers.paths import ROOT

PAD, EOS = "<pad>", "<eos>"
CHARS = "0123456789+-=?. abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
HELDOUT_SIZE = 500
SPLIT_SEED = 1234  # the held-out set is the same for every seed
GRPO_DEFAULTS = GRPOSettings(num_generations=8, max_completion_length=8, temperature=1.0,
                             beta=0.0, loss_type="dapo", learning_rate=1e-4)
PROMPTS_PER_STEP = 8  # x 8 generations = 64 completions a step
SFT_LR = 1e-3
SFT_BATCH = 64


class CharTokenizer:
    """One token per character, plus the answer tags as whole tokens; pads on the left."""

    padding_side = "left"

    def __init__(self) -> None:
        self.vocab = [PAD, EOS, ANSWER_START, ANSWER_END, *CHARS]
        self.ids = {tok: i for i, tok in enumerate(self.vocab)}
        self.pad_token_id, self.eos_token_id = 0, 1

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Text -> ids, matching the two tags before single characters."""
        ids, i = [], 0
        while i < len(text):
            tag = next((t for t in (ANSWER_START, ANSWER_END) if text.startswith(t, i)), None)
            piece = tag or text[i]
            if piece not in self.ids:
                raise ValueError(f"Character {piece!r} is not in the toy vocabulary: {CHARS!r}.")
            ids.append(self.ids[piece])
            i += len(piece)
        return ids

    def __call__(self, texts: Sequence[str], return_tensors: str = "pt", padding: bool = True,
                 add_special_tokens: bool = False) -> dict[str, torch.Tensor]:
        """Left-padded input_ids and attention_mask, like a Hugging Face tokenizer."""
        rows = [self.encode(t) for t in texts]
        width = max(len(r) for r in rows)
        ids = torch.tensor([[self.pad_token_id] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        return {"input_ids": ids, "attention_mask": mask}

    def batch_decode(self, ids: torch.Tensor, skip_special_tokens: bool = True) -> list[str]:
        """Ids -> text; pad and EOS vanish, the answer tags stay (they are not special)."""
        skip = {self.pad_token_id, self.eos_token_id} if skip_special_tokens else set()
        return ["".join(self.vocab[i] for i in row if i not in skip) for row in ids.tolist()]


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str  # the gold number, as text

    @property
    def target(self) -> str:
        return f"{ANSWER_START}{self.answer}{ANSWER_END}"


def all_problems() -> list[Problem]:
    """Every 'a+b=' and 'a-b=' with a and b from 0 to 99: 20,000 problems."""
    return [Problem(f"{a}{op}{b}=", str(a + b if op == "+" else a - b))
            for a in range(100) for b in range(100) for op in "+-"]


def split_problems() -> tuple[list[Problem], list[Problem]]:
    """(train, held-out): a fixed random 500 are never trained on."""
    problems = all_problems()
    random.Random(SPLIT_SEED).shuffle(problems)
    return problems[HELDOUT_SIZE:], problems[:HELDOUT_SIZE]


def build_model(tokenizer: CharTokenizer, seed: int) -> Any:
    """A ~1M-parameter Qwen2 (hidden 128, 4 layers) with random weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def correct(texts: Sequence[str], golds: Sequence[str]) -> list[bool]:
    """The course's strict check (one <answer> span, same number) without math-verify's cost.

    helpers.rewards.is_correct takes ~4 ms a completion through math-verify, as long as a GRPO
    update here; for integer answers a normalised string match gives the same verdict (tested).
    """
    from helpers.rewards import extract_answer

    def ok(text: str, gold: str) -> bool:
        span = extract_answer(text)
        single = text.count(ANSWER_START) == 1 and text.count(ANSWER_END) == 1
        return single and span is not None and _value(span) == _value(gold)

    return [ok(t, g) for t, g in zip(texts, golds, strict=True)]


def _value(number: str) -> float | str:
    """'084' -> 84.0, '1,000' -> 1000.0; anything that is not a number stays text."""
    cleaned = normalize_number(number)
    try:
        return float(cleaned)
    except ValueError:
        return cleaned


def correctness_reward(completions: list[str], answer: list[str], **kwargs: Any) -> list[float]:
    """1.0 for a right answer in the right format, else 0.0 (trl's reward signature)."""
    return [float(ok) for ok in correct(completions, answer)]


@torch.no_grad()
def greedy_answers(model: Any, tokenizer: CharTokenizer, problems: Sequence[Problem]) -> list[str]:
    """Greedy completions, the way accuracy is measured."""
    was_training = model.training
    model.eval()
    enc = tokenizer([p.question for p in problems])
    out = model.generate(**enc, do_sample=False, max_new_tokens=8,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.train(was_training)
    return tokenizer.batch_decode(out[:, enc["input_ids"].size(1):])


def accuracy(model: Any, tokenizer: CharTokenizer, problems: Sequence[Problem]) -> float:
    """Greedy accuracy (a fraction) under the strict checker."""
    texts = greedy_answers(model, tokenizer, problems)
    return sum(correct(texts, [p.answer for p in problems])) / len(problems)


def sft_batch(tokenizer: CharTokenizer, questions: Sequence[str],
              completions: Sequence[str]) -> Rollout:
    """Prompt + completion + EOS as a Rollout, so SFT and GRPO share per_token_logps."""
    prompts = tokenizer(questions)
    rows = [tokenizer.encode(c) + [tokenizer.eos_token_id] for c in completions]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    return Rollout(prompts["input_ids"], prompts["attention_mask"], ids,
                   mask_after_eos(ids, tokenizer.eos_token_id))


def sft_step(model: Any, optimizer: torch.optim.Optimizer, batch: Rollout) -> float:
    """One step of cross-entropy on the completion tokens only (the prompt is given)."""
    mask = batch.completion_mask
    loss = -(per_token_logps(model, batch) * mask).sum() / mask.sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def _adamw(model: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)


def cold_start(model: Any, tokenizer: CharTokenizer, train: Sequence[Problem], seed: int,
               target_accuracy: float = 0.3, max_seconds: float = 150.0,
               check_every: int = 25) -> dict[str, float]:
    """SFT on labels until greedy accuracy on 128 training problems reaches the target."""
    rng = random.Random(seed)
    probe = rng.sample(list(train), 128)
    acc = 0.0

    def gate_reached(steps: int) -> bool:
        nonlocal acc
        if steps % check_every:
            return False
        acc = accuracy(model, tokenizer, probe)
        return acc >= target_accuracy

    start = time.perf_counter()
    steps = _sft_for(model, tokenizer, train, rng, max_seconds, stop=gate_reached)
    return {"steps": steps, "train_accuracy": acc, "seconds": time.perf_counter() - start}


def run_grpo(model: Any, tokenizer: CharTokenizer, train: Sequence[Problem], seed: int,
             seconds: float, settings: GRPOSettings = GRPO_DEFAULTS,
             on_step: Callable[[int, dict[str, float]], None] | None = None) -> list[dict]:
    """GRPO from scratch with the correctness reward, for a wall-time budget."""
    rng = random.Random(seed)
    model = prepare_model(model, settings)
    optimizer, history, start = make_optimizer(model, settings), [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        rows = rng.sample(list(train), PROMPTS_PER_STEP)
        stats = train_step(model, tokenizer, optimizer, [p.question for p in rows],
                           [correctness_reward], settings, answer=[p.answer for p in rows])
        history.append(stats)
        if on_step is not None:
            on_step(len(history), stats)
    return history


def run_sft(model: Any, tokenizer: CharTokenizer, train: Sequence[Problem], seed: int,
            seconds: float) -> int:
    """Control 1: keep doing SFT on the labelled answers for the same wall time."""
    return _sft_for(model, tokenizer, train, random.Random(seed), seconds)


def _sft_for(model: Any, tokenizer: CharTokenizer, train: Sequence[Problem], rng: random.Random,
             seconds: float, stop: Callable[[int], bool] | None = None) -> int:
    """SFT steps on labelled answers for `seconds`, or until `stop(steps)`; returns the steps."""
    optimizer, start, steps = _adamw(model, SFT_LR), time.perf_counter(), 0
    model.train()
    while time.perf_counter() - start < seconds:
        rows = rng.sample(list(train), SFT_BATCH)
        sft_step(model, optimizer, sft_batch(tokenizer, [p.question for p in rows],
                                             [p.target for p in rows]))
        steps += 1
        if stop is not None and stop(steps):
            break
    return steps


def run_rft(model: Any, tokenizer: CharTokenizer, train: Sequence[Problem], seed: int,
            seconds: float, settings: GRPOSettings = GRPO_DEFAULTS) -> dict[str, int]:
    """Control 2: sample like GRPO, keep the samples the checker accepts, SFT on them.

    Accepted samples are pooled until there are SFT_BATCH of them, so each update sees as many
    examples as the SFT control's: Adam on a handful of samples a step takes steps as large as on
    64, on a far noisier gradient, and wrecked the model in a first version.
    """
    rng, optimizer, start = random.Random(seed), _adamw(model, SFT_LR), time.perf_counter()
    steps = updates = accepted = 0
    pool: list[tuple[str, str]] = []
    model.train()
    while time.perf_counter() - start < seconds:
        rows = rng.sample(list(train), PROMPTS_PER_STEP)
        batch = rollout(model, tokenizer, [p.question for p in rows], settings)
        texts = tokenizer.batch_decode(batch.completion_ids)
        golds = [p.answer for p in rows for _ in range(settings.num_generations)]
        pool += [(rows[i // settings.num_generations].question, texts[i])
                 for i, ok in enumerate(correct(texts, golds)) if ok]
        steps += 1
        if len(pool) >= SFT_BATCH:
            questions, completions = zip(*pool[:SFT_BATCH], strict=True)
            sft_step(model, optimizer, sft_batch(tokenizer, questions, completions))
            accepted, updates, pool = accepted + SFT_BATCH, updates + 1, pool[SFT_BATCH:]
    return {"sampling_steps": steps, "updates": updates, "accepted": accepted}


@contextlib.contextmanager
def torch_threads(n: int):
    """Use n CPU threads inside the block. A 1M-parameter model gains nothing from a second
    thread, and on a shared 2-core machine two threads each ran ~10x slower than one."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_seed(seed: int, grpo_seconds: float = 150.0, control_seconds: float | None = None,
             cold_start_seconds: float = 150.0, controls: bool = True,
             num_threads: int = 1) -> dict[str, Any]:
    """Cold start, then GRPO and both controls from the same cold-start weights."""
    with torch_threads(num_threads):
        return _run_seed(seed, grpo_seconds, control_seconds, cold_start_seconds, controls)


def _run_seed(seed: int, grpo_seconds: float, control_seconds: float | None,
              cold_start_seconds: float, controls: bool) -> dict[str, Any]:
    tokenizer = CharTokenizer()
    train, heldout = split_problems()
    model = build_model(tokenizer, seed)
    start = time.perf_counter()
    cold = cold_start(model, tokenizer, train, seed, max_seconds=cold_start_seconds)
    row: dict[str, Any] = {"seed": seed, "cold_start": cold,
                           "acc_before": accuracy(model, tokenizer, heldout)}
    grpo_model = copy.deepcopy(model)
    history = run_grpo(grpo_model, tokenizer, train, seed, grpo_seconds)
    row["grpo_steps"] = len(history)
    row["acc_after_grpo"] = accuracy(grpo_model, tokenizer, heldout)
    row["cold_start_plus_grpo_s"] = time.perf_counter() - start
    row["reward_first_last"] = [history[0]["reward"], _mean([h["reward"] for h in history[-20:]])]
    row["samples"] = sample_table(grpo_model, tokenizer, heldout[:8])
    if controls:
        seconds = grpo_seconds if control_seconds is None else control_seconds
        sft_model, rft_model = copy.deepcopy(model), copy.deepcopy(model)
        row["sft_steps"] = run_sft(sft_model, tokenizer, train, seed, seconds)
        row["acc_after_sft_control"] = accuracy(sft_model, tokenizer, heldout)
        row["rft"] = run_rft(rft_model, tokenizer, train, seed, seconds)
        row["acc_after_rft"] = accuracy(rft_model, tokenizer, heldout)
    return row


def _mean(values: Sequence[float]) -> float:
    return sum(values) / max(len(values), 1)


def sample_table(model: Any, tokenizer: CharTokenizer,
                 problems: Sequence[Problem]) -> list[dict[str, Any]]:
    """A few greedy completions beside the gold answers: proof that the gain is not hacking."""
    texts = greedy_answers(model, tokenizer, problems)
    oks = correct(texts, [p.answer for p in problems])
    return [{"question": p.question, "completion": t, "gold": p.answer, "correct": ok}
            for p, t, ok in zip(problems, texts, oks, strict=True)]


# ---- What each memory trick saves: peak RSS of one GRPO update, one process per setting --------

class PeakRss:
    """Highest resident memory (MB) seen while the block runs, polled from /proc every 2 ms.

    getrusage's ru_maxrss cannot do this: it is the process's all-time peak, and importing
    torch, transformers and bitsandbytes already peaks above a small model's whole training step.
    """

    def __init__(self) -> None:
        self.peak_mb = self.start_mb = _rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.002):
            self.peak_mb = max(self.peak_mb, _rss_mb())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, _rss_mb())


def _rss_mb() -> float:
    """Current resident set size in MB (Linux /proc; elsewhere the all-time peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_probe(hidden: int, layers: int, batch: int, completion_length: int,
                 settings: GRPOSettings, steps: int = 2) -> dict[str, float]:
    """Training memory (peak RSS above the loaded libraries) of `steps` GRPO updates."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if settings.optim == "adamw_8bit":
        import bitsandbytes  # noqa: F401  (imported before the baseline, like torch)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(CharTokenizer()), hidden_size=hidden,
                         intermediate_size=4 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=completion_length + 32)
    prompt = torch.randint(4, 40, (batch, 16))
    completion = torch.randint(4, 40, (batch, completion_length))
    data = Rollout(prompt, torch.ones_like(prompt), completion, torch.ones_like(completion))
    advantages = torch.randn(batch)
    k = settings.gradient_accumulation_steps
    with PeakRss() as rss:
        model = prepare_model(Qwen2ForCausalLM(config), settings)
        optimizer = make_optimizer(model, settings)
        start = time.perf_counter()
        for _ in range(steps):
            for i in range(0, batch, batch // k):
                rows = slice(i, i + batch // k)
                loss, _ = grpo_loss(model, data.rows(rows), advantages[rows], settings,
                                    num_items_in_batch=completion.numel())
                loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        step_s = (time.perf_counter() - start) / steps
    return {"training_mb": rss.peak_mb - rss.start_mb, "peak_rss_mb": rss.peak_mb,
            "baseline_rss_mb": rss.start_mb, "step_s": step_s,
            "params_m": sum(p.numel() for p in model.parameters()) / 1e6}


def memory_probe_in_subprocess(**kwargs: Any) -> dict[str, float]:
    """Run memory_probe in a fresh Python, so one setting's peak cannot hide another's."""
    settings = kwargs.pop("settings", GRPOSettings())
    payload = json.dumps({**kwargs, "settings": settings.__dict__})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "helpers.toy_r1", "--memory-probe", payload],
                         capture_output=True, text=True, check=False, cwd=ROOT, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"memory probe failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


MEMORY_TRICKS = {
    "baseline": {},
    "gradient_accumulation (4 chunks)": {"gradient_accumulation_steps": 4},
    "gradient_checkpointing": {"gradient_checkpointing": True},
    "adamw_8bit": {"optim": "adamw_8bit"},
}


def measure_memory_tricks(hidden: int = 256, layers: int = 4, batch: int = 16,
                          completion_length: int = 128) -> dict[str, dict[str, float]]:
    """Training memory with each trick switched on alone, each in its own process."""
    results = {}
    for name, switch in MEMORY_TRICKS.items():
        settings = GRPOSettings(**switch)
        results[name] = memory_probe_in_subprocess(
            hidden=hidden, layers=layers, batch=batch, completion_length=completion_length,
            settings=settings)
    base = results["baseline"]["training_mb"]
    for row in results.values():
        row["saved_mb"] = base - row["training_mb"]
    return results


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--memory-probe":
    args = json.loads(sys.argv[2])
    args["settings"] = GRPOSettings(**args["settings"])
    print(json.dumps(memory_probe(**args)))


# ---- Proof on one batch: this module's loss and gradient equal trl's GRPOTrainer ----------------

def smoke_batch(tokenizer: Any, num_generations: int = 4, completion_length: int = 12,
                seed: int = 0) -> Rollout:
    """Two prompts x G random completions, EOS at different places (one truncated)."""
    gen = torch.Generator().manual_seed(seed)
    enc = tokenizer(["What is 2+3?", "Tom has 7 apples and eats 2. How many are left?"],
                    return_tensors="pt", padding=True)
    prompt_ids = enc["input_ids"].repeat_interleave(num_generations, 0)
    prompt_mask = enc["attention_mask"].repeat_interleave(num_generations, 0)
    ids = torch.randint(3, len(tokenizer), (2 * num_generations, completion_length), generator=gen)
    for row in range(2 * num_generations - 1):  # the last row keeps no EOS: truncated
        eos_at = int(torch.randint(0, completion_length, (1,), generator=gen))
        ids[row, eos_at] = tokenizer.eos_token_id
        ids[row, eos_at + 1:] = tokenizer.pad_token_id
    return Rollout(prompt_ids, prompt_mask, ids, mask_after_eos(ids, tokenizer.eos_token_id))


def _loss_and_grads(model: Any, compute: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss = compute()
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


def compare_with_trl(loss_type: str, beta: float, output_dir: str,
                     accumulation: int = 2) -> dict[str, float]:
    """Loss and gradient from grpo_loss and from trl's GRPOTrainer.compute_loss, same inputs.

    The smoke model in float32; old log-probs 0.3 nats off the current ones (so some ratios
    clip), a reference 0.5 nats off, temperature 0.7, eps 0.2 / eps_high 0.28, and the batch is
    one of `accumulation` chunks, so each loss type's normalisation is exercised.
    """
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from helpers.grpo_scratch import group_advantages
    from helpers.smoke_model import ensure_smoke_model

    g, length = 4, 12
    path = ensure_smoke_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    args = GRPOConfig(
        output_dir=output_dir, use_cpu=True, bf16=False, fp16=False, report_to="none",
        per_device_train_batch_size=2 * g, num_generations=g, max_completion_length=length,
        loss_type=loss_type, beta=beta, epsilon=0.2, epsilon_high=0.28, temperature=0.7,
        gradient_accumulation_steps=accumulation,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=correctness_reward, args=args,
                          train_dataset=Dataset.from_list([{"prompt": "hi", "answer": "1"}] * 16),
                          processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = accumulation  # the training loop sets it
    model = trainer.model.train()
    settings = GRPOSettings(num_generations=g, max_completion_length=length, temperature=0.7,
                            epsilon=0.2, epsilon_high=0.28, beta=beta, loss_type=loss_type,
                            gradient_accumulation_steps=accumulation)
    batch = smoke_batch(tokenizer, g, length)
    gen = torch.Generator().manual_seed(1)
    advantages = group_advantages(torch.randint(0, 2, (2 * g,), generator=gen).float(), g)
    with torch.no_grad():
        logps = per_token_logps(model, batch, settings.temperature)
    old = logps + 0.3 * torch.randn(logps.shape, generator=gen)
    ref = logps + 0.5 * torch.randn(logps.shape, generator=gen) if beta else None
    num_items = batch.completion_mask.sum() * accumulation  # tokens in the generation batch
    inputs = {"prompt_ids": batch.prompt_ids, "prompt_mask": batch.prompt_mask,
              "completion_ids": batch.completion_ids, "completion_mask": batch.completion_mask,
              "advantages": advantages, "old_per_token_logps": old,
              "num_items_in_batch": num_items}
    if beta:
        inputs["ref_per_token_logps"] = ref
    trl_loss, trl_grads = _loss_and_grads(model, lambda: trainer.compute_loss(model, inputs))
    loss, grads = _loss_and_grads(
        model, lambda: grpo_loss(model, batch, advantages, settings, old, ref, num_items)[0])
    return {"loss_type": loss_type, "beta": beta, "loss_trl": trl_loss, "loss_ours": loss,
            "loss_rel_err": abs(loss - trl_loss) / abs(trl_loss),
            "grad_rel_err": ((grads - trl_grads).norm() / trl_grads.norm()).item()}
