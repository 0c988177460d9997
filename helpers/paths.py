"""Where things are written: runs/ at the course root, or a run folder on Google Drive on Colab.

A run folder holds one profile's training run: checkpoints/, adapter/, log_history.json, figures/
and eval/. On Colab each notebook gets its own runtime, so notebooks 05-07 keep it on Drive by
default; 05 writes it and 06-07 find it there.

A runtime can die in the middle of any write (Drive is slow, so often in one), so what others read
is written next to its place and renamed into it (`write_json_atomic`, `swap_in`), and what is
read back is checked whole first (`file_problem`, `adapter_problem`). A folder that cannot be used
gets one sentence naming it and the fix (`RunFolderError`), never a traceback from deep inside.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from helpers.profiles import Profile

ROOT = Path(__file__).resolve().parent.parent
SMOKE_MODEL_DIR = ROOT / "models" / "smoke"  # the committed smoke model (helpers.smoke_model)
RUN_NAME = "course"  # runs/<RUN_NAME>/<profile>; `make course` uses a timestamp instead
DRIVE_RUNS = Path("MyDrive") / "grpo-course" / "runs"  # inside the Drive mount
DRIVE_WHY = (
    "Google Drive is mounted so that the run folder outlives this runtime: notebook 05 writes it, "
    "and 06 and 07 read it from their own runtimes (set USE_DRIVE = False to keep it local)."
)


class RunMissingError(FileNotFoundError):
    """No trained run where notebooks 06-07 look; the message says what to do."""


class RunFolderError(RuntimeError):
    """A run folder that cannot be used as it is; the message names the folder and the fix."""


# ---- named moments inside writes, where the fault-injection tests stop a run ----------------

FaultHook = Callable[[str, "int | None"], None]
_FAULT_HOOKS: list[FaultHook] = []


def add_fault_hook(hook: FaultHook) -> None:
    """Call `hook(point, step)` at every fault point (scripts/train_grpo.py, when a test asks)."""
    _FAULT_HOOKS.append(hook)


def fault_point(point: str, step: int | None = None) -> None:
    """A named moment in a write (e.g. 'adapter-swap'); without a registered hook, nothing."""
    for hook in _FAULT_HOOKS:
        hook(point, step)


# ---- writes that a kill cannot leave half-done ----------------------------------------------


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


# ---- is a file, or a folder of them, whole? -------------------------------------------------


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


ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def adapter_problem(folder: Path) -> str | None:
    """Why `folder` is not a whole saved LoRA adapter, or None."""
    if not folder.is_dir():
        return "the folder is missing"
    for name in ADAPTER_FILES:
        problem = file_problem(folder / name)
        if problem:
            return f"its {name} {problem}"
    return None


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


def cache_root() -> Path:
    """Built artefacts (the smoke model): $GRPO_COURSE_CACHE, else .cache/ at the course root."""
    return Path(os.environ.get("GRPO_COURSE_CACHE") or ROOT / ".cache")


def on_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules


def drive_mount() -> Path:
    """Where Colab mounts Google Drive; $GRPO_DRIVE_MOUNT moves it (the tests fake Colab)."""
    return Path(os.environ.get("GRPO_DRIVE_MOUNT") or "/content/drive")


def uses_drive(use_drive: bool) -> bool:
    """The run folder is on Drive: on Colab, asked for, and not overridden by $GRPO_RUN_DIR."""
    return use_drive and on_colab() and not os.environ.get("GRPO_RUN_DIR")


def runs_root(use_drive: bool = False) -> Path:
    """The folder that holds the runs: $GRPO_RUN_DIR's parent, Drive on Colab, else runs/."""
    if os.environ.get("GRPO_RUN_DIR"):
        return Path(os.environ["GRPO_RUN_DIR"]).parent
    return drive_mount() / DRIVE_RUNS if uses_drive(use_drive) else ROOT / "runs"


def run_dir(profile_name: str, use_drive: bool = False) -> Path:
    """A profile's run folder: $GRPO_RUN_DIR/<profile> (make course), else <runs_root>/course/."""
    if os.environ.get("GRPO_RUN_DIR"):
        return Path(os.environ["GRPO_RUN_DIR"]) / profile_name
    return runs_root(use_drive) / RUN_NAME / profile_name


def mount_drive() -> Path:
    """Mount Google Drive once per runtime (Colab asks for permission) and return the mount."""
    mount = drive_mount()
    if not (mount / "MyDrive").is_dir():
        from google.colab import drive  # Colab-only

        drive.mount(str(mount))
    return mount


def flush_drive() -> str:
    """End of the training notebook on Colab: write out what is still pending on Google Drive, so
    that the next notebook's runtime sees the whole run; elsewhere nothing. Says what it did.

    Colab's only flush is `drive.flush_and_unmount()` ("to flush any outstanding writes"), so
    Drive is mounted again afterwards for the cells below that still read the run folder.
    """
    if not on_colab() or not (drive_mount() / "MyDrive").is_dir():
        return ("No Google Drive mounted here, so nothing to flush: the next notebook can be "
                "opened now.")
    from google.colab import drive  # Colab-only

    drive.flush_and_unmount()
    mount_drive()
    return ("Google Drive is flushed: the whole run is saved there, and the next notebook can be "
            "opened now, in its own runtime (Drive is mounted again for the cells below).")


