"""Where things are written: runs/ at the course root, or a run folder on Google Drive on Colab.

A run folder holds one profile's training run: checkpoints/, adapter/, log_history.json, figures/
and eval/. On Colab each notebook gets its own runtime, so notebooks 04-06 keep it on Drive by
default; 04 writes it and 05-06 find it there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_NAME = "course"  # runs/<RUN_NAME>/<profile>; `make course` uses a timestamp instead
DRIVE_RUNS = Path("MyDrive") / "grpo-course" / "runs"  # inside the Drive mount
DRIVE_WHY = (
    "Google Drive is mounted so that the run folder outlives this runtime: notebook 04 writes it, "
    "and 05 and 06 read it from their own runtimes (set USE_DRIVE = False to keep it local)."
)


class RunMissingError(FileNotFoundError):
    """No trained run where notebooks 05-06 look; the message says what to do."""


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
    """End of notebook 04 on Colab: write out what is still pending on Google Drive and unmount
    it, so that notebook 05's runtime sees the whole run; elsewhere nothing. Says what it did."""
    if not on_colab() or not (drive_mount() / "MyDrive").is_dir():
        return "No Google Drive mounted here, so nothing to flush: notebook 05 can be opened now."
    from google.colab import drive  # Colab-only

    drive.flush_and_unmount()  # "to flush any outstanding writes", as Colab's API says
    return ("Google Drive is flushed and unmounted: the run is saved there, and notebook 05 can "
            "be opened now, in its own runtime.")


def training_run_dir(profile_name: str, use_drive: bool = True, folder: str = "") -> Path:
    """Notebook 04's run folder: `folder`, else run_dir(); mounts Drive when the folder is there."""
    run = Path(folder) if folder else run_dir(profile_name, use_drive)
    if uses_drive(use_drive) or run.is_relative_to(drive_mount()):
        mount_drive()
        print(DRIVE_WHY)
    print(f"Run folder: {shown(run)}")
    return run


def has_adapter(run: Path) -> bool:
    """True when `run` holds a saved LoRA adapter (at the end of training or at a checkpoint)."""
    return (run / "adapter" / "adapter_config.json").is_file()


def _adapter_time(run: Path) -> float:
    return (run / "adapter" / "adapter_config.json").stat().st_mtime


def newest_run(root: Path, profile_name: str) -> Path | None:
    """The <root>/<name>/<profile> folder with the most recently saved adapter, or None."""
    runs = [run for run in root.glob(f"*/{profile_name}") if has_adapter(run)]
    return max(runs, key=_adapter_time, default=None)


def missing_run_message(profile_name: str, where: Path, pattern: str) -> str:
    """One sentence: no run in `where`, and the three ways out (naming profiles that have one)."""
    found = sorted({path.parent.parent.name for path in where.glob(pattern)} - {profile_name})
    others = f" (runs found for: {', '.join(found)})" if found else ""
    return (
        f"No trained {profile_name} run in {shown(where)}: run notebook 04 with this profile "
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
    """Where notebook 06 writes exports: run/export, but never on Drive (GBs, not MBs).

    A run on Drive exports to this runtime's runs/export/<profile> ($GRPO_EXPORT_DIR moves it).
    """
    if run.is_relative_to(drive_mount()):
        return Path(os.environ.get("GRPO_EXPORT_DIR") or ROOT / "runs" / "export") / run.name
    return run / "export"


def shown(value: object) -> object:
    """A path inside the course, shown relative to its root (stored outputs stay machine-free)."""
    path = Path(str(value))
    return path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else value
