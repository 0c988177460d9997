"""Kill it anywhere, lose nothing: SIGKILL at every named point of training, 06 and 07; then resume.

One chain of child processes (scripts/fault_soak.py) trains one smoke run: each attempt is killed
at the next fault point and the next one resumes, and after every kill the run folder is checked
(fault_soak.CHECKS). Then 06's evaluation is killed in its trained pass and 07's merge before its
rename, and both are rerun. The bad-run-folder tests below need no training: each builds the
folder by hand, in the layout transformers 4.56.2 writes, and checks the one sentence it gets.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.paths import shown
from helpers.profiles import PROFILES, TrainingConfigError
from helpers.resume import check_resumable, latest_checkpoint, load_log_history, prepare_resume
from helpers.run_folder import usable_adapter
from helpers.storage import RunFolderError, check_writable, file_problem, write_json_atomic
from scripts import fault_soak
from tools.faults import FAULT_POINTS

SMOKE = PROFILES["smoke"]


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    """The whole chain once, then 06 and 07 killed and rerun, with one warm zygote."""
    root = tmp_path_factory.mktemp("faults")
    runner = fault_soak.Zygote()
    try:
        chain = fault_soak.run_chain(runner, root / "chain")
        fault_dir = root / "chain" / "faults"
        chain["evaluation"] = fault_soak.run_evaluation_kill(runner, chain["run"], fault_dir)
        chain["merge"] = fault_soak.run_merge_kill(runner, chain["run"], root / "export", fault_dir)
        with read_only(root / "locked", skip=False) as locked:
            chain["read-only"] = locked and fault_soak.attempt(
                runner, "train", fault_soak.train_argv(locked), fault_dir, "read-only")
    finally:
        runner.close()
    fault_soak.print_table(chain["rows"])  # shown with pytest -s; the report quotes it
    return chain


def test_the_chain_stops_at_every_named_point():
    assert {point for point, _, _ in fault_soak.CHAIN} == set(FAULT_POINTS)


def test_every_kill_and_resume_keeps_every_promise(faults):
    rows = faults["rows"]
    assert len(rows) == len(fault_soak.CHAIN) + 1
    for row in rows[:-1]:
        assert row.held == list(fault_soak.CHECKS), row.point
    assert {"global step 8", "final adapter == last checkpoint's"} <= set(rows[-1].held)


def test_a_half_written_checkpoint_4_resumes_from_checkpoint_2(faults):
    """The old failure: killed after the model of checkpoint-4 was written, before the rest."""
    after = faults["outputs"]["save:optimizer-written@4"]  # the attempt that followed the kill
    folder = shown(faults["run"] / "checkpoints")
    assert (f"Skipping checkpoint-4 in {folder}: its trainer_state.json is missing, a save that "
            "did not finish; resuming from checkpoint-2 instead, and checkpoint-4 is deleted and "
            "saved again when training reaches it.") in after
    assert "RESUMING from checkpoint-2: steps 1-2 are done" in after


def test_a_full_disk_is_one_sentence_and_the_rerun_resumes(faults):
    output = faults["outputs"]["save:model-written@6 (disk-full)"]
    sentence = faults["outputs"]["disk-full sentence"]
    run = shown(faults["run"])
    assert sentence.startswith(f"train_grpo.py: error: Writing into {run} failed (")
    assert "set RUN_FOLDER" in sentence and sentence.endswith("training resumes from checkpoint-4.")
    assert "Traceback" not in output
    assert "RESUMING from checkpoint-4" in faults["outputs"]["log-history@6"]


def test_the_adapter_swap_kill_leaves_the_previous_adapter_for_06(faults):
    swap = next(row for row in faults["rows"] if row.point == "adapter-swap@4")
    assert swap.note == "checkpoint 4, log to step 4, adapter.old/ at step 2"
    after = next(row for row in faults["rows"] if row.point.startswith("save:model-written@6"))
    assert after.note.endswith("adapter/ at step 4")  # the resumed run brought it up to date


def test_a_kill_in_06s_trained_pass_keeps_the_base_answers(faults):
    evaluation = faults["evaluation"]
    lines = evaluation["rerun"].output.splitlines()
    base = next(line for line in lines if line.startswith("base: "))
    trained = next(line for line in lines if line.startswith("trained: "))
    assert base.startswith("base: reusing all 6 answers saved in eval/answers/base-")
    assert trained.startswith("trained: reusing 2 of 6 answers saved in eval/answers/trained-")
    assert trained.endswith("by a run that stopped; generating the other 4.")
    assert len(evaluation["base_files"]) == 3 and len(evaluation["trained_files_at_kill"]) == 1
    for path, written in evaluation["base_files"].items():  # reused, not generated again
        assert path.stat().st_mtime_ns == written
    scores = evaluation["results"]["scores"]
    assert scores["base"]["n"] == scores["trained"]["n"] == 6


def test_a_kill_during_07s_merge_leaves_nothing_that_looks_finished(faults):
    merge = faults["merge"]
    assert merge["after_kill"] == ["merged_16bit.partial"]
    assert "Removed the unfinished" in merge["rerun"].output
    assert merge["after_rerun"] == ["merged_16bit"]
    merged = Path(faults["run"]).parent.parent / "export" / "merged_16bit"
    assert file_problem(merged / "model.safetensors") is None
    assert file_problem(merged / "config.json") is None


def test_a_read_only_run_folder_stops_training_in_one_line(faults):
    done = faults["read-only"]
    if done is None:
        pytest.skip("root, but a read-only folder cannot be mounted here")
    assert done.exit_code == 1 and "Traceback" not in done.output
    errors = fault_soak.error_lines(done.output)
    assert len(errors) == 1 and "is not writable" in errors[0]


# ---- bad run folders: one sentence each, naming the folder and the fix ---------------------


def whole_checkpoint(folder: Path, step: int, base: str = "smoke-model") -> Path:
    """A checkpoint in the layout transformers 4.56.2 writes (tiny tensors, real formats)."""
    import torch
    from safetensors.torch import save_file

    checkpoint = folder / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    save_file({"lora_A": torch.ones(2, 2)}, checkpoint / "adapter_model.safetensors")
    write_json_atomic(checkpoint / "adapter_config.json", {"base_model_name_or_path": base})
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"):
        torch.save({"state": torch.zeros(3)}, checkpoint / name)
    log = [{"step": s, "loss": 0.0} for s in range(1, step + 1)]
    write_json_atomic(checkpoint / "trainer_state.json", {"global_step": step, "log_history": log})
    return checkpoint


def run_with_checkpoints(root: Path, *steps: int) -> Path:
    run = root / "run"
    for step in steps:
        whole_checkpoint(run / "checkpoints", step)
    return run


def cut(path: Path, keep: float = 0.5) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


def one_sentence(message: str, folder: Path) -> str:
    assert "\n" not in message and "Traceback" not in message
    assert str(shown(folder)) in message, message
    return message


@contextmanager
def read_only(folder: Path, skip: bool = True):
    """A folder nobody can write, root included: a read-only mount (root) or chmod (others).

    Where neither works (root without mount rights), the test skips, or gets None.
    """
    folder.mkdir(parents=True)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        if skip:
            pytest.skip(f"root, but cannot mount a read-only folder here: {mounted.stderr.strip()}")
        yield None
        return
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_the_issue_case_half_written_checkpoint_4_beside_a_whole_checkpoint_2(tmp_path):
    """checkpoint-4 holding only adapter_model.safetensors: what a kill during the save left."""
    run = run_with_checkpoints(tmp_path, 2)
    partial = run / "checkpoints" / "checkpoint-4"
    partial.mkdir()
    shutil.copy(run / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors", partial)
    assert latest_checkpoint(run / "checkpoints").name == "checkpoint-2"
    checkpoint, lines = prepare_resume(run / "checkpoints", 8, 2)
    assert checkpoint.name == "checkpoint-2" and not partial.exists()
    assert lines[0] == (
        f"Skipping checkpoint-4 in {shown(run / 'checkpoints')}: its trainer_state.json is "
        "missing, a save that did not finish; resuming from checkpoint-2 instead, and "
        "checkpoint-4 is deleted and saved again when training reaches it.")
    assert lines[1].startswith("RESUMING from checkpoint-2")


@pytest.mark.parametrize(("broken", "problem"), [
    ("trainer_state.json", "its trainer_state.json is not valid JSON"),
    ("adapter_model.safetensors", "its adapter_model.safetensors is cut off ("),
    ("optimizer.pt", "its optimizer.pt is cut off (not a whole torch file)"),
    ("rng_state.pth", "its rng_state.pth is cut off (not a whole torch file)"),
])
def test_a_cut_off_file_in_a_checkpoint_is_skipped_in_one_sentence(tmp_path, broken, problem):
    run = run_with_checkpoints(tmp_path, 2, 4)
    cut(run / "checkpoints" / "checkpoint-4" / broken)
    checkpoint, lines = prepare_resume(run / "checkpoints", 8, 2)
    assert checkpoint.name == "checkpoint-2"
    sentence = one_sentence(lines[0], run / "checkpoints")
    assert f"Skipping checkpoint-4 in {shown(run / 'checkpoints')}: {problem}" in sentence
    assert "resuming from checkpoint-2 instead" in sentence


def test_a_truncated_adapter_in_the_run_folder_is_refused_by_06_and_07(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(whole_checkpoint(tmp_path / "c", 2), run / "adapter")
    cut(run / "adapter" / "adapter_model.safetensors")
    with pytest.raises(RunFolderError) as caught:
        usable_adapter(run)
    sentence = one_sentence(str(caught.value), run / "adapter")
    assert "its adapter_model.safetensors is cut off (" in sentence
    assert "rerun notebook 05 with this run folder" in sentence


def test_a_run_folder_of_another_model_is_refused_by_training_06_and_07(tmp_path):
    run = run_with_checkpoints(tmp_path, 2)
    folder = run / "checkpoints"
    other = {"model": "unsloth/Qwen2.5-1.5B-Instruct-unsloth-bnb-4bit", "learning_rate": 5e-6}
    write_json_atomic(folder / "run_fingerprint.json", other)
    with pytest.raises(TrainingConfigError) as caught:
        check_resumable(folder, {"model": "/cache/smoke-model", "learning_rate": 1e-3})
    sentence = one_sentence(str(caught.value), folder)
    assert "come from a different run, another profile or model" in sentence
    assert "set RUN_FOLDER (--output-dir for the script) to a new folder" in sentence

    shutil.copytree(folder / "checkpoint-2", run / "adapter")
    write_json_atomic(run / "adapter" / "adapter_config.json",
                      {"base_model_name_or_path": PROFILES["t4"].model_name})
    with pytest.raises(RunFolderError) as caught:
        usable_adapter(run, SMOKE)
    sentence = one_sentence(str(caught.value), run)
    assert (f"was trained on {PROFILES['t4'].model_name}, not on the smoke profile's "
            "models/smoke") in sentence
    assert "set PROFILE to the profile that run used" in sentence


def gpu_trainer(folder: Path, precision: str) -> SimpleNamespace:
    """What train_or_resume reads of a trainer on a GPU, in `precision`. Its GRPOConfig says fp16
    or bf16; accelerate 1.16 makes a GradScaler for fp16 off the CPU only
    (accelerator.py:534-555), and transformers 4.56.2's resume loads scaler.pt into it whenever
    the file is there, with no None check (trainer.py:3619-3645), which `train` does here too."""
    from helpers.resume import RESUME_KEYS

    scaler = SimpleNamespace(load_state_dict=lambda state: None) if precision == "fp16" else None
    args = SimpleNamespace(output_dir=str(folder), max_steps=8, save_steps=2, world_size=1,
                           device=SimpleNamespace(type="cuda"), fp16=precision == "fp16",
                           bf16=precision == "bf16", **dict.fromkeys(RESUME_KEYS, 1))
    trainer = SimpleNamespace(args=args, model=SimpleNamespace(config=SimpleNamespace(
        _name_or_path="smoke-model")), resumed=[], accelerator=SimpleNamespace(
        is_main_process=True, wait_for_everyone=lambda: None, scaler=scaler))

    def train(resume_from_checkpoint: str | None = None) -> str:
        if resume_from_checkpoint and (Path(resume_from_checkpoint) / "scaler.pt").is_file():
            trainer.accelerator.scaler.load_state_dict({})  # AttributeError on None
        trainer.resumed.append(resume_from_checkpoint)
        return "trained"

    trainer.train = train
    return trainer


def precision_run(root: Path, precision: str) -> Path:
    """checkpoint-2 and -4 of a run trained in `precision` (fp16 ones hold scaler.pt)."""
    import torch

    from helpers.resume import run_fingerprint

    folder = run_with_checkpoints(root, 2, 4) / "checkpoints"
    if precision == "fp16":
        for step in (2, 4):
            torch.save({"scale": 65536.0}, folder / f"checkpoint-{step}" / "scaler.pt")
    write_json_atomic(folder / "run_fingerprint.json",
                      run_fingerprint(gpu_trainer(folder, precision)))
    return folder


@pytest.mark.parametrize(("was", "now"), [("bf16", "fp16"), ("fp16", "bf16")],
                         ids=["bf16 run resumed on a T4", "T4 run resumed in bf16"])
def test_a_resume_across_precisions_is_refused_in_one_sentence_and_deletes_nothing(
        tmp_path, was, now):
    """The same RUN_FOLDER first on an L4/A100 runtime, then on a T4 (or the other way). Before,
    a T4 deleted every bf16 checkpoint as "a save that did not finish" (no scaler.pt), and bf16
    resumed an fp16 checkpoint into an AttributeError inside train()."""
    from helpers.resume import train_or_resume

    folder = precision_run(tmp_path, was)
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    trainer = gpu_trainer(folder, now)
    with pytest.raises(TrainingConfigError) as caught:
        train_or_resume(trainer)
    sentence = one_sentence(str(caught.value), folder)
    assert f"were trained in {was} and this machine trains in {now}" in sentence
    assert "nothing was deleted" in sentence and "set RUN_FOLDER" in sentence
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    assert trainer.resumed == []


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_the_same_precision_resumes_from_the_newest_checkpoint(tmp_path, precision):
    from helpers.resume import train_or_resume

    folder = precision_run(tmp_path, precision)
    trainer = gpu_trainer(folder, precision)
    assert train_or_resume(trainer) == "trained"
    assert trainer.resumed == [str(folder / "checkpoint-4")]
    saved = json.loads((folder / "run_fingerprint.json").read_text())
    assert saved["precision"] == precision


def test_a_fingerprint_from_before_the_precision_was_recorded_still_resumes(tmp_path):
    from helpers.resume import train_or_resume

    folder = precision_run(tmp_path, "fp16")
    old = json.loads((folder / "run_fingerprint.json").read_text())
    del old["precision"]
    write_json_atomic(folder / "run_fingerprint.json", old)
    trainer = gpu_trainer(folder, "fp16")
    assert train_or_resume(trainer) == "trained"
    assert trainer.resumed == [str(folder / "checkpoint-4")]


def test_an_empty_checkpoints_folder_starts_over_and_says_what_is_replaced(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "adapter").mkdir()
    write_json_atomic(run / "log_history.json", [])
    checkpoint, lines = prepare_resume(run / "checkpoints", 8, 2)
    assert checkpoint is None and len(lines) == 1
    sentence = one_sentence(lines[0], run / "checkpoints")
    assert "holds no checkpoint, so this is a new run of 8 steps" in sentence
    assert "set RUN_FOLDER to a new folder to keep them" in sentence


def test_a_log_history_that_is_not_json_falls_back_to_the_checkpoints_copy(tmp_path, capsys):
    run = run_with_checkpoints(tmp_path, 4)
    (run / "log_history.json").write_text('[{"step": 1, "loss": 0.1}, {"st')
    log = load_log_history(run)
    assert [entry["step"] for entry in log] == [1, 2, 3, 4]
    sentence = one_sentence(capsys.readouterr().out.strip(), run)
    assert "log_history.json is not valid JSON: using the log saved in checkpoint-4" in sentence
    shutil.rmtree(run / "checkpoints")
    with pytest.raises(RunFolderError) as caught:
        load_log_history(run)
    assert "rerun notebook 05 with this run folder" in one_sentence(str(caught.value), run)


def test_a_read_only_run_folder_is_one_sentence(tmp_path):
    with read_only(tmp_path / "run") as run:
        with pytest.raises(RunFolderError) as caught:
            check_writable(run / "checkpoints")
    sentence = one_sentence(str(caught.value), run / "checkpoints")
    assert "is not writable" in sentence and "set RUN_FOLDER" in sentence


def test_a_cut_off_partial_file_never_replaces_the_whole_one(tmp_path):
    """write_json_atomic: a kill between write and rename leaves the old file in place."""
    path = write_json_atomic(tmp_path / "log_history.json", [{"step": 1}])
    (tmp_path / "log_history.json.partial").write_text('[{"step": 1}, {"st')  # a killed write
    assert json.loads(path.read_text()) == [{"step": 1}]
    write_json_atomic(path, [{"step": 1}, {"step": 2}])
    assert json.loads(path.read_text()) == [{"step": 1}, {"step": 2}]


@pytest.mark.parametrize("gone", [FileNotFoundError, ProcessLookupError])
def test_a_child_that_vanishes_while_its_state_is_read_counts_as_exited(monkeypatch, gone):
    """/proc/<pid>/stat of a child reaped between the open and the read raises ESRCH."""
    def vanished(*args, **kwargs):
        raise gone(3, "No such process")

    monkeypatch.setattr(fault_soak, "open", vanished, raising=False)
    assert fault_soak._exited(os.getpid())
    monkeypatch.undo()
    assert not fault_soak._exited(os.getpid())  # this process runs: state R or S
