"""Checkpoints and resuming (helpers.resume) on a real smoke run: a callback kills it after step 3
(a Colab disconnect: step 3 is lost, checkpoint-2 is on disk), then a freshly loaded model resumes,
and everything the notebook promises is checked on that one run; what a whole checkpoint is,
pinned to the trainer's own save order."""

import unsloth  # noqa: F401  (before trl and transformers, as in the notebooks)

# isort: split
import json
from pathlib import Path

import pytest

from helpers.callbacks import format_eta
from helpers.grpo_config import (
    TrainingConfigError,
    grpo_settings,
    make_grpo_config,
)
from helpers.hardware import CPU_ONLY
from helpers.profiles import PROFILES
from helpers.resume import (
    checkpoint_problem,
    describe_adapter,
    describe_resume,
    latest_checkpoint,
    load_log_history,
    scaler_files,
    train_or_resume,
)

SMOKE = PROFILES["smoke"]


def test_eta_is_minutes_for_long_waits_and_seconds_for_short_ones():
    assert format_eta(12, 150, 14.2) == "step 12/150: 14.2 s/step, about 33 min left"
    assert format_eta(28, 30, 0.5) == "step 28/30: 0.5 s/step, about 1 s left"
    assert format_eta(30, 30, 0.5).endswith("about 0 s left")


def test_adapter_note_says_which_step_it_holds(tmp_path):
    assert "end of training" in describe_adapter(tmp_path)
    (tmp_path / "training_step.json").write_text('{"step": 25, "max_steps": 150}')
    assert "step 25 of 150" in describe_adapter(tmp_path) and "resume" in describe_adapter(tmp_path)
    (tmp_path / "training_step.json").write_text('{"step": 150, "max_steps": 150}')
    assert describe_adapter(tmp_path) == "The adapter holds all 150 training steps."


def test_resume_message_says_what_happens(tmp_path):
    assert describe_resume(None, 30, 10).startswith("Starting a new run of 30 steps")
    ckpt = tmp_path / "checkpoint-20"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text('{"global_step": 20}')
    assert "continues at step 21 of 30" in describe_resume(ckpt, 30, 10)
    assert "ends at once" in describe_resume(ckpt, 20, 10)
    assert latest_checkpoint(tmp_path / "nothing-here") is None
    with pytest.raises(FileNotFoundError, match="run notebook 05"):
        load_log_history(tmp_path)


# ---- a real run: crash after step 3, resume, finish ----------------------------------------

MAX_STEPS, SAVE_EVERY, CRASH_AT = 4, 2, 3


def distinct_characters_reward(completions, **kwargs) -> list[float]:
    """A dense reward for the test only: the random smoke model rarely triggers the course's
    rewards in a 4-step run, and with zero reward spread the gradient (and Adam's state) would
    be exactly 0, which would make the "weights changed" and "optimizer restored" checks vacuous.
    """
    from helpers.rewards import completion_text

    return [len(set(completion_text(c))) / 10 for c in completions]


def load_smoke_model():
    from unsloth import FastLanguageModel

    from helpers.loading import load_kwargs, lora_kwargs

    model, tokenizer = FastLanguageModel.from_pretrained(**load_kwargs(SMOKE))
    return FastLanguageModel.get_peft_model(model, **lora_kwargs(SMOKE)), tokenizer


