"""`make bench` on a fresh clone writes every figure that README, docs/ and the notebooks cite.

`make bench` runs each script in bench/ with no arguments, then the figure check. Here each script
runs through its own command line with no arguments too, into a temporary folder, with stand-ins
for only its expensive inner calls: each stand-in returns a row shaped like the committed
benchmark's own rows. So a default that leaves out a kernel path, a seed or a control (and with it
a figure the prose cites) fails here, in seconds instead of hours.
"""

import importlib
import json
import sys

import pytest

from helpers.paths import ROOT
from scripts import figures as figures_script
from tools import cited_numbers as figures

BENCH = ROOT / "bench"
COMMITTED = ROOT / "runs" / "bench"


def committed(name: str) -> dict:
    return json.loads((COMMITTED / f"{name}.json").read_text())


def smoke_stand_ins(monkeypatch, module) -> None:
    saved = committed("smoke_model")
    build, learned = saved["kernel_paths"][0], saved["learning"][0]
    monkeypatch.setattr(module, "rebuild_row", lambda kernel, rebuild: {**build, "name": kernel})
    gain = {k: v for k, v in learned.items() if k not in ("kernel_path", "seed")}
    monkeypatch.setattr(module, "run_on_kernel_path",
                        lambda kernel, seed, max_steps=None: dict(gain))


def toy_stand_ins(monkeypatch, module) -> None:
    row = committed("toy_r1")["seeds"][0]
    monkeypatch.setattr(module, "one_seed",
                        lambda kernel, seed, recipe, diagnose, weak: {**row, "seed": seed})


def trl_stand_ins(monkeypatch, module) -> None:
    saved = committed("grpo_vs_trl")
    monkeypatch.setattr(module, "run_child", lambda kind: saved[kind])
    monkeypatch.setattr("helpers.memory_probe.measure_memory_tricks",
                        lambda **sizes: saved["memory_tricks"])


def rewards_stand_ins(monkeypatch, module) -> None:
    monkeypatch.setattr(module, "NUM_COMPLETIONS", 40)  # the real code, on fewer completions
    monkeypatch.setattr(module, "REPEATS", 1)


def ablation_stand_ins(monkeypatch, module) -> None:
    from helpers.lab import ARMS

    rows = committed("ablations")["rows"]
    by_seed = {(row["arm"], row["seed"]): row for row in rows}  # the grid's own row for each run

    def one_run(name, seed, kernel, steps=None):
        row = by_seed.get((name, seed), rows[0])
        return {**row, "arm": name, "knob": ARMS[name].knob, "seed": seed, "kernel_path": kernel}

    monkeypatch.setattr(module, "one_run", one_run)


def calibration_stand_ins(monkeypatch, module) -> None:
    from bench import ablations

    rows = committed("course_pool")["rows"]  # the course's and the null arm's
    by_run = {(row["arm"], row["seed"]): row for row in rows}
    monkeypatch.setattr(ablations, "one_run", lambda name, seed, kernel, steps=None:
                        {**by_run[name, seed], "kernel_path": kernel})
    monkeypatch.setattr(module, "SPLITS", 100)  # the real analysis, on fewer splits
    monkeypatch.setattr(module, "BOOTSTRAP", 5)


def failing_stand_ins(monkeypatch, module) -> None:
    by_rate = {run["learning_rate"]: run for run in committed("failing_run")["runs"].values()}
    monkeypatch.setattr(module, "train", lambda folder, learning_rate: by_rate[learning_rate])


STAND_INS = {"smoke_model": smoke_stand_ins, "toy_r1": toy_stand_ins,
             "grpo_vs_trl": trl_stand_ins, "rewards": rewards_stand_ins,
             "ablations": ablation_stand_ins, "failing_run": failing_stand_ins,
             "calibration": calibration_stand_ins}


def bench_scripts() -> list[str]:
    return sorted(p.stem for p in BENCH.glob("*.py") if not p.stem.startswith(("_", "run_all")))


def run_plain(name: str, monkeypatch) -> None:
    """bench/<name>.py as `make bench` runs it: no arguments."""
    module = importlib.import_module(f"bench.{name}")
    if name in STAND_INS:
        STAND_INS[name](monkeypatch, module)
    monkeypatch.setattr(sys, "argv", [f"bench/{name}.py"])  # as `python -m bench.<name>`
    (module.cli if hasattr(module, "cli") else module.main)()


def test_every_benchmark_has_a_stand_in_or_is_fast():
    assert set(bench_scripts()) == set(STAND_INS) | {"memory_fit"}  # it only computes estimates


def test_a_plain_make_bench_writes_every_cited_figure(tmp_path, monkeypatch):
    out = tmp_path / "runs" / "bench"
    monkeypatch.setenv("GRPO_BENCH_DIR", str(out))
    for name in bench_scripts():
        run_plain(name, monkeypatch)
    written = {path.stem for path in out.glob("*.json")}
    benched = {prefix for prefix, s in figures.SOURCES.items() if s.fix == figures.BENCH_FIX}
    produced = figures.compute(tmp_path, benched)
    cited = {key for path in figures_script.documents(ROOT)
             for _, text in figures_script.texts(path) for key in figures.keys_in(text)
             if key.split(".", 1)[0] in benched}
    assert {figures.SOURCES[p].path.split("/")[-1][:-5] for p in benched} <= written
    missing = sorted(cited - set(produced))
    assert not missing, f"cited, but a plain `make bench` does not write them: {missing[:12]}"


@pytest.mark.parametrize("name", ["smoke_model", "toy_r1"])
def test_the_default_grid_covers_every_kernel_path(name, tmp_path, monkeypatch):
    from tools.smoke_runs import KERNEL_PATHS

    monkeypatch.setenv("GRPO_BENCH_DIR", str(tmp_path))
    run_plain(name, monkeypatch)
    data = json.loads((tmp_path / f"{name}.json").read_text())
    paths = ([row["name"] for row in data["kernel_paths"]] if name == "smoke_model"
             else list(data["by_kernel"]))
    assert sorted(paths) == sorted(KERNEL_PATHS)  # (the JSON sorts its keys)
