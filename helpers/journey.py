"""The Colab journey in minutes: per notebook its install, vLLM's first start and its work.

Every figure comes from one place: the install times from `helpers.course.INSTALL_MINUTES`,
vLLM's first start from `helpers.loading.VLLM_FIRST_START_MINUTES`, notebook 05's training from the
t4 profile's seconds per step, and each notebook's own work from `helpers.course.NOTEBOOKS`. Where
`make gpu-check` has written runs/gpu-check/*.json, its measured vLLM start (and an install time,
when a report carries one) replace the estimates. Notebook 00 shows the table, each notebook's
header says its own row (`time_line`), and docs/colab.md holds a copy that a test compares with
`journey_markdown()`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from helpers.course import (
    COLAB_GPU,
    FULL_INSTALL_RESTART,
    INSTALL_MINUTES,
    NOTEBOOKS,
    Install,
    Minutes,
    notebook_key,
)
from helpers.loading import VLLM_FIRST_START_MINUTES
from helpers.paths import ROOT
from helpers.profiles import PROFILES, Profile, expected_t4_minutes

GPU_CHECK_REPORTS = ROOT / "runs" / "gpu-check"


@dataclass(frozen=True)
class Leg:
    """One notebook's runtime: install, vLLM's first start, its own work (minutes, low-high)."""

    notebook: str
    install: Install
    install_minutes: Minutes
    vllm_minutes: Minutes
    work_minutes: Minutes

    @property
    def total(self) -> Minutes:
        parts = (self.install_minutes, self.vllm_minutes, self.work_minutes)
        return sum(p[0] for p in parts), sum(p[1] for p in parts)


@dataclass(frozen=True)
class Measured:
    """What `make gpu-check` measured, in minutes (None: not measured)."""

    vllm_first_start: float | None = None
    full_install: float | None = None


def minutes_range(text: str) -> Minutes:
    """'3-5 min' -> (3.0, 5.0); one figure ('8 min') is both ends."""
    found = re.search(r"(\d+(?:\.\d+)?)(?:\s*[-–]\s*(\d+(?:\.\d+)?))?\s*min", text)
    if found is None:
        raise ValueError(f"No minutes in {text!r}: write INSTALL_MINUTES as 'A-B min'.")
    low = float(found[1])
    return low, float(found[2] or low)


def measured(folder: Path = GPU_CHECK_REPORTS) -> Measured:
    """The newest gpu-check report's vLLM first start and full install, if it holds them."""
    reports = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for path in reversed(reports):
        report = json.loads(path.read_text())
        start, install = report.get("vllm_first_start_seconds"), report.get("install_seconds")
        if start is not None or install is not None:
            return Measured(start / 60 if start is not None else None,
                            install / 60 if install is not None else None)
    return Measured()


def journey(profile: Profile = PROFILES["t4"], found: Measured | None = None) -> list[Leg]:
    """One Leg per notebook, in reading order, for `profile` on a Colab T4."""
    found = measured() if found is None else found
    legs = []
    for name, book in NOTEBOOKS.items():
        install_minutes = minutes_range(INSTALL_MINUTES[book.install])
        if book.install == "full" and found.full_install is not None:
            install_minutes = (found.full_install, found.full_install)
        vllm: Minutes = (0, 0)
        if book.starts_vllm and profile.fast_inference:
            vllm = VLLM_FIRST_START_MINUTES
            if found.vllm_first_start is not None:
                vllm = (found.vllm_first_start, found.vllm_first_start)
        low, high = book.work_minutes
        if book.trains:
            training = expected_t4_minutes(profile) or (0, 0)
            low, high = low + training[0], high + training[1]
        legs.append(Leg(name, book.install, install_minutes, vllm, (low, high)))
    return legs


def total(legs: list[Leg], install: Install | None = None) -> Minutes:
    """The sum of the legs' totals (only those of one install, if given)."""
    chosen = [leg.total for leg in legs if install is None or leg.install == install]
    return sum(t[0] for t in chosen), sum(t[1] for t in chosen)


