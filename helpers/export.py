"""Keep what you trained: the LoRA adapter, a merged 16-bit model, GGUF, and plain-transformers use.

Run as a script, it answers questions with a merged model through plain `transformers`, in a
process that never imports unsloth (the test and notebook 06 check that):

    python -m helpers.export MERGED_DIR --max-new-tokens 64 "What is 2 + 3?"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from helpers.data import make_prompt
from helpers.paths import ROOT

if TYPE_CHECKING:
    from helpers.hardware import Hardware
    from helpers.profiles import Profile

HUB_TOKEN_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def load_trained(profile: Profile, adapter_dir: Path, load_in_4bit: bool = True) -> tuple[Any, Any]:
    """The base model plus a saved LoRA adapter, through the same unsloth call as notebook 01."""
    from unsloth import FastLanguageModel

    from helpers.model import load_kwargs

    kwargs = {**load_kwargs(profile), "model_name": str(adapter_dir), "load_in_4bit": load_in_4bit}
    model, tokenizer = FastLanguageModel.from_pretrained(**kwargs)
    FastLanguageModel.for_inference(model)
    return model, tokenizer


def save_adapter(model: Any, tokenizer: Any, out_dir: Path) -> list[str]:
    """Save only the LoRA weights (megabytes, not gigabytes) and the tokenizer; list the files."""
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return sorted(p.name for p in out_dir.iterdir())


def merge_to_16bit(
    model: Any, tokenizer: Any, adapter_dir: Path, out_dir: Path, profile: Profile, hw: Hardware
) -> Path:
    """Fold the adapter into the base weights and save a standalone 16-bit model.

    On a GPU unsloth dequantizes the 4-bit base as it merges. Its CPU backend cannot merge into
    4-bit weights, so on CPU the adapter is reloaded on a 16-bit base first: same call, same file.
    """
    if not hw.cuda:
        model, tokenizer = load_trained(profile, adapter_dir, load_in_4bit=False)
    model.save_pretrained_merged(str(out_dir), tokenizer, save_method="merged_16bit")
    return out_dir


def gguf_skip_reason(profile: Profile, hw: Hardware) -> str | None:
    """Why GGUF export is skipped here, or None when it can run."""
    if profile.synthetic_data or not hw.cuda:
        return (
            f"GGUF export skipped in the {profile.name} profile: it runs on a GPU profile only, "
            "because it compiles llama.cpp (cmake, a C++ compiler, internet access, several minutes)."
        )
    return None


def export_gguf(model: Any, tokenizer: Any, out_dir: Path, quantization: str = "q4_k_m") -> Any:
    """llama.cpp's GGUF file via unsloth: merges, converts, quantizes (builds llama.cpp once)."""
    return model.save_pretrained_gguf(str(out_dir), tokenizer, quantization_method=quantization)


def hub_token() -> str | None:
    """A Hugging Face token from $HF_TOKEN (or $HUGGING_FACE_HUB_TOKEN), else Colab's secrets."""
    for name in HUB_TOKEN_NAMES:
        if os.environ.get(name):
            return os.environ[name]
    try:
        from google.colab import userdata
    except ImportError:
        return None
    try:
        return userdata.get("HF_TOKEN")
    except Exception:  # Colab raises its own types: secret missing, or notebook access denied
        return None


def push_adapter(model: Any, tokenizer: Any, repo_id: str, token: str) -> str:
    """Upload the adapter and tokenizer to a private Hub repo; return its URL."""
    model.push_to_hub(repo_id, token=token, private=True)
    tokenizer.push_to_hub(repo_id, token=token, private=True)
    return f"https://huggingface.co/{repo_id}"


def transformers_generate(model_dir: Path, questions: Sequence[str], max_new_tokens: int) -> list[str]:
    """Greedy answers from a merged model with plain transformers: what a learner runs anywhere."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype="auto")
    answers = []
    for question in questions:
        ids = tokenizer.apply_chat_template(
            make_prompt(question), add_generation_prompt=True, return_tensors="pt"
        )
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
        answers.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    return answers


def run_plain_transformers(
    model_dir: Path, questions: Sequence[str], max_new_tokens: int
) -> list[str]:
    """Run `transformers_generate` in a fresh Python process, proving it needs no unsloth."""
    command = [
        sys.executable, "-m", "helpers.export", str(model_dir),
        "--max-new-tokens", str(max_new_tokens), *questions,
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"Plain-transformers inference failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["completions"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Answer questions with a merged model.")
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("questions", nargs="+")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args(argv)
    completions = transformers_generate(args.model_dir, args.questions, args.max_new_tokens)
    if "unsloth" in sys.modules:
        raise SystemExit("unsloth was imported: the merged model must load without it.")
    print(json.dumps({"unsloth_loaded": False, "completions": completions}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
