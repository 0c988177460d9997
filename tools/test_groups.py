"""How the test session is cut into groups, in what order they run, and which tier runs each.

conftest.py applies these rules; they live here so that a test can import them.
- A group goes whole to one pytest-xdist process: a test file (its module fixtures are built once),
  a notebook (its cells share one kernel), or the notebooks that hand the training run on.
- The order comes from runs/bench/test_durations.json (each group's seconds, written by
  `pytest --store-durations`): the longest first, so no process is left alone with a long one at
  the end; a group the file does not know yet goes last. A group's release checks are timed
  apart from the rest (`timing_key`), since they run in another session.
- Tiers (docs/ci.md): `make test-fast` leaves out every group that takes FAST_SHARE or more of
  `make test`'s stored time, `make test` leaves out the RELEASE checks, and `.ci/run` runs
  `make test`, then those.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Protocol, TypeVar

from helpers.paths import ROOT

DURATIONS = ROOT / "runs" / "bench" / "test_durations.json"

# Notebooks that read what the one before wrote (the training run): one process, in this order.
RUN_CHAIN = ("05_grpo_training", "06_evaluation", "07_save_and_use")
RUN_CHAIN_GROUP = "notebooks/training-evaluation-export"
RELEASE_SUFFIX = " (release)"

# `make test-fast` leaves out the groups that take this share of `make test`'s stored seconds or
# more: a share, not seconds, so that a session timed on a slower machine draws the same line.
FAST_SHARE = 0.02

# The release checks: `.ci/run` runs them after `make test`, which leaves them out. A key is a
# group, "group::fixture" for the tests of that group that use the fixture, or "group::test".
RELEASE = {
    "tests/test_smoke_promise.py": "the learning check on a second float kernel path (60 GRPO "
                                   "steps; notebook 06 checks the same promise on the native path)",
    "tests/test_faults.py::faults": "the fault soak: one smoke run killed at every named point "
                                    "and resumed (the rest of the file runs in `make test`)",
    "tests/test_locks.py::dry_runs": "pip's dry runs of each lock for each Python, against PyPI",
    "tests/test_ablations.py::test_no_op_arms_match_the_course_and_the_null_arm_differs":
        "the lab's three no-op knobs train exactly as the course, and its null arm does not (5 "
        "smoke runs of 10 steps)",
    "tests/test_train_script.py::two_process_run":
        "scripts/train_grpo.py as two processes under accelerate (gloo), killed and resumed: "
        "the several-GPU path of notebook 10, not the notebooks' own",
    "tests/test_offline_gpu_check.py::checked":
        "scripts/offline_gpu_check.py's whole run on this CPU (train, resume bit for bit, "
        "rerun, export): the check a GPU machine runs before a release",
}


class Item(Protocol):
    """What the ordering needs of a pytest item."""

    nodeid: str


T = TypeVar("T", bound=Item)


def group_of(nodeid: str) -> str:
    """The group of a test id: its file, or the run chain for the notebooks in it."""
    path = nodeid.split("::", 1)[0]
    return RUN_CHAIN_GROUP if PurePosixPath(path).stem in RUN_CHAIN else path


def timing_key(nodeid: str, release: bool) -> str:
    """The name a test's seconds are stored under: its group, marked when it is a release check."""
    return f"{group_of(nodeid)}{RELEASE_SUFFIX if release else ''}"


def is_release(nodeid: str, fixtures: Iterable[str]) -> bool:
    """Whether a test is one of the RELEASE checks."""
    group, test = group_of(nodeid), nodeid.split("::")[-1].split("[")[0]
    return group in RELEASE or any(f"{group}::{name}" in RELEASE for name in (*fixtures, test))


def read_durations(path: Path | None = None) -> dict[str, float]:
    """Each group's stored seconds; none when the file is missing (every group is then unknown)."""
    path = path or DURATIONS
    if not path.exists():
        return {}
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text())["seconds"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{path} is not a durations file ({error}): delete it, or rewrite it with "
                         "`make test PYTEST_ADDOPTS=--store-durations`") from error


def ordered(items: Sequence[T], seconds: dict[str, float],
            key: Callable[[T], str] = lambda item: group_of(item.nodeid)) -> list[T]:
    """The items, longest group first; unknown groups last; each group keeps its own order."""
    def rank(item: T) -> tuple[bool, float]:
        known = seconds.get(key(item))
        return known is None, -(known or 0.0)

    return sorted(items, key=rank)  # stable


def fast_limit_s(seconds: dict[str, float], share: float = FAST_SHARE) -> float:
    """The seconds from which `make test-fast` leaves a group out (release checks not counted)."""
    return share * sum(s for key, s in seconds.items() if not key.endswith(RELEASE_SUFFIX))


def slow_groups(seconds: dict[str, float], share: float = FAST_SHARE) -> set[str]:
    """The groups `make test-fast` leaves out."""
    limit = fast_limit_s(seconds, share)
    return {key for key, s in seconds.items() if s >= limit and not key.endswith(RELEASE_SUFFIX)}


def group_seconds(reports: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Seconds per timing key from (timing key, seconds) of each setup, call and teardown."""
    out: dict[str, float] = {}
    for key, duration in reports:
        out[key] = out.get(key, 0.0) + duration
    return out


def store_durations(measured: dict[str, float], command: str, path: Path | None = None) -> None:
    """Merge a session's seconds per group into the stored file (the groups it did not run stay)."""
    path = path or DURATIONS
    seconds = read_durations(path) | {group: round(s, 1) for group, s in measured.items()}
    # bench/_results.py's diff-friendly form (tests/test_figures.py checks every file there).
    path.write_text(json.dumps({"command": command, "seconds": seconds}, indent=2, sort_keys=True,
                               ensure_ascii=False) + "\n")