def one_runtime_path(legs: list[Leg]) -> Minutes:
    """05, 06 and 07 in one T4 runtime (USE_DRIVE = False): one install and one restart; 06's
    vLLM start reuses the compiled kernels, counted here in full all the same."""
    by_name = {leg.notebook: leg for leg in legs}
    run = [by_name[name] for name in ("grpo_training", "evaluation", "save_and_use")]
    install = run[0].install_minutes
    parts = [install, *(leg.vllm_minutes for leg in run), *(leg.work_minutes for leg in run)]
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def _span(minutes: Minutes) -> str:
    low, high = (f"{m:.1f}".removesuffix(".0") for m in minutes)
    return low if low == high else f"{low}-{high}"


def _sum(spans: list[Minutes]) -> Minutes:
    return sum(s[0] for s in spans), sum(s[1] for s in spans)


def time_line(notebook: str, legs: list[Leg] | None = None) -> str:
    """A notebook header's time, its journey row in words: '**Time:** ≈ 6-9 min on a T4 (...)'."""
    key = notebook_key(notebook)
    leg = next(leg for leg in (journey() if legs is None else legs) if leg.notebook == key)
    parts = [f"{_span(leg.install_minutes)} install"]
    if leg.vllm_minutes[1]:
        parts.append(f"{_span(leg.vllm_minutes)} vLLM start")
    parts.append(f"{_span(leg.work_minutes)} {'training' if NOTEBOOKS[key].trains else 'work'}")
    where = f"on a {COLAB_GPU}" if leg.install == "full" else "on any runtime"
    return f"**Time:** ≈ {_span(leg.total)} min {where} ({', '.join(parts)}; estimated)"


def journey_markdown(legs: list[Leg] | None = None, found: Measured | None = None) -> str:
    """The journey as a markdown table, its totals, and the cheapest path on little quota."""
    found = measured() if found is None else found
    legs = journey(found=found) if legs is None else legs
    install_note = ("measured by `make gpu-check`" if found.full_install
                    else "measured on a stand-in")
    vllm_note = "measured by `make gpu-check`" if found.vllm_first_start else "estimate"
    rows = [f"| notebook | install | vLLM first start ({vllm_note}) | work (estimate) | total |",
            "|---|---|---|---|---|"]
    for number, leg in enumerate(legs):
        how = (f"{leg.install}, {install_note}" if leg.install == "full"
               else "light, measured on a stand-in")
        rows.append(f"| {number:02d} {leg.notebook} | {_span(leg.install_minutes)} ({how}) | "
                    f"{_span(leg.vllm_minutes) if leg.vllm_minutes[1] else '-'} | "
                    f"{_span(leg.work_minutes)} | {_span(leg.total)} |")
    t4, light, everything = total(legs, "full"), total(legs, "light"), total(legs)
    restart = ", one restart" if FULL_INSTALL_RESTART else ""
    columns = [_sum([leg.install_minutes for leg in legs]),
               _sum([leg.vllm_minutes for leg in legs]), _sum([leg.work_minutes for leg in legs])]
    rows.append(f"| **all** | {' | '.join(_span(c) for c in columns)} | **{_span(everything)}** |")
    return "\n".join([
        *rows, "",
        f"Minutes. The full notebooks take {_span(t4)} min of T4 time (your GPU quota); the light "
        f"ones {_span(light)} min on any runtime. With little quota, run the light notebooks on a "
        f"CPU runtime, read 01 without running it, and let 05 run 06 and 07 in its own T4 runtime: "
        f"set `USE_DRIVE = False` and `RUN_06_07_HERE = True` in 05's parameters, Run all, then "
        f"follow its section 12 (restart the session, run the first two cells and that section's "
        f"cell): one install{restart}, about {_span(one_runtime_path(legs))} min of T4.",
    ])


if __name__ == "__main__":
    print(journey_markdown())
