"""Keep what you trained: the LoRA adapter, a merged 16-bit model, GGUF, and plain-transformers use.

Run as a script, it answers questions with a merged model through plain `transformers`, in a
process that never imports unsloth (the test and notebook 06 check that):

    python -m helpers.export MERGED_DIR --max-new-tokens 64 "What is 2 + 3?"
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
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
_ARTEFACT_PATH = re.compile(r"/[\w./-]+?/((?:\.cache|runs)/)")


def shorten_paths(text: str) -> str:
    """'/home/me/course/.cache/x' -> '.cache/x': stored outputs name no machine's folders."""
    return _ARTEFACT_PATH.sub(r"\1", text)


def load_trained(
    profile: Profile,
    adapter_dir: Path,
    load_in_4bit: bool = True,
    fast_inference: bool | None = None,
) -> tuple[Any, Any]:
    """The base model plus a saved LoRA adapter, through the same unsloth call as notebook 01.

    `fast_inference=None` keeps the profile's choice (vLLM on GPU profiles).
    """
    from unsloth import FastLanguageModel

    from helpers.model import load_kwargs

    check_base_exists(adapter_dir)
    kwargs = {**load_kwargs(profile), "model_name": str(adapter_dir), "load_in_4bit": load_in_4bit}
    if fast_inference is not None:
        kwargs["fast_inference"] = fast_inference
    with contextlib.redirect_stdout(io.StringIO()) as said:  # unsloth prints absolute paths
        model, tokenizer = FastLanguageModel.from_pretrained(**kwargs)
    print(shorten_paths(said.getvalue()), end="")
    FastLanguageModel.for_inference(model)
    return model, tokenizer


def check_base_exists(adapter_dir: Path) -> None:
    """Fail clearly when an adapter names a local base model folder that is gone."""
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    base = str(config.get("base_model_name_or_path") or "")
    if base.startswith(("/", ".")) and not Path(base).exists():
        raise FileNotFoundError(
            f"This adapter was trained on the local model {shorten_paths(base)}, which is no "
            "longer on disk (the smoke model is rebuilt when its recipe changes): run notebook 04 "
            "again."
        )


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
        model, tokenizer = load_trained(
            profile, adapter_dir, load_in_4bit=False, fast_inference=False
        )
    model.save_pretrained_merged(str(out_dir), tokenizer, save_method="merged_16bit")
    return out_dir


def gguf_skip_reason(profile: Profile, hw: Hardware) -> str | None:
    """Why GGUF export is skipped here, or None when it can run."""
    if profile.synthetic_data or not hw.cuda:
        return (
            f"GGUF export skipped in the {profile.name} profile: it runs on a GPU profile only, "
            "because it compiles llama.cpp (cmake, a C++ compiler, internet access, minutes)."
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


def push_folder(folder: Path, repo_id: str, token: str) -> str:
    """Upload a saved folder (the adapter, say) to a private Hub repo; return its URL."""
    from huggingface_hub import create_repo, upload_folder

    create_repo(repo_id, token=token, private=True, exist_ok=True)
    upload_folder(repo_id=repo_id, folder_path=str(folder), token=token)
    return f"https://huggingface.co/{repo_id}"


def transformers_generate(
    model_dir: Path, questions: Sequence[str], max_new_tokens: int
) -> list[str]:
    """Greedy answers from a merged model with plain transformers: what a learner runs anywhere."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # On a GPU, device_map="auto" spills what does not fit in GPU memory to the CPU.
    device_map = "auto" if torch.cuda.is_available() else None
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, torch_dtype="auto", device_map=device_map
    )
    answers = []
    for question in questions:
        ids = tokenizer.apply_chat_template(
            make_prompt(question), add_generation_prompt=True, return_tensors="pt"
        ).to(model.device)
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
