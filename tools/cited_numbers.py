"""Every run figure that README and notebook prose cite, computed from the one file it comes from.

Prose writes such a figure as `<!-- fig:KEY -->VALUE<!-- /fig -->` (invisible on GitHub and
Colab). A key's first part names its source: `toy_r1.mean.acc_after_grpo` comes from
runs/bench/toy_r1.json. `scripts/figures.py` rewrites every VALUE from here (`make figures`);
`--check` and tests/test_figures.py fail when a VALUE, a key or a source is wrong.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!-- fig:(?P<key>[^\s>]*) -->(?P<value>.*?)<!-- /fig -->", re.DOTALL)


def in_code_span(text: str, position: int) -> bool:
    """Whether `position` lies inside an inline code span (odd backticks before it on its line)."""
    line_start = text.rfind("\n", 0, position) + 1
    return text.count("`", line_start, position) % 2 == 1


def markers(text: str) -> list[re.Match[str]]:
    """The figure markers in `text`; one inside a code span is shown literally, as an example."""
    return [m for m in MARKER.finditer(text) if not in_code_span(text, m.start())]


# One formatting rule per kind of figure.
def percent(fraction: float) -> str:
    """A fraction as a percentage with one decimal: 0.446 -> '44.6%'."""
    return f"{100 * fraction:.1f}%"


def points(value: float) -> str:
    """Percentage points with their sign: 15.47 -> '+15.5'."""
    return f"{value:+.1f}"


def seconds(value: float) -> str:
    """Whole seconds: '193 s'."""
    return f"{value:.0f} s"


def minutes(value_s: float) -> str:
    """Seconds shown as minutes with one decimal: '12.4 min'."""
    return f"{value_s / 60:.1f} min"


def clock(value_s: float) -> str:
    """Seconds as minutes and seconds, as `time` prints them: 963 -> '16:03'."""
    whole = round(value_s)
    return f"{whole // 60}:{whole % 60:02d}"


def count(value: float) -> str:
    """A whole number with thousands separators: '2,075'."""
    return f"{round(value):,}"


def ratio(value: float) -> str:
    """A ratio with two decimals: '1.63x'."""
    return f"{value:.2f}x"


def gib(value: float) -> str:
    """GiB with one decimal: '8.1 GiB'."""
    return f"{value:.1f} GiB"


def megabytes(value: float) -> str:
    """Whole megabytes, signed when negative: '172 MB', '-6 MB'."""
    return f"{value:,.0f} MB"


def setting(value: object) -> str:
    """A configuration value as written in code: 300, 0.0001 -> '1e-4', 'dapo'."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if value == 0 or abs(value) >= 0.01:
        return f"{value:g}"
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def minutes_range(low: float, high: float) -> str:
    """A range of minutes, in hours from two hours up: '25-50 min', '2.1-3.5 h'."""
    if high < 120:
        return f"{low:.0f}-{high:.0f} min"
    return f"{low / 60:.1f}-{high / 60:.1f} h"


# What each source gives, as {key: displayed value}. Keys carry the source's prefix.
def toy_r1_figures(data: dict[str, Any]) -> dict[str, str]:
    """bench/toy_r1.py: the recipe, each seed's accuracies, the means and the GRPO gain."""
    accuracies = [key for key in data if key.startswith("acc_")]
    out = {f"toy_r1.mean.{key}": percent(data[key]) for key in accuracies}
    out["toy_r1.gain_grpo_points"] = points(data["gain_grpo_points"])
    out["toy_r1.wall"] = minutes(data["wall_s"])
    out["toy_r1.seeds"] = str(len(data["seeds"]))
    for section in ("recipe", "grpo_settings"):
        out |= {f"toy_r1.{section}.{k}": setting(v) for k, v in data[section].items()}
    out["toy_r1.recipe.cold_start_target"] = f"{100 * data['recipe']['cold_start_target']:.0f}%"
    out["toy_r1.recipe.cold_start_max_steps"] = count(data["recipe"]["cold_start_max_steps"])
    for row in data["seeds"]:
        seed = f"toy_r1.seed{row['seed']}"
        out |= {f"{seed}.{key}": percent(row[key]) for key in row if key.startswith("acc_after")
                and isinstance(row[key], float)}
        out[f"{seed}.acc_before"] = percent(row["acc_before"])
        out[f"{seed}.cold_start_steps"] = count(row["cold_start"]["steps"])
        for lr, acc in row.get("acc_after_one_sft_update", {}).items():
            out[f"{seed}.one_sft_update.lr{setting(float(lr))}"] = percent(acc)
    gains = [means["gain_grpo_points"] for means in data.get("by_kernel", {}).values()]
    if gains:
        out |= {"toy_r1.kernel_gain_min": points(min(gains)),
                "toy_r1.kernel_gain_max": points(max(gains))}
    for kernel, means in data.get("by_kernel", {}).items():
        key = f"toy_r1.{kernel}"
        out |= {f"{key}.mean.{k}": percent(v) for k, v in means.items() if k.startswith("acc_")}
        out[f"{key}.gain_grpo_points"] = points(means["gain_grpo_points"])
        out[f"{key}.seeds"] = str(len(means["seeds"]))
        if "weak_cold_start" in means:
            weak = means["weak_cold_start"]
            out |= {f"{key}.weak_cold_start.acc_before": percent(weak["acc_before"]),
                    f"{key}.weak_cold_start.gain_grpo_points": points(weak["gain_grpo_points"])}
    out |= weak_cold_start_figures(data)
    first = [row["rft_first_version"]["updates"] for row in data["seeds"]
             if "rft_first_version" in row]
    if first:
        out["toy_r1.rft_first_version.updates_min"] = str(min(first))
        out["toy_r1.rft_first_version.updates_max"] = str(max(first))
    return out


