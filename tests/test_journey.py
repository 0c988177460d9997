"""The journey table: every figure from one place, rows that add up, measurements preferred."""

import json
import re

import pytest

from helpers.course import INSTALL_MINUTES, NOTEBOOKS
from helpers.journey import (
    Measured,
    journey,
    journey_markdown,
    measured,
    minutes_range,
    one_runtime_path,
    time_line,
    total,
)
from helpers.loading import VLLM_FIRST_START_MINUTES
from helpers.paths import ROOT
from helpers.profiles import PROFILES, expected_t4_minutes


def test_each_leg_adds_up_and_the_totals_are_the_sum_of_the_legs():
    legs = journey(found=Measured())
    assert [leg.notebook for leg in legs] == list(NOTEBOOKS)
    for leg in legs:
        parts = (leg.install_minutes, leg.vllm_minutes, leg.work_minutes)
        assert leg.total == (sum(p[0] for p in parts), sum(p[1] for p in parts))
        assert leg.total[0] <= leg.total[1]
    everything = total(legs)
    assert everything == (sum(leg.total[0] for leg in legs), sum(leg.total[1] for leg in legs))
    full, light = total(legs, "full"), total(legs, "light")
    assert (full[0] + light[0], full[1] + light[1]) == everything


def test_the_figures_come_from_the_course_the_loader_and_the_profile():
    legs = {leg.notebook: leg for leg in journey(found=Measured())}
    assert legs["setup"].install == "light" and legs["setup"].vllm_minutes == (0, 0)
    assert legs["load_4bit_lora"].install_minutes == minutes_range(INSTALL_MINUTES["full"])
    assert legs["gsm8k_formatting"].install_minutes == minutes_range(INSTALL_MINUTES["light"])
    for name in ("load_4bit_lora", "grpo_training", "evaluation"):
        assert legs[name].vllm_minutes == VLLM_FIRST_START_MINUTES
    assert legs["save_and_use"].vllm_minutes == (0, 0)  # 07 loads without vLLM
    training = expected_t4_minutes(PROFILES["t4"])
    assert legs["grpo_training"].work_minutes[0] >= training[0]
    assert legs["grpo_training"].work_minutes[1] >= training[1]
    # the cheapest path pays one install for 05, 06 and 07, not three
    three = [legs[n] for n in ("grpo_training", "evaluation", "save_and_use")]
    separately = sum(leg.total[1] for leg in three)
    saved = 2 * legs["evaluation"].install_minutes[1]
    assert one_runtime_path(list(legs.values()))[1] == separately - saved


def test_minutes_are_read_from_the_install_promise():
    assert minutes_range("3-5 min") == (3, 5) and minutes_range("about 8 min") == (8, 8)
    with pytest.raises(ValueError, match="A-B min"):
        minutes_range("see docs/colab.md")


def test_a_gpu_check_report_replaces_the_estimates(tmp_path):
    assert measured(tmp_path) == Measured()
    (tmp_path / "tesla-t4.json").write_text(json.dumps({"vllm_first_start_seconds": 270.0}))
    found = measured(tmp_path)
    assert found == Measured(vllm_first_start=4.5)
    legs = {leg.notebook: leg for leg in journey(found=found)}
    assert legs["grpo_training"].vllm_minutes == (4.5, 4.5)
    table = journey_markdown(found=found)
    assert "vLLM first start (measured by `make gpu-check`)" in table
    assert "(full, measured on a stand-in)" in table  # no install time in that report


def test_the_table_prints_every_notebook_once_and_its_total_row_adds_up():
    table = journey_markdown(found=Measured())
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == len(NOTEBOOKS) + 1
    spans = [re.findall(r"[\d.]+(?:-[\d.]+)?", row.split("|")[-2]) for row in rows]
    lows = [float(s[0].split("-")[0]) for s in spans]
    highs = [float(s[0].split("-")[-1]) for s in spans]
    assert sum(lows[:-1]) == lows[-1] and sum(highs[:-1]) == highs[-1]


def test_each_notebooks_header_says_its_own_journey_row():
    """The `**Time:**` line of every header is `time_line` of its journey row (make sync-notebooks
    writes it): a light notebook says "any runtime", a full one "on a T4" and its vLLM start."""
    legs = journey(found=Measured())
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        title = "".join(json.loads(path.read_text())["cells"][0]["source"])
        line = next(p for p in title.split("\n\n") if p.startswith("**Time:**"))
        assert line.startswith(time_line(path.name, legs) + " · CPU smoke"), path.name
        leg = next(leg for leg in legs if path.name[3:].startswith(leg.notebook))
        total = time_line(path.name, legs).split(" min ")[0].removeprefix("**Time:** ≈ ")
        assert total == "-".join(dict.fromkeys(
            f"{m:.1f}".removesuffix(".0") for m in leg.total)), path.name
        assert ("on any runtime" in line) == (leg.install == "light")
        assert ("vLLM start" in line) == bool(leg.vllm_minutes[1])


def test_helpers_course_loads_by_path_as_the_bootstrap_the_book_and_the_site_load_it():
    """Colab's first cell reads helpers/course.py before anything is installed or importable."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("course_by_path", ROOT / "helpers" / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # no sys.modules entry: a dataclass here would fail
    assert module.notebook_install("05_grpo_training.ipynb") == "full"
    assert list(module.NOTEBOOKS) == list(NOTEBOOKS)
