"""Install the course's pinned stack for the hardware found.

    python3 scripts/install_stack.py venv   # make: create .venv (CPU or GPU, detected) + dev tools
    python3 scripts/install_stack.py colab  # the notebooks' bootstrap cell, on Colab
    python3 scripts/install_stack.py colab --light  # the same for a notebook that needs no GPU
    python3 scripts/install_stack.py gpu    # into the current environment (e.g. conda) + dev tools

On a GPU every package comes from its GPU class's lock (locks/t4.txt, locks/ampere.txt, written
by scripts/lock_stack.py): one resolve, every version exact, for CPython 3.13 or 3.12 (another
Python stops with the fix). On Colab pip's cache is off (disk), and the packages a fresh Colab
kernel has already imported keep Colab's versions when the lock's `# hold:` range allows (the
choice is explained in lock_stack.py). `colab --light` installs locks/light.txt on top of
Colab's own torch instead (no vLLM, no unsloth), or the full install if Colab's torch is outside
the range those packages accept. On a CPU-only machine torch is pinned to a CPU build first and
unsloth is installed without its dependencies, so nothing pulls the multi-GB CUDA torch.

pip's output streams as it runs. Exit status 0 means installed; on failure the last two lines
say what failed and the fix (exit status 2: this Python cannot take the locks).
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

from lock_stack import KEPT_ON_COLAB, LIGHT, PYTHONS, Lock, gpu_class, read_lock  # noqa: E402

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
WRONG_PYTHON = 2  # the exit status when this Python cannot take the locks
THIS_PYTHON = tuple(sys.version_info[:2])
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


def python_problem(version_info: tuple[int, ...], colab: bool) -> str | None:
    """One sentence with the fix when this Python is not one the locks were checked for."""
    this = f"{version_info[0]}.{version_info[1]}"
    if this in PYTHONS:
        return None
    checked = " or ".join(PYTHONS)
    if colab:
        return (f"This Colab runtime runs Python {this}, and the course's locks are checked for "
                f"CPython {checked} only: choose Runtime > Change runtime type > Runtime version "
                f"with Python {checked}, then run the first cell again.")
    return (f"This is Python {this}, and the course's GPU locks are checked for CPython "
            f"{checked} only: create the environment with one of those (`conda env create -f "
            "environment.yml` gives 3.12), then install again.")


def require_locked_python(colab: bool) -> None:
    """Stop (exit status 2) with the fix on a Python the locks were not checked for."""
    if problem := python_problem(THIS_PYTHON, colab):
        print(problem, flush=True)
        raise SystemExit(WRONG_PYTHON)


def install_pins(python: str, name: str, pins: dict[str, str], quiet: bool, colab: bool) -> None:
    """`pins` ({package: version}) in one pip resolve, from a requirements file."""
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp) / f"{name}.txt"
        requirements.write_text("".join(f"{p}=={v}\n" for p, v in sorted(pins.items())))
        pip(python, "-r", str(requirements), quiet=quiet, colab=colab)


def kept_notes(lock: Lock, pins: dict[str, str]) -> str:
    """'; keeping Colab's numpy 2.1.3, ...' for the held packages whose version is Colab's."""
    kept = [f"{p} {pins[p]}" for p in sorted(lock.holds) if pins[p] != lock.pins[p]]
    return f"; keeping Colab's {', '.join(kept)}" if kept else ""


def install_locked(python: str, gpu: Hardware, quiet: bool, colab: bool) -> None:
    """Every package at its locked version for this GPU class, in one pip resolve."""
    require_locked_python(colab)
    name = gpu_class(gpu)
    lock = read_lock(name)
    pins = held_pins(lock, {p: installed_version(p) for p in lock.holds}) if colab else lock.pins
    print(f"{len(pins)} packages from locks/{name}.txt{kept_notes(lock, pins) if colab else ''}",
          flush=True)
    install_pins(python, name, pins, quiet, colab)


def light_fits(lock: Lock, installed: dict[str, str | None]) -> list[str]:
    """What keeps the light install off this runtime: each kept package missing or out of range."""
    from packaging.specifiers import SpecifierSet

    problems = []
    for package, allowed in sorted(lock.keeps.items()):
        found = installed.get(package)
        if found is None or not SpecifierSet(allowed).contains(found.split("+")[0], True):
            problems.append(f"{package} {found or 'not installed'} (the light set needs "
                            f"{allowed or 'any'})")
    return problems


def install_light(python: str, quiet: bool) -> bool:
    """locks/light.txt on top of Colab's own torch; False (nothing done) when torch won't do."""
    require_locked_python(colab=True)
    lock = read_lock(LIGHT)
    installed = {p: installed_version(p) for p in [*lock.holds, *KEPT_ON_COLAB]}
    if problems := light_fits(lock, installed):
        print(f"The light install cannot use this runtime's {'; '.join(problems)}: installing the "
              "full stack instead.", flush=True)
        return False
    pins = held_pins(lock, installed)
    kept = {p: installed[p] for p in KEPT_ON_COLAB}  # named, so that pip leaves them alone
    print(f"{len(pins)} packages from locks/{LIGHT}.txt on Colab's "
          f"{', '.join(f'{p} {v}' for p, v in kept.items())}{kept_notes(lock, pins)}", flush=True)
    install_pins(python, LIGHT, {**pins, **kept}, quiet, colab=True)
    return True


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
    parser.add_argument("--light", action="store_true",
                        help="colab only: the packages of a notebook that needs no GPU")
    args = parser.parse_args()
    gpu = gpu_from_nvidia_smi()
    where = gpu.describe() if gpu else "no CUDA GPU: CPU-only torch, unsloth without its deps"
    if args.light and args.target == "colab":
        where = f"{gpu.describe() if gpu else 'no GPU'}: the light set, on Colab's own torch"
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
        if not (args.light and install_light(sys.executable, quiet=False)):
            install(sys.executable, gpu, [], quiet=False, colab=True)
        print(f"Stack installed in {elapsed()}. Continue with the next cell.")
    else:
        install(sys.executable, gpu, [] if gpu else [CPU_TORCH], quiet=False)
        pip(sys.executable, *read_requirements("requirements-dev.txt"), quiet=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