def weak_cold_start_figures(data: dict[str, Any]) -> dict[str, str]:
    """bench/toy_r1.py: GRPO from the weak cold start beside the recipe's (when it was run)."""
    out = {}
    if "zero_spread_first_20" in data:
        out["toy_r1.zero_spread_first_20"] = f"{100 * data['zero_spread_first_20']:.0f}%"
    if "weak_cold_start_target" in data["recipe"]:
        out["toy_r1.recipe.weak_cold_start_target"] = (
            f"{100 * data['recipe']['weak_cold_start_target']:.0f}%")
    if "weak_cold_start" in data:
        weak = data["weak_cold_start"]
        out |= {"toy_r1.weak_cold_start.acc_before": percent(weak["acc_before"]),
                "toy_r1.weak_cold_start.acc_after_grpo": percent(weak["acc_after_grpo"]),
                "toy_r1.weak_cold_start.gain_grpo_points": points(weak["gain_grpo_points"]),
                "toy_r1.weak_cold_start.zero_spread_first_20":
                    f"{100 * weak['zero_spread_first_20']:.0f}%"}
    return out


def memory_fit_figures(rows: list[dict[str, Any]]) -> dict[str, str]:
    """bench/memory_fit.py: each GPU profile's estimate on its target GPU."""
    out = {}
    for row in (r for r in rows if r["target"]):
        key = f"memory_fit.{row['profile']}"
        out |= {f"{key}.gpu": row["gpu"], f"{key}.estimate": gib(row["estimate_gib"]),
                f"{key}.gpu_memory": gib(row["gpu_gib"]), f"{key}.verdict": row["verdict"]}
    return out


def rewards_figures(data: dict[str, Any]) -> dict[str, str]:
    """bench/rewards.py: reward throughput, all five together and each alone."""
    out = {"rewards.all_per_s": count(data["completions_per_s"]),
           "rewards.num_completions": count(data["num_completions"]),
           "rewards.lenient_per_s": count(data["lenient_is_correct_per_s"])}
    out |= {f"rewards.{name}_per_s": count(rate)
            for name, rate in data["per_function_completions_per_s"].items()}
    return out | machine_figures("rewards", data)


def grpo_vs_trl_figures(data: dict[str, Any]) -> dict[str, str]:
    """bench/grpo_vs_trl.py: step time and peak RSS against trl's; each memory trick's saving."""
    out = {"grpo_vs_trl.step_time_ratio": ratio(data["step_time_ratio"]),
           "grpo_vs_trl.peak_rss_ratio": ratio(data["peak_rss_ratio"])}
    # Trick names may carry a note in brackets ("gradient_accumulation (4 chunks)"): keys can't.
    out |= {f"grpo_vs_trl.saved.{name.split()[0]}": megabytes(row["saved_mb"])
            for name, row in data["memory_tricks"].items()}
    return out | machine_figures("grpo_vs_trl", data)


