"""Keep what you trained: the LoRA adapter, a merged 16-bit model, GGUF, and plain-transformers use.

Run as a script, it answers questions with a merged model through plain `transformers`, in a
process that never imports unsloth (the test and notebook 07 check that):

    python -m helpers.export MERGED_DIR --max-new-tokens 64 "What is 2 + 3?"
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from helpers.data import make_prompt
from helpers.hardware import Hardware, detect_hardware
from helpers.loading import load_trained
from helpers.paths import ROOT
from helpers.storage import clear_staging, fault_point, swap_in

if TYPE_CHECKING:
    from helpers.profiles import Profile

HUB_TOKEN_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
# A quantized GGUF's size as a fraction of the 16-bit model (bits per weight / 16).
GGUF_FRACTION = {"q4_k_m": 0.30, "q5_k_m": 0.36, "q8_0": 0.53, "f16": 1.0}


def export_adapter(model: Any, tokenizer: Any, out_dir: Path) -> list[str]:
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
    The merge is written to `<out_dir>.partial` and renamed into place only when it is done, so a
    kill never leaves an `out_dir` that looks finished; a rerun deletes the partial one first.
    """
    staging = staging_dir(out_dir)
    clear_staging(staging, "a merge")
    if not hw.cuda:
        model, tokenizer = load_trained(
            profile, adapter_dir, load_in_4bit=False, fast_inference=False
        )
    model.save_pretrained_merged(str(staging), tokenizer, save_method="merged_16bit")
    return swap_in(staging, out_dir, point="export:merge")


def staging_dir(out_dir: Path) -> Path:
    """Where an export is written before it is renamed to `out_dir`."""
    return out_dir.with_name(out_dir.name + ".partial")


def billions_of_parameters(profile: Profile) -> float:
    """The model's parameter count in billions, from its config numbers (helpers.memory)."""
    from helpers.memory import architecture

    arch = architecture(profile.model_name)
    return (arch.linear_params() + arch.embedding_params()) / 1e9


def gguf_skip_reason(profile: Profile, hw: Hardware, asked: bool) -> str | None:
    """Why the GGUF export does not run here, or None when it runs: it is opt-in (`asked`, the
    EXPORT_GGUF flag) on every profile, and needs a GPU profile even then."""
    if not asked:
        disk = ("a GPU profile" if profile.synthetic_data else
                f"about {disk_need_gb(profile, 'gguf'):.0f} GB of free disk on this profile")
        return (
            "GGUF export is off (EXPORT_GGUF = False at the top of this cell): set it to True to "
            "build the llama.cpp file too, which costs a few more minutes of GPU time (llama.cpp "
            f"is fetched or compiled once) and needs {disk}."
        )
    if profile.synthetic_data or not hw.cuda:
        return (
            f"GGUF export skipped in the {profile.name} profile: it runs on a GPU profile only, "
            "because it compiles llama.cpp (cmake, a C++ compiler, internet access, minutes)."
        )
    return None


def disk_need_gb(profile: Profile, step: str, quantization: str = "q4_k_m") -> float:
    """Free disk a step needs, in GB: 'merge' or 'gguf' (peak, with everything it writes).

    merge: the 16-bit base it downloads (off Colab into the Hugging Face cache) and the merged
    copy; on Colab unsloth merges over the download, so this errs on the safe side. gguf: its own
    16-bit merge, a 16-bit GGUF, and the quantized file.
    """
    size = 2 * billions_of_parameters(profile)  # 16-bit: 2 bytes a parameter
    if step == "merge":
        return 2 * size
    if step == "gguf":
        return 2 * size + size * GGUF_FRACTION.get(quantization.lower(), 1.0)
    raise ValueError(f"Unknown export step {step!r}: use 'merge' or 'gguf'.")


def free_disk_gb(folder: Path) -> float:
    """Free space on the disk that holds `folder` (or its nearest existing parent), in GB."""
    path = Path(folder).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free / 1e9


class DiskSpaceError(OSError):
    """An export that would not fit on the disk; the message names what to free or skip."""


