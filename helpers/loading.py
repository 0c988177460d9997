"""The arguments of unsloth's two loading calls, built from a profile, and the vLLM engine a
`fast_inference` load starts.

The notebooks call `FastLanguageModel.from_pretrained(**load_kwargs(profile))` and
`FastLanguageModel.get_peft_model(model, **lora_kwargs(profile))` on every machine: only the
model name, the sizes and `fast_inference` differ between profiles (a test checks this).

On a GPU that load starts vLLM inside the kernel: `vllm_start_announced` says so (and refuses a
second engine beside a first), and `abort_unfinished` clears the requests that a stopped cell
left in it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from helpers.hardware import Hardware, detect_hardware
from helpers.profiles import SEED, SMOKE_MODEL, Profile

# All attention and MLP projections, as unsloth's GRPO notebooks do.
LORA_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def resolve_model_name(profile: Profile) -> str:
    """A hub id, or for the smoke profile the folder of the locally built tiny model."""
    if profile.model_name == SMOKE_MODEL:
        from helpers.smoke_model import ensure_smoke_model

        return str(ensure_smoke_model())
    return profile.model_name


def load_kwargs(profile: Profile) -> dict[str, object]:
    """Keyword arguments for `FastLanguageModel.from_pretrained`."""
    return {
        "model_name": resolve_model_name(profile),
        "max_seq_length": profile.max_seq_length,
        "load_in_4bit": True,  # NF4 weights through bitsandbytes (it has CPU kernels too)
        "fast_inference": profile.fast_inference,  # vLLM generation: GPU only
        "max_lora_rank": profile.lora_rank,
        "gpu_memory_utilization": profile.gpu_memory_utilization,
    }


def lora_kwargs(profile: Profile) -> dict[str, object]:
    """Keyword arguments for `FastLanguageModel.get_peft_model`."""
    return {
        "r": profile.lora_rank,
        "lora_alpha": profile.lora_rank,  # alpha = r: a scale of 1, so r can change alone
        "target_modules": LORA_TARGET_MODULES,
        "use_gradient_checkpointing": "unsloth",  # recompute activations: less memory
        "random_state": SEED,  # the LoRA init: the course's, and a lab run's own seed instead
    }


# vLLM's first start in a runtime, in minutes (low, high): an estimate until a GPU measures it
# (`make gpu-check` times it). On a T4 unsloth turns on FlashInfer attention and its sampler,
# which nvcc JIT-compiles on Colab's 2 vCPUs; torch inductor and CUDA-graph capture follow.
VLLM_FIRST_START_MINUTES = (3, 10)
NO_FLASHINFER = "UNSLOTH_VLLM_NO_FLASHINFER"  # unsloth_zoo's switch: Triton attention instead


def vllm_start_note(profile: Profile, hw: Hardware,
                    environ: dict[str, str] | None = None) -> str | None:
    """The line said before vLLM's first start, or None where no vLLM starts (CPU, smoke)."""
    if not (profile.fast_inference and hw.cuda):
        return None
    environ = dict(os.environ) if environ is None else environ
    low, high = VLLM_FIRST_START_MINUTES
    flashinfer = environ.get(NO_FLASHINFER, "0") == "0"
    sm = "".join(map(str, hw.compute_capability or ()))
    compiles = (f"FlashInfer's attention and sampler kernels for this GPU (sm{sm}), JIT-built "
                "into unsloth_compiled_cache, then " if flashinfer else "")
    fallback = (f"; if it fails, set os.environ[\"{NO_FLASHINFER}\"] = \"1\" before importing "
                "unsloth (Runtime → Restart session first) to use Triton attention instead"
                if flashinfer else f" ({NO_FLASHINFER} is set: Triton attention, no FlashInfer)")
    return (f"vLLM's first start compiles {compiles}torch inductor's graphs and the CUDA-graph "
            f"capture: about {low}-{high} min (an estimate, not yet measured on a GPU), once per "
            f"runtime{fallback}.")


GIB = 1024**3
# unsloth gives vLLM gpu_memory_utilization x the *free* memory (unsloth_zoo vllm_utils.py:2585-
# 2587, 2671, passed to LLM at 5011-5013), not x the total the run was planned for. A fresh
# process holds only its CUDA context (about 0.4 GiB, helpers.memory.CUDA_CONTEXT_GIB) before
# the load; a first engine and its model (half a T4 on the t4 profile) hold far more. Below this
# share free, a second engine would start squeezed beside the first one.
MIN_FREE_SHARE = 0.75


class GpuInUseError(RuntimeError):
    """A fast_inference load where an earlier one (or another model) still holds the GPU."""


def gpu_memory() -> tuple[int, int]:
    """(free, total) bytes of the current CUDA device: what unsloth reads to size vLLM."""
    import torch

    return torch.cuda.mem_get_info()