def smoke_model_figures(data: dict[str, Any]) -> dict[str, str]:
    """bench/smoke_model.py: per CPU kernel path, the rebuild, the committed start, GRPO's gains."""
    out: dict[str, str] = {"smoke_model.kernel_paths": str(len(data["kernel_paths"])),
                           "smoke_model.seeds": str(data["seeds"])}
    for row in data["kernel_paths"]:
        key = f"smoke_model.{row['name']}"
        out |= {f"{key}.capability": row["kernel"]["capability"],
                f"{key}.committed_strict": percent(row["committed_strict"])}
        if "rebuilt_strict" in row:
            out |= {f"{key}.rebuild.steps": count(row["steps"]),
                    f"{key}.rebuild.strict": percent(row["rebuilt_strict"]),
                    f"{key}.rebuild.validation": percent(row["checks"][-1][1]),
                    f"{key}.rebuild.seconds": seconds(row["build_s"]),
                    f"{key}.rebuild.peak_rss": megabytes(row["build_peak_rss_mb"])}
    rebuilt = [row["rebuilt_strict"] for row in data["kernel_paths"] if "rebuilt_strict" in row]
    if rebuilt:
        out |= {"smoke_model.rebuild_strict_min": percent(min(rebuilt)),
                "smoke_model.rebuild_strict_max": percent(max(rebuilt))}
    return out | learning_figures(data["learning"]) | machine_figures("smoke_model", data)


def learning_figures(runs: list[dict[str, Any]]) -> dict[str, str]:
    """Each (kernel path, seed)'s paired result, and the spread of the gains per path and in all."""
    out: dict[str, str] = {}
    for run in runs:
        key = f"smoke_model.{run['kernel_path']}.seed{run['seed']}"
        out |= {f"{key}.base": percent(run["base"]), f"{key}.trained": percent(run["trained"]),
                f"{key}.gain": points(100 * run["gain"]),
                f"{key}.ci_low": points(100 * run["ci_low"]),
                f"{key}.ci_high": points(100 * run["ci_high"]), f"{key}.fixed": str(run["fixed"]),
                f"{key}.broken": str(run["broken"]),
                f"{key}.train_seconds": seconds(run["train_seconds"])}
    groups: dict[str, list[float]] = {"smoke_model": [100 * run["gain"] for run in runs]}
    for run in runs:
        groups.setdefault(f"smoke_model.{run['kernel_path']}", []).append(100 * run["gain"])
    for key, gains in groups.items():
        if gains:
            out |= {f"{key}.gain_min": points(min(gains)), f"{key}.gain_max": points(max(gains)),
                    f"{key}.gain_median": points(statistics.median(gains))}
    for kernel in {run["kernel_path"] for run in runs}:
        times = [run["train_seconds"] for run in runs if run["kernel_path"] == kernel]
        out[f"smoke_model.{kernel}.train_seconds_median"] = seconds(statistics.median(times))
    if runs:
        out["smoke_model.runs"] = str(len(runs))
        out["smoke_model.base"] = percent(runs[0]["base"])  # the committed start, in 4-bit
    return out


def ablation_figures(data: dict[str, Any]) -> dict[str, str]:
    """bench/ablations.py: per kernel path and arm, the mean gain, its range over seeds, the
    verdict against its reference (raw, Holm, Benjamini-Hochberg), the mean gain over the run,
    the training signals; the grid's size, time and design (power, seeds as blocks, the
    evaluation's share of the spread, coverage, the dead-group fit, the reference check)."""
    from helpers.stats import EQUIVALENCE_MARGIN, VERDICTS

    native = data["summary"].get("native", {})
    tested = [s for s in native.values() if s["verdict"] and not s.get("same_as_reference")]
    out: dict[str, str] = {
        "ablations.runs": str(sum(1 for r in data["rows"] if r["kernel_path"] == "native")),
        "ablations.reruns": str(sum(1 for r in data["rows"] if r["kernel_path"] != "native")),
        "ablations.steps": str(data["steps"]),
        "ablations.problems": str(data["problems"]),
        "ablations.wall": minutes(data["wall_seconds"]),
        "ablations.arms": str(len(tested)),
        "ablations.knobs": str(len({s["knob"] for s in native.values()} - {"course"})),
        "ablations.a_a": str(sum(1 for s in native.values()
                                 if s["verdict"] and s.get("same_as_reference"))),
        "ablations.margin": f"{100 * EQUIVALENCE_MARGIN:.0f}",
    }
    for said in VERDICTS:
        for method in ("verdict", "holm", "bh"):
            key = "ablations" if method == "verdict" else f"ablations.{method}"
            out[f"{key}.{said}"] = str(sum(1 for s in tested if s["verdict"][method] == said))
    for kernel, summary in data["summary"].items():
        # The reruns take one path, the furthest this CPU can run (tools.smoke_runs): `rerun`.
        prefix = "ablations" if kernel == "native" else "ablations.rerun"
        for arm, s in summary.items():
            out |= _arm_figures(f"{prefix}.{arm}", s)
    out["ablations.rerun.path"] = next((k for k in data["summary"] if k != "native"), "none")
    # Pairing by seed, measured on the grid's own arms: its interval against Welch's, per arm.
    widths = [(s["paired"]["high"] - s["paired"]["low"])
              / (s["verdict"]["high"] - s["verdict"]["low"]) for s in tested if s.get("paired")]
    out |= {"ablations.paired.arms": str(len(widths)),
            "ablations.paired.wider": str(sum(w > 1 for w in widths)),
            "ablations.paired.width_ratio": f"{statistics.median(widths):.2f}"}
    return out | _design_figures(data.get("design", {})) | machine_figures("ablations", data)


