"""Install the course's pinned stack for the hardware found.

    python3 -m scripts.install_stack venv   # make: create .venv (CPU or GPU, detected) + dev tools
    python3 -m scripts.install_stack colab  # the notebooks' bootstrap cell, on Colab
    python3 -m scripts.install_stack colab --light  # the same for a notebook that needs no GPU
    python3 -m scripts.install_stack gpu    # into the current environment (e.g. conda) + dev tools

On a GPU every package comes from its GPU class's lock (locks/t4.txt, locks/ampere.txt, written by
scripts/lock_stack.py): one resolve, every version exact, for CPython 3.13 or 3.12 (another Python
stops with the fix). On Colab the lock is installed by uv (`uv pip install -r`, the same pins and
index as pip, about twice as fast: docs/colab.md), itself put by pip into a temporary folder, not
into the runtime; if uv cannot be had or fails, pip installs instead (`GRPO_COURSE_INSTALLER=pip`
skips uv, to compare the two). No cache is kept on Colab (disk), and the packages a fresh Colab
kernel has already imported keep Colab's versions when the lock's `# hold:` range allows (the
choice is explained in lock_stack.py). `colab --light` installs locks/light.txt on top of Colab's
own torch instead (no vLLM, no unsloth), or the full install if Colab's torch is outside the range
those packages accept. On a CPU-only machine torch is pinned to a CPU build first and unsloth is
installed without its dependencies, so nothing pulls the multi-GB CUDA torch.

The installer's output streams as it runs; pip's list of conflicts with packages that Colab
preinstalls and the course never imports (KNOWN_CONFLICTS) becomes one sentence. Exit status 0
means installed; on failure the last two lines say what failed and the fix (exit status 2: this
Python cannot take the locks).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections import deque
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from helpers.hardware import Hardware  # needs no torch: this runs before anything is installed
from helpers.paths import ROOT
from scripts.lock_stack import KEPT_ON_COLAB, LIGHT, PYTHONS, Lock, gpu_class, read_lock

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
HEARTBEAT_S = 30.0  # a line at least this often while the installer works in silence
# Colab's installer: pinned, so every runtime installs the same way. Measured on a Colab stand-in
# (docs/colab.md, "Two installs"): the full lock in 2 min 33 s with uv against 4 min 32 s with pip.
UV = "uv==0.13.9"
INSTALLER_ENV = "GRPO_COURSE_INSTALLER"  # "pip": skip uv on Colab (to time pip against it)
# pip lists, after an install, every installed package whose own requirements the new versions
# break. On Colab these preinstalled packages always show up; the course never imports them, and
# Colab's image ships them with the same kind of conflict, so the list becomes one sentence.
KNOWN_CONFLICTS = {
    "google-colab": "pins the pandas Colab shipped",
    "cuda-python": "pins the cuda-bindings Colab shipped",
}
CONFLICTS_HEADER = "ERROR: pip's dependency resolver does not currently take into account"
CONFLICT = re.compile(r"^(\S+) \S+ requires .+(which is incompatible|which is not installed)\.$")
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


class ConflictFilter:
    """Holds back pip's list of dependency conflicts: the known ones (KNOWN_CONFLICTS) become one
    sentence, anything else is printed as pip wrote it."""

    def __init__(self) -> None:
        self.held: list[str] = []  # the header and the conflict lines, while they come

    def feed(self, line: str) -> list[str]:
        """The lines to print now, for one line of pip's output."""
        if line.startswith(CONFLICTS_HEADER):
            self.held = [line]
            return []
        if self.held and CONFLICT.match(line.strip()):
            self.held.append(line)
            return []
        return [*self.flush(), line]

    def flush(self) -> list[str]:
        """What the held lines become: one sentence for the known conflicts, the rest verbatim."""
        header, conflicts = self.held[:1], self.held[1:]
        self.held = []
        known = [c for c in conflicts if CONFLICT.match(c.strip()).group(1) in KNOWN_CONFLICTS]
        unknown = [c for c in conflicts if c not in known]
        lines = [*header, *unknown] if unknown or (header and not known) else []
        if known:
            names = sorted({CONFLICT.match(c.strip()).group(1) for c in known})
            why = "; ".join(f"{name} {KNOWN_CONFLICTS[name]}" for name in names)
            lines.append(f"Note: pip lists {len(known)} conflict(s) with packages Colab "
                         f"preinstalls and the course never imports ({why}); they are expected "
                         "and harmless.\n")
        return lines


