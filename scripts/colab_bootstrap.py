"""Install the course's stack into a Colab runtime once, from the notebooks' bootstrap cell.

The bootstrap cell clones the course, then calls `ensure_stack` with the notebook's name. It runs
before the course's packages can be imported, so this module uses the standard library only (it
reads helpers/course.py, itself plain Python, from the clone by path).

- Which install: helpers/course.py's NOTEBOOKS table says "full" (the GPU lock) or "light" (the
  CPU-side packages on Colab's own torch) for each notebook.
- A stamp file is written only after `install_stack.py colab` succeeds, naming the install; a
  full install also serves a light notebook. Without a matching stamp, a rerun of the cell
  installs again (an interrupted or failed install is retried, not skipped).
- The installer's output is relayed line by line, so the cell shows progress.
- If the install changed a package this session had already imported, the cell stops with
  "Runtime → Restart session, then run all again": Python keeps the old copy in memory until a
  restart, and "Run all" must not go on in a stale session. After the restart the stamp makes the
  rerun skip the install. Rerunning the cell *instead* of restarting stops again, with the same
  sentence: the session that holds the old copies remembers it (RESTART_PENDING, in this
  process's environment, which a restarted kernel does not inherit). The exception is
  STALE_IS_SAFE: packages whose old copy in memory was
  checked, from their code, to break nothing the notebooks do later, at the version the locks
  install (docs/colab.md, "The first cell and restarts", has the table); for those the cell says
  so in one line and goes on.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata as metadata
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

RESTART = "Runtime → Restart session, then run all again"
# Set in this process when the cell stopped for a restart: a rerun without one stops again.
RESTART_PENDING = "GRPO_COURSE_RESTART_PENDING"
FULL = "full"
# What a fresh Colab kernel has imported and the full install upgrades, checked to be harmless
# when left stale in memory: {distribution: (the version it was checked at, why)}. The check
# holds for that new version only: another version asks for a restart until it is checked again
# (tests/test_locks.py fails when a lock moves one of these).
STALE_IS_SAFE: dict[str, tuple[str, str]] = {
    "certifi": ("2026.10.19.post1", (
        "its code is unchanged (only __version__ and cacert.pem differ); where() returns the path "
        "of cacert.pem, which the install replaced in place, so the old module hands out the new "
        "bundle, and nothing the notebooks run reads certifi.__version__")),
    "setuptools": ("80.10.2", (
        "the kernel holds only pkg_resources (imported by google/__init__.py) and the "
        "distutils-precedence hook; none of the course's packages calls pkg_resources, and what "
        "later imports setuptools (torch.utils.cpp_extension, for torch.compile and vLLM) gets "
        "the new setuptools, which needs nothing from the old pkg_resources; checked by building "
        "a C++ extension and a torch.compile kernel in a process with setuptools 75.2.0's "
        "pkg_resources loaded and 80.10.2 on disk")),
}


def stamp_path(course_dir: Path) -> Path:
    """Beside the clone, not in it: a fresh clone of the same pins keeps the runtime's install."""
    return course_dir.parent / ".grpo-course-stack-ok"


def pin_hashes(course_dir: Path) -> str:
    """A hash of every pin file (the installs read locks/), so changed pins install again."""
    files = [course_dir / "requirements.txt", *sorted((course_dir / "locks").glob("*.txt"))]
    return "".join(
        f"{f.relative_to(course_dir)} sha256 {hashlib.sha256(f.read_bytes()).hexdigest()}\n"
        for f in files
    )


def stamp_text(course_dir: Path, kind: str = FULL) -> str:
    """What the stamp records: which install succeeded, and the pins it installed."""
    return f"install {kind}\n{pin_hashes(course_dir)}"


def installed_kind(course_dir: Path) -> str | None:
    """The install this runtime holds for today's pins ("full" or "light"), or None."""
    stamp = stamp_path(course_dir)
    if not stamp.is_file():
        return None
    first, _, hashes = stamp.read_text().partition("\n")
    return first.removeprefix("install ") if hashes == pin_hashes(course_dir) else None


def is_installed(course_dir: Path, kind: str = FULL) -> bool:
    """True when this runtime already holds `kind`, or the full install, for these pins."""
    return installed_kind(course_dir) in {kind, FULL}