def lora_weights(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


@pytest.fixture(scope="module")
def crashed_and_resumed(tmp_path_factory):
    """Train, crash after step 3, resume in a fresh model; return what the checks need."""
    import torch
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from helpers.callbacks import AdapterCheckpoint, CompletionSampler, LivePlot, StepTimer
    from helpers.data import load_gsm8k, to_grpo_example
    from helpers.hardware import detect_hardware, use_one_cpu_thread
    from helpers.resume import train_or_resume
    from helpers.rewards import REWARD_FUNCS, REWARD_WEIGHTS

    class Disconnect(TrainerCallback):
        """Kills the run right after step 3 is logged: step 3 is not in any checkpoint."""

        def on_log(self, args, state, control, **kwargs):
            if state.global_step == CRASH_AT:
                raise KeyboardInterrupt("simulated Colab disconnect")

    class OptimizerAtStart(TrainerCallback):
        """Copies the optimizer state when training (re)starts: after a resume loaded it."""

        def __init__(self):
            self.state = None

        def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
            self.state = {k: {n: t.clone() for n, t in v.items() if torch.is_tensor(t)}
                          for k, v in optimizer.state_dict()["state"].items()}

    use_one_cpu_thread(detect_hardware())
    run_dir = Path(tmp_path_factory.mktemp("run"))
    data = load_gsm8k("train", SMOKE, limit=16).map(to_grpo_example, remove_columns=["question"])

    def trainer_for(model, tokenizer, *callbacks):
        config = make_grpo_config(
            SMOKE, detect_hardware(), run_dir / "checkpoints", max_steps=MAX_STEPS,
            save_steps=SAVE_EVERY, max_completion_length=16, reward_weights=[*REWARD_WEIGHTS, 1.0],
        )
        trainer = GRPOTrainer(
            model=model, processing_class=tokenizer, args=config,
            reward_funcs=[*REWARD_FUNCS, distinct_characters_reward],
            train_dataset=data,
            callbacks=[
                LivePlot(run_dir), AdapterCheckpoint(run_dir, tokenizer), StepTimer(), *callbacks
            ],
        )
        sampler = CompletionSampler(trainer, run_dir, every=1)
        trainer.add_callback(sampler)
        return trainer, sampler

    model, tokenizer = load_smoke_model()
    initial = lora_weights(model)
    first, _ = trainer_for(model, tokenizer, Disconnect())
    with pytest.raises(KeyboardInterrupt):
        train_or_resume(first)
    crashed_log = list(first.state.log_history)
    adapter_after_crash = adapter_files(run_dir / "adapter")

    model, tokenizer = load_smoke_model()  # a new session: nothing survives but the disk
    probe = OptimizerAtStart()
    second, sampler = trainer_for(model, tokenizer, probe)
    train_or_resume(second)
    final = lora_weights(model)

    model, tokenizer = load_smoke_model()  # a third session, after the run finished
    third, _ = trainer_for(model, tokenizer)
    train_or_resume(third)
    return {
        "run_dir": run_dir, "crashed_log": crashed_log, "trainer": second, "probe": probe,
        "sampler": sampler, "initial": initial, "final": final,
        "third": third, "reloaded": lora_weights(model),
        "adapter_after_crash": adapter_after_crash,
    }


def adapter_files(folder: Path) -> dict:
    """The saved adapter's tensors and its step note, read back from disk."""
    import json

    from safetensors.torch import load_file

    return {
        "tensors": load_file(folder / "adapter_model.safetensors"),
        "step": json.loads((folder / "training_step.json").read_text()),
    }


def test_the_adapter_is_saved_at_each_checkpoint(crashed_and_resumed):
    """After a crash at step 3, run/adapter holds checkpoint-2's LoRA weights, labelled step 2."""
    from safetensors.torch import load_file

    saved = crashed_and_resumed["adapter_after_crash"]
    assert saved["step"] == {"step": SAVE_EVERY, "max_steps": MAX_STEPS}
    checkpoint = crashed_and_resumed["run_dir"] / "checkpoints" / f"checkpoint-{SAVE_EVERY}"
    trainer_copy = load_file(checkpoint / "adapter_model.safetensors")
    assert saved["tensors"].keys() == trainer_copy.keys() and saved["tensors"]
    assert all(torch_equal(saved["tensors"][k], trainer_copy[k]) for k in trainer_copy)
    final = adapter_files(crashed_and_resumed["run_dir"] / "adapter")
    assert final["step"]["step"] == MAX_STEPS
    assert not any(torch_equal(final["tensors"][k], trainer_copy[k]) for k in trainer_copy)


def test_step_time_is_logged_for_every_step(crashed_and_resumed):
    log = crashed_and_resumed["trainer"].state.log_history
    times = [e["time/step_seconds"] for e in log if "loss" in e and e["step"] > SAVE_EVERY]
    assert len(times) == MAX_STEPS - SAVE_EVERY and all(t > 0 for t in times)


def test_step_count_continues_after_the_crash(crashed_and_resumed):
    steps = [e["step"] for e in crashed_and_resumed["crashed_log"] if "loss" in e]
    assert steps == [1, 2, 3]
    trainer = crashed_and_resumed["trainer"]
    assert trainer.state.global_step == MAX_STEPS
    resumed = [e["step"] for e in trainer.state.log_history if "loss" in e]
    assert resumed == list(range(1, MAX_STEPS + 1)), "each step logged exactly once"


def test_no_log_entries_before_the_checkpoint_are_lost(crashed_and_resumed):
    before = [e for e in crashed_and_resumed["crashed_log"] if e["step"] <= SAVE_EVERY]
    after = crashed_and_resumed["trainer"].state.log_history[: len(before)]
    assert after == before
    saved = load_log_history(crashed_and_resumed["run_dir"])
    assert [e["step"] for e in saved if "loss" in e] == list(range(1, MAX_STEPS + 1))


def test_optimizer_state_is_restored_from_the_checkpoint(crashed_and_resumed):
    import torch

    checkpoint = crashed_and_resumed["run_dir"] / "checkpoints" / f"checkpoint-{SAVE_EVERY}"
    saved = torch.load(checkpoint / "optimizer.pt", weights_only=False)["state"]
    loaded = crashed_and_resumed["probe"].state
    assert saved and loaded.keys() == saved.keys()
    assert any(t["exp_avg"].abs().sum() > 0 for t in saved.values()), "Adam never moved"
    for key, tensors in saved.items():
        assert torch.equal(loaded[key]["exp_avg"], tensors["exp_avg"])
        assert torch.equal(loaded[key]["exp_avg_sq"], tensors["exp_avg_sq"])
        assert int(loaded[key]["step"]) == SAVE_EVERY


def test_lora_weights_changed(crashed_and_resumed):
    initial, final = crashed_and_resumed["initial"], crashed_and_resumed["final"]
    changed = [n for n in initial if not torch_equal(initial[n], final[n])]
    assert len(changed) >= len(initial) // 2, "training left most LoRA weights untouched"


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)


