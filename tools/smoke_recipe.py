"""The smoke model's build recipe: a tokenizer, a tiny Qwen2, a warm start, and the manifest.

    python -m tools.smoke_recipe            # check models/smoke/ against RECIPE and its manifest
    python -m tools.smoke_recipe --rebuild  # build it again (a few minutes; see docs/results.md)

The course only checks the committed model (helpers.smoke_model); this module rebuilds it.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from helpers.data import FORMAT_TAGS, SYSTEM_PROMPT
from helpers.paths import shown
from helpers.smoke_model import (
    CHAT_TEMPLATE,
    MANIFEST,
    MODEL_DIR,
    RECIPE,
    SPECIAL_TOKENS,
    SmokeModelError,
    check_model_folder,
    file_digests,
)
from helpers.synthetic import synthetic_split


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
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


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


def validation_accuracy(model: Any, tokenizer: Any, rows: Sequence[dict[str, str]]) -> float:
    """Greedy strict accuracy on `rows`, decoded as notebook 06 decodes (the smoke budget)."""
    from helpers.data import build_prompts, extract_gold_answer
    from helpers.evaluation import DecodingSettings, generate_hf, score
    from helpers.profiles import SMOKE

    prompts = build_prompts(tokenizer, [row["question"] for row in rows])
    settings = DecodingSettings(max_new_tokens=SMOKE.max_completion_length, batch_size=100)
    generations = generate_hf(model, tokenizer, prompts, settings, "validation")
    return score(generations, [extract_gold_answer(row["answer"]) for row in rows])["strict"][
        "accuracy"
    ]


def is_check_step(step: int) -> bool:
    """Whether the warm start measures validation accuracy after `step`."""
    first, every = RECIPE["warm_start_first_check"], RECIPE["warm_start_check_every"]
    return step >= first and (step - first) % every == 0


def warm_start(
    model: Any, tokenizer: Any, measure: Callable[[Any], float] | None = None
) -> dict[str, Any]:
    """Supervised fine-tuning on formatted solutions (full weights, fp32) until the target.

    `measure(model)` gives the validation accuracy (default: `validation_accuracy` on the recipe's
    validation problems); returns the steps taken, the losses and every (step, accuracy) checked.
    """
    import random

    import torch

    if measure is None:
        rows = synthetic_split("validation", RECIPE["validation_problems"])
        measure = lambda m: validation_accuracy(m, tokenizer, rows)  # noqa: E731
    examples = _warm_start_examples(tokenizer)
    rng = random.Random(RECIPE["seed"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster than two fighting
    optimizer = torch.optim.AdamW(model.parameters(), lr=RECIPE["warm_start_lr"], weight_decay=0.0)
    warmup = RECIPE["warm_start_warmup"]
    # A linear ramp (a high learning rate from step 1 diverges), then constant. Not decayed: a
    # decayed warm start reached 58% greedy but sampled at temperature 1 only 22% right, too unsure
    # for GRPO, which then lost 4.5 points; stopped at a constant rate, samples were right almost as
    # often as greedy answers, and GRPO gained (measured in the course's first smoke recipes).
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / warmup))
    model.train()
    losses, checks = [], []
    for step in range(1, RECIPE["warm_start_max_steps"] + 1):
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
        if is_check_step(step):
            model.eval()
            checks.append((step, measure(model)))
            model.train()
            if checks[-1][1] >= RECIPE["warm_start_target"]:
                break
    torch.set_num_threads(threads)
    model.eval()
    if not checks or checks[-1][1] < RECIPE["warm_start_target"]:
        raise SmokeModelError(
            f"The warm start did not reach {RECIPE['warm_start_target']:.0%} validation accuracy "
            f"in {RECIPE['warm_start_max_steps']} steps (last checks: {checks[-3:]}): raise "
            "warm_start_max_steps or warm_start_lr in RECIPE."
        )
    return {"steps": len(losses), "losses": losses, "checks": checks}


def build_smoke_model(target: Path = MODEL_DIR) -> dict[str, Any]:
    """Build the model by RECIPE into `target` (replacing it) and return its manifest."""
    from helpers.hardware import cpu_kernel_path

    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    trace = warm_start(model, tokenizer)
    staging = target.with_name(f"{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    manifest = {
        "recipe": RECIPE,
        "warm_start_steps": trace["steps"],
        "validation_checks": trace["checks"],
        "built_on": cpu_kernel_path(),
        "files": file_digests(staging),
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)  # a half-written build never sits where the course looks
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check or rebuild the committed smoke model.")
    parser.add_argument("--rebuild", action="store_true", help=f"build into {shown(MODEL_DIR)}")
    parser.add_argument("--out", type=Path, default=MODEL_DIR, help="build somewhere else")
    args = parser.parse_args(argv)
    if args.rebuild:
        manifest = build_smoke_model(args.out)
        checks = ", ".join(f"{step}: {acc:.1%}" for step, acc in manifest["validation_checks"])
        print(f"Built {shown(args.out)} in {manifest['warm_start_steps']} warm-start steps "
              f"(validation accuracy at each check: {checks}).")
        return 0
    manifest = check_model_folder(args.out)
    print(f"{shown(args.out)} matches RECIPE version {RECIPE['version']} and its manifest "
          f"({manifest['warm_start_steps']} warm-start steps, built on "
          f"{manifest['built_on']['capability']}).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
