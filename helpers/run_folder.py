"""The run folder: every path a training run writes or reads, where it lives, and how it is found.

A run folder holds one profile's training run. `RunFolder` is the one place that spells its layout:

    checkpoints/           the trainer's checkpoint-N folders (and the run's fingerprint)
    adapter/               the newest whole LoRA adapter (notebooks 06 and 07 load it)
    heldout-adapter/       the adapter served to vLLM while held-out accuracy is scored (GPU;
                           on this runtime's disk when the run is on Drive)
    log_history.json       trainer.state.log_history
    completions.json       sampled completions with their rewards
    figures/training.png   the training figure
    eval/                  notebook 06: answers/ (per model and batch), results.json, problems.csv

On Colab each notebook gets its own runtime, so notebooks 05-07 keep it on Google Drive by default:
05 writes it and 06-07 find it there (`find_run`). Exports are gigabytes, so they never go to Drive.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from helpers.paths import ROOT, SMOKE_MODEL_DIR, on_colab, shown
from helpers.storage import ADAPTER_CONFIG, RunFolderError, _old, adapter_problem, whole_folder

if TYPE_CHECKING:
    from helpers.profiles import Profile

RUN_NAME = "course"  # runs/<RUN_NAME>/<profile>; `make course` uses a timestamp instead
DRIVE_RUNS = Path("MyDrive") / "grpo-course" / "runs"  # inside the Drive mount
DRIVE_WHY = (
    "Google Drive is mounted so that the run folder outlives this runtime: notebook 05 writes it, "
    "and 06 and 07 read it from their own runtimes (set USE_DRIVE = False to keep it local)."
)
ADAPTER_STEP_FILE = "training_step.json"  # inside an adapter folder: the step it holds
FINGERPRINT_FILE = "run_fingerprint.json"  # inside checkpoints/: what a resume must match
EXPORTS = "export"  # a local run's exports, or runs/export/<profile> for a run on Drive


@dataclass(frozen=True)
class RunFolder:
    """One training run's folder (`root`), and the path of everything in it."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def __fspath__(self) -> str:
        return str(self.root)

    def __str__(self) -> str:
        return str(self.root)

    @property
    def name(self) -> str:
        """The folder's name: the profile, for the course's own runs."""
        return self.root.name

    @property
    def checkpoints(self) -> Path:
        """Where the trainer saves checkpoint-N folders (GRPOConfig's output_dir)."""
        return self.root / "checkpoints"

    @property
    def fingerprint(self) -> Path:
        return self.checkpoints / FINGERPRINT_FILE

    @property
    def adapter(self) -> Path:
        return self.root / "adapter"

    @property
    def adapter_staging(self) -> Path:
        """Where a new adapter is written whole before it is swapped in (helpers.storage)."""
        return self.adapter.with_name(self.adapter.name + ".partial")

    @property
    def heldout_adapter(self) -> Path:
        """The adapter vLLM reads while held-out accuracy is scored: rewritten at every score and
        needed by no later notebook, so a run on Drive keeps it on this runtime's disk."""
        return self.local / "heldout-adapter"

    @property
    def log(self) -> Path:
        return self.root / "log_history.json"

    @property
    def samples(self) -> Path:
        return self.root / "completions.json"

    @property
    def figure(self) -> Path:
        return self.root / "figures" / "training.png"

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    @property
    def answers(self) -> Path:
        """Notebook 06's saved answers, per model and batch, reused by a rerun."""
        return self.eval / "answers"

    @property
    def results(self) -> Path:
        return self.eval / "results.json"

    @property
    def problems(self) -> Path:
        """The per-problem table of the evaluation (CSV)."""
        return self.eval / "problems.csv"

    @property
    def local(self) -> Path:
        """Where what need not outlive the runtime goes: the run folder itself, or for a run on
        Drive this runtime's runs/export/<profile> ($GRPO_EXPORT_DIR moves it)."""
        if self.root.is_relative_to(drive_mount()):
            return Path(os.environ.get("GRPO_EXPORT_DIR") or ROOT / "runs" / EXPORTS) / self.name
        return self.root

    @property
    def exports(self) -> Path:
        """Where notebook 07 writes exports: export/ here, but never on Drive (GBs, not MBs)."""
        local = self.local
        return local if local != self.root else local / EXPORTS

    @classmethod
    def of_checkpoints(cls, checkpoints: Path) -> RunFolder | None:
        """The run whose checkpoints/ this is, or None for a trainer folder outside a run."""
        run = cls(Path(checkpoints).parent)
        return run if run.checkpoints == Path(checkpoints) else None


class RunMissingError(FileNotFoundError):
    """No trained run where notebooks 06-07 look; the message says what to do."""


def as_run(folder: RunFolder | Path | str) -> RunFolder:
    """A RunFolder, from one or from the folder's path."""
    return folder if isinstance(folder, RunFolder) else RunFolder(Path(folder))


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


