"""A cell stopped inside a vLLM generate, then run again: notebook 05's Exercise 3 on a GPU.

On a GPU a rollout or a held-out score is most of a step, so the stop button usually lands inside
vLLM's `LLM.generate`, which leaves its requests in unsloth's in-process engine (vLLM 0.11.2
aborts them only when adding them fails, vllm/entrypoints/llm.py:1595-1613); the next generate
returns their answers first (llm.py:1768). The engine here is tests/vllm_standin.py, which keeps
requests as the pinned vLLM does; the last test checks the pinned source still reads so.
"""

from unsloth import FastLanguageModel  # noqa: I001  (first: unsloth patches trl on import)

import json
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.evaluation import DecodingSettings, generate_vllm
from helpers.paths import ROOT
from tests import vllm_standin as vs
from tests.vllm_sources import require_wheel, wheel_source

VLLM = "0.11.2"


def echo(wave):
    """A model that answers each prompt with its own ids reversed, then stops."""
    return [(list(reversed(r.prompt_token_ids)), "stop") for r in wave]


def decode(ids: list[int]) -> str:
    return "".join(map(chr, ids))


def tokenizer(text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
    return {"input_ids": [ord(c) for c in text]}


def engine_model(at: int | None, max_num_seqs: int = 2) -> types.SimpleNamespace:
    model = types.SimpleNamespace()
    vs.attach(model, vs.LLM(vs.Interrupt(echo, at), decode, max_num_seqs))
    return model


def test_the_stand_in_keeps_a_stopped_generates_requests_and_returns_them_first():
    """What vLLM 0.11.2 does, and what the course must undo."""
    llm = engine_model(at=1).vllm_engine
    with pytest.raises(KeyboardInterrupt):
        llm.generate([{"prompt_token_ids": [1]}, {"prompt_token_ids": [2]},
                      {"prompt_token_ids": [3]}])
    assert llm.llm_engine.get_num_unfinished_requests() == 3
    again = llm.generate([{"prompt_token_ids": [7]}])
    assert [out.request_id for out in again] == ["0", "1", "2", "3"]  # the leftovers first


@pytest.fixture
def vllm(monkeypatch):
    """`from vllm import SamplingParams` finds the stand-in's (vLLM installs beside CUDA only)."""
    monkeypatch.setitem(sys.modules, "vllm", vs.vllm_module())


@pytest.mark.parametrize("samples", [1, 2], ids=["greedy", "n=2 (children under a parent)"])
def test_a_generate_after_a_stopped_one_gets_only_its_own_answers(vllm, capsys, samples):
    """helpers.evaluation.generate_vllm (held-out scores, notebook 06, gpu-check) aborts what a
    stopped call left: before, 'cd' got the three stopped prompts' answers as well, first."""
    model = engine_model(at=1)
    settings = DecodingSettings(max_new_tokens=4, num_samples=samples,
                                temperature=0.0 if samples == 1 else 1.0)
    with pytest.raises(KeyboardInterrupt):
        generate_vllm(model, tokenizer, ["ab", "xy", "zw"], settings, None, progress=False)
    (answers,) = generate_vllm(model, tokenizer, ["cd"], settings, None, progress=False)
    assert [g.text for g in answers] == ["dc"] * samples
    engine = model.vllm_engine.llm_engine
    assert not engine.has_unfinished_requests() and not engine.output_processor.parent_requests
    assert len(engine.aborted) == 3 * samples  # every stopped (child) request reached the core
    assert f"vLLM still held {3 * samples} unfinished request(s)" in capsys.readouterr().out


def test_nothing_is_aborted_without_vllm_or_without_leftovers(capsys):
    from helpers.loading import abort_unfinished

    assert abort_unfinished(types.SimpleNamespace()) == 0  # CPU: no engine
    model = engine_model(at=None)
    model.vllm_engine.generate([{"prompt_token_ids": [5]}])
    assert abort_unfinished(model) == 0 and model.vllm_engine.llm_engine.aborted == []
    assert capsys.readouterr().out == ""


# ---- notebook 05, Exercise 3: "Interrupt the training cell (stop button) after a checkpoint,
# then run it again." ---------------------------------------------------------------------------

def notebook_cell(notebook: str, marker: str) -> str:
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells
                 if c["cell_type"] == "code" and marker in "".join(c["source"])]
    return source


