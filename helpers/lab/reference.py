"""The reference a verdict compares with: the stored grid's course runs, if this machine
reproduces them and they were run with the course's present settings, else the course's arm run
here (kept in .cache/lab/); and `try_arm`, a learner's arm against it."""

from __future__ import annotations

import inspect
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from helpers.data import make_prompt
from helpers.evaluation import decoding_settings, fingerprint
from helpers.grpo_config import grpo_settings
from helpers.hardware import CPU_ONLY, cpu_kernel_path
from helpers.lab.arms import ARMS, COURSE, Arm
from helpers.lab.problems import lab_problems
from helpers.lab.runs import run_seeds
from helpers.lab.tables import _points
from helpers.lab.verdicts import paired_against, reference_check
from helpers.loading import lora_kwargs
from helpers.paths import ROOT, cache_root
from helpers.profiles import PROFILES, SEED
from helpers.rewards import REWARDS
from helpers.smoke_model import read_manifest
from helpers.stats import (
    EQUIVALENCE_MARGIN,
    SEQUENTIAL_LOOKS,
    adjusted_verdicts,
    holm,
    sequential_step,
    verdict,
)

GRID_FILE = "runs/bench/ablations.json"
POOL_FILE = "runs/bench/course_pool.json"  # the course's arm alone on many seeds
# How a lab run draws its randomness: part of what a stored run was made under.
LAB_SEEDING = "the run's seed: LoRA init, data order, sampling"
# GRPOConfig fields that say where and how a run is kept, not what it learns.
_KEEPING = ("output_dir", "save_steps", "save_total_limit", "report_to", "push_to_hub",
            "log_completions", "logging_steps", "seed")


class StaleGridError(ValueError):
    """A stored grid run with other course settings than the present ones."""


def course_settings() -> dict[str, Any]:
    """What a lab run's result depends on in the course: the smoke profile's GRPO settings, the
    rewards (weights and code), the LoRA setup, the decoding, the prompt, the smoke model's files,
    the lab's problems and how a run seeds what it draws."""
    profile = PROFILES["smoke"]
    grpo = grpo_settings(profile, CPU_ONLY, "unused")
    return {"grpo": {k: v for k, v in grpo.items() if k not in _KEEPING},
            "rewards": {r.name: [r.weight, fingerprint(inspect.getsource(r.func))]
                        for r in REWARDS},
            "lora": {k: v for k, v in lora_kwargs(profile).items() if k != "random_state"},
            "decoding": fingerprint(decoding_settings(profile)),
            "prompt": fingerprint(make_prompt("{question}")),
            "smoke_model": fingerprint(read_manifest()),
            "problems": fingerprint(lab_problems()), "seeding": LAB_SEEDING}


def settings_key(settings: dict[str, Any] | None = None) -> str:
    """A short hash of `course_settings()`: the key of a stored grid and of a reference cache."""
    return fingerprint(course_settings() if settings is None else settings)


def _changed(now: dict[str, Any], then: dict[str, Any]) -> list[str]:
    """The settings (part, or part.field) that differ between two `course_settings()`."""
    out = []
    for part in sorted(now.keys() | then.keys()):
        a, b = now.get(part), then.get(part)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{part}.{k}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
        elif a != b:
            out.append(part)
    return out


def stale_note(grid: dict[str, Any]) -> str | None:
    """None when `grid` was run with the course's present settings; else one sentence naming
    what changed and the fix."""
    now, then = json.loads(json.dumps(course_settings())), grid.get("settings")
    if then is not None and settings_key(then) == settings_key(now):
        return None
    what = ("records no course settings (it predates their key)" if then is None else
            f"was run with other course settings ({', '.join(_changed(now, then))} changed)")
    return (f"{GRID_FILE} {what}: its runs are not this course's reference. Rerun the grid "
            "(`python -m bench.ablations --fresh`); until then the reference is the course's arm "
            "run here.")


def load_grid(root: Path | None = None) -> dict[str, Any]:
    """The grid bench/ablations.py stored, or one sentence saying how to make it."""
    path = (root or ROOT) / GRID_FILE
    if not path.exists():
        raise FileNotFoundError(f"No {GRID_FILE}: run `python -m bench.ablations` (a few hours "
                                "on two cores; it resumes if stopped).")
    return json.loads(path.read_text())