def _interval(low: float, high: float) -> str:
    return f"[{points(100 * low)}, {points(100 * high)}]"


def _arm_figures(key: str, s: dict[str, Any]) -> dict[str, str]:
    """One arm's figures: gains, signals, the verdict and the mean gain over the run."""
    out = {f"{key}.mean": points(100 * s["mean"]), f"{key}.seeds": str(s["seeds"]),
           f"{key}.base": percent(s["base"]),
           f"{key}.range": f"{points(100 * s['low'])} to {points(100 * s['high'])}"}
    out |= {f"{key}.{name}": (f"{value:.5f}" if name == "kl" else f"{value:.1f}"
                              if name == "length" else f"{value:.2f}"
                              if name == "extra_generations" else percent(value))
            for name, value in s["signals"].items()}
    if s.get("auc") is not None:
        out[f"{key}.auc"] = points(100 * s["auc"])
    out |= {f"{key}.{k}": f"{s[k]:.1f}" for k in ("fixed", "broken") if k in s}
    if s.get("a_a"):
        out[f"{key}.a_a"] = s["a_a"]
    v = s["verdict"]
    if v:
        out |= {f"{key}.verdict": v["verdict"], f"{key}.difference": points(100 * v["difference"]),
                f"{key}.interval": _interval(v["low"], v["high"]),
                f"{key}.interval90": _interval(v["low90"], v["high90"]),
                f"{key}.mde": f"{100 * v['mde']:.1f}",
                f"{key}.largest": f"{100 * v['largest']:.1f}",
                f"{key}.p": f"{v['p']:.3f}" if v["p"] >= 0.001 else "<0.001"}
        for method in ("holm", "bh"):
            if method in v:
                p = v[f"p_{method}"]
                out |= {f"{key}.{method}": v[method],
                        f"{key}.p_{method}": f"{p:.3f}" if p >= 0.001 else "<0.001"}
    if s.get("paired"):
        d = s["paired"]
        out |= {f"{key}.paired_difference": points(100 * d["difference"]),
                f"{key}.paired_interval": _interval(d["low"], d["high"]),
                f"{key}.paired_seeds": str(len(d["seeds"]))}
    if s.get("verdict_auc"):
        a = s["verdict_auc"]
        out |= {f"{key}.auc_verdict": a["verdict"],
                f"{key}.auc_difference": points(100 * a["difference"]),
                f"{key}.auc_interval": _interval(a["low"], a["high"])}
    return out


