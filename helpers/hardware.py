"""What machine are we on? Hardware detection and the precision it calls for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Precision = Literal["bf16", "fp16", "fp32"]


def best_precision(cuda: bool, compute_capability: tuple[int, int] | None) -> Precision:
    """bf16 needs compute capability 8.0+ (Ampere); a T4 (7.5) must use fp16; a CPU trains fp32.

    `torch.cuda.is_bf16_supported()` can say True on a T4 through emulation, so it is not asked.
    """
    if not cuda:
        return "fp32"
    if compute_capability is not None and compute_capability >= (8, 0):
        return "bf16"
    return "fp16"


@dataclass(frozen=True)
class Hardware:
    """A description of the accelerator (or its absence), and the precision a run uses on it.

    `precision` is decided once, here, from the compute capability; every later step (the
    GRPOConfig flags, the weights' dtype, vLLM's dtype) reads it. `replace(hw, precision="fp16")`
    runs a bf16-capable GPU the way a T4 runs (`make gpu-check --precision fp16`).
    """

    cuda: bool
    gpu_name: str | None = None
    vram_gb: float = 0.0
    compute_capability: tuple[int, int] | None = None
    precision: Precision = None  # type: ignore[assignment]  # None: the best this machine has

    def __post_init__(self) -> None:
        best = best_precision(self.cuda, self.compute_capability)
        allowed = {"fp32": {"fp32"}, "fp16": {"fp16"}, "bf16": {"bf16", "fp16"}}[best]
        if self.precision is None:
            object.__setattr__(self, "precision", best)
        elif self.precision not in allowed:
            where = self.gpu_name or "a CPU"
            raise ValueError(f"precision={self.precision!r} cannot run on {where}: use "
                             f"{' or '.join(repr(p) for p in sorted(allowed))}.")

    def describe(self) -> str:
        """One line for humans."""
        if not self.cuda:
            return "CPU only (no CUDA GPU found)"
        major, minor = self.compute_capability or (0, 0)
        return f"{self.gpu_name}, {self.vram_gb:.1f} GB, compute capability {major}.{minor}"


CPU_ONLY = Hardware(cuda=False)
# Described, not detected: used by the tests and by the README's "fits" table.
TESLA_T4 = Hardware(True, "Tesla T4", 14.74, (7, 5))
A100_40GB = Hardware(True, "NVIDIA A100-SXM4-40GB", 39.4, (8, 0))


def detect_hardware() -> Hardware:
    """Read the first CUDA device, if any."""
    import torch

    if not torch.cuda.is_available():
        return CPU_ONLY
    props = torch.cuda.get_device_properties(0)
    return Hardware(
        cuda=True,
        gpu_name=props.name,
        vram_gb=props.total_memory / 1024**3,
        compute_capability=(props.major, props.minor),
    )


# vLLM by GPU class. unsloth's Colab notebooks pin 0.11.2 on a T4: 0.10.x and 0.14.x clash with
# unsloth's standby mode, and later releases changed the APIs unsloth patches. On a T4, 0.11.2
# runs FlashInfer attention, JIT-compiled at the first start (UNSLOTH_VLLM_NO_FLASHINFER=1 falls
# back to Triton). Their notebooks take 0.15.1 on newer GPUs, but trl 0.22.2 without unsloth
# (notebook 08, multi-process training, `trl vllm-serve`) needs names that vLLM 0.12 removed
# (`GuidedDecodingParams`, `SamplingParams(guided_decoding=...)`), so Ampere+ gets 0.11.2 too.
VLLM_BEFORE_AMPERE = "vllm==0.11.2"
VLLM_AMPERE = "vllm==0.11.2"


def vllm_requirement(hw: Hardware) -> str:
    """The vLLM pin for this GPU's class (see the comment above)."""
    if hw.compute_capability is not None and hw.compute_capability < (8, 0):
        return VLLM_BEFORE_AMPERE
    return VLLM_AMPERE


def memory_in_use_gb(hw: Hardware) -> tuple[str, float]:
    """Peak GPU memory allocated by torch on GPU; the process's resident memory (RSS) on CPU."""
    if hw.cuda:
        import torch

        return "peak GPU memory", torch.cuda.max_memory_allocated() / 1024**3
    import psutil

    return "process RSS", psutil.Process().memory_info().rss / 1024**3


def use_one_cpu_thread(hw: Hardware) -> None:
    """On CPU, train on one torch thread: the tiny model's matrices are too small to split.

    Measured on a shared 2-core machine: 4 smoke steps took 34 s on 2 threads, 2.6 s on one.
    """
    if not hw.cuda:
        import torch

        torch.set_num_threads(1)


# The environment variables that pick another float kernel path on the same CPU (README, "What
# differs from machine to machine"): torch's vectorised kernels, and MKL's reproducibility mode.
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR")


def cpu_kernel_path() -> dict[str, str | None]:
    """Which CPU float kernels torch runs here: its vector capability and the variables above."""
    import os
    import platform

    import torch

    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        **{name: os.environ.get(name) for name in KERNEL_ENV},
    }