def load_reference_runs(root: Path | None = None) -> dict[str, Any]:
    """The stored course runs a verdict compares with: the pool (bench/ablations.py --pool) when
    there is one, else the grid's; {"rows": []} when neither exists."""
    for name in (POOL_FILE, GRID_FILE):
        path = (root or ROOT) / name
        if path.exists():
            return json.loads(path.read_text())
    return {"rows": []}


def stored_reference(grid: dict[str, Any] | None = None, steps: int | None = None,
                     kernel_path: str = "native") -> list[dict[str, Any]]:
    """The grid's course runs (at the profile's steps, on one kernel path); StaleGridError if
    the grid was run with other course settings than the present ones."""
    grid = grid or load_grid()
    note = stale_note(grid)
    if note:
        raise StaleGridError(note)
    steps = steps or PROFILES["smoke"].max_steps
    return sorted((r for r in grid["rows"] if r["arm"] == COURSE and r["kernel_path"] ==
                   kernel_path and r.get("steps", steps) == steps and r.get("correct")),
                  key=lambda r: r["seed"])


def reference_cache(steps: int, problems: int | None) -> Path:
    """Where this machine's own course runs are kept: one file per kernel path, lab set and
    course settings (a change to the course starts a new file instead of reusing old runs)."""
    scored = lab_problems()[:problems]
    key = fingerprint([cpu_kernel_path(), steps, fingerprint(scored), settings_key()])[:12]
    return cache_root() / "lab" / f"course-{key}.json"


def local_reference(stored: Sequence[dict[str, Any]], steps: int, workers: int = 2,
                    seeds: int = 2, unstored: int = 4, problems: int | None = None
                    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None, str]:
    """The reference for a verdict on this machine, and why.

    At the grid's own steps, `seeds` course runs here are checked against the stored ones
    (`reference_check`): if this machine reproduces them (exactly, or within the prediction
    interval) the stored runs are the reference; if its kernels shift them, two more local runs
    make a local reference of four. At other steps the stored runs do not apply: the course runs
    here, on `unstored` seeds. Local runs are kept in .cache/lab/, so each runs once per machine.
    """
    path = reference_cache(steps, problems)
    saved = json.loads(path.read_text()) if path.exists() else []
    need = seeds if stored else unstored

    def local(n: int) -> list[dict[str, Any]]:
        have = {r["seed"] for r in saved}
        missing = [SEED + i for i in range(n) if SEED + i not in have]
        if missing:
            print("The course's arm, here, for the reference:", flush=True)
            saved.extend(run_seeds(ARMS[COURSE], missing, steps, workers, problems=problems))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(saved))
        return sorted((r for r in saved if r["seed"] < SEED + n), key=lambda r: r["seed"])

    mine = local(need)
    if not stored:
        return mine, None, (f"The reference: the course's arm run here on {len(mine)} seeds, "
                            f"{steps} steps each (the stored grid's runs do not apply).")
    check = reference_check(mine, stored)
    if check["status"] == "shifted":
        mine = local(4)
        return mine, check, (
            f"Reference check: the course's arm gained {_points(check['local_mean'])} points "
            f"here on {seeds} seeds, outside the {_points(check['low'])} to "
            f"{_points(check['high'])} the stored runs predict: this machine's kernels shift "
            f"it, so the reference is the course's arm run here ({len(mine)} seeds).")
    how = ("gave exactly the stored answers" if check["status"] == "exact" else
           f"gained {_points(check['local_mean'])} points, inside the {_points(check['low'])} "
           f"to {_points(check['high'])} the stored runs predict")
    return list(stored), check, (f"Reference check: the course's arm {how} on {seeds} seeds "
                                 f"here, so the reference is the stored course arm "
                                 f"({len(stored)} seeds).")