def stream(cmd: list[str], tool: str = "pip",
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run cmd (in `env`, default ours), printing its output live (and a heartbeat in long
    silences); keep the tail."""
    tail: deque[str] = deque(maxlen=40)
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)
    last = [time.monotonic()]
    done = threading.Event()
    conflicts = ConflictFilter()

    def heartbeat() -> None:
        while not done.wait(min(5.0, HEARTBEAT_S / 2)):
            if time.monotonic() - last[0] >= HEARTBEAT_S:
                print(f"  ... {tool} is still working ({elapsed()} elapsed)", flush=True)
                last[0] = time.monotonic()

    threading.Thread(target=heartbeat, daemon=True).start()
    for line in process.stdout:
        for shown in conflicts.feed(line):
            print(shown, end="", flush=True)
        tail.append(line)
        last[0] = time.monotonic()
    for shown in conflicts.flush():
        print(shown, end="", flush=True)
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


def fetch_uv(python: str, folder: Path) -> str | None:
    """uv's binary, put by pip into `folder` (not into the runtime), or None when pip cannot."""
    print(f"[{elapsed()}] fetching {UV}, the installer", flush=True)
    result = try_pip(python, "--no-cache-dir", "--target", str(folder), UV, quiet=True)
    binary = folder / "bin" / "uv"
    return str(binary) if result.returncode == 0 and binary.is_file() else None


def uv_environment(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The environment uv runs in: ours without the UV_* settings a runtime left behind; and
    the names of those dropped. Colab has persisted a UV_CONSTRAINT to a file that is gone, an
    empty UV_PRERELEASE and UV_SYSTEM_PYTHON (googlecolab/colabtools#5237, astral-sh/uv#12724):
    each fails uv (file not found, a CLI error, an unsatisfiable resolve), and pip, twice as
    slow, installs instead."""
    dropped = sorted(name for name in environ if name.startswith("UV_"))
    return {k: v for k, v in environ.items() if not k.startswith("UV_")}, dropped


def try_uv(uv: str, python: str, *args: str, quiet: bool) -> subprocess.CompletedProcess:
    """`uv pip install` into `python`'s environment: one resolve of exact pins, from PyPI like pip;
    no cache is kept (Colab's disk). Only the lock decides: no inherited UV_* setting, no uv.toml
    (--no-config), and a system Python is installed into as pip would (--break-system-packages:
    uv, unlike pip, ignores PIP_BREAK_SYSTEM_PACKAGES, astral-sh/uv#2988)."""
    env, dropped = uv_environment(os.environ)
    if dropped:
        print(f"Running uv without this runtime's {', '.join(dropped)}: the lock alone decides "
              "what is installed.", flush=True)
    cmd = [uv, "pip", "install", "--no-config", "--python", python, "--break-system-packages",
           "--no-cache", *args]
    print(f"[{elapsed()}] $ uv pip install", " ".join(args), flush=True)
    if quiet:
        return subprocess.run(cmd, capture_output=True, text=True, env=env)
    return stream(cmd, tool="uv", env=env)


SEEN_VERSIONS = """
import importlib.metadata as m, json, sys
def seen(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({name: seen(name) for name in json.loads(sys.stdin.read())}))
"""


def unseen_pins(python: str, requirements: Path) -> list[str]:
    """The pins of `requirements` that `python` does not see at their version (after uv: where
    uv put the packages is where this Python looks, or pip must install them)."""
    from packaging.version import InvalidVersion, Version

    pins = dict(line.split("==", 1) for line in requirements.read_text().split())
    done = subprocess.run([python, "-c", SEEN_VERSIONS], input=json.dumps(list(pins)),
                          capture_output=True, text=True)
    if done.returncode != 0:
        return list(pins)
    seen = json.loads(done.stdout)

    def same(found: str | None, pinned: str) -> bool:
        try:
            return found is not None and Version(found) == Version(pinned)
        except InvalidVersion:
            return found == pinned

    return [f"{p}=={v}" for p, v in pins.items() if not same(seen.get(p), v)]


def install_requirements(python: str, requirements: Path, quiet: bool, colab: bool) -> None:
    """One requirements file in one resolve: with uv on Colab, pip when uv fails or elsewhere."""
    if colab and os.environ.get(INSTALLER_ENV, "uv") == "pip":
        print(f"{INSTALLER_ENV}=pip: installing with pip.", flush=True)
    elif colab:
        uv = fetch_uv(python, requirements.parent / "uv")
        if uv is None:
            print(f"{UV} could not be installed, so pip installs the stack instead (slower).",
                  flush=True)
        elif try_uv(uv, python, "-r", str(requirements), quiet=quiet).returncode != 0:
            print("uv failed (its error is above), so pip installs the stack instead (slower).",
                  flush=True)
        elif unseen := unseen_pins(python, requirements):
            print(f"uv finished, but this Python does not see {len(unseen)} of the pins (e.g. "
                  f"{unseen[0]}), so pip installs the stack instead (slower).", flush=True)
        else:
            return
    pip(python, "-r", str(requirements), quiet=quiet, colab=colab)


def install_pins(python: str, name: str, pins: dict[str, str], quiet: bool, colab: bool) -> None:
    """`pins` ({package: version}) in one resolve, from a requirements file."""
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp) / f"{name}.txt"
        requirements.write_text("".join(f"{p}=={v}\n" for p, v in sorted(pins.items())))
        install_requirements(python, requirements, quiet, colab)


def kept_notes(lock: Lock, pins: dict[str, str]) -> str:
    """'; keeping Colab's numpy 2.1.3, ...' for the held packages whose version is Colab's."""
    kept = [f"{p} {pins[p]}" for p in sorted(lock.holds) if pins[p] != lock.pins[p]]
    return f"; keeping Colab's {', '.join(kept)}" if kept else ""


def install_locked(python: str, gpu: Hardware, quiet: bool, colab: bool) -> None:
    """Every package at its locked version for this GPU class, in one resolve."""
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
    kept = {p: installed[p] for p in KEPT_ON_COLAB}  # named, so that uv or pip leaves them alone
    print(f"{len(pins)} packages from locks/{LIGHT}.txt on Colab's "
          f"{', '.join(f'{p} {v}' for p, v in kept.items())}{kept_notes(lock, pins)}", flush=True)
    install_pins(python, LIGHT, {**pins, **kept}, quiet, colab=True)
    return True


def install(
    python: str, gpu: Hardware | None, torch_pin: list[str], quiet: bool, colab: bool = False,
    step_done: Callable[[], None] = lambda: None,
) -> None:
    """GPU: the GPU class's lock. CPU: unsloth without deps, torch held fixed. `step_done` is
    called when torch is in (on a CPU) and at the end, so that make's venv compiles meanwhile."""
    if gpu is not None:
        install_locked(python, gpu, quiet, colab)
        step_done()
        return
    requirements = read_requirements("requirements.txt")
    if torch_pin and try_pip(python, *torch_pin, quiet=True).returncode != 0:
        pip(python, "--extra-index-url", TORCH_CPU_INDEX, *torch_pin, quiet=quiet, colab=colab)
    step_done()
    plain = [r for r in requirements if r.split("==")[0] not in NO_DEPS_ON_CPU]
    no_deps = [r for r in requirements if r.split("==")[0] in NO_DEPS_ON_CPU]
    # the torch pin again: nothing may replace that torch
    pip(python, *torch_pin, *plain, quiet=quiet, colab=colab)
    pip(python, "--no-deps", *no_deps, quiet=quiet, colab=colab)
    step_done()


class Compiler:
    """Compiles a venv's Python files while pip installs into it. pip installs on one core: after
    each step, one pass of compileall compiles what is there so far on the other core (unless the
    last pass is still going); at the end, one pass on every core compiles what is left, and what
    pip replaced since (a newer file). pip's own files wait for the end, since pip replaces itself.
    A .pyc records its source's time and size, and Python checks both on import, so a file read
    while pip was still writing it is never run from its stale .pyc."""

    def __init__(self, python: str, lib: Path) -> None:
        self.command = [python, "-m", "compileall", "-qq", str(lib)]
        self.running: subprocess.Popen | None = None

    def step_done(self) -> None:
        if self.running is None or self.running.poll() is not None:
            self.running = subprocess.Popen([*self.command, "-x", r"/site-packages/pip/"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def finish(self) -> None:
        if self.running is not None:
            self.running.wait()
        print(f"[{elapsed()}] $ python -m compileall -j 0 .venv/lib (what is left)", flush=True)
        subprocess.run([*self.command, "-j", "0"])


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
        # pip compiles each package's files one by one as it installs them (about half of the
        # install's time, on the core pip is using): the Compiler uses the other cores instead.
        os.environ["PIP_COMPILE"] = "0"
        compiler = Compiler(python, target / "lib")
        install(python, gpu, [] if gpu else [CPU_TORCH], quiet=False, step_done=compiler.step_done)
        pip(python, *read_requirements("requirements-dev.txt"), quiet=False)
        compiler.finish()
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