def test_notebook_05_exercise_3_stop_in_a_vllm_call_then_rerun_resumes(tmp_path, vllm, capsys):
    """Notebook 05's run with the held-out scores going through the stand-in engine (as on a
    GPU), the training cell stopped inside the step-2 score, after checkpoint-1; the same cell
    run again resumes from checkpoint-1 and finishes. Before, the rerun's step-2 score got the
    stopped score's 8 answers too: "16 generations for 8 gold answers"."""
    from helpers.grpo_config import make_grpo_config
    from helpers.grpo_run import build_trainer
    from helpers.hardware import detect_hardware
    from helpers.loading import load_kwargs, lora_kwargs
    from helpers.logs import HELDOUT_KEY
    from helpers.profiles import PROFILES
    from helpers.run_folder import RunFolder

    profile = replace(PROFILES["smoke"], heldout_during_training=8, max_completion_length=24)
    run = RunFolder(tmp_path)
    model, tok = FastLanguageModel.from_pretrained(**load_kwargs(profile))
    model = FastLanguageModel.get_peft_model(model, **lora_kwargs(profile))
    # One wave a score (8 answers): steps 0 and 1 are scored, the stop lands in step 2's score.
    vs.attach(model, vs.LLM(vs.Interrupt(vs.hf_runner(model, tok), at=3), tok.decode, 8))
    config = make_grpo_config(profile, detect_hardware(), run.checkpoints, max_steps=3,
                              save_steps=1, per_device_train_batch_size=8)  # one group a step
    trainer = build_trainer(model, tok, config, profile, run)  # held-out: the profile's 8
    cell = notebook_cell("05_grpo_training.ipynb", "result = train_or_resume(trainer)")
    with pytest.raises(KeyboardInterrupt):  # the stop button, inside vLLM
        exec(cell, {"trainer": trainer, "model": model})
    assert [p.name for p in sorted(run.checkpoints.glob("checkpoint-*"))] == ["checkpoint-1"]
    assert model.vllm_engine.llm_engine.get_num_unfinished_requests() == 8
    capsys.readouterr()

    rerun: dict = {"trainer": trainer, "model": model}
    exec(cell, rerun)  # the same cell again, as the exercise says
    said = capsys.readouterr().out
    assert "vLLM still held 8 unfinished request(s)" in said
    assert "RESUMING from checkpoint-1" in said
    assert rerun["result"].global_step == 3
    scored = [(e["step"], e["heldout/n"]) for e in trainer.state.log_history if HELDOUT_KEY in e]
    assert scored == [(step, 8) for step in range(4)]
    solution = notebook_cell("05_grpo_training.ipynb", "are trained twice")
    exec(solution, {"RUN_DIR": run, "config": config})
    assert "At most 0 steps are trained twice (save_steps=1)." in capsys.readouterr().out


# ---- the stand-in against the pinned vLLM -----------------------------------------------------

# (file in the vLLM 0.11.2 wheel, line number, the line, stripped) that vllm_standin.py mirrors.
PINNED_LINES = [
    ("vllm/entrypoints/llm.py", 1595, "try:"),
    ("vllm/entrypoints/llm.py", 1610, "except Exception as e:"),
    ("vllm/entrypoints/llm.py", 1612, "self.llm_engine.abort_request(added_request_ids)"),
    ("vllm/entrypoints/llm.py", 1698, "request_id = str(next(self.request_counter))"),
    ("vllm/entrypoints/llm.py", 1737, "while self.llm_engine.has_unfinished_requests():"),
    ("vllm/entrypoints/llm.py", 1768, "return sorted(outputs, key=lambda x: int(x.request_id))"),
    ("vllm/v1/engine/llm_engine.py", 187,
     "has_unfinished = self.output_processor.has_unfinished_requests()"),
    ("vllm/v1/engine/llm_engine.py", 207,
     "def abort_request(self, request_ids: list[str]) -> None:"),
    ("vllm/v1/engine/llm_engine.py", 210,
     "request_ids = self.output_processor.abort_requests(request_ids)"),
    ("vllm/v1/engine/llm_engine.py", 285, "outputs = self.engine_core.get_output()"),
    ("vllm/v1/engine/output_processor.py", 349,
     "self.request_states: dict[str, RequestState] = {}"),
    ("vllm/v1/engine/output_processor.py", 358, "return len(self.request_states) > 0"),
    ("vllm/v1/engine/output_processor.py", 373,
     "req_state = self.request_states.pop(request_id, None)"),
    ("vllm/v1/engine/output_processor.py", 392,
     "elif parent := self.parent_requests.get(request_id):"),
    ("vllm/v1/engine/parallel_sampling.py", 87, 'child_req_id = f"{index}_{self.request_id}"'),
]


@pytest.mark.network
@pytest.mark.parametrize(("path", "line", "text"), PINNED_LINES,
                         ids=[f"{p.rsplit('/', 1)[1]}:{n}" for p, n, _ in PINNED_LINES])
def test_the_stand_in_follows_the_pinned_vllm(path: str, line: int, text: str):
    require_wheel(VLLM)
    lines = wheel_source(VLLM, path).splitlines()
    found = lines[line - 1].strip()
    assert found == text, (f"{path}:{line} now reads {found!r}: update tests/vllm_standin.py "
                           "and the line numbers it cites")


def test_unsloth_serves_the_engine_from_the_peft_model():
    """abort_unfinished reads `model.vllm_engine`: unsloth sets it on the model it loads and
    copies it onto the PEFT wrapper (the one the trainer and the callbacks hold)."""
    import importlib.util

    package = Path(importlib.util.find_spec("unsloth").submodule_search_locations[0])
    utils = (package / "models" / "_utils.py").read_text()
    assert "model.vllm_engine" in utils and "model.fast_generate" in utils