def _design_figures(design: dict[str, Any]) -> dict[str, str]:
    """The grid's design, measured (helpers.lab.design)."""
    out: dict[str, str] = {}
    if design.get("power"):
        p = design["power"]
        out |= {"ablations.sd": f"{100 * p['sd']:.1f}", "ablations.mde": f"{100 * p['mde']:.1f}",
                "ablations.mde_holm": f"{100 * p['mde_holm']:.1f}"}
        out |= {f"ablations.mde_seeds.{n}": f"{100 * v:.1f}"
                for n, v in p["mde_equal_seeds"].items()}
    if design.get("blocks"):
        b = design["blocks"]
        out |= {"ablations.blocks.mde": f"{100 * b['mde']:.1f}",
                "ablations.blocks.residual_sd": f"{100 * b['residual_sd']:.1f}",
                "ablations.blocks.df": str(b["residual_df"]),
                "ablations.blocks.arms": str(len(b["arms"])),
                "ablations.blocks.seed_f": f"{b['seed_f']:.1f}",
                "ablations.blocks.seed_p": f"{b['seed_p']:.3f}"}
    for name, e in (design.get("evaluation") or {}).items():
        if isinstance(e, dict):
            out |= {f"ablations.evaluation.{name}.share": percent(e["share"]),
                    f"ablations.evaluation.{name}.sd": f"{100 * e['evaluation_sd']:.1f}",
                    f"ablations.evaluation.{name}.seed_sd": f"{100 * e['seed_sd']:.1f}",
                    f"ablations.evaluation.{name}.random_set_share":
                        percent(e["random_set_share"]),
                    f"ablations.evaluation.{name}.runs": str(e["runs"])}
    for name, c in (design.get("coverage") or {}).items():
        out |= {f"ablations.coverage.{name}.{k}": (f"{v:.0f}" if k == "effective_facts"
                                                   else str(v)) for k, v in c.items()}
    if design.get("dead_groups"):
        d = design["dead_groups"]
        out["ablations.dead.spread"] = f"{d['spread']:.2f}"
        for arm, a in d["arms"].items():
            out |= {f"ablations.dead.{arm}.{k}": percent(v) for k, v in a.items()
                    if k != "group_size"}
    for checks in (design.get("reference_check") or {}).values():  # the rerun path's, one
        for which, c in checks.items():
            key = f"ablations.reference.{which}"
            out |= {f"{key}.status": c["status"],
                    f"{key}.local_mean": points(100 * c["local_mean"]),
                    f"{key}.interval": f"{points(100 * c['low'])} to {points(100 * c['high'])}"}
    return out


def lab_arm_figures(data: dict[str, Any]) -> dict[str, str]:
    """bench/ablations.py --one-cell: notebook 11's own arm at the grid's size, timed against the
    newest run's reference (older runs judged against another stay in the record); the median of
    the runs that found the reference check done, and the first run, which ran it too."""
    last = data["runs"][-1]
    runs = [r for r in data["runs"] if r["reference"] == last["reference"]]
    timed = [r for r in runs if r["reference_cached"]]
    first = [r for r in runs if not r["reference_cached"]]
    v = last["verdict"]
    out = {"lab_arm.verdict": v["verdict"], "lab_arm.difference": points(100 * v["difference"]),
           "lab_arm.interval": _interval(v["low"], v["high"]),
           "lab_arm.seeds": str(last["seeds"]), "lab_arm.steps": str(last["steps"])}
    if timed:
        out |= {"lab_arm.minutes": minutes(statistics.median(r["seconds"] for r in timed)),
                "lab_arm.timed": str(len(timed)),
                "lab_arm.load": f"{statistics.median(r['load_start'] for r in timed):.1f}"}
    if first:
        out["lab_arm.first_minutes"] = minutes(first[0]["seconds"])
    return out | machine_figures("lab_arm", data)


def calibration_figures(data: dict[str, Any]) -> dict[str, str]:
    """bench/calibration.py: the course's pool of seeds, and how often the lab's verdicts go
    wrong on splits of it (false helps/hurts; false "equivalent" at a true ±margin; a pseudo-
    grid's any false verdict, raw and with Holm), each with the interval that resamples the pool."""
    from helpers.stats import t_quantile, welch_df

    pool = data["pool"]
    out = {"lab_calibration.seeds": str(pool["seeds"]),
           "lab_calibration.mean": points(100 * pool["mean"]),
           "lab_calibration.sd": f"{100 * pool['sd']:.1f}",
           "lab_calibration.splits": count(data["splits"]),
           "lab_calibration.mde_pool": f"{100 * pool['mde_against_pool']:.1f}",
           "lab_calibration.mde_8": f"{100 * pool['mde_against_8']:.1f}"}
    # The narrowest equivalence margin the grid could ever meet: the half-width of the 90%
    # interval of 4 seeds against 8 at the pool's spread, with no difference at all.
    sd, arm, ref = pool["sd"], data["against_8"]["arm_seeds"], data["against_8"]["reference_seeds"]
    half = t_quantile(0.95, welch_df(sd, arm, ref)) * sd * math.sqrt(1 / arm + 1 / ref)
    out["lab_calibration.narrowest_margin"] = f"{100 * half:.1f}"
    for key in ("against_pool", "against_8", "paired"):
        r = data[key]
        for rate in ("false_difference", "false_equivalent"):
            low, high = r[f"{rate}_pool_interval"]
            out[f"lab_calibration.{key}.{rate}"] = percent(r[rate])
            out[f"lab_calibration.{key}.{rate}_interval"] = f"{percent(low)} to {percent(high)}"
        out[f"lab_calibration.{key}.equivalent"] = percent(r["equivalent"])
    n = data["null_arm"]  # the null arm against the course, seed by seed
    out |= {"lab_calibration.null.pairs": str(n["pairs"]),
            "lab_calibration.null.mean": points(100 * n["mean"]),
            "lab_calibration.null.sd": f"{100 * n['sd']:.1f}",
            "lab_calibration.null.correlation": f"{n['correlation']:.2f}",
            "lab_calibration.null.mde": f"{100 * n['mde']:.1f}"}
    family = data["family"]
    out["lab_calibration.family.arms"] = str(family["arms"])
    for level in ("raw", "holm"):
        out[f"lab_calibration.family.{level}"] = percent(family[level]["any_false"])
    return out | machine_figures("lab_calibration", data)


