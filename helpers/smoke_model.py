"""A tiny Qwen2-architecture model and tokenizer, built offline for the smoke profile.

No weights can be downloaded in CI, so the course builds its own model from scratch. It is
saved in the Hugging Face format and then loaded through exactly the same unsloth calls as a
real model on a GPU. A short warm start (supervised fine-tuning on formatted synthetic solutions)
teaches it the answer format but not arithmetic: it writes well-formed, mostly wrong answers,
which gives GRPO's rewards something to tell apart. It shows the pipeline runs, not reasoning.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from helpers.data import FORMAT_TAGS, SYSTEM_PROMPT
from helpers.paths import cache_root
from helpers.synthetic import generate_problems

# Bump when the recipe changes: the cache key includes it, so old builds are not reused.
RECIPE = {
    "version": 1,
    "vocab_size": 768,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    # LoRA barely moves a random tiny model at the usual 0.02; at 0.2 training visibly moves it.
    "initializer_range": 0.2,
    "corpus_problems": 2000,
    "seed": 0,
    "warm_start_steps": 100,  # enough for well-formed answers (20/20 on held-out problems)
    "warm_start_batch": 16,
    "warm_start_lr": 6e-3,
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
    return generate_problems(RECIPE["corpus_problems"], seed=RECIPE["seed"])


def _training_corpus() -> list[str]:
    texts = [SYSTEM_PROMPT]
    for row in _corpus_rows():
        texts += [row["question"], formatted_solution(row["answer"])]
    return texts


def build_tokenizer():
    """Byte-level BPE trained on the course's own problems, with a chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
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
        torch_dtype="float32",
    )
    return Qwen2ForCausalLM(config)


def warm_start(model, tokenizer) -> list[float]:
    """Teach the format by supervised fine-tuning on formatted solutions; returns the losses."""
    import random

    import torch

    from helpers.data import make_prompt

    examples = []
    for row in _corpus_rows():
        messages = make_prompt(row["question"])
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        answer = formatted_solution(row["answer"]) + tokenizer.eos_token
        examples.append((prompt, tokenizer(answer, add_special_tokens=False)["input_ids"]))
    rng = random.Random(RECIPE["seed"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster than two fighting
    optimizer = torch.optim.AdamW(model.parameters(), lr=RECIPE["warm_start_lr"])
    model.train()
    losses = []
    for _ in range(RECIPE["warm_start_steps"]):
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
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
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
