"""Write locks/<gpu class>.txt and locks/light.txt: every package pip resolves for the course.

    python -m scripts.lock_stack          # resolve again and rewrite every lock (needs PyPI)
    python -m scripts.lock_stack --check  # resolve again and list the pins that would change

Targets: CPython 3.13 (Colab's default since 2026-08-25) and CPython 3.12 (Colab's "runtime
version 2026.07", and conda's environment.yml), both on manylinux_2_35_x86_64. Input:
requirements.txt, the GPU class's vLLM pin (helpers.hardware.vllm_requirement) and TORCHAO. pip
resolves them once per Python with `install --dry-run --ignore-installed --report`, ignoring this
machine's pip configuration. Both Pythons must give the same pins, so one lock serves both (the
script stops, naming the differing pins, the day they part); tests/test_locks.py checks on PyPI
that every pin has a wheel for each Python and that every requirement is met there.

Markers: pip checks wheel tags and Requires-Python against --python-version, but evaluates
environment markers (`setuptools; python_version >= "3.12"`) for the interpreter that runs it.
So pip runs here with its marker environment set to the target's.

locks/light.txt is the part of the same resolve that the CPU-side notebooks need on Colab
(NOTEBOOKS in helpers/course.py): requirements.txt without unsloth, and everything they
pull in, except torch, which stays Colab's own (`# keep torch:` records the range they accept).

Held at Colab's versions, a deliberate choice: a fresh Colab kernel has already imported some
packages (locks/colab.txt lists them, with how that list was derived), and replacing one of those
calls for a restart. Each lock records, next to such a package's pin, the range every other
locked package accepts (`pyzmq==27.3.0  # hold: >=25.0.0`); `install_stack.py colab` keeps
Colab's version inside that range and installs the locked one otherwise (the bootstrap cell then
stops and asks for a restart). Every other install uses the locked versions.

Both GPU classes get vLLM 0.11.2 today (helpers/hardware.py says why), so their locks hold the
same pins; they are separate files so that the classes can part again with one edit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from helpers.hardware import A100_40GB, TESLA_T4, Hardware, vllm_requirement
from helpers.paths import ROOT

if TYPE_CHECKING:  # packaging is imported where used: a bare python3 may lack it
    from packaging.requirements import Requirement

LOCK_DIR = ROOT / "locks"
# One representative GPU per lock; install_stack picks a lock with gpu_class().
LOCK_GPUS = {"t4": TESLA_T4, "ampere": A100_40GB}
LIGHT = "light"  # locks/light.txt: the CPU-side notebooks' packages, on Colab's own torch
NOT_LIGHT = ("unsloth", "unsloth-zoo")  # the GPU path only; they pull torch, vLLM and xformers
KEPT_ON_COLAB = ("torch",)  # the light install never replaces these
COLAB_RECORD = LOCK_DIR / "colab.txt"  # written by scripts/colab_kernel_modules.py
# unsloth's own rule: torchao 0.18 imports torch.nn.functional.ScalingType, new in torch 2.10,
# and both vLLM pins bring torch 2.9.
TORCHAO = "torchao>=0.16.0,<0.18.0"
# Every lock is resolved and checked for each of these; the first is Colab's default.
PYTHONS = ("3.13", "3.12")
PLATFORM = "manylinux_2_35_x86_64"
# Older pips do not expand manylinux_2_35 to the older manylinux tags it accepts: list them all.
PLATFORM_TAGS = [f"manylinux_2_{minor}_x86_64" for minor in range(35, 16, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
INDEX_URL = "https://pypi.org/simple"


def target_markers(python: str) -> dict[str, str]:
    """The environment markers of CPython `python` on Linux x86_64 (Colab)."""
    return {
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_version": f"{python}.0",
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
    """A lock file's pins, the ranges in which Colab's version is held, and what it keeps."""

    pins: dict[str, str]
    holds: dict[str, str]  # {package: range}: Colab's version is kept inside it
    keeps: dict[str, str] = field(default_factory=dict)  # {package: range}: never installed


@dataclass(frozen=True)
class ColabRecord:
    """locks/colab.txt: Colab's versions of what its kernel imports at start, and of torch."""

    imported: dict[str, str]  # {distribution: version} imported by a fresh Colab kernel
    preinstalled: dict[str, str]  # {distribution: version} that the light install keeps
    python: str  # Colab's Python, e.g. "3.13.15"


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