def test_log_names_the_reward_functions_and_the_table_is_not_empty(crashed_and_resumed):
    from helpers.logs import reward_names
    from helpers.plotting import completion_table
    from helpers.rewards import REWARD_FUNCS

    log = crashed_and_resumed["trainer"].state.log_history
    names = [f.__name__ for f in REWARD_FUNCS]
    # A resumed log comes back from trainer_state.json with sorted keys: compare as sets.
    assert set(reward_names(log)) == {*names, "distinct_characters_reward"}
    table = completion_table(crashed_and_resumed["sampler"].rows)
    assert not table.empty
    assert {f.__name__ for f in REWARD_FUNCS} <= set(table.columns)
    assert set(table["step"]) >= {1, MAX_STEPS}


def test_rerunning_a_finished_run_loads_it_without_training(crashed_and_resumed):
    third, second = crashed_and_resumed["third"], crashed_and_resumed["trainer"]
    assert third.state.global_step == MAX_STEPS
    assert [e["step"] for e in third.state.log_history if "loss" in e] == list(
        range(1, MAX_STEPS + 1)
    )
    reloaded, final = crashed_and_resumed["reloaded"], crashed_and_resumed["final"]
    assert all(torch_equal(reloaded[n], final[n]) for n in final), "finished LoRA not loaded"
    folder = crashed_and_resumed["run_dir"] / "checkpoints"
    checkpoints = sorted(p.name for p in folder.glob("checkpoint-*"))
    assert checkpoints == [f"checkpoint-{SAVE_EVERY}", f"checkpoint-{MAX_STEPS}"]
    assert second.state.global_step == MAX_STEPS