def check_disk(folder: Path, need_gb: float, step: str, fix: str) -> str:
    """Before a big write: raise DiskSpaceError when it won't fit, else say that it does."""
    free = free_disk_gb(folder)
    if free < need_gb:
        raise DiskSpaceError(
            f"The {step} needs about {need_gb:.1f} GB of free disk but {free:.1f} GB is free: "
            f"{fix}."
        )
    return f"Disk check: the {step} needs about {need_gb:.1f} GB, {free:.1f} GB is free."


# What to do when a step won't fit, in the words of notebook 06.
DISK_FIXES = {
    "merge": "delete what you no longer need (old exports, ~/.cache/huggingface) or stop here: "
    "the adapter saved above is the whole result of training",
    "gguf": "delete the merged_16bit folder of section 5 first (GGUF makes its own merge), or "
    "set EXPORT_GGUF = False",
}


def preflight_disk(profile: Profile, step: str, folder: Path, quantization: str = "q4_k_m") -> str:
    """Notebook 07's disk check before the merge or the GGUF export, with its fix."""
    return check_disk(folder, disk_need_gb(profile, step, quantization), step, DISK_FIXES[step])


def remove_gguf_intermediates(out_dir: Path, quantization: str) -> list[str]:
    """After a GGUF export: delete its 16-bit merge and 16-bit GGUF; keep the quantized file.

    unsloth merges into `out_dir` and writes the GGUFs to `<out_dir>_gguf`. Nothing is deleted
    unless a file named for `quantization` is there.
    """
    gguf_dir = out_dir.with_name(out_dir.name + "_gguf")
    files = sorted(gguf_dir.glob("*.gguf")) if gguf_dir.is_dir() else []
    keep = [f for f in files if quantization.lower() in f.name.lower()]
    if not keep:
        return []
    removed = [f.name for f in files if f not in keep]
    for name in removed:
        (gguf_dir / name).unlink()
    if out_dir.is_dir():
        shutil.rmtree(out_dir)
        removed.append(f"{out_dir.name}/")
    return removed


def gguf_failure(error: BaseException, out_dir: Path) -> str:
    """One sentence for a GGUF export that stopped (llama.cpp's download or build, most often):
    what went wrong, that the exports before it are whole, and what to try."""
    reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else "no message"
    return (f"GGUF export stopped ({type(error).__name__}: {reason}); the adapter and the merged "
            f"model above are saved and whole, and nothing was left in {out_dir.name}/: rerun this "
            "cell to try again, or set EXPORT_GGUF = False to skip it.")


def export_gguf(model: Any, tokenizer: Any, out_dir: Path, quantization: str = "q4_k_m") -> Path:
    """llama.cpp's GGUF file via unsloth: merges, converts, quantizes (builds llama.cpp once).

    unsloth 2026.10.9 writes its 16-bit merge into the folder it is given and the GGUF files into
    `<folder>_gguf` beside it; both go to staging folders first. Once the export has finished,
    the intermediate copies are deleted and the GGUF folder is renamed to `out_dir`, so `out_dir`
    only ever holds a finished export.
    """
    staging = staging_dir(out_dir)
    gguf_staging = staging.with_name(staging.name + "_gguf")
    clear_staging(staging, "a GGUF merge")
    clear_staging(gguf_staging, "a GGUF export")
    print(model.save_pretrained_gguf(str(staging), tokenizer, quantization_method=quantization))
    fault_point("export:gguf")
    removed = remove_gguf_intermediates(staging, quantization)
    print("Deleted the intermediate copies:", ", ".join(removed) or "none")
    shutil.rmtree(staging, ignore_errors=True)  # the merge, if no quantized file named it
    return swap_in(gguf_staging, out_dir, point="export:gguf-swap")


def merged_dtype(hw: Hardware) -> str:
    """How to load a merged model: 'float16' where training ran in fp16 (a T4), else 'auto'."""
    return "float16" if hw.precision == "fp16" else "auto"


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
    hw = detect_hardware()
    # A T4 has no bf16: load in fp16 there. device_map="auto" spills to CPU what does not fit.
    dtype = merged_dtype(hw)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype if dtype == "auto" else getattr(torch, dtype),
        device_map="auto" if hw.cuda else None,
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