def machine_figures(prefix: str, data: dict[str, Any]) -> dict[str, str]:
    """The date and load a benchmark recorded (bench/_results.py), when it did."""
    if "machine" not in data:
        return {}
    info = data["machine"]
    return {f"{prefix}.date": info["date"], f"{prefix}.cpus": str(info["cpus"]),
            f"{prefix}.load": f"{info['load_1min']:.1f}"}


def course_time_figures(data: dict[str, Any]) -> dict[str, str]:
    """scripts/run_course.py --in-place (smoke, CPU): seconds per notebook, keyed by its number."""
    out = {f"cpu_seconds.{name[:2]}": seconds(s) for name, s in data["seconds"].items()}
    out["cpu_seconds.total"] = minutes(sum(data["seconds"].values()))
    return out | {"cpu_seconds.date": data["date"], "cpu_seconds.cores": str(data["cores"])}


def make_test_figures(data: dict[str, Any]) -> dict[str, str]:
    """scripts/time_tests.py: the newest passing run of each make target at its own HEAD (runs
    are oldest first; an older commit timed for comparison, `--commit`, is not today's figure)."""
    out = {}
    for run in data["runs"]:
        if run.get("older") or run.get("rc", 0) != 0:
            continue
        key = f"make_test.{run['target']}"
        out |= {f"{key}.wall": clock(run["wall_s"]) if run["wall_s"] else "not recorded",
                f"{key}.cpu": f"{count(run['cpu_s'])} CPU-seconds" if run["cpu_s"]
                else "CPU-seconds not recorded",
                f"{key}.gauge": f"{run['gauge_s']:.1f} s" if run["gauge_s"] else "not recorded",
                f"{key}.date": run["date"][:10], f"{key}.commit": str(run["commit"]),
                f"{key}.tests": run["tests"] or "tests not recorded"}
    return out


def test_group_figures(data: dict[str, Any]) -> dict[str, str]:
    """runs/bench/test_durations.json: where `make test`'s time goes, and what test-fast leaves."""
    from tools.test_groups import (
        FAST_SHARE,
        RELEASE_SUFFIX,
        RUN_CHAIN,
        RUN_CHAIN_GROUP,
        fast_limit_s,
        slow_groups,
    )

    def name(group: str) -> str:  # in words: the web book's check reads values without "_"
        if group == RUN_CHAIN_GROUP:
            return "notebooks " + "-".join(stem[:2] for stem in (RUN_CHAIN[0], RUN_CHAIN[-1]))
        stem = group.split("/")[-1].split(".")[0]
        if group.startswith("notebooks/"):
            return f"notebook {stem[:2]}"
        return stem.removeprefix("test_").replace("_", " ")

    seconds_of = data["seconds"]
    gate = {g: s for g, s in seconds_of.items() if not g.endswith(RELEASE_SUFFIX)}
    longest = sorted(gate, key=gate.__getitem__, reverse=True)[:8]
    return {"test_durations.longest": ", ".join(f"{name(g)} {gate[g]:.0f} s" for g in longest),
            "test_durations.slow": ", ".join(sorted(map(name, slow_groups(gate)))),
            "test_durations.fast_share": f"{FAST_SHARE:.0%}",
            "test_durations.fast_limit": seconds(fast_limit_s(seconds_of)),
            "test_durations.test": minutes(sum(gate.values())),
            "test_durations.release": minutes(sum(seconds_of.values()) - sum(gate.values()))}