def test_resuming_with_other_settings_is_refused(crashed_and_resumed):
    from helpers.resume import check_resumable, run_fingerprint

    folder = crashed_and_resumed["run_dir"] / "checkpoints"
    fingerprint = run_fingerprint(crashed_and_resumed["trainer"])
    check_resumable(folder, fingerprint)  # the same run: fine
    with pytest.raises(TrainingConfigError, match=r"learning_rate: 0.001 -> 0.002.*delete"):
        check_resumable(folder, {**fingerprint, "learning_rate": 0.002})


def test_figure_and_log_survive_in_the_run_folder(crashed_and_resumed):
    run_dir = crashed_and_resumed["run_dir"]
    assert (run_dir / "figures" / "training.png").stat().st_size > 10_000
    assert (run_dir / "log_history.json").exists()


# ---- what a whole checkpoint is: pinned to the trainer's own save order ----------------------


def test_the_trainer_writes_trainer_state_last_and_rotates_only_after():
    """helpers.resume.checkpoint_problem relies on this order in transformers 4.56.2's
    Trainer._save_checkpoint; rotation after the save means a whole checkpoint survives it."""
    import inspect

    from transformers import Trainer

    source = inspect.getsource(Trainer._save_checkpoint)
    order = ["self.save_model(", "self._save_optimizer_and_scheduler(", "self._save_rng_state(",
             "self.state.save_to_json(", "self._rotate_checkpoints("]
    positions = [source.index(call) for call in order]
    assert positions == sorted(positions)
    assert grpo_settings(SMOKE, CPU_ONLY, "/tmp/unused")["save_total_limit"] >= 2


def test_several_processes_resume_on_cpu_despite_the_indexed_cpu_device(monkeypatch, tmp_path):
    """transformers 4.56.2 loads the optimizer with map_location=args.device, 'cpu:0' on CPU."""
    import torch
    import torch.serialization as serialization

    from helpers.resume import _restore_on_indexed_cpu, allow_indexed_cpu_locations

    torch.save({"exp_avg": torch.ones(3)}, tmp_path / "optimizer.pt")
    stock = [entry for entry in serialization._package_registry
             if entry[2] is not _restore_on_indexed_cpu]
    monkeypatch.setattr(serialization, "_package_registry", stock)
    with pytest.raises(RuntimeError, match=r"tagged with cpu:0"):
        torch.load(tmp_path / "optimizer.pt", map_location=torch.device("cpu", 0))
    allow_indexed_cpu_locations()
    allow_indexed_cpu_locations()  # registers once
    assert sum(e[2] is _restore_on_indexed_cpu for e in serialization._package_registry) == 1
    loaded = torch.load(tmp_path / "optimizer.pt", map_location=torch.device("cpu", 0))
    assert torch.equal(loaded["exp_avg"], torch.ones(3))


def fake_checkpoint(folder: Path, step: int, rng=("rng_state.pth",)) -> Path:
    import json

    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({"w": torch.ones(2)}, folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text("{}")
    for name in ("optimizer.pt", "scheduler.pt", *rng):
        torch.save({"x": torch.ones(1)}, folder / name)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def test_a_checkpoint_is_whole_only_with_every_file_the_trainer_writes(tmp_path):
    from helpers.resume import checkpoint_problem

    assert checkpoint_problem(fake_checkpoint(tmp_path / "checkpoint-2", 2)) is None
    assert checkpoint_problem(fake_checkpoint(tmp_path / "checkpoint-4", 2)) == (
        "its trainer_state.json is for step 2, not 4")
    ranks = fake_checkpoint(tmp_path / "checkpoint-6", 6, rng=("rng_state_0.pth",
                                                                 "rng_state_1.pth"))
    assert checkpoint_problem(ranks) is None
    (ranks / "rng_state_0.pth").unlink()  # rank 0 was killed before writing its RNG state
    assert "per-process RNG files are incomplete" in checkpoint_problem(ranks)
    bare = fake_checkpoint(tmp_path / "checkpoint-8", 8)
    (bare / "scheduler.pt").unlink()
    assert checkpoint_problem(bare) == "its scheduler.pt is missing"


def test_the_adapter_step_is_read_from_the_whole_adapter_only(tmp_path):
    from helpers.resume import saved_adapter_step

    assert saved_adapter_step(tmp_path) is None
    adapter = fake_checkpoint(tmp_path / "adapter.old", 4)  # a kill mid-swap left only .old
    (adapter / "training_step.json").write_text('{"step": 4, "max_steps": 8}')
    assert saved_adapter_step(tmp_path) == 4


def test_an_fp16_checkpoint_without_its_scaler_is_not_whole(tmp_path):
    """On a T4 (fp16) the trainer saves scaler.pt; a checkpoint that lost it would resume with
    a fresh loss scale, silently. Off fp16 (CPU, bf16) no scaler is written or needed."""
    import json
    import types

    import torch

    checkpoint = tmp_path / "checkpoint-4"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        torch.save({}, checkpoint / name)
    (checkpoint / "adapter_config.json").write_text("{}")
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(1)}, str(checkpoint / "adapter_model.safetensors"))
    fp16 = types.SimpleNamespace(accelerator=types.SimpleNamespace(scaler=object()))
    cpu = types.SimpleNamespace(accelerator=types.SimpleNamespace(scaler=None))
    assert checkpoint_problem(checkpoint, scaler_files(cpu)) is None
    assert checkpoint_problem(checkpoint, scaler_files(fp16)) == "its scaler.pt is missing"
    assert latest_checkpoint(tmp_path, scaler_files(fp16)) is None
    torch.save({}, checkpoint / "scaler.pt")
    assert latest_checkpoint(tmp_path, scaler_files(fp16)) == checkpoint


