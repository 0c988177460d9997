"""A tiny Qwen2-architecture model and tokenizer, built offline for the smoke profile.

No weights can be downloaded in CI, so the course builds its own model from scratch. It is
saved in the Hugging Face format and then loaded through exactly the same unsloth calls as a
real model on a GPU. It has random weights: it shows that the pipeline runs, not that it reasons.
"""

from __future__ import annotations

import hashlib
import json
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


def _training_corpus() -> list[str]:
    texts = [SYSTEM_PROMPT]
    for row in generate_problems(RECIPE["corpus_problems"], seed=RECIPE["seed"]):
        reasoning, number = row["answer"].rsplit("####", 1)
        texts.append(row["question"])
        texts.append(f"{FORMAT_TAGS[0]}\n{reasoning.strip()}\n{FORMAT_TAGS[1]}\n")
        texts.append(f"{FORMAT_TAGS[2]}\n{number.strip()}\n{FORMAT_TAGS[3]}")
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


def ensure_smoke_model(root: Path | None = None) -> Path:
    """Build and save the tiny model once; later calls return the cached folder."""
    target = smoke_model_dir(root)
    if (target / "config.json").exists():
        return target
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    staging = target.with_name(target.name + ".partial")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(target)  # atomic: a half-written build is never picked up
    return target