def profile_figures(profiles: dict[str, Any]) -> dict[str, str]:
    """helpers/profiles.py: the knobs README's profile tables show, and the T4 time estimate."""
    from helpers.profiles import expected_t4_minutes, t4_step_seconds

    out = {}
    for name, p in profiles.items():
        key = f"profile.{name}"
        out |= {f"{key}.lora_rank": str(p.lora_rank), f"{key}.G": str(p.num_generations),
                f"{key}.tokens": f"{p.max_prompt_length}+{p.max_completion_length}",
                f"{key}.batch": f"{p.per_device_train_batch_size}×{p.gradient_accumulation_steps}",
                f"{key}.steps": str(p.max_steps), f"{key}.lr": setting(p.learning_rate),
                f"{key}.prompts_per_step": str(p.per_device_train_batch_size
                                               * p.gradient_accumulation_steps
                                               // p.num_generations),
                f"{key}.eval_problems": str(p.num_eval_problems)}
        if (step := t4_step_seconds(p)) is not None:
            low, high = step
            t4_low, t4_high = expected_t4_minutes(p) or (0, 0)
            out[f"{key}.t4_step_seconds"] = f"{low:g}-{high:g} s"
            out[f"{key}.t4_minutes"] = minutes_range(t4_low, t4_high)
    return out


def smoke_recipe_figures(recipe: dict[str, Any]) -> dict[str, str]:
    """helpers/smoke_model.py's RECIPE: how the smoke model is built and warm-started."""
    return {f"smoke_recipe.{key}": setting(value) for key, value in recipe.items()}


def lock_figures(texts: dict[str, str]) -> dict[str, str]:
    """locks/*.txt: how many packages each GPU lock pins (`make lock` rewrites them)."""
    def pins(text: str) -> int:
        return sum("==" in line and not line.startswith("#") for line in text.splitlines())

    return {f"locks.{name}.packages": str(pins(text)) for name, text in texts.items()}


def gpu_call_figures(module: Any) -> dict[str, str]:
    """tools/gpu_calls.py: the GPU-only call sites the contract tests check."""
    return {"gpu_calls.sites": str(len(module.GPU_CALLS)),
            "gpu_calls.stock_exempt": str(len(module.STOCK_CALLS))}


def learning_promise_figures(module: Any) -> dict[str, str]:
    """helpers/smoke_promise.py: the promise the evaluation notebook and tests assert."""
    return {"learning.min_gain_points": f"{module.MIN_GAIN_POINTS:g}",
            "learning.min_problems": str(module.MIN_PROBLEMS),
            "learning.kernel_paths": str(len(module.KERNEL_PATHS))}


def read_json(path: Path) -> Any:
    """A benchmark's JSON file."""
    return json.loads(path.read_text())


def read_profiles(_: Path) -> Any:
    """The profiles, imported rather than parsed: the code is the source."""
    from helpers.profiles import PROFILES

    return PROFILES


def read_locks(path: Path) -> Any:
    """Every lock file beside `path`, by GPU class."""
    return {lock.stem: lock.read_text() for lock in sorted(path.parent.glob("*.txt"))}


def read_gpu_calls(_: Path) -> Any:
    """The GPU-only call table."""
    from tools import gpu_calls

    return gpu_calls


def read_learning(_: Path) -> Any:
    """The smoke promise (its thresholds) and the kernel paths its runs check it on."""
    from types import SimpleNamespace

    from helpers import smoke_promise
    from tools.smoke_runs import KERNEL_PATHS

    return SimpleNamespace(MIN_GAIN_POINTS=smoke_promise.MIN_GAIN_POINTS,
                           MIN_PROBLEMS=smoke_promise.MIN_PROBLEMS, KERNEL_PATHS=KERNEL_PATHS)


def read_smoke_recipe(_: Path) -> Any:
    """The smoke model's build recipe."""
    from helpers.smoke_model import RECIPE

    return RECIPE


@dataclass(frozen=True)
class Source:
    """A file that figures come from, the command that writes it, and what it gives."""

    path: str  # relative to the course root
    fix: str  # the command that (re)writes it
    figures: Callable[[Any], dict[str, str]]
    read: Callable[[Path], Any] = read_json


BENCH_FIX = "make bench"
SOURCES: dict[str, Source] = {
    "toy_r1": Source("runs/bench/toy_r1.json", BENCH_FIX, toy_r1_figures),
    "memory_fit": Source("runs/bench/memory_fit.json", BENCH_FIX, memory_fit_figures),
    "rewards": Source("runs/bench/rewards.json", BENCH_FIX, rewards_figures),
    "grpo_vs_trl": Source("runs/bench/grpo_vs_trl.json", BENCH_FIX, grpo_vs_trl_figures),
    "smoke_model": Source("runs/bench/smoke_model.json", BENCH_FIX, smoke_model_figures),
    "ablations": Source("runs/bench/ablations.json", BENCH_FIX, ablation_figures),
    "lab_arm": Source("runs/bench/lab_arm.json", "python -m bench.ablations --one-cell",
                      lab_arm_figures),
    "lab_calibration": Source("runs/bench/lab_calibration.json", BENCH_FIX,
                              calibration_figures),
    "cpu_seconds": Source("runs/bench/course_times.json", "make execute-notebooks",
                          course_time_figures),
    "make_test": Source("runs/bench/make_test.json", "python -m scripts.time_tests",
                        make_test_figures),
    "test_durations": Source("runs/bench/test_durations.json",
                             "make test PYTEST_ADDOPTS=--store-durations", test_group_figures),
    "profile": Source("helpers/profiles.py", "git restore helpers/profiles.py", profile_figures,
                      read_profiles),
    "locks": Source("locks/t4.txt", "make lock", lock_figures, read_locks),
    "gpu_calls": Source("tools/gpu_calls.py", "git restore tools/gpu_calls.py",
                        gpu_call_figures, read_gpu_calls),
    "learning": Source("helpers/smoke_promise.py", "git restore helpers/smoke_promise.py",
                       learning_promise_figures, read_learning),
    "smoke_recipe": Source("helpers/smoke_model.py", "git restore helpers/smoke_model.py",
                           smoke_recipe_figures, read_smoke_recipe),
}


def notebook_sources(root: Path | None = None) -> dict[str, Source]:
    """One source per notebook whose stored outputs prose quotes (tools/output_quotes.py)."""
    from tools.output_quotes import QUOTES, quote_figures

    root = root or Path(__file__).resolve().parent.parent
    found = {}
    for number in QUOTES:
        path = next((root / "notebooks").glob(f"{number}_*.ipynb"), None)
        if path is not None:
            found[f"nb{number}"] = Source(f"notebooks/{path.name}", "make execute-notebooks",
                                          quote_figures(number))
    return found


SOURCES |= notebook_sources()


def source_of(key: str) -> Source | None:
    """The source a key's prefix names, or None."""
    return SOURCES.get(key.split(".", 1)[0])


def compute(root: Path, prefixes: Iterable[str] | None = None) -> dict[str, str]:
    """Every figure of the named sources (default: all) whose file exists under `root`."""
    out: dict[str, str] = {}
    for prefix in SOURCES if prefixes is None else prefixes:
        source = SOURCES[prefix]
        if (root / source.path).exists():
            out |= source.figures(source.read(root / source.path))
    return out


def problem(key: str, value: str, figures: dict[str, str], root: Path) -> str | None:
    """What is wrong with one marker, in one sentence that names the fix; None when right."""
    source = source_of(key)
    if source is None:
        return (f"fig:{key} names no known source (one of {', '.join(SOURCES)}): fix the key, "
                "or register its source in tools/cited_numbers.py.")
    if not (root / source.path).exists():
        return (f"fig:{key} comes from {source.path}, which is missing: run `{source.fix}`, "
                "then `make figures`.")
    if key not in figures:
        near = sorted(k for k in figures if k.startswith(key.split(".", 1)[0] + "."))[:8]
        return (f"fig:{key} is not a figure of {source.path}: use a registered key "
                f"({', '.join(near)}, ...) or add it in tools/cited_numbers.py.")
    if value != figures[key]:
        reread = ("re-read the sentence that quotes it (a re-run printed another number), then "
                  if source.path.startswith("notebooks/") else "")
        return (f"fig:{key} says {value!r} but {source.path} gives {figures[key]!r}: "
                f"{reread}run `make figures`.")
    return None


def check_text(text: str, figures: dict[str, str], root: Path) -> list[str]:
    """Every problem with the markers in `text`, and registered keys hidden in code spans."""
    literal = [m["key"] for m in MARKER.finditer(text)
               if in_code_span(text, m.start()) and source_of(m["key"])]
    found = [problem(m["key"], m["value"], figures, root) for m in markers(text)]
    return [p for p in found if p] + [
        f"fig:{key} is inside a code span, where the marker shows literally: move it out of "
        "the backticks." for key in literal]


def fill_text(text: str, figures: dict[str, str]) -> str:
    """`text` with every known marker's VALUE replaced by the registry's (others left alone)."""
    def value(m: re.Match[str]) -> str:
        if in_code_span(text, m.start()):
            return m[0]
        new = figures.get(m["key"], m["value"])
        return f"<!-- fig:{m['key']} -->{new}<!-- /fig -->"

    return MARKER.sub(value, text)


def keys_in(text: str) -> list[str]:
    """The keys of the markers in `text`, in order."""
    return [m["key"] for m in markers(text)]