@pytest.mark.parametrize(("scaler", "now"), [(True, "bf16"), (False, "fp16")],
                         ids=["old T4 run resumed in bf16", "old bf16 run resumed on a T4"])
def test_a_fingerprint_older_than_precision_still_refuses_across_precisions(tmp_path, scaler,
                                                                              now):
    """A run folder whose fingerprint was written before it recorded `precision`: the checkpoints
    themselves say fp16 (scaler.pt) or not, and a resume across that line is refused with nothing
    deleted, instead of pruning them as saves that did not finish."""
    from tests.test_faults import gpu_trainer, precision_run

    folder = precision_run(tmp_path, "fp16" if scaler else "bf16")
    saved = json.loads((folder / "run_fingerprint.json").read_text())
    del saved["precision"]
    (folder / "run_fingerprint.json").write_text(json.dumps(saved))
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    trainer = gpu_trainer(folder, now)
    with pytest.raises(TrainingConfigError, match="nothing was deleted"):
        train_or_resume(trainer)
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    assert trainer.resumed == []


def test_an_old_fingerprint_without_a_scaler_resumes_in_bf16_or_fp32(tmp_path):
    from tests.test_faults import gpu_trainer, precision_run

    folder = precision_run(tmp_path, "bf16")
    saved = json.loads((folder / "run_fingerprint.json").read_text())
    del saved["precision"]
    (folder / "run_fingerprint.json").write_text(json.dumps(saved))
    trainer = gpu_trainer(folder, "bf16")
    assert train_or_resume(trainer) == "trained"
    assert trainer.resumed == [str(folder / "checkpoint-4")]


def test_a_rerun_of_the_same_trainer_starts_a_fresh_generation_batch(tmp_path):
    """Exercise 3 reruns the same trainer object after a stop. trl 0.22.2 sets `_step` and
    `_buffered_inputs` in __init__ only and regenerates when `_step % generate_every == 0`, so
    after a stop mid-step the rerun would train on the stopped step's old completions; the
    rerun must see what a fresh process sees."""
    from collections import defaultdict

    from tests.test_faults import gpu_trainer

    trainer = gpu_trainer(tmp_path / "checkpoints", "fp32")
    seen = []
    trainer._step, trainer._buffered_inputs = 6, ["stale micro-batch"] * 4  # stopped mid-step
    trainer._metrics = {"train": defaultdict(list, {"reward": [0.5]}), "eval": defaultdict(list)}
    trainer.train = lambda resume_from_checkpoint=None: seen.append(
        (trainer._step, trainer._buffered_inputs, dict(trainer._metrics["train"])))
    train_or_resume(trainer)
    assert seen == [(0, None, {})]
