"""helpers.prelude: the known-harmless warnings vanish (and only they), and on a CPU unsloth's
banner already counts the one torch thread the course trains on."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings

import pytest
import torch

from helpers import prelude
from helpers.paths import ROOT


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def collected():
    """A handler on each quieted logger, which starts unquieted (another test in this process
    may have run the prelude: the filters are global); the loggers are put back after it."""
    handler = Collect()
    loggers = [logging.getLogger(name) for name in prelude.HARMLESS_LOG_MESSAGES]
    before = {logger.name: list(logger.filters) for logger in loggers}
    for logger in loggers:
        logger.filters[:] = [f for f in logger.filters if not isinstance(f, prelude.DropMessages)]
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)
        logger.filters[:] = before[logger.name]


def test_the_bitsandbytes_kernels_line_is_dropped_and_other_lines_are_not(collected):
    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    prelude.quiet_known_warnings()
    prelude.quiet_known_warnings()  # twice: still one filter
    assert sum(isinstance(f, prelude.DropMessages) for f in logger.filters) == 1
    logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please "
                   "make sure you already `pip install kernels`", "No module named 'kernels'")
    logger.warning("Some other bitsandbytes problem")
    assert collected.messages == ["Some other bitsandbytes problem"]


def test_the_torch_dtype_deprecation_is_dropped_where_transformers_logs_it(collected):
    from transformers import PretrainedConfig

    config = PretrainedConfig(dtype="float32")
    warn_once = logging.getLogger("transformers.configuration_utils").warning_once
    warn_once.cache_clear()
    _ = config.torch_dtype  # the old attribute name: transformers warns (once)
    assert any("torch_dtype` is deprecated" in m for m in collected.messages)
    collected.messages.clear()
    warn_once.cache_clear()
    prelude.quiet_known_warnings()
    _ = config.torch_dtype
    assert not collected.messages


def checkpoint_without_grad() -> None:
    """What trl's reference pass does with beta > 0: a checkpointed layer under no_grad."""
    layer = torch.nn.Linear(2, 2)
    with torch.no_grad():
        torch.utils.checkpoint.checkpoint(layer, torch.ones(1, 2), use_reentrant=True)


def test_the_checkpoint_warning_of_a_no_grad_pass_is_hidden():
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        checkpoint_without_grad()
    assert any("None of the inputs have requires_grad" in str(w.message) for w in shown)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        prelude.quiet_known_warnings()  # its filter goes in front of "always"
        checkpoint_without_grad()
        warnings.warn("None of the inputs have requires_grad=True", UserWarning, stacklevel=1)
    messages = [(str(w.message), w.filename) for w in shown]
    assert len(messages) == 1 and messages[0][1] == __file__  # only torch's own is hidden


def test_unsloths_torchcodec_mismatch_on_colab_is_hidden_and_nothing_else():
    # The sentence unsloth 2026.10.9 warns at import on Colab after the full install
    # (unsloth/import_fixes.py, _torchcodec_version_mismatch_hint).
    colab = ("torchcodec 0.11.0+cu128 is incompatible with torch 2.9.0+cu128; install a matching "
             "build with `pip install 'torchcodec>=0.8,<0.9.0'`.")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        prelude.quiet_known_warnings()
        warnings.warn(colab, UserWarning, stacklevel=1)
        warnings.warn("torchcodec failed to load its native library", UserWarning, stacklevel=1)
    assert [str(w.message) for w in shown] == ["torchcodec failed to load its native library"]


def test_one_thread_only_without_a_gpu(tmp_path):
    before = torch.get_num_threads()
    try:
        (tmp_path / "nvidia0").touch()
        assert prelude.has_nvidia_device(tmp_path)
        torch.set_num_threads(2)
        assert not prelude.one_cpu_thread_without_gpu(tmp_path)
        assert torch.get_num_threads() == 2
        assert prelude.one_cpu_thread_without_gpu(tmp_path / "empty")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(prelude.has_nvidia_device(), reason="unsloth's CPU banner needs a CPU box")
def test_unsloths_banner_counts_one_thread_and_bitsandbytes_stays_quiet():
    """The notebooks' order: the first cell runs prelude(), the next imports unsloth."""
    code = ("import os, sys; sys.path.insert(0, os.getcwd()); import torch; "
            "torch.set_num_threads(2); from helpers.prelude import prelude; prelude(); "
            "import unsloth")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "1 threads" in result.stdout, result.stdout
    assert "kernels-community" not in result.stderr, result.stderr[-2000:]