def training_run_dir(profile_name: str, use_drive: bool = True, folder: str = "") -> Path:
    """Notebook 05's run folder: `folder`, else run_dir(); mounts Drive when the folder is there."""
    run = Path(folder) if folder else run_dir(profile_name, use_drive)
    if uses_drive(use_drive) or run.is_relative_to(drive_mount()):
        mount_drive()
        print(DRIVE_WHY)
    print(f"Run folder: {shown(run)}")
    return run


def _adapter_configs(run: Path) -> list[Path]:
    """adapter/'s config, and adapter.old/'s, which a kill while 05 replaced the adapter leaves."""
    folders = (run / "adapter", _old(run / "adapter"))
    return [folder / "adapter_config.json" for folder in folders
            if (folder / "adapter_config.json").is_file()]


def has_adapter(run: Path) -> bool:
    """True when `run` holds a saved LoRA adapter (at the end of training or at a checkpoint)."""
    return bool(_adapter_configs(run))


def _adapter_time(run: Path) -> float:
    return max(config.stat().st_mtime for config in _adapter_configs(run))


def _same_model(saved: str, expected: str) -> bool:
    """Hub ids must match; local folders (the smoke model's) match by folder name."""
    if saved == expected:
        return True
    local = saved.startswith(("/", ".")) or expected.startswith(("/", "."))
    return local and Path(saved).name == Path(expected).name


def usable_adapter(run: Path, profile: Profile | None = None) -> Path:
    """The whole adapter 06 and 07 load from `run`, or one sentence saying why there is none.

    Never a half-written one: adapter/ if whole, else the adapter.old/ a kill during 05's swap
    left. With `profile`, the adapter must have been trained on that profile's model.
    """
    adapter = whole_folder(run / "adapter", adapter_problem)
    if adapter is None:
        problem = adapter_problem(run / "adapter")
        raise RunFolderError(
            f"The adapter in {shown(run / 'adapter')} cannot be loaded, {problem}: "
            "rerun notebook 05 with this run folder (it saves the adapter again from its newest "
            "complete checkpoint), or set RUN_FOLDER to another run."
        )
    if adapter.name != "adapter":
        print(f"adapter/ is missing in {shown(run)}: a disconnect hit 05 while it replaced it, "
              f"so the previous one, {adapter.name}/, is used (rerun 05 to finish the run).")
    if profile is not None:
        from helpers.profiles import SMOKE_MODEL

        saved = str(json.loads((adapter / "adapter_config.json").read_text())
                    .get("base_model_name_or_path") or "")
        # What helpers.model.resolve_model_name loads (without importing the model code here).
        expected = str(SMOKE_MODEL_DIR) if profile.model_name == SMOKE_MODEL else profile.model_name
        if not _same_model(saved, expected):
            model = shown(expected)  # the smoke model as models/smoke, a hub id as it is
            raise RunFolderError(
                f"The run in {shown(run)} was trained on {saved}, not on the {profile.name} "
                f"profile's {model}: set PROFILE to the profile that run used, or RUN_FOLDER to "
                f"a {profile.name} run."
            )
    return adapter


def newest_run(root: Path, profile_name: str) -> Path | None:
    """The <root>/<name>/<profile> folder with the most recently saved adapter, or None."""
    runs = [run for run in root.glob(f"*/{profile_name}") if has_adapter(run)]
    return max(runs, key=_adapter_time, default=None)


def missing_run_message(profile_name: str, where: Path, pattern: str) -> str:
    """One sentence: no run in `where`, and the three ways out (naming profiles that have one)."""
    found = sorted({path.parent.parent.name for path in where.glob(pattern)} - {profile_name})
    others = f" (runs found for: {', '.join(found)})" if found else ""
    return (
        f"No trained {profile_name} run in {shown(where)}: run notebook 05 with this profile "
        f"first, set RUN_FOLDER to the folder of the run you want, or set PROFILE to the "
        f"profile of a run you have{others}."
    )


def find_run(profile_name: str, use_drive: bool = True, folder: str = "") -> Path:
    """Notebooks 05-06: the run to read. `folder` if given; on Drive the profile's newest run."""
    if folder:
        run: Path | None = Path(folder)
        if run.is_relative_to(drive_mount()):
            mount_drive()
        where, pattern = run, "adapter/adapter_config.json"
    elif uses_drive(use_drive):
        mount_drive()
        print(DRIVE_WHY)
        where, pattern = runs_root(use_drive), "*/*/adapter/adapter_config.json"
        run = newest_run(where, profile_name)
    else:
        run = run_dir(profile_name)
        where, pattern = run.parent, "*/adapter/adapter_config.json"
    if run is None or not has_adapter(run):
        raise RunMissingError(missing_run_message(profile_name, where, pattern))
    print(f"Run folder: {shown(run)}")
    return run


def exports_dir(run: Path) -> Path:
    """Where notebook 07 writes exports: run/export, but never on Drive (GBs, not MBs).

    A run on Drive exports to this runtime's runs/export/<profile> ($GRPO_EXPORT_DIR moves it).
    """
    if run.is_relative_to(drive_mount()):
        return Path(os.environ.get("GRPO_EXPORT_DIR") or ROOT / "runs" / "export") / run.name
    return run / "export"


def shown(value: object) -> object:
    """A path inside the course, shown relative to its root (stored outputs stay machine-free)."""
    path = Path(str(value))
    return path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else value
