"""scripts/train_grpo.py: its command line, its GRPOConfig (the same as notebook 05's), and a real
two-process run under `accelerate launch` with gloo, killed mid-run and resumed, whose ranks must
stay bit-identical at every step, before the kill and after the resume."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from helpers import launch
from helpers.grpo_config import batch_arithmetic, checkpoint_every
from helpers.hardware import CPU_ONLY
from helpers.paths import ROOT
from helpers.profiles import PROFILES, TrainingConfigError
from helpers.run_folder import RunFolder
from scripts import fault_soak
from scripts import train_grpo as tg

SMOKE = PROFILES["smoke"]
TWO_PROCESS_STEPS = 8  # ~1 s a step; the seeded run needs a group with reward spread to move
KILLED_IN = 5  # killed while scoring step 5: checkpoint-4 is whole, step 5 is lost




def _run(*args: str, env: dict | None = None, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scripts.train_grpo", *args], capture_output=True, text=True,
        cwd=ROOT, env=env, timeout=timeout,
    )


def test_help_lists_every_flag():
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    for flag in ("--profile", "--model", "--max-steps", "--output-dir", "--resume",
                 "--no-resume", "--vllm-server-host", "--debug-dump-params"):
        assert flag in done.stdout


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--profile", "nope"], "invalid choice: 'nope'"),
        (["--max-steps", "0"], "must be at least 1"),
        (["--max-steps", "ten"], "expected a whole number"),
    ],
)
def test_a_bad_flag_is_one_line(argv, fragment):
    done = _run(*argv)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert fragment in lines[0] and lines[0].startswith("train_grpo.py: error:")


def _notebook_05_config(max_steps: int | None) -> Any:
    """Run notebook 05's own parameters cell and config cell, on CPU with the smoke profile."""
    nb = nbformat.read(ROOT / "notebooks" / "05_grpo_training.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    params = next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    config_cell = next(src for src in code if re.search(r"^config = GRPOConfig\(", src, re.M))
    namespace: dict[str, Any] = {}
    exec(params, namespace)  # PROFILE, USE_DRIVE, RUN_FOLDER, MAX_STEPS, as the notebook sets them
    # What `hw, profile = start(PROFILE)` returns in CI (GRPO_PROFILE=smoke, no GPU).
    namespace.update(MAX_STEPS=max_steps, hw=CPU_ONLY, profile=PROFILES["smoke"])
    exec(config_cell, namespace)
    return namespace["config"]


@pytest.mark.parametrize("max_steps", [None, 7])
def test_one_process_gives_notebook_05s_config(max_steps):
    """The script's GRPOConfig equals the one notebook 05's config cell builds, field by field."""
    argv = ["--profile", "smoke"] + (["--max-steps", str(max_steps)] if max_steps else [])
    script = tg.build_config(tg.parse_args(argv), CPU_ONLY, SMOKE, launch.plan_run(SMOKE)).to_dict()
    notebook = _notebook_05_config(max_steps).to_dict()
    # logging_dir holds the creation time (runs/<date-time>_<host>): the one field that may differ.
    script.pop("logging_dir"), notebook.pop("logging_dir")
    assert script == notebook
    assert script["max_steps"] == (max_steps or PROFILES["smoke"].max_steps)


def test_flags_reach_the_config(tmp_path):
    args = tg.parse_args(["--profile", "smoke", "--max-steps", "7", "--output-dir", str(tmp_path)])
    config = tg.build_config(args, CPU_ONLY, SMOKE, launch.plan_run(SMOKE))
    assert config.max_steps == 7
    assert Path(config.output_dir) == tmp_path / "checkpoints"


def test_plan_is_made_in_one_place():
    single = launch.plan_run(SMOKE)
    assert (single.backend, single.load_in_4bit) == ("unsloth", True)
    several = launch.plan_run(SMOKE, 4, vllm_server=False)
    assert (several.backend, several.load_in_4bit) == ("peft", True)
    served = launch.plan_run(SMOKE, 4, vllm_server=True)
    assert (served.backend, served.load_in_4bit) == ("peft", False)


def test_the_plan_imports_unsloth_only_when_it_picks_it(monkeypatch):
    """unsloth must be imported before trl when the plan picks it, and not otherwise: with
    `unsloth` made unimportable here, only the unsloth plan's import fails."""
    monkeypatch.setitem(sys.modules, "unsloth", None)  # `import unsloth` now raises ImportError
    launch.Plan("peft", True, 1, "").import_backend()
    with pytest.raises(ImportError):
        launch.Plan("unsloth", True, 1, "").import_backend()


def test_several_processes_and_vllm_server_settings():
    args = tg.parse_args(["--profile", "smoke", "--vllm-server-host", "10.0.0.1"])
    plan = launch.plan_run(SMOKE, 2, vllm_server=True)
    config = tg.build_config(args, CPU_ONLY, SMOKE, plan)
    assert config.use_vllm and config.vllm_mode == "server"
    assert (config.vllm_server_host, config.vllm_server_port) == ("10.0.0.1", 8000)
    assert config.ddp_find_unused_parameters is False


def test_the_plan_refuses_a_4bit_checkpoint_for_a_vllm_server():
    assert launch.plan_run(PROFILES["large"], 4, vllm_server=False).load_in_4bit
    with pytest.raises(TrainingConfigError, match="16-bit model that vLLM serves too"):
        launch.plan_run(PROFILES["large"], 4, vllm_server=True)
    local = tg.with_model(PROFILES["large"], "models/llama-3.1-8b-instruct")
    assert not launch.plan_run(local, 4, vllm_server=True).load_in_4bit


@pytest.mark.parametrize(
    "per_device, accum, world, generations, completions, prompts",
    [(4, 1, 1, 4, 4, 1), (4, 1, 2, 4, 8, 2), (1, 4, 1, 4, 4, 1), (1, 8, 4, 8, 32, 4),
     (2, 1, 2, 4, 4, 1)],
)
def test_batch_arithmetic(per_device, accum, world, generations, completions, prompts):
    got = batch_arithmetic(per_device, accum, world, generations)
    assert got == {
        "completions_per_process": per_device * accum,
        "completions_per_step": completions,
        "prompts_per_step": prompts,
    }


def test_batch_arithmetic_matches_trl():
    """trl computes generation_batch_size itself; a non-divisible batch is refused by both."""
    from trl import GRPOConfig

    config = GRPOConfig(
        output_dir="unused", per_device_train_batch_size=2, gradient_accumulation_steps=3,
        num_generations=3, use_cpu=True, bf16=False, report_to="none",
    )
    assert config.generation_batch_size == batch_arithmetic(2, 3, 1, 3)["completions_per_step"]
    with pytest.raises(ValueError, match="not divisible by num_generations=4"):
        batch_arithmetic(1, 2, 1, 4)


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    """accelerate launch, two CPU processes, the tiny model: killed as a whole (SIGKILL to every
    process) while scoring step KILLED_IN, then launched again to resume; per-rank dumps of both.
    """
    root = tmp_path_factory.mktemp("ddp")
    run, faults = root / "run", root / "faults"
    faults.mkdir()
    code, first, killed = fault_soak.launch_until(
        fault_soak.two_process_command(run, TWO_PROCESS_STEPS, root / "dump-killed"), faults,
        f"step@{KILLED_IN}")
    assert killed, f"not stopped at step {KILLED_IN} (exit {code}):\n{first[-4000:]}"
    code, second, _ = fault_soak.launch_until(
        fault_soak.two_process_command(run, TWO_PROCESS_STEPS, root / "dump-resumed"), faults, None)
    assert code == 0, second[-6000:]
    killed_ranks, resumed_ranks = (
        [json.loads((root / dump / f"rank{r}.json").read_text()) for r in (0, 1)]
        for dump in ("dump-killed", "dump-resumed")
    )
    ranks = [  # one record per rank across both launches, as if the run had never stopped
        {**a, "steps": a["steps"] + b["steps"], "scored": a["scored"] + b["scored"]}
        for a, b in zip(killed_ranks, resumed_ranks, strict=True)
    ]
    return {"ranks": ranks, "killed": killed_ranks, "resumed": resumed_ranks, "run": run,
            "stdout": second}


def test_both_ranks_take_part(two_process_run):
    ranks = two_process_run["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == 2 and r["backend"] == "gloo" for r in ranks)
    assert ranks[0]["pid"] != ranks[1]["pid"]
    for r in ranks:
        assert len(r["steps"]) == TWO_PROCESS_STEPS  # each rank ran every optimizer step
        assert len(r["scored"]) == TWO_PROCESS_STEPS  # and scored its own completions each step
    # The ranks saw different problems: rank 0's prompts are not rank 1's.
    answers = [[tuple(s["answers"]) for s in r["scored"]] for r in ranks]
    assert answers[0] != answers[1]


def test_gradients_are_synchronised(two_process_run):
    """Different data on each rank, yet bit-identical gradients and weights after every step."""
    rank0, rank1 = two_process_run["ranks"]
    assert rank0["initial_params"] == rank1["initial_params"]
    for s0, s1 in zip(rank0["steps"], rank1["steps"], strict=True):
        assert s0["step"] == s1["step"]
        assert s0["grads"] == s1["grads"], f"gradients differ at step {s0['step']}"
        assert s0["params"] == s1["params"], f"weights differ at step {s0['step']}"
    moved = [s for s in rank0["steps"] if s["grad_abs_sum"] > 0]
    assert moved, (
        f"no step had a non-zero gradient in {TWO_PROCESS_STEPS} steps (no group with reward "
        "spread), so synchronisation was not really tested: raise TWO_PROCESS_STEPS"
    )
    assert rank0["steps"][-1]["params"] != rank0["initial_params"]


def test_global_batch_matches_the_notebook(two_process_run):
    """Per step: per_device x accumulation x processes completions, in groups of num_generations."""
    ranks = two_process_run["ranks"]
    config = ranks[0]["config"]
    taught = batch_arithmetic(
        config["per_device_train_batch_size"], config["gradient_accumulation_steps"], 2,
        config["num_generations"],
    )
    assert config["generation_batch_size"] == taught["completions_per_step"]
    for step in range(TWO_PROCESS_STEPS):
        calls = [r["scored"][step] for r in ranks]
        assert [c["completions"] for c in calls] == [taught["completions_per_process"]] * 2
        assert sum(c["completions"] for c in calls) == taught["completions_per_step"]
        groups = [
            c["answers"][i : i + config["num_generations"]]
            for c in calls for i in range(0, len(c["answers"]), config["num_generations"])
        ]
        assert len(groups) == taught["prompts_per_step"]
        assert all(len(set(group)) == 1 for group in groups)  # one prompt's completions per group
    said = (f"= {taught['completions_per_step']} completions per step = "
            f"{taught['prompts_per_step']} prompt(s) x {config['num_generations']} generations")
    assert said in two_process_run["stdout"]


def test_a_killed_two_process_run_resumes_from_its_newest_checkpoint(two_process_run):
    """The second launch starts from checkpoint-4 on both ranks, with the weights the first
    launch had after step 4, bit for bit; the run then ends at the right step."""
    every = checkpoint_every(TWO_PROCESS_STEPS)
    saved = (KILLED_IN - 1) // every * every  # the newest checkpoint before the kill
    killed, resumed = two_process_run["killed"], two_process_run["resumed"]
    assert [len(r["steps"]) for r in killed] == [KILLED_IN - 1] * 2  # step 5 never finished
    assert [r["start_step"] for r in resumed] == [saved, saved]
    at_checkpoint = killed[0]["steps"][saved - 1]
    assert at_checkpoint["step"] == saved
    assert [r["initial_params"] for r in resumed] == [at_checkpoint["params"]] * 2
    assert [r["steps"][-1]["step"] for r in resumed] == [TWO_PROCESS_STEPS] * 2
    assert two_process_run["stdout"].count(f"RESUMING from checkpoint-{saved}") == 1


def test_the_run_writes_what_notebook_05_writes(two_process_run):
    run = two_process_run["run"]
    log = json.loads((run / "log_history.json").read_text())
    assert [e["step"] for e in log if "reward" in e] == list(range(1, TWO_PROCESS_STEPS + 1))
    assert (run / "figures" / "training.png").stat().st_size > 0
    assert (run / "adapter" / "adapter_config.json").exists()
    assert (run / "checkpoints" / f"checkpoint-{TWO_PROCESS_STEPS}").is_dir()


def test_evaluate_script_reads_the_two_process_adapter(two_process_run, tmp_path):
    """Notebook 06's evaluation, from the command line, on the adapter the DDP run saved."""
    adapter = two_process_run["run"] / "adapter"
    command = [sys.executable, "-m", "scripts.evaluate", "--profile", "smoke",
               "--adapter", str(adapter), "--num-problems", "2", "--output-dir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(RunFolder(tmp_path).results.read_text())  # into the run folder's eval/
    assert [results["scores"][side]["n"] for side in ("base", "trained")] == [2, 2]
    assert "| base | 2 |" in done.stdout and "| trained | 2 |" in done.stdout


def test_evaluate_script_on_a_merged_model(tmp_path):
    """A merged model is compared with the profile's base; the base itself must tie with itself."""
    from helpers.smoke_model import ensure_smoke_model
    from scripts import evaluate as ev

    same = ensure_smoke_model()  # a standalone model folder, like a merged export
    argv = ["--profile", "smoke", "--merged", str(same), "--num-problems", "2",
            "--output-dir", str(tmp_path)]
    assert ev.main(argv) == 0
    results = json.loads(RunFolder(tmp_path).results.read_text())
    assert results["scores"]["base"] == results["scores"]["trained"]
    assert all(row["base_completion"] == row["trained_completion"] for row in results["problems"])


def test_evaluate_script_bad_flags_are_one_line():
    for argv in (["--merged", "/no/such/folder"], ["--adapter", "a", "--merged", "b"]):
        done = subprocess.run([sys.executable, "-m", "scripts.evaluate", *argv],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr


# ---- ZeRO-3 loads a 16-bit base and quantizes it (a -bnb-4bit checkpoint keeps uint8 storage) ----

DS = "ACCELERATE_USE_DEEPSPEED"


@pytest.mark.parametrize(("env", "zero3"), [
    ({}, False),
    ({DS: "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}, True),
    ({DS: "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}, False),
    ({DS: "true", "ACCELERATE_DEEPSPEED_CONFIG_FILE": "configs/accelerate/ds_zero3.json"}, True),
    ({DS: "true", "ACCELERATE_DEEPSPEED_CONFIG_FILE": "configs/accelerate/ds_zero2.json"}, False),
    ({DS: "false", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}, False),
])
def test_zero3_is_read_from_accelerates_environment(env, zero3, monkeypatch):
    monkeypatch.chdir(ROOT)  # accelerate passes the config file path as given: the course root's
    assert launch.zero3_requested(env) is zero3


def _unsloth_16bit_siblings() -> list[set[str]]:
    """Groups of names unsloth's mapper lists as one model (4-bit ids and their 16-bit ids)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("unsloth")
    mapper = Path(next(iter(spec.submodule_search_locations))) / "models" / "mapper.py"
    groups = []
    for node in ast.walk(ast.parse(mapper.read_text())):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                names = {c.value for c in ast.walk(value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)}
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    groups.append(names | {key.value})
    return groups


@pytest.mark.parametrize("name", sorted({p.model_name for p in PROFILES.values()
                                         if "bnb-4bit" in p.model_name}))
def test_zero3_maps_each_4bit_profile_model_to_its_16bit_model(name):
    base = launch.zero3_base(name)
    assert "bnb" not in base and base.startswith("unsloth/")
    assert any({name, base} <= group for group in _unsloth_16bit_siblings()), (
        f"unsloth's mapper does not list {base} as the 16-bit model of {name}")


def test_zero3_keeps_a_16bit_folder_and_refuses_a_quantized_one(tmp_path):
    plain, quantized = tmp_path / "plain", tmp_path / "quantized"
    for folder, config in ((plain, {"model_type": "qwen2"}),
                           (quantized, {"model_type": "qwen2", "quantization_config": {}})):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
    assert launch.zero3_base(str(plain)) == str(plain)
    assert launch.zero3_base("unsloth/Qwen2.5-1.5B-Instruct-unsloth-bnb-4bit") == (
        "unsloth/Qwen2.5-1.5B-Instruct")
    with pytest.raises(ValueError, match="already quantized"):
        launch.zero3_base(str(quantized))
