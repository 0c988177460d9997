"""What every notebook runs before `from unsloth import ...`: quiet known-harmless warnings, and
on a CPU-only machine one torch thread from the start.

Both must happen before unsloth is imported: unsloth imports bitsandbytes, which logs its CPU
warning at import, and unsloth's CPU banner prints `torch.get_num_threads()` at import, so a
thread count set later (by `helpers.session.start`) contradicts the banner. Nothing here imports
transformers, trl or peft, which unsloth must patch first.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

# logger name -> the start of each message that is known to be harmless there, and why.
HARMLESS_LOG_MESSAGES: dict[str, tuple[str, ...]] = {
    # bitsandbytes tries the optional `kernels` package (a hub download) for a faster CPU 4-bit
    # matmul; without it it uses its own CPU kernel, with the same results.
    "bitsandbytes.backends.cpu.ops": (
        "Failed to load CPU gemm_4bit_forward from kernels-community",),
    # transformers 4.56 renamed `torch_dtype` to `dtype`; the old name still works, with the same
    # result. The course passes `dtype`; where a library or helper passes the old name, it warns.
    "transformers.configuration_utils": ("`torch_dtype` is deprecated!",),
    "transformers.modeling_utils": ("`torch_dtype` is deprecated!",),
}
# (message regex, category, module regex), for `warnings.filterwarnings`.
HARMLESS_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    # With beta > 0, trl computes the reference log-probs under torch.no_grad() while gradient
    # checkpointing is on; the checkpoint then sees no input that needs a gradient. No gradient
    # is wanted there: in the training notebook's beta=0.04 solution every occurrence ran with
    # grad mode off. (A LoRA that really got no gradient would show in that notebook's check
    # that its B matrices changed.)
    ("None of the inputs have requires_grad=True", UserWarning, r"torch\.utils\.checkpoint"),
    # Colab's image ships torchcodec built for its torch 2.11; the full install brings torch 2.9,
    # and unsloth, finding the mismatch at import, warns and switches torchcodec off. The course
    # decodes no audio or video, so off is right and the pip remedy it suggests is not needed.
    (r"torchcodec \S+ is incompatible with torch ", UserWarning, ""),
)


class DropMessages(logging.Filter):
    """A logging filter that drops records whose message starts with one of `prefixes`."""

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


def quiet_known_warnings() -> None:
    """Hide the warnings listed above (and only those); safe to call more than once."""
    for name, prefixes in HARMLESS_LOG_MESSAGES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropMessages) for f in logger.filters):
            logger.addFilter(DropMessages(prefixes))
    for message, category, module in HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


def has_nvidia_device(dev: Path = Path("/dev")) -> bool:
    """An NVIDIA GPU is visible to this machine (its device files), asked without CUDA."""
    return (dev / "nvidiactl").exists() or any(dev.glob("nvidia[0-9]*"))


def one_cpu_thread_without_gpu(dev: Path = Path("/dev")) -> bool:
    """On a machine without an NVIDIA GPU, torch uses one thread from now on; True if it did.

    The same rule as `helpers.hardware.use_one_cpu_thread`, applied before unsloth prints its
    banner. With a GPU, torch is left alone here: unsloth sets its allocator variables before
    torch first touches CUDA, and `start()` decides later from the real device.
    """
    if has_nvidia_device(dev):
        return False
    import torch

    torch.set_num_threads(1)
    return True


def prelude() -> None:
    """The one call the first cell makes, before `from unsloth import ...`."""
    quiet_known_warnings()
    one_cpu_thread_without_gpu()