def pip_command(python: str, report: Path, requirements: list[str], target: str,
                deps: bool = True) -> list[str]:
    """The dry-run resolve for CPython `target`, ignoring this machine's pip config and caches."""
    return [
        python, "-c", PIP_FOR_TARGET, json.dumps(target_markers(target)),
        "install", "--isolated", "--no-cache-dir", "--disable-pip-version-check", "--quiet",
        "--dry-run", "--ignore-installed", "--report", str(report),
        # From an index without PEP 658 metadata files, pip 23.2 downloads every wheel to read its
        # METADATA (the t4 lock: 5 GB per Python); pip 26.3 reads it with HTTP range requests.
        "--use-feature=fast-deps",
        *([] if deps else ["--no-deps"]),
        "--target", str(report.parent / "target"),  # older pips ask for it with --platform
        "--index-url", INDEX_URL, "--only-binary=:all:", "--python-version", target,
        "--implementation", "cp", "--abi", f"cp{target.replace('.', '')}",
        *(arg for tag in PLATFORM_TAGS for arg in ("--platform", tag)), *requirements,
    ]


def resolve(requirements: list[str], target: str = PYTHONS[0], python: str = sys.executable,
            deps: bool = True) -> dict:
    """pip's installation report for `requirements` on CPython `target`; exits with pip's error.

    With deps=False pip only checks that each requirement has a wheel for the target (and
    reports its metadata): `lock_problems` then checks the requirements between them.
    """
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run(pip_command(python, report, requirements, target, deps),
                              capture_output=True, text=True)
        if done.returncode != 0:
            said = [line for line in done.stderr.splitlines() if line.strip()]
            raise SystemExit(f"pip could not resolve {' '.join(requirements)} for Python "
                             f"{target}:\n" + "\n".join(said[-15:])
                             + "\nFix the pins in requirements.txt.")
        data = json.loads(report.read_text())
    if data["environment"]["python_version"] != target:
        raise SystemExit(f"pip resolved for Python {data['environment']['python_version']}, not "
                         f"{target}: this pip ignores the marker override; use pip 22.2 to 26.x.")
    return data


def report_pins(report: dict) -> dict[str, str]:
    """{normalized name: version} of every package in pip's report."""
    items = report["install"]
    return {normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


def requirement_graph(report: dict, env: dict[str, str], roots: list[str] | None = None,
                      stop: tuple[str, ...] = ()) -> list[tuple[str, Requirement]]:
    """(requirer, requirement) for each Requires-Dist whose marker holds, reached from `roots`
    (default: every package in the report, with the extras pip was asked for), extras followed
    through, never looking inside a package in `stop`."""
    from packaging.requirements import Requirement

    meta = {normalize(i["metadata"]["name"]): i["metadata"] for i in report["install"]}
    extras: dict[str, set[str]] = {}
    if roots is None:
        roots = list(meta)
        for item in report["install"]:
            extras.setdefault(normalize(item["metadata"]["name"]), set()).update(
                item.get("requested_extras") or [])
    todo = list(roots)
    for root in roots:
        extras.setdefault(root, set())
    edges: dict[tuple[str, str], Requirement] = {}
    while todo:  # an extra can switch on a requirement that asks for another extra
        name = todo.pop()
        if name in stop or name not in meta:
            continue
        wanted = {""} | extras[name]
        for line in meta[name].get("requires_dist") or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in wanted):
                continue
            edges.setdefault((name, line), req)
            dep = normalize(req.name)
            if dep not in extras or not set(req.extras) <= extras[dep]:
                extras.setdefault(dep, set()).update(req.extras)
                todo.append(dep)
    return [(name, req) for (name, _), req in edges.items()]


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


def hold_range(report: dict, package: str, env: dict[str, str],
               within: set[str] | None = None) -> str:
    """The versions of `package` that every other locked package (or every one `within`)
    accepts, e.g. '>=1.25,<2.3'."""
    specifiers = [s for requirer, req in requirement_graph(report, env)
                  if normalize(req.name) == package and (within is None or requirer in within)
                  for s in req.specifier]
    return tightest(specifiers)


def light_packages(report: dict, env: dict[str, str]) -> set[str]:
    """What the CPU-side notebooks need: requirements.txt without NOT_LIGHT, and everything
    those pull in, except KEPT_ON_COLAB (Colab's own torch)."""
    roots = [normalize(line.split("==")[0]) for line in read_requirements()]
    roots = [name for name in roots if name not in NOT_LIGHT]
    graph = requirement_graph(report, env, roots, stop=KEPT_ON_COLAB)
    return ({*roots, *(normalize(req.name) for _, req in graph)}) - set(KEPT_ON_COLAB)


