"""Writes that a kill cannot leave half-done, whole-file checks, and storage errors in one sentence.

A runtime can die in the middle of any write (Drive is slow, so often in one), so what others read
is written next to its place and renamed into it (`write_json_atomic`, `swap_in`), and what is
read back is checked whole first (`file_problem`, `adapter_problem`). A folder that cannot be used
gets one sentence naming it and the fix (`RunFolderError`), never a traceback from deep inside.

Fault points (`fault_point`) name the moments inside these writes where the crash tests stop a
run; without a registered hook (tools/faults.py registers one) they do nothing.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from helpers.paths import shown


class RunFolderError(RuntimeError):
    """A run folder that cannot be used as it is; the message names the folder and the fix."""


FaultHook = Callable[[str, "int | None"], None]
_FAULT_HOOKS: list[FaultHook] = []


def add_fault_hook(hook: FaultHook) -> None:
    """Call `hook(point, step)` at every fault point (tools/faults.py, when a test asks)."""
    _FAULT_HOOKS.append(hook)


def fault_point(point: str, step: int | None = None) -> None:
    """A named moment in a write (e.g. 'adapter-swap'); without a registered hook, nothing."""
    for hook in _FAULT_HOOKS:
        hook(point, step)


def write_json_atomic(
    path: Path, value: Any, point: str | None = None, step: int | None = None
) -> Path:
    """Write JSON beside `path`, then rename it over `path`: readers see the old or the new file.

    `point` names the moment between the two (a fault point) for the tests.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value, indent=1))
    if point:
        fault_point(point, step)
    partial.replace(path)
    return path


def _old(folder: Path) -> Path:
    return folder.with_name(folder.name + ".old")


def swap_in(staging: Path, target: Path, point: str | None = None, step: int | None = None) -> Path:
    """Move a fully written `staging` folder to `target`, keeping a whole copy at every moment.

    The previous `target` waits as `<target>.old` until the new one is in place, so a kill between
    the two renames leaves `.old` (which `whole_folder` reads); it is deleted only after.
    """
    old = _old(target)
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)  # target is whole: an older spare is not needed
        target.rename(old)
    if point:
        fault_point(point, step)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target


def clear_staging(staging: Path, what: str) -> None:
    """Delete an unfinished staging folder left by a killed run, and say so."""
    if staging.exists():
        shutil.rmtree(staging)
        print(f"Removed the unfinished {shown(staging)} (a run stopped while writing {what}); "
              "writing it again.")


def _safetensors_problem(path: Path, size: int) -> str | None:
    """The safetensors layout: 8 bytes of header length, a JSON header, then the tensors' bytes."""
    with path.open("rb") as f:
        head = f.read(8)
        header_size = int.from_bytes(head, "little") if len(head) == 8 else size
        if 8 + header_size > size:
            return f"is cut off ({size:,} bytes, shorter than its own header)"
        try:
            header = json.loads(f.read(header_size))
        except ValueError:
            return "has a broken header"
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    expected = 8 + header_size + max(ends, default=0)
    if size < expected:
        return f"is cut off ({size:,} of {expected:,} bytes)"
    if size > expected:
        return f"has {size - expected:,} bytes more than its header accounts for"
    return None


def file_problem(path: Path) -> str | None:
    """Why `path` is not a whole file (missing, empty, cut off, not valid), or None.

    JSON must parse; safetensors must be as long as its header says; torch files (.pt, .pth,
    .bin) are zip archives, whose directory is written last, so a cut-off one has none.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "is missing"
    if size == 0:
        return "is empty"
    if path.suffix == ".json":
        try:
            json.loads(path.read_bytes())
        except ValueError:
            return "is not valid JSON"
    elif path.suffix == ".safetensors":
        return _safetensors_problem(path, size)
    elif path.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(path):
        return "is cut off (not a whole torch file)"
    return None


ADAPTER_CONFIG = "adapter_config.json"  # peft's: a folder holding it is an adapter
ADAPTER_FILES = (ADAPTER_CONFIG, "adapter_model.safetensors")


def first_problem(folder: Path, names: Iterable[str]) -> str | None:
    """'its <name> <problem>' for the first of `names` in `folder` that is not a whole file
    (file_problem), or None when all are whole."""
    for name in names:
        problem = file_problem(folder / name)
        if problem:
            return f"its {name} {problem}"
    return None


def adapter_problem(folder: Path) -> str | None:
    """Why `folder` is not a whole saved LoRA adapter, or None."""
    if not folder.is_dir():
        return "the folder is missing"
    return first_problem(folder, ADAPTER_FILES)


def whole_folder(target: Path, problem: Callable[[Path], str | None]) -> Path | None:
    """`target` if whole, else the `.old` copy a kill during `swap_in` left whole, else None."""
    for folder in (target, _old(target)):
        if folder.is_dir() and problem(folder) is None:
            return folder
    return None


def check_writable(folder: Path) -> Path:
    """Create `folder` if needed and write a file in it, or stop with the fix in one sentence."""
    probe = folder / f".write-check-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise RunFolderError(
            f"The run folder {shown(folder)} is not writable ({error.strerror}): make it writable "
            f"(chmod -R u+w {folder}) or set RUN_FOLDER (--output-dir for the script) to a "
            "folder you can write to."
        ) from None
    return folder


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


_GONE = (errno.EIO, errno.ENOTCONN, errno.ESTALE, errno.ENODEV)


def storage_failure(error: BaseException, folder: Path, resumes: str) -> RunFolderError | None:
    """A failed write into `folder` as one sentence with its fix, or None if it is not one.

    Python raises OSError; torch's writer raises a RuntimeError naming inline_container.cc (no
    errno); safetensors' a SafetensorError with "os error N". `resumes` says where a rerun
    starts ("from checkpoint-4").
    """
    text = str(error)
    code = getattr(error, "errno", None)
    if code is None and (found := re.search(r"os error (\d+)", text)):
        code = int(found[1])
    torch_writer = "inline_container.cc" in text or "PytorchStreamWriter" in text
    if code not in _FULL + _READ_ONLY + _GONE and not torch_writer:
        return None
    free = shutil.disk_usage(_existing(folder)).free / 1e9
    reason = os.strerror(code) if code else "a file was cut off mid-write"
    if code in _READ_ONLY:
        fix = f"make it writable (chmod -R u+w {folder}) or set RUN_FOLDER to a writable folder"
    elif code in _GONE:
        fix = "check that the disk (or Google Drive) is still mounted (rerun the cell mounting it)"
    else:
        fix = ("free some space there (on Google Drive empty the bin too) or set RUN_FOLDER "
               "(--output-dir for the script) to a folder with room")
    where = getattr(error, "filename", None) or folder  # torch's writer does not say which file
    return RunFolderError(
        f"Writing into {shown(where)} failed ({reason}; {free:.1f} GB free there): {fix}, then "
        f"run again: training resumes {resumes}."
    )


def _existing(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return path
