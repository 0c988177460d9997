"""Install the pinned stack into a Colab runtime once, from the notebooks' bootstrap cell.

The bootstrap cell clones the course, then calls `ensure_stack`. It runs before the course's own
packages can be imported, so this module uses the standard library only.

- A stamp file is written only after `install_stack.py colab` succeeds; without it, a rerun of
  the cell installs again (an interrupted or failed install is retried, not skipped).
- pip's output is relayed line by line, so the cell shows progress.
- Packages the session had already imported, and that the install changed, are listed with a
  "Runtime > Restart session" hint: Python keeps the old copy in memory until a restart.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata as metadata
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

RESTART = "Runtime → Restart session"


def stamp_path(course_dir: Path) -> Path:
    """Beside the clone, not in it: a fresh clone of the same pins keeps the runtime's install."""
    return course_dir.parent / ".grpo-course-stack-ok"


def stamp_text(course_dir: Path) -> str:
    """What the stamp records: a hash of every pin file (the GPU install reads locks/), so
    changed pins install again."""
    files = [course_dir / "requirements.txt", *sorted((course_dir / "locks").glob("*.txt"))]
    return "".join(
        f"{f.relative_to(course_dir)} sha256 {hashlib.sha256(f.read_bytes()).hexdigest()}\n"
        for f in files
    )


def is_installed(course_dir: Path) -> bool:
    """True when this runtime already holds a successful install of these pins."""
    stamp = stamp_path(course_dir)
    return stamp.is_file() and stamp.read_text() == stamp_text(course_dir)


def loaded_versions(modules: dict | None = None) -> dict[str, str]:
    """{distribution: installed version} for every package this session has imported."""
    names = {name.split(".")[0] for name in (sys.modules if modules is None else modules)}
    owners = metadata.packages_distributions()
    versions = {}
    for dist in sorted({d for name in names for d in owners.get(name, [])}):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
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


def restart_hint(changed: dict[str, tuple[str, str]]) -> str:
    """One sentence: restart, and why (the changed packages this session had imported)."""
    listed = ", ".join(f"{dist} {old} → {new}" for dist, (old, new) in sorted(changed.items()))
    return (
        f"{RESTART}, then run this cell again: the install changed {listed}, which this "
        "session had already imported, and Python keeps the old copy until a restart."
    )


def failure_message(returncode: int) -> str:
    """Two lines: what failed, and the fix."""
    return (
        f"Installing the pinned stack failed (install_stack.py exit code {returncode}; its "
        "error is above).\nFix: Runtime → Disconnect and delete runtime, then run this cell "
        "again; it retries the install because no success stamp was written."
    )


def relay(command: list[str]) -> int:
    """Run `command`, printing its output line by line as it comes; return its exit code."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert process.stdout is not None
    for line in process.stdout:
        print(line, end="", flush=True)
    return process.wait()


def ensure_stack(
    course_dir: str | Path, run: Callable[[list[str]], int] = relay, modules: dict | None = None
) -> bool:
    """Install the stack unless the stamp says it is done; True when it installed now.

    `modules` stands for sys.modules (the packages this session has imported).
    """
    course_dir = Path(course_dir)
    if is_installed(course_dir):
        print("The pinned stack is already installed in this runtime.")
        return False
    print("Installing the pinned stack (3-5 minutes; pip's progress follows)...", flush=True)
    before = loaded_versions(modules)
    returncode = run([sys.executable, str(course_dir / "scripts" / "install_stack.py"), "colab"])
    if returncode != 0:
        raise SystemExit(failure_message(returncode))
    stamp_path(course_dir).write_text(stamp_text(course_dir))
    changed = changed_versions(before)
    if changed:
        print(restart_hint(changed))
    return True
