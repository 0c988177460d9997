"""Install the course's pinned stack for the hardware found.

    python3 scripts/install_stack.py venv   # make: create .venv (CPU or GPU, detected) + dev tools
    python3 scripts/install_stack.py colab  # the notebooks' bootstrap cell, on Colab
    python3 scripts/install_stack.py gpu    # into the current environment (e.g. conda) + dev tools

On a GPU every package comes from its GPU class's lock (locks/t4.txt, locks/ampere.txt, written
by scripts/lock_stack.py): one resolve, every version exact. On Colab pip's cache is off (disk),
and numpy and pillow keep Colab's preinstalled versions when the lock's `# hold:` range allows
(the choice is explained in lock_stack.py). On a CPU-only machine torch is pinned to a CPU build
first and unsloth is installed without its dependencies, so nothing pulls the multi-GB CUDA torch.

pip's output streams as it runs. Exit status 0 means installed; on failure the last two lines
say what failed and the fix.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections import deque
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # a stray `scripts` package may be installed

from lock_stack import HELD_ON_COLAB, PYTHON, Lock, gpu_class, read_lock  # noqa: E402

from helpers.hardware import Hardware  # noqa: E402  (needs no torch)

# On Linux the "+cpu" build tag makes a CUDA wheel impossible: PyPI has none, so pip either finds
# this CPU wheel (a local wheel folder, as in CI) or fails fast, and we retry on PyTorch's CPU
# index. macOS wheels on PyPI are CPU-only and carry no tag.
CPU_TORCH = "torch==2.13.0" if sys.platform == "darwin" else "torch==2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
NO_DEPS_ON_CPU = {"unsloth", "unsloth_zoo"}  # their deps pull CUDA torch, xformers and triton
FIX_COLAB = ("Runtime > Disconnect and delete runtime, then run the first cell again; if it "
             "fails the same way, report the error line above.")
FIX_LOCAL = ("delete .venv (or the environment) and rerun `make`; if a pinned version is "
             "missing, regenerate the locks with `make lock`.")
HEARTBEAT_S = 30.0  # a line at least this often while pip downloads in silence
STARTED = time.monotonic()


def elapsed() -> str:
    """Minutes:seconds since this script started."""
    seconds = int(time.monotonic() - STARTED)
    return f"{seconds // 60}:{seconds % 60:02d}"


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


def stream(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run cmd, printing its output live (and a heartbeat in long silences); keep the tail."""
    tail: deque[str] = deque(maxlen=40)
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last = [time.monotonic()]
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(min(5.0, HEARTBEAT_S / 2)):
            if time.monotonic() - last[0] >= HEARTBEAT_S:
                print(f"  ... pip is still working ({elapsed()} elapsed)", flush=True)
                last[0] = time.monotonic()

    threading.Thread(target=heartbeat, daemon=True).start()
    for line in process.stdout:
        print(line, end="", flush=True)
        tail.append(line)
        last[0] = time.monotonic()
    returncode = process.wait()
    done.set()
    return subprocess.CompletedProcess(cmd, returncode, stdout="".join(tail), stderr="")


def try_pip(python: str, *args: str, quiet: bool) -> subprocess.CompletedProcess:
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", *args]
    print(f"[{elapsed()}] $ pip install", " ".join(args), flush=True)
    if quiet:
        return subprocess.run(cmd, capture_output=True, text=True)
    return stream(cmd)


def failure(output: str, colab: bool) -> str:
    """Two lines: pip's first error line, and the fix."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
    said = (errors or lines or ["pip printed nothing"])[0]
    fix = FIX_COLAB if colab else FIX_LOCAL
    return f"Error: installing the pinned stack failed: {said}\nFix: {fix}"


def pip(python: str, *args: str, quiet: bool, colab: bool = False) -> None:
    """Run pip (without its cache on Colab); on failure show the error and the fix, then exit."""
    result = try_pip(python, *(["--no-cache-dir"] if colab else []), *args, quiet=quiet)
    if result.returncode != 0:
        output = (result.stdout or "") + (result.stderr or "")
        if quiet:
            print("\n".join(output.splitlines()[-25:]))
        raise SystemExit(failure(output, colab))


def installed_version(package: str) -> str | None:
    """The version installed in this interpreter, or None."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def held_pins(lock: Lock, installed: dict[str, str | None]) -> dict[str, str]:
    """The lock's pins, with each held package at its installed version when its range allows."""
    from packaging.specifiers import SpecifierSet  # Colab and every venv with pip have it

    pins = dict(lock.pins)
    for package, allowed in lock.holds.items():
        found = installed.get(package)
        if found and SpecifierSet(allowed).contains(found, prereleases=True):
            pins[package] = found
    return pins


def python_note(version_info: tuple[int, ...] = tuple(sys.version_info)) -> str | None:
    """A warning when this Python is not the one the GPU locks were resolved for."""
    if ".".join(map(str, version_info[:2])) == PYTHON:
        return None
    return (f"Note: the GPU locks were resolved for CPython {PYTHON}, and this is "
            f"{version_info[0]}.{version_info[1]}; if a locked version has no wheel here, use "
            f"Python {PYTHON} (`conda env create -f environment.yml`).")


def install_locked(python: str, gpu: Hardware, quiet: bool, colab: bool) -> None:
    """Every package at its locked version for this GPU class, in one pip resolve."""
    name = gpu_class(gpu)
    lock = read_lock(name)
    pins = held_pins(lock, {p: installed_version(p) for p in HELD_ON_COLAB}) if colab else lock.pins
    kept = [f"{p} {pins[p]}" for p in HELD_ON_COLAB if colab and pins.get(p) != lock.pins.get(p)]
    print(f"{len(pins)} packages from locks/{name}.txt"
          + (f"; keeping Colab's {', '.join(kept)}" if kept else ""), flush=True)
    if note := python_note():
        print(note, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp) / f"{name}.txt"
        requirements.write_text("".join(f"{p}=={v}\n" for p, v in sorted(pins.items())))
        pip(python, "-r", str(requirements), quiet=quiet, colab=colab)


def install(
    python: str, gpu: Hardware | None, torch_pin: list[str], quiet: bool, colab: bool = False
) -> None:
    """GPU: the GPU class's lock. CPU: unsloth without deps, torch held fixed."""
    if gpu is not None:
        install_locked(python, gpu, quiet, colab)
        return
    requirements = read_requirements("requirements.txt")
    if torch_pin and try_pip(python, *torch_pin, quiet=True).returncode != 0:
        pip(python, "--extra-index-url", TORCH_CPU_INDEX, *torch_pin, quiet=quiet, colab=colab)
    plain = [r for r in requirements if r.split("==")[0] not in NO_DEPS_ON_CPU]
    no_deps = [r for r in requirements if r.split("==")[0] in NO_DEPS_ON_CPU]
    # the torch pin again: nothing may replace that torch
    pip(python, *torch_pin, *plain, quiet=quiet, colab=colab)
    pip(python, "--no-deps", *no_deps, quiet=quiet, colab=colab)


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
        install(sys.executable, gpu, [], quiet=False, colab=True)
        print(f"Stack installed in {elapsed()}. Continue with the next cell.")
    else:
        install(sys.executable, gpu, [] if gpu else [CPU_TORCH], quiet=False)
        pip(sys.executable, *read_requirements("requirements-dev.txt"), quiet=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