def run_dir(profile_name: str, use_drive: bool = False) -> RunFolder:
    """A profile's run folder: $GRPO_RUN_DIR/<profile> (make course), else <runs_root>/course/."""
    if os.environ.get("GRPO_RUN_DIR"):
        return RunFolder(Path(os.environ["GRPO_RUN_DIR"]) / profile_name)
    return RunFolder(runs_root(use_drive) / RUN_NAME / profile_name)


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
    Drive is mounted again afterwards for the cells below that still read the run folder. That
    mount is a fresh consent request, which a learner away from the screen misses (it times
    out): the run is saved all the same, so a failed remount is one sentence, not a stop.
    """
    if not on_colab() or not (drive_mount() / "MyDrive").is_dir():
        return ("No Google Drive mounted here, so nothing to flush: the next notebook can be "
                "opened now.")
    from google.colab import drive  # Colab-only

    drive.flush_and_unmount()
    saved = ("Google Drive is flushed: the whole run is saved there, and the next notebook can be "
             "opened now, in its own runtime")
    try:
        mount_drive()
    except Exception as error:  # colabtools raises ValueError or TimeoutError; any is the same
        return (f"{saved}; Drive could not be mounted again here ({type(error).__name__}: "
                f"{str(error).strip()[:120] or 'no reason given'}), so the Solutions that read "
                "the run folder need this cell run again first.")
    return f"{saved} (Drive is mounted again for the cells below)."


def training_run_dir(profile_name: str, use_drive: bool = True, folder: str = "") -> RunFolder:
    """Notebook 05's run folder: `folder`, else run_dir(); mounts Drive when the folder is there."""
    run = RunFolder(Path(folder)) if folder else run_dir(profile_name, use_drive)
    if uses_drive(use_drive) or run.root.is_relative_to(drive_mount()):
        mount_drive()
        print(DRIVE_WHY)
    print(f"Run folder: {shown(run)}")
    return run


def _adapter_configs(run: RunFolder | Path) -> list[Path]:
    """adapter/'s config, and adapter.old/'s, which a kill while 05 replaced the adapter leaves."""
    adapter = as_run(run).adapter
    return [folder / ADAPTER_CONFIG for folder in (adapter, _old(adapter))
            if (folder / ADAPTER_CONFIG).is_file()]


def has_adapter(run: RunFolder | Path) -> bool:
    """True when `run` holds a saved LoRA adapter (at the end of training or at a checkpoint)."""
    return bool(_adapter_configs(run))


def _adapter_time(run: RunFolder) -> float:
    return max(config.stat().st_mtime for config in _adapter_configs(run))


def _same_model(saved: str, expected: str) -> bool:
    """Hub ids must match; local folders (the smoke model's) match by folder name."""
    if saved == expected:
        return True
    local = saved.startswith(("/", ".")) or expected.startswith(("/", "."))
    return local and Path(saved).name == Path(expected).name


def usable_adapter(run: RunFolder | Path, profile: Profile | None = None) -> Path:
    """The whole adapter 06 and 07 load from `run`, or one sentence saying why there is none.

    Never a half-written one: adapter/ if whole, else the adapter.old/ a kill during 05's swap
    left. With `profile`, the adapter must have been trained on that profile's model.
    """
    run = as_run(run)
    adapter = whole_folder(run.adapter, adapter_problem)
    if adapter is None:
        problem = adapter_problem(run.adapter)
        raise RunFolderError(
            f"The adapter in {shown(run.adapter)} cannot be loaded, {problem}: "
            "rerun notebook 05 with this run folder (it saves the adapter again from its newest "
            "complete checkpoint), or set RUN_FOLDER to another run."
        )
    if adapter != run.adapter:
        print(f"{run.adapter.name}/ is missing in {shown(run)}: a disconnect hit 05 while it "
              f"replaced it, so the previous one, {adapter.name}/, is used (rerun 05 to finish "
              "the run).")
    if profile is not None:
        from helpers.profiles import SMOKE_MODEL

        saved = str(json.loads((adapter / ADAPTER_CONFIG).read_text())
                    .get("base_model_name_or_path") or "")
        # What helpers.loading.resolve_model_name loads (without importing the model code here).
        expected = str(SMOKE_MODEL_DIR) if profile.model_name == SMOKE_MODEL else profile.model_name
        if not _same_model(saved, expected):
            model = shown(expected)  # the smoke model as models/smoke, a hub id as it is
            raise RunFolderError(
                f"The run in {shown(run)} was trained on {saved}, not on the {profile.name} "
                f"profile's {model}: set PROFILE to the profile that run used, or RUN_FOLDER to "
                f"a {profile.name} run."
            )
    return adapter


def newest_run(root: Path, profile_name: str) -> RunFolder | None:
    """The <root>/<name>/<profile> folder with the most recently saved adapter, or None."""
    runs = [RunFolder(path) for path in root.glob(f"*/{profile_name}")]
    return max((run for run in runs if has_adapter(run)), key=_adapter_time, default=None)


def missing_run_message(profile_name: str, where: Path, runs: str) -> str:
    """One sentence: no run in `where`, and the three ways out (naming profiles that have one).

    `runs` is the glob of run folders under `where` ("", "*" or "*/*").
    """
    folders = [RunFolder(path) for path in where.glob(runs)] if runs else [RunFolder(where)]
    found = sorted({run.name for run in folders if has_adapter(run)} - {profile_name})
    others = f" (runs found for: {', '.join(found)})" if found else ""
    return (
        f"No trained {profile_name} run in {shown(where)}: run notebook 05 with this profile "
        f"first, set RUN_FOLDER to the folder of the run you want, or set PROFILE to the "
        f"profile of a run you have{others}."
    )


def find_run(profile_name: str, use_drive: bool = True, folder: str = "") -> RunFolder:
    """Notebooks 06-07: the run to read. `folder` if given; on Drive the profile's newest run."""
    run: RunFolder | None
    if folder:
        run = RunFolder(Path(folder))
        if run.root.is_relative_to(drive_mount()):
            mount_drive()
        where, runs = run.root, ""
    elif uses_drive(use_drive):
        mount_drive()
        print(DRIVE_WHY)
        where, runs = runs_root(use_drive), "*/*"
        run = newest_run(where, profile_name)
    else:
        run = run_dir(profile_name)
        where, runs = run.root.parent, "*"
    if run is None or not has_adapter(run):
        raise RunMissingError(missing_run_message(profile_name, where, runs))
    print(f"Run folder: {shown(run)}")
    return run