def lock_problems(report: dict, pins: dict[str, str], env: dict[str, str],
                  keeps: dict[str, str] | None = None) -> list[str]:
    """Each requirement of the report's packages (markers for `env`) that `pins` do not meet.

    `keeps` ({package: version}) stands for what the target already has (Colab's torch).
    """
    have = {**pins, **(keeps or {})}
    problems = []
    for requirer, req in requirement_graph(report, env):
        found = have.get(normalize(req.name))
        if found is None:
            problems.append(f"{requirer} needs {req}, which the lock does not pin")
        elif not req.specifier.contains(found.split("+")[0], prereleases=True):
            problems.append(f"{requirer} needs {req}, the lock has {req.name} {found}")
    return sorted(set(problems))


def same_for_every_python(pins_by_python: dict[str, dict[str, str]], what: str) -> dict[str, str]:
    """The pins, when every Python got the same; else stop, naming the pins that differ."""
    (first, pins), *rest = pins_by_python.items()
    for python, other in rest:
        if other != pins:
            changes = "; ".join(pin_changes(pins, other))
            raise SystemExit(f"{what} resolves differently for Python {first} and {python} "
                             f"({changes}): give each Python its own lock in lock_stack.py.")
    return pins


def python_list() -> str:
    """'3.13 and 3.12'."""
    return " and ".join(PYTHONS)


def lock_header(name: str, gpu: Hardware, pip_version: str) -> list[str]:
    """The comment lines that say what a GPU lock is for and how it was made."""
    capability = ".".join(map(str, gpu.compute_capability or ()))
    return [
        f"# locks/{name}.txt: the course's GPU stack for the {name} class (like a {gpu.gpu_name},",
        f"# compute capability {capability}), every package pip resolves, pinned. Generated by",
        f"# `python -m scripts.lock_stack` (`make lock`) with pip {pip_version}, resolved for",
        f"# CPython {python_list()} on {PLATFORM} (Colab), the same pins for each, from:",
        f"#   requirements.txt + {vllm_requirement(gpu)} + {TORCHAO}",
        "# Do not edit: change requirements.txt or the script, then regenerate. `# hold:` marks",
        "# the range in which `install_stack.py colab` keeps Colab's preinstalled version.",
    ]


def light_header(pip_version: str) -> list[str]:
    """The comment lines of locks/light.txt."""
    return [
        "# locks/light.txt: what the notebooks that need no GPU install on Colab, on top of",
        "# Colab's own torch: requirements.txt without unsloth, and what it pulls in, at the",
        "# versions of the GPU locks. Generated by `python -m scripts.lock_stack` with pip",
        f"# {pip_version}, resolved for CPython {python_list()} on {PLATFORM}. `# keep torch:` is",
        "# the range these packages accept; `# hold:` as in the GPU locks.",
    ]


def render_lock(header: list[str], pins: dict[str, str], holds: dict[str, str],
                keeps: dict[str, str] | None = None) -> str:
    """A lock file's text: its header, what it keeps, then one pin a line."""
    lines = [*header, *(f"# keep {p}: {r or 'any'}" for p, r in sorted((keeps or {}).items()))]
    for package, version in sorted(pins.items()):
        hold = f"  # hold: {holds[package] or 'any'}" if package in holds else ""
        lines.append(f"{package}=={version}{hold}")
    return "\n".join(lines) + "\n"


def _range(text: str) -> str:
    text = text.strip()
    return "" if text == "any" else text


def parse_lock(text: str) -> Lock:
    """A lock file's pins, holds and keeps; a line that is not `name==version` is an error."""
    pins, holds, keeps = {}, {}, {}
    for number, raw in enumerate(text.splitlines(), 1):
        spec, _, comment = raw.partition("#")
        if comment.startswith(" keep ") and not spec.strip():
            package, _, allowed = comment.removeprefix(" keep ").partition(":")
            keeps[normalize(package.strip())] = _range(allowed)
        if not spec.strip():
            continue
        name, sep, version = spec.strip().partition("==")
        if not sep or not version or " " in version:
            raise ValueError(f"lock line {number} is not `name==version`: {raw!r}; regenerate "
                             "the lock with `make lock`.")
        pins[normalize(name)] = version
        if comment.strip().startswith("hold:"):
            holds[normalize(name)] = _range(comment.strip().removeprefix("hold:"))
    return Lock(pins, holds, keeps)


def read_lock(name: str) -> Lock:
    """locks/<name>.txt, parsed; a missing file names the command that writes it."""
    path = lock_path(name)
    if not path.exists():
        raise SystemExit(f"No lock {path.relative_to(ROOT)}: run `make lock` (needs PyPI).")
    return parse_lock(path.read_text())