def vllm_room_problem(profile: Profile, free: int, total: int) -> str | None:
    """Why a vLLM start should not go on with `free` of `total` bytes free, or None."""
    if free >= MIN_FREE_SHARE * total:
        return None
    share = profile.gpu_memory_utilization
    # The free memory is device-wide: on a workstation another process may hold it.
    return (f"{(total - free) / GIB:.1f} of this GPU's {total / GIB:.1f} GiB are already in use "
            "by this process or another one (on Colab most likely vLLM and a model from an "
            "earlier run of a load cell in this session; on a shared machine perhaps another "
            "notebook's kernel: nvidia-smi lists them), so unsloth would start vLLM in "
            f"{share * free / GIB:.1f} GiB instead of the {share * total / GIB:.1f} GiB this run "
            "is planned for and training would run out of memory later: on Colab, Runtime → "
            "Restart session, then Run all; elsewhere, stop the other process or restart Python, "
            "then run again.")


def _ticker(stream: TextIO, started: float, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        minutes, seconds = divmod(int(time.perf_counter() - started), 60)
        stream.write(f"... vLLM still starting: {minutes} min {seconds:02d} s so far\n")
        stream.flush()


@contextlib.contextmanager
def vllm_start_announced(profile: Profile, hw: Hardware | None = None,
                         every: float = 60.0) -> Iterator[None]:
    """Around a load that starts vLLM: say what compiles and for how long, tick while it runs
    (unsloth's call blocks and reports no progress of its own), and say how long it took.

    Refuses (GpuInUseError, one sentence) when the GPU is already largely in use: a second
    engine in the same session, from a rerun load cell or "Run all" after an error. Silent
    where no vLLM starts. `hw=None` reads the machine.
    """
    note = vllm_start_note(profile, detect_hardware() if hw is None else hw)
    if note is None:
        yield
        return
    if problem := vllm_room_problem(profile, *gpu_memory()):
        raise GpuInUseError(problem)
    stream = sys.stdout  # the cell's output, kept even while a load redirects stdout
    print(note, flush=True)
    started, stop = time.perf_counter(), threading.Event()
    thread = threading.Thread(target=_ticker, args=(stream, started, stop, every), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    seconds = time.perf_counter() - started
    stream.write(f"vLLM started in {seconds / 60:.1f} min.\n")


def load_trained(
    profile: Profile,
    adapter_dir: Path,
    load_in_4bit: bool = True,
    fast_inference: bool | None = None,
    dtype: Any = None,
) -> tuple[Any, Any]:
    """The base model plus a saved LoRA adapter, through the same unsloth call as notebook 01.

    `fast_inference=None` keeps the profile's choice (vLLM on GPU profiles); `dtype=None` lets
    unsloth pick (fp16 on a T4, bf16 on Ampere+; gpu-check passes torch.float16 anywhere).
    """
    from unsloth import FastLanguageModel

    check_base_exists(adapter_dir)
    kwargs = {**load_kwargs(profile), "model_name": str(adapter_dir), "load_in_4bit": load_in_4bit}
    if fast_inference is not None:
        kwargs["fast_inference"] = fast_inference
    if dtype is not None:
        kwargs["dtype"] = dtype
    with vllm_start_announced(replace(profile, fast_inference=bool(kwargs["fast_inference"]))):
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
            f"This adapter was trained on the local model {shorten_paths(base)}, which is not on "
            "this machine (an adapter records its base model's folder, and a course checked out "
            "elsewhere has its own): run notebook 05 again."
        )


def load_unsloth(profile: Profile, seed: int = SEED) -> tuple[Any, Any]:
    """Notebook 01's two unsloth calls; `seed` draws the LoRA init (a lab run passes its own)."""
    from unsloth import FastLanguageModel

    with vllm_start_announced(profile):
        model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(profile))
    lora = {**lora_kwargs(profile), "random_state": seed}
    return FastLanguageModel.get_peft_model(model, **lora), tokenizer


_ARTEFACT_PATH = re.compile(r"/[\w./-]+?/((?:\.cache|runs|models)/)")


def shorten_paths(text: str) -> str:
    """'/home/me/course/.cache/x' -> '.cache/x': stored outputs name no machine's folders."""
    return _ARTEFACT_PATH.sub(r"\1", text)


def abort_unfinished(model: Any) -> int:
    """Abort the requests a stopped cell left in the model's vLLM engine; return how many.

    vLLM 0.11.2's `LLM.generate` adds every prompt, then steps the engine until none is left
    (vllm/entrypoints/llm.py:1737), and aborts its requests only when *adding* them fails
    (llm.py:1595-1613). A KeyboardInterrupt (the stop button) during the steps leaves them in
    unsloth's in-process engine, and the next `generate` returns their answers as well, first
    (sorted by request id, llm.py:1768): trl's rollout then concatenates mismatched tensors, and
    a held-out score gets twice its answers. Nothing to do without vLLM (CPU, smoke).
    """
    llm = getattr(model, "vllm_engine", None)  # unsloth's LLM, on the model and its PEFT wrapper
    if llm is None:
        return 0
    engine = llm.llm_engine  # vllm/v1/engine/llm_engine.py's LLMEngine
    if not engine.has_unfinished_requests():
        return 0
    states = engine.output_processor  # request_states: one per (child) request not finished
    left = len(states.request_states)
    # n > 1 fans a request out into children under a parent (llm_engine.py:262-275): both go.
    engine.abort_request([*states.request_states, *states.parent_requests])
    print(f"vLLM still held {left} unfinished request(s) from a stopped cell: aborted, so this "
          "call gets only its own answers.", flush=True)
    return left
