"""Install the course's pinned stack for the hardware found.

    python3 scripts/install_stack.py venv   # make: create .venv (CPU or GPU, detected) + dev tools
    python3 scripts/install_stack.py colab  # the notebooks' bootstrap cell, on Colab
    python3 scripts/install_stack.py gpu    # into the current environment (e.g. conda)

All versions come from requirements.txt (and requirements-dev.txt for `venv`). On a CPU-only
machine torch is pinned to a CPU build first and unsloth is installed without its dependencies,
so nothing pulls the multi-GB CUDA torch. On a GPU, vLLM is added by GPU class.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers.hardware import Hardware, vllm_requirement  # noqa: E402  (needs no torch)

# On Linux the "+cpu" build tag makes a CUDA wheel impossible: PyPI has none, so pip either finds
# this CPU wheel (a local wheel folder, as in CI) or fails fast, and we retry on PyTorch's CPU
# index. macOS wheels on PyPI are CPU-only and carry no tag.
CPU_TORCH = "torch==2.13.0" if sys.platform == "darwin" else "torch==2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
NO_DEPS_ON_CPU = {"unsloth", "unsloth_zoo"}  # their deps pull CUDA torch, xformers and triton


def read_requirements(name: str) -> list[str]:
    lines = (ROOT / name).read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def gpu_from_nvidia_smi() -> Hardware | None:
    """The first GPU as nvidia-smi reports it, before torch may be installed."""
    query = ["nvidia-smi", "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    name, memory, capability = (part.strip() for part in out.splitlines()[0].split(","))
    major, minor = (int(x) for x in capability.split("."))
    return Hardware(True, name, float(memory.split()[0]) / 1024, (major, minor))


def try_pip(python: str, *args: str, quiet: bool) -> subprocess.CompletedProcess:
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", *args]
    print("$ pip install", " ".join(args), flush=True)
    return subprocess.run(cmd, capture_output=quiet, text=True)


def pip(python: str, *args: str, quiet: bool) -> None:
    """Run pip; on failure show its last lines and the likely fix, then exit."""
    result = try_pip(python, *args, quiet=quiet)
    if result.returncode != 0:
        if quiet:
            print("\n".join((result.stdout + result.stderr).splitlines()[-25:]))
        raise SystemExit(
            "Installing the pinned stack failed (see above). Fix: on Colab use "
            "Runtime > Disconnect and delete runtime, then run again; elsewhere delete .venv and "
            "rerun `make`. If a version is missing, check requirements.txt against README."
        )


def install(python: str, gpu: Hardware | None, torch_pin: list[str], quiet: bool) -> None:
    """GPU: everything with its deps, plus vLLM. CPU: unsloth without deps, torch held fixed."""
    requirements = read_requirements("requirements.txt")
    if gpu is not None:
        pip(python, *requirements, vllm_requirement(gpu), quiet=quiet)
        return
    if torch_pin and try_pip(python, *torch_pin, quiet=True).returncode != 0:
        pip(python, "--extra-index-url", TORCH_CPU_INDEX, *torch_pin, quiet=quiet)
    plain = [r for r in requirements if r.split("==")[0] not in NO_DEPS_ON_CPU]
    no_deps = [r for r in requirements if r.split("==")[0] in NO_DEPS_ON_CPU]
    pip(python, *torch_pin, *plain, quiet=quiet)  # the pin again: nothing may replace that torch
    pip(python, "--no-deps", *no_deps, quiet=quiet)


def main() -> int:
    parser = argparse.ArgumentParser(description="Install the course's pinned stack.")
    parser.add_argument("target", choices=["venv", "colab", "gpu"])
    args = parser.parse_args()
    gpu = gpu_from_nvidia_smi()
    where = gpu.describe() if gpu else "no CUDA GPU: CPU-only torch, unsloth without its deps"
    print(f"Installing the course stack ({where}).", flush=True)
    if args.target == "venv":
        target = ROOT / ".venv"
        if not (target / "bin" / "python").exists():
            venv.create(target, with_pip=True)
        python = str(target / "bin" / "python")
        install(python, gpu, [] if gpu else [CPU_TORCH], quiet=False)
        pip(python, *read_requirements("requirements-dev.txt"), quiet=False)
        # make's stamp: the venv is rebuilt when a requirements file is newer than this.
        (target / ".stack-installed").write_text("\n".join(read_requirements("requirements.txt")))
    elif args.target == "colab":
        # A CPU-only Colab runtime keeps its own torch and gets the smoke profile.
        install(sys.executable, gpu, [], quiet=True)
        print("Stack installed. Continue with the next cell.")
    else:
        install(sys.executable, gpu, [] if gpu else [CPU_TORCH], quiet=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
