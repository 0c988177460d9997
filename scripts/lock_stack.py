"""Write locks/<gpu class>.txt: every package pip resolves for the course's GPU stack on Colab.

    python scripts/lock_stack.py          # resolve again and rewrite every lock (needs PyPI)
    python scripts/lock_stack.py --check  # resolve again and list the pins that would change

Target: CPython 3.12 on manylinux_2_35_x86_64, as on Colab. Input: requirements.txt, the GPU
class's vLLM pin (helpers.hardware.vllm_requirement) and TORCHAO. pip resolves them with
`install --dry-run --ignore-installed --report` for that target, ignoring this machine's pip
configuration, and the report's packages become the lock, one `name==version` a line.

Markers: pip checks wheel tags and Requires-Python against --python-version, but evaluates
environment markers (`setuptools; python_version >= "3.12"`) for the interpreter that runs it.
So pip runs here with its marker environment set to the target's, and the lock is checked to say
3.12 whatever Python generated it.

numpy and pillow, a deliberate choice: hold them at Colab's versions. Colab preinstalls both and
its kernel has often imported them, so replacing them calls for a restart. unsloth's Colab
notebooks pass them unpinned, so pip keeps what is installed if compatible. The course does the
same, with a fixed fallback: the lock records next to their pins the range that every other
locked package accepts (`numpy==2.2.6  # hold: >=2.0.2,<2.3`), and `install_stack.py colab`
keeps Colab's version when it lies in that range and installs the locked one otherwise (the
bootstrap cell then asks for a restart). Every other install uses the locked versions.

Both GPU classes get vLLM 0.11.2 today (helpers/hardware.py says why), so their locks hold the
same pins; they are separate files so that the classes can part again with one edit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers.hardware import A100_40GB, TESLA_T4, Hardware, vllm_requirement  # noqa: E402

LOCK_DIR = ROOT / "locks"
# One representative GPU per lock; install_stack picks a lock with gpu_class().
LOCK_GPUS = {"t4": TESLA_T4, "ampere": A100_40GB}
# unsloth's own rule: torchao 0.18 imports torch.nn.functional.ScalingType, new in torch 2.10,
# and both vLLM pins bring torch 2.9.
TORCHAO = "torchao>=0.16.0,<0.18.0"
HELD_ON_COLAB = ("numpy", "pillow")
PYTHON, PLATFORM = "3.12", "manylinux_2_35_x86_64"
# Older pips do not expand manylinux_2_35 to the older manylinux tags it accepts: list them all.
PLATFORM_TAGS = [f"manylinux_2_{minor}_x86_64" for minor in range(35, 16, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
INDEX_URL = "https://pypi.org/simple"
TARGET_MARKERS = {
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "python_version": PYTHON,
    "python_full_version": f"{PYTHON}.0",
    "implementation_version": f"{PYTHON}.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}
# Runs pip with the target's marker environment (see the module docstring).
PIP_FOR_TARGET = """
import json, sys
import pip._vendor.packaging.markers as markers
target = json.loads(sys.argv.pop(1))
host = markers.default_environment
markers.default_environment = lambda: {**host(), **target}
from pip._internal.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass(frozen=True)
class Lock:
    """A lock file's pins and, for HELD_ON_COLAB, the range Colab's version must lie in."""

    pins: dict[str, str]
    holds: dict[str, str]


def normalize(name: str) -> str:
    """PEP 503 name: lower case, runs of `-_.` as one `-`."""
    return "-".join(part for part in name.lower().replace("_", "-").replace(".", "-").split("-"))


def gpu_class(gpu: Hardware) -> str:
    """The lock for this GPU: 't4' before Ampere (compute capability 8.0), else 'ampere'."""
    capability = gpu.compute_capability or (0, 0)
    return "t4" if capability < (8, 0) else "ampere"


def lock_path(name: str) -> Path:
    """locks/<name>.txt."""
    return LOCK_DIR / f"{name}.txt"