def try_arm(chosen: Arm, seeds: int = 4, steps: int | None = None, workers: int = 2,
            sequential: bool = False, grid: dict[str, Any] | None = None,
            problems: int | None = None) -> dict[str, Any]:
    """Your arm against the course's, over seeds, on this machine: a verdict in four words.

    Runs `seeds` seeds (with `sequential`: 4, then 8, then 16 while the verdict is still
    "inconclusive", each look at a stricter level so that a false "helps" or "hurts" stays at 5%
    over the three looks: helpers.stats.sequential_step). The reference is the stored course arm
    (the pool of seeds if there is one, else the grid's: `load_reference_runs`) if this machine
    reproduces it (`local_reference`), else the course's arm run here; so it is for other `steps`
    or fewer `problems` (a quick look: only the first so many scored). Beside the verdict, the
    difference paired by seed against the reference's runs on the same seeds, when it has them;
    and from a learner's second arm in one runtime on, every arm's verdict after Holm over all of
    them (`TRIED`, `judged_together`).
    """
    steps = steps or chosen.steps or PROFILES["smoke"].max_steps
    grid = grid or load_reference_runs()
    stored = []
    if not problems and grid["rows"]:
        try:
            stored = stored_reference(grid, steps)
        except StaleGridError as error:
            print(error, flush=True)
    reference, _, note = local_reference(stored, steps, workers, unstored=max(2, seeds),
                                         problems=problems)
    print(note, flush=True)
    typical = statistics.median(r["run_seconds"] for r in reference)
    first = SEQUENTIAL_LOOKS[0] if sequential else seeds
    rows = run_seeds(chosen, range(SEED, SEED + first), steps, workers, typical, problems)
    ref_gains = [r["gain"] for r in reference]
    while True:
        gains = [r["gain"] for r in rows]
        if not sequential:
            found = verdict(gains, ref_gains)
            break
        found, more = sequential_step(gains, ref_gains)
        if more is None:
            break
        print(f"Still inconclusive at {len(rows)} seeds: {more - len(rows)} more.", flush=True)
        rows += run_seeds(chosen, range(SEED + len(rows), SEED + more), steps, workers,
                          typical, problems)
    print(verdict_line(chosen.name, found, len(rows), len(ref_gains)), flush=True)
    paired = paired_against(rows, reference)
    if paired:
        print(paired_line(paired), flush=True)
    together = {}
    if not sequential:  # (a sequential verdict holds its own level over its looks)
        TRIED[chosen.name] = found
        together = judged_together(TRIED)
        if len(together) > 1:
            print(f"Your {len(together)} arms in this runtime, judged together (Holm, as the "
                  "grid's are): " + "; ".join(f"{n}: {v}" for n, v in together.items()) + ".",
                  flush=True)
    return {"arm": chosen.name, "rows": rows, "reference": reference, "verdict": found,
            "paired": paired, "note": note, "together": together}


# The verdicts try_arm gave in this runtime, by arm name (a rerun replaces its arm's): a learner
# who tries several ideas is testing several, and is owed the grid's correction for that.
TRIED: dict[str, dict[str, Any]] = {}


def judged_together(tried: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each arm's verdict after Holm's adjustment over all of them (helpers.stats:
    adjusted_verdicts), by name."""
    judged = adjusted_verdicts(list(tried.values()), holm)
    return {name: j["verdict"] for name, j in zip(tried, judged, strict=True)}


def paired_line(paired: dict[str, Any]) -> str:
    """One sentence: the difference paired by seed, with its interval."""
    return (f"Paired by seed ({len(paired['seeds'])} seeds both ran): "
            f"{_points(paired['difference'])} points, 95% interval {_points(paired['low'])} to "
            f"{_points(paired['high'])}; beside the verdict, not instead of it: pairing by seed "
            "does not narrow this lab's intervals (docs/lab.md).")


def verdict_line(name: str, found: dict[str, Any], seeds: int, reference: int) -> str:
    """One sentence: the verdict, the difference with its interval, and what was compared."""
    interval = (f", 95% interval {_points(found['low'])} to {_points(found['high'])}"
                if "low" in found else "")
    return (f"{name}: {found['verdict']} ({_points(found['difference'])} points against the "
            f"course's arm{interval}, p = {found['p']:.3f}; {seeds} seeds against {reference}; "
            f"equivalent means within ±{100 * EQUIVALENCE_MARGIN:.0f} points).")
