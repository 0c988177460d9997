"""Every run figure in README and notebook prose equals what its source file gives."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import nbformat
import pytest

from helpers.paths import ROOT
from scripts import figures as script
from scripts import run_course
from tools import cited_numbers as fg


def load_results_module():
    """bench/_results.py (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_results", ROOT / "bench" / "_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_figure_in_readme_and_notebooks_matches_its_source():
    problems = script.check(ROOT)
    assert not problems, "\n".join(problems)


def test_readme_and_docs_cite_figures_from_every_committed_benchmark():
    keys = [key for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
            for key in fg.keys_in(path.read_text())]
    for prefix in ("toy_r1", "smoke_model", "memory_fit", "rewards", "grpo_vs_trl", "profile",
                   "locks", "gpu_calls", "learning"):
        assert any(k.startswith(prefix + ".") for k in keys), f"no {prefix} figure is cited"


def copy_of_course(tmp_path: Path) -> Path:
    """README, docs/ and the benchmark JSONs, copied: planted errors go there (notebooks: below)."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copytree(ROOT / "runs" / "bench", tmp_path / "runs" / "bench")
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    for source in fg.SOURCES.values():  # the code sources (their files must exist there)
        if source.path.endswith(".py"):
            (tmp_path / source.path).parent.mkdir(exist_ok=True)
            shutil.copy(ROOT / source.path, tmp_path / source.path)
    return tmp_path


def test_a_planted_mismatch_fails_and_make_figures_repairs_it(tmp_path: Path):
    root = copy_of_course(tmp_path)
    readme = root / "docs" / "results.md"
    text = readme.read_text()
    marker = "<!-- fig:toy_r1.mean.acc_after_grpo -->"
    assert marker in text
    value = fg.compute(ROOT, ["toy_r1"])["toy_r1.mean.acc_after_grpo"]
    readme.write_text(text.replace(f"{marker}{value}", f"{marker}54.0%", 1))

    problems = script.check(root)
    assert problems == [f"results.md: fig:toy_r1.mean.acc_after_grpo says '54.0%' but "
                        f"runs/bench/toy_r1.json gives '{value}': run `make figures`."]
    assert script.main(["--check", "--root", str(root)]) == 1

    assert script.fill(root) == [readme]
    assert readme.read_text() == text
    assert script.check(root) == []


def test_a_changed_benchmark_result_fails_until_figures_are_filled(tmp_path: Path):
    root = copy_of_course(tmp_path)
    path = root / "runs" / "bench" / "toy_r1.json"
    data = json.loads(path.read_text())
    data["acc_after_grpo"] = 0.5
    path.write_text(json.dumps(data))
    assert any("toy_r1.mean.acc_after_grpo says" in p for p in script.check(root))
    script.fill(root)
    assert script.check(root) == []
    assert "<!-- fig:toy_r1.mean.acc_after_grpo -->50.0%<!-- /fig -->" in (
        root / "docs" / "results.md").read_text()


def test_an_unknown_key_and_an_unknown_source_fail(tmp_path: Path):
    root = copy_of_course(tmp_path)
    (root / "README.md").write_text(
        "<!-- fig:toy_r1.mean.acc_after_magic -->1%<!-- /fig --> "
        "<!-- fig:nowhere.x -->2<!-- /fig -->")
    first, second = script.check(root)
    assert "fig:toy_r1.mean.acc_after_magic is not a figure of runs/bench/toy_r1.json" in first
    assert "fig:nowhere.x names no known source" in second


def test_a_missing_source_names_the_command_that_writes_it(tmp_path: Path):
    root = copy_of_course(tmp_path)
    (root / "runs" / "bench" / "toy_r1.json").unlink()
    (root / "runs" / "bench" / "course_times.json").unlink(missing_ok=True)
    shutil.rmtree(root / "docs")
    (root / "README.md").write_text(
        "<!-- fig:toy_r1.gain_grpo_points -->+15.5<!-- /fig -->\n"
        "**Time:** CPU smoke <!-- fig:cpu_seconds.03 -->M s<!-- /fig --> (measured)")
    assert script.check(root) == [
        "README.md: fig:toy_r1.gain_grpo_points comes from runs/bench/toy_r1.json, which is "
        "missing: run `make bench`, then `make figures`.",
        "README.md: fig:cpu_seconds.03 comes from runs/bench/course_times.json, which is "
        "missing: run `make execute-notebooks`, then `make figures`.",
    ]


def test_notebook_markers_are_filled_in_markdown_cells_only(tmp_path: Path):
    root = tmp_path
    (root / "notebooks").mkdir()
    (root / "README.md").write_text("no figures\n")
    marker = "<!-- fig:cpu_seconds.07 -->M s<!-- /fig -->"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(f"# Title\n**Time:** T4 ≈ 15 min (estimated) · CPU smoke "
                                      f"{marker} (measured)"),
        nbformat.v4.new_code_cell(f"print('{marker}')"),
    ])
    path = root / "notebooks" / "07_toy.ipynb"
    path.write_text(nbformat.writes(nb) + "\n")
    record = run_course.course_times({"07_toy.ipynb": 41.26, "00_setup.ipynb": 9.0})
    (root / "runs" / "bench").mkdir(parents=True)
    (root / "runs" / "bench" / "course_times.json").write_text(json.dumps(record))

    assert script.check(root) == [
        "07_toy.ipynb cell 0: fig:cpu_seconds.07 says 'M s' but runs/bench/course_times.json "
        "gives '41 s': run `make figures`."]
    script.fill(root)
    cells = nbformat.read(path, as_version=4).cells
    assert "<!-- fig:cpu_seconds.07 -->41 s<!-- /fig --> (measured)" in cells[0].source
    assert cells[1].source == f"print('{marker}')"
    assert script.check(root) == []


def test_a_marker_in_a_code_span_is_an_example_or_a_mistake(tmp_path: Path):
    text = "write `<!-- fig:KEY -->VALUE<!-- /fig -->` for <!-- fig:a.b -->1<!-- /fig -->"
    assert fg.keys_in(text) == ["a.b"]
    assert fg.fill_text(text, {"KEY": "9", "a.b": "2"}) == text.replace("1<", "2<")
    hidden = "`beta=<!-- fig:toy_r1.grpo_settings.beta -->0<!-- /fig -->`"
    assert fg.check_text(hidden, {}, tmp_path) == [
        "fig:toy_r1.grpo_settings.beta is inside a code span, where the marker shows literally: "
        "move it out of the backticks."]


def test_cpu_seconds_keys_come_from_the_notebook_files_recorded():
    record = run_course.course_times({"10_scaling_up.ipynb": 60.0, "00_setup.ipynb": 12.4})
    assert list(record["seconds"]) == ["00_setup.ipynb", "10_scaling_up.ipynb"]
    assert record["profile"] == "smoke" and record["cache"] == "empty"
    values = fg.course_time_figures(record)
    assert values["cpu_seconds.00"] == "12 s" and values["cpu_seconds.10"] == "60 s"
    assert values["cpu_seconds.total"] == "1.2 min"
    assert "cpu_seconds.05" not in values


@pytest.mark.parametrize(("rule", "value", "shown"), [
    (fg.percent, 0.446, "44.6%"), (fg.points, 15.4667, "+15.5"), (fg.points, -3.5, "-3.5"),
    (fg.seconds, 192.6, "193 s"), (fg.minutes, 741.3, "12.4 min"), (fg.count, 2075, "2,075"),
    (fg.ratio, 1.634, "1.63x"), (fg.gib, 8.14, "8.1 GiB"), (fg.megabytes, -6.2, "-6 MB"),
    (fg.setting, 0.0001, "1e-4"), (fg.setting, 0.0, "0"), (fg.setting, 0.2, "0.2"),
    (fg.setting, 300, "300"), (fg.setting, "dapo", "dapo"),
])
def test_one_formatting_rule_per_kind(rule, value, shown):
    assert rule(value) == shown


def test_profile_figures_follow_the_profiles():
    from helpers.profiles import PROFILES

    values = fg.profile_figures(PROFILES)
    smoke = PROFILES["smoke"]
    assert values["profile.smoke.tokens"] == (
        f"{smoke.max_prompt_length}+{smoke.max_completion_length}")
    assert values["profile.smoke.steps"] == str(smoke.max_steps)
    assert values["profile.t4.t4_minutes"] == "25-50 min"
    assert values["profile.t4-7b.t4_minutes"] == "2.1-3.5 h"
    assert "profile.smoke.t4_minutes" not in values


def test_benchmark_json_is_diff_friendly():
    results = load_results_module()
    text = results.dumps({"b": 0.1 + 0.2, "a": [1 / 3, {"z": 2, "y": 741.2968331190004}]})
    assert text == ('{\n  "a": [\n    0.333333,\n    {\n      "y": 741.297,\n      "z": 2\n'
                    '    }\n  ],\n  "b": 0.3\n}\n')
    for path in sorted((ROOT / "runs" / "bench").glob("*.json")):
        raw = path.read_text()
        assert raw == results.dumps(json.loads(raw)), (
            f"{path.name} is not in bench/_results.py's format: rerun its benchmark")


def test_lock_figures_count_pins_not_comments():
    lock = "# header: numpy==1 in a comment\nnumpy==2.2.6  # hold: >=2.0.2,<2.3\ntorch==2.9.0\n"
    assert fg.lock_figures({"t4": lock}) == {"locks.t4.packages": "2"}


def test_the_weak_cold_start_figures_appear_once_the_benchmark_records_them():
    data = fg.read_json(ROOT / "runs" / "bench" / "toy_r1.json")
    data.pop("weak_cold_start", None)
    before = fg.toy_r1_figures(data)
    assert not any(key.startswith("toy_r1.weak_cold_start.") for key in before)
    data["recipe"]["weak_cold_start_target"] = 0.1
    data["zero_spread_first_20"] = 0.3125
    data["weak_cold_start"] = {"target": 0.1, "acc_before": 0.12, "acc_after_grpo": 0.151,
                               "zero_spread_first_20": 0.6, "gain_grpo_points": 3.1}
    after = fg.toy_r1_figures(data)
    assert after["toy_r1.recipe.weak_cold_start_target"] == "10%"
    assert after["toy_r1.zero_spread_first_20"] == "31%"
    assert after["toy_r1.weak_cold_start.acc_after_grpo"] == "15.1%"
    assert after["toy_r1.weak_cold_start.gain_grpo_points"] == "+3.1"
    assert after["toy_r1.weak_cold_start.zero_spread_first_20"] == "60%"


def test_a_quote_follows_its_stored_output_and_fails_when_the_output_changes(tmp_path, monkeypatch):
    """Prose quoting a notebook's printed number (tools/output_quotes.py): right while the stored
    output says it, one sentence naming the fix once a re-run prints something else."""
    from tools import output_quotes

    cell = {"cell_type": "code", "source": ["print(accuracy_line(run))\n"], "outputs": [
        {"output_type": "stream", "name": "stdout", "text": ["held-out accuracy: 38.5%\n"]}]}
    notebook = {"cells": [{"cell_type": "markdown", "source": ["It starts at "
                          "<!-- fig:nb77.start -->38.5%<!-- /fig -->."]}, cell]}
    path = tmp_path / "notebooks" / "77_demo.ipynb"
    path.parent.mkdir()
    path.write_text(json.dumps(notebook))
    monkeypatch.setitem(output_quotes.QUOTES, "77", {"start": output_quotes.Quote(
        "print(accuracy_line(run))", r"held-out accuracy: ([\d.]+%)")})
    monkeypatch.setitem(fg.SOURCES, "nb77", fg.notebook_sources(tmp_path)["nb77"])
    prose = "".join(notebook["cells"][0]["source"])
    assert fg.check_text(prose, fg.compute(tmp_path, ["nb77"]), tmp_path) == []
    cell["outputs"][0]["text"] = ["held-out accuracy: 41.0%\n"]  # a re-run printed another number
    path.write_text(json.dumps(notebook))
    assert fg.check_text(prose, fg.compute(tmp_path, ["nb77"]), tmp_path) == [
        "fig:nb77.start says '38.5%' but notebooks/77_demo.ipynb gives '41.0%': re-read the "
        "sentence that quotes it (a re-run printed another number), then run `make figures`."]
    cell["outputs"][0]["text"] = ["no accuracy printed\n"]  # the printed line itself changed
    path.write_text(json.dumps(notebook))
    with pytest.raises(ValueError, match="no longer matches .* re-read the prose that quotes it"):
        fg.compute(tmp_path, ["nb77"])


def test_notebook_06s_quotes_read_the_lines_describe_sampled_prints():
    """The prose of 04, 05 and 06 quotes 06's greedy and sampled rows: the patterns must follow
    helpers.evaluation.describe_sampled's own format."""
    import dataclasses

    from helpers.evaluation import DecodingSettings, describe_sampled, sampled_settings
    from tools import output_quotes

    greedy = {side: {"strict": {"accuracy": accuracy}} for side, accuracy in
              (("base", 0.385), ("trained", 0.55))}
    results = {"settings": dataclasses.asdict(DecodingSettings(48)), "scores": greedy}
    # 200 problems: greedy 77 -> 110 right; samples 1 of 4 -> 2 of 4 right on problems 0-99
    results["problems"] = [{"base_strict": i < 77, "trained_strict": i < 110} for i in range(200)]
    shares = {"base": [0.25] * 100 + [0.0] * 100, "trained": [0.5] * 100 + [0.0] * 100}
    paired = {"base": 0.125, "trained": 0.25, "gain": 0.125, "ci_low": 0.1, "ci_high": 0.15}
    sampled = {"settings": dataclasses.asdict(sampled_settings(DecodingSettings(48))), "n": 200,
               "base": 0.309, "trained": 0.441, "gain": 0.132, "ci_low": 0.084, "ci_high": 0.181,
               "per_problem": shares, "maj": {**paired, "base": 0.2, "trained": 0.3},
               "pass": {**paired, "base": 0.6, "trained": 0.65, "gain": 0.05}}
    text = describe_sampled(sampled, results) + "\n"
    cell = {"cell_type": "code", "source": [output_quotes.SAMPLED_CELL + "\n"],
            "outputs": [{"output_type": "stream", "name": "stdout", "text": [text]}]}
    found = output_quotes.quote_figures("06")({"cells": [cell]})
    assert found == {
        "nb06.sampled_n": "200", "nb06.greedy_base": "38.5%", "nb06.greedy_trained": "55.0%",
        "nb06.greedy_gain": "+16.5", "nb06.sampled_base": "30.9%", "nb06.sampled_trained": "44.1%",
        "nb06.sampled_gain": "+13.2", "nb06.sampled_low": "+8.4", "nb06.sampled_high": "+18.1",
        "nb06.sampled_moved": "rose", "nb06.maj_base": "20.0%", "nb06.maj_trained": "30.0%",
        "nb06.pass_base": "60.0%", "nb06.pass_trained": "65.0%", "nb06.pass_gain": "+5.0",
        "nb06.sharpening": "+4.0", "nb06.sharpening_reading": "the two gains cannot be told apart"}


# ---- Tables docs/ copies from the code (tools/doc_tables.py) ----------------------------------

def test_each_table_the_code_prints_has_one_current_copy_in_the_docs():
    from tools.doc_tables import MARKER, TABLES, table_problems

    found = {}
    for path in script.documents(ROOT):
        if path.suffix == ".md":
            text = path.read_text()
            assert table_problems(text) == [], path.name
            for m in MARKER.finditer(text):
                found.setdefault(m["name"], []).append(path.name)
    assert {name: len(where) for name, where in found.items()} == {name: 1 for name in TABLES}


def test_a_stale_unknown_or_badly_marked_table_is_named_and_make_figures_mends_it(monkeypatch):
    from tools import doc_tables

    monkeypatch.setattr(doc_tables, "TABLES", {"t": lambda: "| a |\n|---|\n| 2 |"})
    stale = "Before.\n\n<!-- table:t -->\n\n| a |\n|---|\n| 1 |\n\n<!-- /table -->\n\nAfter.\n"
    assert doc_tables.table_problems(stale) == ["table:t is out of date: run `make figures`."]
    mended = doc_tables.fill_tables(stale)
    assert mended == stale.replace("| 1 |", "| 2 |") and doc_tables.table_problems(mended) == []
    unknown = stale.replace("table:t", "table:u")
    assert "no known table" in doc_tables.table_problems(unknown)[0]
    assert doc_tables.fill_tables(unknown) == unknown
    cramped = "<!-- table:t -->\n| a |\n|---|\n| 2 |\n<!-- /table -->"
    assert "blank line" in doc_tables.table_problems(cramped)[0]


def test_the_make_test_figure_is_the_newest_passing_run_of_its_own_head():
    """An older commit timed for comparison (`time_tests --commit`) or a failed run is kept in
    the record but never becomes docs/ci.md's figure."""
    def run(commit: str, wall: float, **extra: object) -> dict[str, object]:
        return {"target": "test", "commit": commit, "wall_s": wall, "cpu_s": 1000.0,
                "gauge_s": 10.0, "date": "2026-12-07 12:00", "tests": "9 passed", **extra}

    runs = [run("aaa", 600.0, rc=0), run("old", 760.0, rc=0, older=True),
            run("bbb", 610.0, rc=2)]
    found = fg.make_test_figures({"runs": runs})
    assert found["make_test.test.commit"] == "aaa" and found["make_test.test.wall"] == "10:00"
    found = fg.make_test_figures({"runs": [*runs, run("ccc", 590.0)]})  # early runs: no rc
    assert found["make_test.test.commit"] == "ccc"


def test_the_one_cell_figure_times_only_runs_against_the_newest_reference():
    def run(seconds: float, cached: bool, reference: str) -> dict[str, object]:
        return {"seconds": seconds, "reference_cached": cached, "reference": reference,
                "load_start": 1.0, "seeds": 4, "steps": 60,
                "verdict": {"verdict": "equivalent", "difference": 0.01, "low": -0.01,
                            "high": 0.03}}

    runs = [run(120.0, True, "the earlier grid"), run(120.0, True, "the earlier grid"),
            run(300.0, False, "the pool"), run(210.0, True, "the pool")]
    found = fg.lab_arm_figures({"runs": runs})
    assert found["lab_arm.minutes"] == "3.5 min" and found["lab_arm.timed"] == "1"
    assert found["lab_arm.first_minutes"] == "5.0 min"