def read_requirements(path: Path = ROOT / "requirements.txt") -> list[str]:
    """The requirement lines of a requirements file, comments dropped."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def lock_inputs(gpu: Hardware) -> list[str]:
    """What pip resolves for one GPU class: the course's pins, its vLLM, and torchao held."""
    return [*read_requirements(), vllm_requirement(gpu), TORCHAO]


def pip_command(python: str, report: Path, requirements: list[str]) -> list[str]:
    """The dry-run resolve for the target, ignoring this machine's pip config and caches."""
    return [
        python, "-c", PIP_FOR_TARGET, json.dumps(TARGET_MARKERS),
        "install", "--isolated", "--no-cache-dir", "--disable-pip-version-check", "--quiet",
        "--dry-run", "--ignore-installed", "--report", str(report),
        "--target", str(report.parent / "target"),  # older pips ask for it with --platform
        "--index-url", INDEX_URL, "--only-binary=:all:", "--python-version", PYTHON,
        "--implementation", "cp", "--abi", f"cp{PYTHON.replace('.', '')}",
        *(arg for tag in PLATFORM_TAGS for arg in ("--platform", tag)), *requirements,
    ]


def resolve(requirements: list[str], python: str = sys.executable) -> dict:
    """pip's installation report for `requirements` on the target; exits with pip's error."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run(pip_command(python, report, requirements), capture_output=True,
                              text=True)
        if done.returncode != 0:
            said = [line for line in done.stderr.splitlines() if line.strip()]
            raise SystemExit(f"pip could not resolve {' '.join(requirements)}:\n"
                             + "\n".join(said[-15:]) + "\nFix the pins in requirements.txt.")
        data = json.loads(report.read_text())
    if data["environment"]["python_version"] != PYTHON:
        raise SystemExit(f"pip resolved for Python {data['environment']['python_version']}, not "
                         f"{PYTHON}: this pip ignores the marker override; use pip 22.2 to 26.x.")
    return data


def report_pins(report: dict) -> dict[str, str]:
    """{normalized name: version} of every package in pip's report."""
    items = report["install"]
    return {normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


def active_requirements(report: dict, env: dict[str, str]) -> list:
    """Every Requires-Dist of the report's packages whose marker holds, extras followed through."""
    from packaging.requirements import Requirement

    extras: dict[str, set[str]] = {}
    for item in report["install"]:
        name = normalize(item["metadata"]["name"])
        extras.setdefault(name, set()).update(item.get("requested_extras") or [])
    active: dict[str, object] = {}
    changed = True
    while changed:  # an extra can switch on a requirement that asks for another extra
        changed = False
        for item in report["install"]:
            name = normalize(item["metadata"]["name"])
            for line in item["metadata"].get("requires_dist") or []:
                req = Requirement(line)
                wanted = {""} | extras[name]
                if req.marker and not any(
                    req.marker.evaluate({**env, "extra": extra}) for extra in wanted
                ):
                    continue
                key = f"{name} -> {line}"
                if key not in active:
                    active[key] = req
                    changed = True
                    extras.setdefault(normalize(req.name), set()).update(req.extras)
    return list(active.values())


def tightest(specifiers: list) -> str:
    """The same range with one lower and one upper bound: '>=1.17,>=1.25,<2.3' -> '>=1.25,<2.3'."""
    from packaging.version import Version

    lower = [s for s in specifiers if s.operator in (">", ">=")]
    upper = [s for s in specifiers if s.operator in ("<", "<=")]
    rest = sorted({str(s) for s in specifiers if s not in lower and s not in upper})
    bounds = []
    if lower:
        bounds.append(max(lower, key=lambda s: (Version(s.version), s.operator == ">")))
    if upper:
        bounds.append(min(upper, key=lambda s: (Version(s.version), s.operator == "<=")))
    return ",".join([*(str(s) for s in bounds), *rest])


def hold_range(report: dict, package: str, env: dict[str, str] = TARGET_MARKERS) -> str:
    """The versions of `package` that every other locked package accepts, e.g. '>=1.25,<2.3'."""
    requirements = active_requirements(report, env)
    return tightest([s for r in requirements if normalize(r.name) == package for s in r.specifier])


def lock_header(name: str, gpu: Hardware, pip_version: str) -> list[str]:
    """The comment lines that say what a lock is for and how it was made."""
    capability = ".".join(map(str, gpu.compute_capability or ()))
    return [
        f"# locks/{name}.txt: the course's GPU stack for the {name} class (like a {gpu.gpu_name},",
        f"# compute capability {capability}), every package pip resolves, pinned. Generated by",
        f"# `python scripts/lock_stack.py` (`make lock`) with pip {pip_version} for CPython",
        f"# {PYTHON} on {PLATFORM} (Colab), from:",
        f"#   requirements.txt + {vllm_requirement(gpu)} + {TORCHAO}",
        "# Do not edit: change requirements.txt or the script, then regenerate. `# hold:` marks",
        "# the range in which `install_stack.py colab` keeps Colab's preinstalled version.",
    ]


def render_lock(name: str, gpu: Hardware, report: dict, pip_version: str) -> str:
    """The lock file's text: a header that says how it was made, then one pin a line."""
    lines = lock_header(name, gpu, pip_version)
    for package, version in sorted(report_pins(report).items()):
        hold = f"  # hold: {hold_range(report, package)}" if package in HELD_ON_COLAB else ""
        lines.append(f"{package}=={version}{hold}")
    return "\n".join(lines) + "\n"


def parse_lock(text: str) -> Lock:
    """A lock file's pins and hold ranges; a line that is not `name==version` is an error."""
    pins, holds = {}, {}
    for number, raw in enumerate(text.splitlines(), 1):
        spec, _, comment = raw.partition("#")
        if not spec.strip():
            continue
        name, sep, version = spec.strip().partition("==")
        if not sep or not version or " " in version:
            raise ValueError(f"lock line {number} is not `name==version`: {raw!r}; regenerate "
                             "the lock with `make lock`.")
        pins[normalize(name)] = version
        if comment.strip().startswith("hold:"):
            holds[normalize(name)] = comment.strip().removeprefix("hold:").strip()
    return Lock(pins, holds)


def read_lock(name: str) -> Lock:
    """locks/<name>.txt, parsed; a missing file names the command that writes it."""
    path = lock_path(name)
    if not path.exists():
        raise SystemExit(f"No lock {path.relative_to(ROOT)}: run `make lock` (needs PyPI).")
    return parse_lock(path.read_text())


def pin_changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """One line per package added, removed or moved between two sets of pins."""
    changes = []
    for package in sorted(old.keys() | new.keys()):
        before, after = old.get(package, "-"), new.get(package, "-")
        if before != after:
            changes.append(f"{package}: {before} -> {after}")
    return changes


def pip_version(python: str = sys.executable) -> str:
    """The version of the pip that resolves."""
    out = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True)
    return out.stdout.split()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description="Regenerate the GPU locks in locks/.")
    parser.add_argument("--check", action="store_true", help="list changes, write nothing")
    args = parser.parse_args()
    LOCK_DIR.mkdir(exist_ok=True)
    changed = False
    for name, gpu in LOCK_GPUS.items():
        print(f"Resolving the {name} lock ({vllm_requirement(gpu)}) ...", flush=True)
        report = resolve(lock_inputs(gpu))
        old = parse_lock(lock_path(name).read_text()).pins if lock_path(name).exists() else {}
        changes = pin_changes(old, report_pins(report)) if old else []
        changed |= bool(changes) or not old
        summary = f"  {len(report_pins(report))} packages, " + ("new lock" if not old else (
            f"{len(changes)} pins changed" if changes else "no pin changed"))
        print("\n".join([summary, *(f"    {line}" for line in changes)]), flush=True)
        if not args.check:
            lock_path(name).write_text(render_lock(name, gpu, report, pip_version()))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