def parse_colab_record(text: str) -> ColabRecord:
    """locks/colab.txt: `name==version  # imported` or `# preinstalled`, and `# python: X`."""
    imported, preinstalled, python = {}, {}, ""
    for raw in text.splitlines():
        spec, _, comment = raw.partition("#")
        if not spec.strip():
            python = comment.strip().removeprefix("python:").strip() if comment.strip(
            ).startswith("python:") else python
            continue
        name, _, version = spec.strip().partition("==")
        role = comment.strip().split()[0] if comment.strip() else ""
        if role not in ("imported", "preinstalled") or not version:
            raise ValueError(f"locks/colab.txt: {raw!r} is not `name==version  # imported` or "
                             "`# preinstalled`; rewrite it with scripts/colab_kernel_modules.py.")
        (imported if role == "imported" else preinstalled)[normalize(name)] = version
    return ColabRecord(imported, preinstalled, python)


def read_colab_record(path: Path = COLAB_RECORD) -> ColabRecord:
    """locks/colab.txt, parsed; missing, it names the script that writes it."""
    if not path.exists():
        raise SystemExit(f"No {path.name}: run scripts/colab_kernel_modules.py (its docstring "
                         "says how).")
    return parse_colab_record(path.read_text())


def held_on_colab(pins: dict[str, str], record: ColabRecord | None = None) -> list[str]:
    """The locked packages that a fresh Colab kernel has already imported."""
    record = record or read_colab_record()
    return sorted(set(record.imported) & set(pins))


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


def gpu_lock_text(name: str, gpu: Hardware, report: dict, record: ColabRecord,
                  pip: str) -> str:
    """locks/<gpu class>.txt from one Python's report (every Python gives the same pins)."""
    pins = report_pins(report)
    env = target_markers(report["environment"]["python_version"])
    holds = {p: hold_range(report, p, env) for p in held_on_colab(pins, record)}
    return render_lock(lock_header(name, gpu, pip), pins, holds)


def light_lock_text(report: dict, record: ColabRecord, pip: str) -> str:
    """locks/light.txt from one Python's report."""
    env = target_markers(report["environment"]["python_version"])
    light = light_packages(report, env)
    pins = {p: v for p, v in report_pins(report).items() if p in light}
    holds = {p: hold_range(report, p, env, light) for p in held_on_colab(pins, record)}
    keeps = {p: hold_range(report, p, env, light) for p in KEPT_ON_COLAB}
    return render_lock(light_header(pip), pins, holds, keeps)


def write_or_compare(name: str, text: str, check: bool) -> bool:
    """Print what changed in locks/<name>.txt; write it unless `check`. True when it changed."""
    old = parse_lock(lock_path(name).read_text()).pins if lock_path(name).exists() else {}
    changes = pin_changes(old, parse_lock(text).pins) if old else []
    summary = f"  locks/{name}.txt: {len(parse_lock(text).pins)} packages, " + (
        "new lock" if not old else f"{len(changes)} pins changed" if changes else "no pin changed")
    print("\n".join([summary, *(f"    {line}" for line in changes)]), flush=True)
    if not check:
        lock_path(name).write_text(text)
    return bool(changes) or not old


def main() -> int:
    parser = argparse.ArgumentParser(description="Regenerate the locks in locks/.")
    parser.add_argument("--check", action="store_true", help="list changes, write nothing")
    args = parser.parse_args()
    LOCK_DIR.mkdir(exist_ok=True)
    record, pip, changed = read_colab_record(), pip_version(), False
    reports: dict[tuple[str, ...], dict[str, dict]] = {}  # the classes share inputs today
    for name, gpu in LOCK_GPUS.items():
        inputs = tuple(lock_inputs(gpu))
        if inputs not in reports:
            print(f"Resolving {' '.join(inputs[-2:])} + requirements.txt for Python "
                  f"{python_list()} ...", flush=True)
            reports[inputs] = {python: resolve(list(inputs), python) for python in PYTHONS}
        by_python = reports[inputs]
        texts = {py: gpu_lock_text(name, gpu, r, record, pip) for py, r in by_python.items()}
        same_for_every_python({py: parse_lock(t).pins for py, t in texts.items()},
                              f"locks/{name}.txt")
        if len(set(texts.values())) > 1:
            raise SystemExit(f"locks/{name}.txt: the hold ranges differ between Pythons.")
        changed |= write_or_compare(name, texts[PYTHONS[0]], args.check)
    by_python = reports[tuple(lock_inputs(LOCK_GPUS["t4"]))]
    light = {py: light_lock_text(r, record, pip) for py, r in by_python.items()}
    same_for_every_python({py: parse_lock(t).pins for py, t in light.items()}, "locks/light.txt")
    if len(set(light.values())) > 1:
        raise SystemExit("locks/light.txt: the hold or keep ranges differ between Pythons.")
    changed |= write_or_compare(LIGHT, light[PYTHONS[0]], args.check)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
