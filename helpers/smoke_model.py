"""A tiny Qwen2-architecture model and tokenizer, built offline for the smoke profile.

No weights can be downloaded in CI, so the course builds its own model from scratch. It is
saved in the Hugging Face format and then loaded through exactly the same unsloth calls as a
real model on a GPU. The tokenizer splits every digit into its own token, as Qwen2's does, so
numbers are spelled the same way everywhere. A warm start (supervised fine-tuning on formatted
solutions of the one-step synthetic problems: the "cold start" of DeepSeek-R1's recipe) teaches
the answer format and some of the arithmetic: it stops while about 40% of held-out answers are
right, so GRPO has right and wrong answers in its groups to tell apart. It stops at a constant
learning rate, while its samples are still nearly as often right as its greedy answers: GRPO
learns from samples (see `warm_start`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from helpers.data import FORMAT_TAGS, SYSTEM_PROMPT
from helpers.paths import cache_root
from helpers.synthetic import synthetic_split

# Bump when the recipe changes: the cache key includes it, so old builds are not reused.
RECIPE = {
    "version": 3,
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 256,
    "initializer_range": 0.02,
    "corpus_problems": 4000,
    "seed": 0,
    # Greedy strict accuracy on the 200 held-out problems, traced with warm_start(on_step=...):
    # 9% after 60 steps, 19% after 120, 30% after 180, 40% after 240 (38.5% once in 4-bit).
    "warm_start_steps": 240,
    "warm_start_batch": 32,
    "warm_start_lr": 2e-3,
    "warm_start_warmup": 50,
}

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def smoke_model_dir(root: Path | None = None) -> Path:
    key = hashlib.sha256(json.dumps(RECIPE, sort_keys=True).encode()).hexdigest()[:10]
    return (root or cache_root()) / f"smoke-model-{key}"


def formatted_solution(answer_text: str) -> str:
    """A GSM8K answer rewritten in the course's format: reasoning tags, then answer tags."""
    reasoning, number = answer_text.rsplit("####", 1)
    return (
        f"{FORMAT_TAGS[0]}\n{reasoning.strip()}\n{FORMAT_TAGS[1]}\n"
        f"{FORMAT_TAGS[2]}\n{number.strip()}\n{FORMAT_TAGS[3]}"
    )


def _corpus_rows() -> list[dict[str, str]]:
    # Drawn from the training split, so no held-out question is ever in the warm start either.
    return synthetic_split("train", RECIPE["corpus_problems"])


def _training_corpus() -> list[str]:
    # The system prompt and role names come with every problem, as in the chat-formatted training
    # text, so BPE learns them as whole words: shorter prompts, faster steps.
    texts = []
    for row in _corpus_rows():
        texts += [SYSTEM_PROMPT, "system user assistant", row["question"]]
        texts.append(formatted_solution(row["answer"]))
    return texts


def build_tokenizer():
    """Byte-level BPE with one token per digit, trained on the course problems; a chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    # One token per digit (as in Qwen2's tokenizer): "47" is always "4" "7", never a merged piece.
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=RECIPE["vocab_size"],
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(_training_corpus(), trainer=trainer)
    # Format tags are ordinary (non-special) tokens: completions are decoded with
    # skip_special_tokens=True, and special tags would vanish, so a format reward could never fire.
    core.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in FORMAT_TAGS])
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        # Without this the tokenizer emits token_type_ids, which `generate` rejects.
        model_input_names=["input_ids", "attention_mask"],
        padding_side="left",
    )


def build_model(tokenizer):
    """A randomly initialised Qwen2 causal LM sized by RECIPE."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(RECIPE["seed"])
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=RECIPE["hidden_size"],
        intermediate_size=RECIPE["intermediate_size"],
        num_hidden_layers=RECIPE["num_hidden_layers"],
        num_attention_heads=RECIPE["num_attention_heads"],
        num_key_value_heads=RECIPE["num_key_value_heads"],
        max_position_embeddings=RECIPE["max_position_embeddings"],
        initializer_range=RECIPE["initializer_range"],
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    return Qwen2ForCausalLM(config)


def _warm_start_examples(tokenizer) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids + EOS) for every corpus problem, in the course's chat format."""
    from helpers.data import make_prompt

    examples = []
    for row in _corpus_rows():
        messages = make_prompt(row["question"])
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        answer = formatted_solution(row["answer"]) + tokenizer.eos_token
        examples.append((prompt, tokenizer(answer, add_special_tokens=False)["input_ids"]))
    return examples