def course_settings(course_dir: Path) -> ModuleType:
    """helpers/course.py of the clone, loaded by path (the course is not importable yet)."""
    spec = importlib.util.spec_from_file_location(
        "grpo_course_settings", course_dir / "helpers" / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def normalize(name: str) -> str:
    """PEP 503 name: lower case, runs of `-_.` as one `-`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def loaded_versions(modules: dict | None = None) -> dict[str, str]:
    """{distribution: installed version} for every distribution a loaded module comes from.

    `modules` stands for sys.modules. A module counts for a distribution when its file is one of
    the distribution's files, so a namespace that many distributions share (`google`) counts only
    the ones actually imported, not every `google-*` package installed.
    """
    modules = sys.modules if modules is None else modules
    files = {os.path.realpath(path) for module in list(modules.values())
             if isinstance(path := getattr(module, "__file__", None), str)}
    if not files:
        return {}
    owners = metadata.packages_distributions()
    candidates = {dist for name in list(modules) for dist in owners.get(name.split(".")[0], [])}
    versions = {}
    for name in sorted(candidates):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if "_vendor" in Path(str(dist.locate_file(""))).parts:
            continue  # a copy bundled inside another package (setuptools'): pip never changes it
        paths = {os.path.realpath(dist.locate_file(f)) for f in dist.files or ()}
        if paths & files:
            versions[normalize(dist.metadata["Name"])] = dist.version
    return versions


def changed_versions(before: dict[str, str]) -> dict[str, tuple[str, str]]:
    """{distribution: (old, new)} for the packages whose installed version changed since."""
    importlib.invalidate_caches()
    changed = {}
    for dist, old in before.items():
        try:
            new = metadata.version(dist)
        except metadata.PackageNotFoundError:
            new = "removed"
        if new != old:
            changed[dist] = (old, new)
    return changed


def needs_restart(changed: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """The changes a restart is needed for: all but those STALE_IS_SAFE, at the version checked."""
    return {dist: (old, new) for dist, (old, new) in changed.items()
            if STALE_IS_SAFE.get(dist, ("",))[0] != new}


def listed(changed: dict[str, tuple[str, str]]) -> str:
    return ", ".join(f"{dist} {old} → {new}" for dist, (old, new) in sorted(changed.items()))


def stale_note(changed: dict[str, tuple[str, str]]) -> str:
    """One line for upgrades of imported packages that need no restart."""
    return (f"The install upgraded {listed(changed)}, which this session had imported; their old "
            "copy in memory breaks nothing later, so no restart is needed (docs/colab.md, \"The "
            "first cell and restarts\").")


def restart_message(changed: dict[str, tuple[str, str]]) -> str:
    """Why the cell stops, and what to do: restart, then run all (the install is not repeated)."""
    return (
        f"{RESTART}. The install succeeded, but it changed {listed(changed)}, which this "
        "session had already imported, and Python keeps the old copy until a restart; after the "
        "restart this cell skips the install."
    )


WRONG_PYTHON = 2  # install_stack.py's exit status when this Python cannot take the locks


def failure_message(returncode: int) -> str:
    """Two lines: what failed, and the fix."""
    if returncode == WRONG_PYTHON:
        return ("This runtime's Python cannot take the course's locks (install_stack.py exit "
                "code 2).\nFix: the line above says which runtime version to choose; then run "
                "this cell again.")
    return (
        f"Installing the pinned stack failed (install_stack.py exit code {returncode}; its "
        "error is above).\nFix: Runtime → Disconnect and delete runtime, then run this cell "
        "again; it retries the install because no success stamp was written."
    )


def relay(command: list[str], cwd: Path) -> int:
    """Run `command` in `cwd`, printing its output line by line as it comes; its exit code."""
    process = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert process.stdout is not None
    for line in process.stdout:
        print(line, end="", flush=True)
    return process.wait()


def ensure_stack(
    course_dir: str | Path, notebook: str = "", run: Callable[[list[str], Path], int] = relay,
    modules: dict | None = None,
) -> bool:
    """Install the notebook's stack unless the stamp says it is there; True when it installed.

    `notebook` is the notebook's name (its install comes from helpers/course.py; none: the full
    install). `modules` stands for sys.modules (what this session has imported). Raises
    SystemExit with the fix when the install fails, and with RESTART when it changed a package
    this session had imported (unless that package is STALE_IS_SAFE at the version installed).
    """
    course_dir = Path(course_dir)
    if pending := os.environ.get(RESTART_PENDING):  # rerun instead of restarted: still stale
        raise SystemExit(pending)
    settings = course_settings(course_dir) if notebook else None
    kind = settings.notebook_install(notebook) if settings else FULL
    if is_installed(course_dir, kind):
        print(f"The {installed_kind(course_dir)} install is already in this runtime.")
        return False
    minutes = settings.INSTALL_MINUTES[kind] if settings else "2-3 min"
    print(f"Installing the {kind} stack ({minutes}; the installer's progress follows)...",
          flush=True)
    before = loaded_versions(modules)
    # A module of the clone, run from its root, where scripts.lock_stack and helpers import.
    command = [sys.executable, "-m", "scripts.install_stack", "colab"]
    returncode = run(command + (["--light"] if kind == "light" else []), course_dir)
    if returncode != 0:
        raise SystemExit(failure_message(returncode))
    stamp_path(course_dir).write_text(stamp_text(course_dir, kind))
    changed = changed_versions(before)
    if needs_restart(changed):
        os.environ[RESTART_PENDING] = restart_message(changed)
        raise SystemExit(os.environ[RESTART_PENDING])
    if changed:
        print(stale_note(changed), flush=True)
    return True