def warm_start(model, tokenizer, steps: int | None = None, on_step=None) -> list[float]:
    """Supervised fine-tuning on formatted solutions (full weights, fp32); returns the losses.

    `on_step(step, model)` runs after every step, in eval mode: e.g. to trace held-out accuracy.
    """
    import random

    import torch

    examples = _warm_start_examples(tokenizer)
    rng = random.Random(RECIPE["seed"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster than two fighting
    optimizer = torch.optim.AdamW(model.parameters(), lr=RECIPE["warm_start_lr"], weight_decay=0.0)
    total, warmup = steps or RECIPE["warm_start_steps"], RECIPE["warm_start_warmup"]
    # A linear ramp (a high learning rate from step 1 diverges), then constant. Not decayed: a
    # decayed warm start reached 58% greedy but sampled at temperature 1 only 22% right, too unsure
    # for GRPO, which then lost 4.5 points; stopped at a constant rate, samples were right almost as
    # often as greedy answers, and GRPO gained (issue 12's measurements, README).
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / warmup))
    model.train()
    losses = []
    for step in range(1, total + 1):
        batch = rng.sample(examples, RECIPE["warm_start_batch"])
        width = max(len(p) + len(c) for p, c in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)  # loss on the answer tokens only
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (prompt, completion) in enumerate(batch):
            n = len(prompt) + len(completion)
            ids[i, :n] = torch.tensor(prompt + completion)
            labels[i, len(prompt) : n] = torch.tensor(completion)
            mask[i, :n] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if on_step is not None:
            model.eval()
            on_step(step, model)
            model.train()
    torch.set_num_threads(threads)
    model.eval()
    return losses


def ensure_smoke_model(root: Path | None = None) -> Path:
    """Build and save the tiny model once; later calls return the cached folder."""
    target = smoke_model_dir(root)
    if (target / "config.json").exists():
        return target
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    warm_start(model, tokenizer)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(target)  # atomic: a half-written build is never picked up
    except OSError:  # another process finished the same build first
        shutil.rmtree(staging)
    return target


def grpo_gain(output_dir: Path, seed: int | None = None, max_steps: int | None = None) -> dict:
    """Train the smoke model as notebook 04 does, evaluate as notebook 05 does; the paired result.

    The caller imports unsloth first. Returns `helpers.evaluation.paired_test` (strict) with both
    accuracies and the training seconds added.
    """
    from unsloth import FastLanguageModel  # first: it patches trl on import

    import time

    from trl import GRPOTrainer

    from helpers.data import grpo_train_dataset, load_gsm8k
    from helpers.evaluation import decoding_settings, evaluate, paired_test
    from helpers.export import load_trained
    from helpers.hardware import detect_hardware, use_one_cpu_thread
    from helpers.model import load_kwargs, lora_kwargs
    from helpers.profiles import PROFILES
    from helpers.rewards import REWARD_FUNCS
    from helpers.session import SEED
    from helpers.training import make_grpo_config, save_adapter

    profile, hw = PROFILES["smoke"], detect_hardware()
    use_one_cpu_thread(hw)  # as the notebooks' start() does
    model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(profile))
    model = FastLanguageModel.get_peft_model(model, **lora_kwargs(profile))
    overrides = {"seed": SEED if seed is None else seed, "save_strategy": "no"}
    if max_steps:
        overrides["max_steps"] = max_steps
    config = make_grpo_config(profile, hw, output_dir, **overrides)
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=REWARD_FUNCS, args=config,
        train_dataset=grpo_train_dataset(profile, tokenizer),
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    # Notebook 05's path: the saved adapter, loaded back on its base model for inference.
    adapter = save_adapter(model, tokenizer, Path(output_dir))
    model, tokenizer = load_trained(profile, adapter)
    rows = list(load_gsm8k("test", profile))
    results = evaluate(model, tokenizer, rows, decoding_settings(profile), adapter)
    scores = results["scores"]
    return {
        **paired_test(results, "strict"),
        "base": scores["base"]["strict"]["accuracy"],
        "trained": scores["trained"]["strict"]["accuracy"],
        "train_seconds": seconds,
        "log_history": trainer.state.log_history,
    }
