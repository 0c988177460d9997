"""Every call the course makes that only a CUDA GPU runs: the list of what CPU CI cannot execute.

On a machine without a GPU, unsloth switches to a separate backend (stock transformers + peft +
trl), so CI never runs unsloth's GPU loader, its patched GRPOConfig/GRPOTrainer, vLLM, or the
merge and GGUF exports. `GPU_CALLS` lists each such call site; tests/test_gpu_contracts.py checks
the keyword arguments and attributes of every entry against the pinned sources (unsloth's GPU
modules parsed with `ast`, vLLM 0.11.2 read from its wheel), and fails when a call site in
helpers/, scripts/ or notebooks/ has no entry. Entries are keyed by file + function + callee + which
call of that callee it is there (1st, 2nd, ...), not by line, so edits that move code do not break
them, and two calls of one name in one notebook are two entries. Print the table with its lines:

    python -m tools.gpu_calls
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from helpers.paths import ROOT

SCANNED = ("helpers", "tools", "scripts", "notebooks")
NOTEBOOK_SCOPE = "<cell>"  # code at a notebook cell's top level
MODULE_SCOPE = "<module>"  # code at a .py file's top level
VLLM_T4 = "0.11.2"  # the vLLM a T4 gets (helpers.hardware.vllm_requirement); read from its wheel

# Methods unsloth attaches to a model on a GPU, and classes that only exist there (vLLM).
GPU_ONLY_METHODS = frozenset({
    "fast_generate", "load_lora", "save_lora", "save_pretrained_merged", "save_pretrained_gguf",
    "push_to_hub_merged", "push_to_hub_gguf",
})
GPU_ONLY_NAMES = frozenset({
    "SamplingParams", "LoRARequest", "LLM", "GRPOConfig", "GRPOTrainer",
    "FastLanguageModel.from_pretrained", "FastLanguageModel.get_peft_model",
    "FastLanguageModel.for_inference", "FastLanguageModel.for_training",
    "FastModel.from_pretrained", "FastModel.get_peft_model",
    "torch.cuda.mem_get_info",  # raises without CUDA; unsloth sizes vLLM from what it says
})
# Methods that run unsloth's GPU code when called on its trainer (`trainer`, `kl_trainer`: its
# patched training loop and loss) or on its model (`model`: rebound save and generate).
GPU_ONLY_TRAINER_METHODS = frozenset({"train", "_load_from_checkpoint"})
GPU_ONLY_MODEL_METHODS = frozenset({"save_pretrained", "generate"})
# Methods of vLLM's engine (model.vllm_engine.llm_engine), whatever the receiver is called.
VLLM_ENGINE_METHODS = frozenset({"abort_request", "has_unfinished_requests"})


@dataclass(frozen=True)
class GpuCall:
    """One GPU-only call site and the pinned code that runs it there."""

    file: str  # relative to the course root
    function: str  # the enclosing def (Class.method), or <cell> / <module>
    callee: str  # as written at the call site
    target: tuple[str, ...]  # "path/in/package.py::Qualified.name" whose parameters must match
    kwargs: tuple[str, ...]  # keyword names passed, with ** spreads resolved for GPU profiles
    positional: int = 0  # positional arguments passed
    bound: bool = False  # the target's first parameter is bound (self, or unsloth's model)
    reads: tuple[str, ...] = ()  # "name@path::Owner": attributes the course reads, where defined
    read_in: str = ""  # "file::function" that reads them, when not the call's own function
    why: str = ""  # what runs there on a GPU that CPU CI never runs
    nth: int = 1  # which call of `callee` in `function` (in reading order)
    # "path::Class" whose attributes the target's **kwargs accepts (generate: GenerationConfig)
    kwargs_into: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.file, self.function, self.callee, self.nth)


@dataclass(frozen=True)
class StockCall:
    """A call to a GPU-only name that runs the same stock code everywhere (so CI covers it)."""

    file: str
    function: str
    callee: str
    why: str
    nth: int = 1

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.file, self.function, self.callee, self.nth)


LOAD_KWARGS = (
    "model_name", "max_seq_length", "load_in_4bit", "fast_inference", "max_lora_rank",
    "gpu_memory_utilization",
)
LORA_KWARGS = ("r", "lora_alpha", "target_modules", "use_gradient_checkpointing", "random_state")
# helpers.grpo_config.grpo_settings' keys: what notebook 05's GRPOConfig(...) cell passes too.
GRPO_SETTINGS_KWARGS = (
    "output_dir", "num_generations", "per_device_train_batch_size",
    "gradient_accumulation_steps", "max_prompt_length", "max_completion_length",
    "learning_rate", "lr_scheduler_type", "warmup_ratio", "optim", "max_grad_norm", "max_steps",
    "beta", "loss_type", "scale_rewards", "epsilon", "epsilon_high", "mask_truncated_completions",
    "num_iterations", "weight_decay", "temperature", "bf16", "fp16", "use_cpu", "logging_steps",
    "save_total_limit", "report_to", "push_to_hub", "log_completions", "seed", "reward_weights",
    "save_steps",
)
GRPO_KWARGS = (
    *GRPO_SETTINGS_KWARGS,
    "save_strategy",  # the callers' overrides (helpers/lab/engine.py)
    "importance_sampling_level",  # notebook 11's GSPO arms (helpers.lab.KNOBS)
    # scripts/train_grpo.py's overrides (several processes, or a vLLM server)
    "ddp_find_unused_parameters", "use_vllm", "vllm_mode", "vllm_server_host", "vllm_server_port",
)
TRAINER_KWARGS = (
    "model", "processing_class", "reward_funcs", "args", "train_dataset", "callbacks",
)

FROM_PRETRAINED = ("unsloth/models/loader.py::FastLanguageModel.from_pretrained",)
GET_PEFT_MODEL = ("unsloth/models/llama.py::FastLlamaModel.get_peft_model",)
FOR_INFERENCE = ("unsloth/models/llama.py::FastLlamaModel.for_inference",)
GRPO_CONFIG = (
    "trl/trainer/grpo_config.py::GRPOConfig",
    "transformers/training_args.py::TrainingArguments",
)
GRPO_TRAINER = ("trl/trainer/grpo_trainer.py::GRPOTrainer",)
# unsloth sets these on the model it loads with fast_inference=True ("*": on any object), and
# copies them onto its PEFT wrapper.
FAST_GENERATE_SET = (
    "fast_generate@unsloth/models/llama.py::*", "fast_generate@unsloth/models/_utils.py::*",
)
LOAD_LORA_SET = (
    "vllm_engine@unsloth/models/llama.py::*", "vllm_engine@unsloth/models/_utils.py::*",
    "load_lora@unsloth/models/_utils.py::*",
)
TRAIN = ("transformers/trainer.py::Trainer.train",)
LOAD_CHECKPOINT = ("transformers/trainer.py::Trainer._load_from_checkpoint",)
# unsloth rebinds model.save_pretrained to unsloth_model_save_pretrained(self, *args, **kwargs),
# which hands everything on to the PEFT model's own save_pretrained.
SAVE_PRETRAINED = ("peft/peft_model.py::PeftModel.save_pretrained",)
# unsloth's model.generate is unsloth_fast_generate(self, *args, **kwargs): it hands everything
# on to transformers' generate, whose **kwargs become GenerationConfig fields or model inputs.
GENERATE = ("transformers/generation/utils.py::GenerationMixin.generate",
            "transformers/models/qwen2/modeling_qwen2.py::Qwen2ForCausalLM.forward")
GENERATION_CONFIG = ("transformers/generation/configuration_utils.py::GenerationConfig",)
HF_GENERATE_KWARGS = ("max_new_tokens", "do_sample", "num_return_sequences", "pad_token_id",
                      "temperature", "top_p", "input_ids", "attention_mask")
MEM_GET_INFO = ("torch/cuda/memory.py::mem_get_info",)
LLM_ENGINE = "vllm/v1/engine/llm_engine.py::LLMEngine"
OUTPUT_PROCESSOR = "vllm/v1/engine/output_processor.py::OutputProcessor"
# What abort_unfinished reads on the way to the engine's unfinished requests.
ENGINE_READS = (
    "vllm_engine@unsloth/models/_utils.py::*", "llm_engine@vllm/entrypoints/llm.py::LLM",
    f"output_processor@{LLM_ENGINE}", f"request_states@{OUTPUT_PROCESSOR}",
    f"parent_requests@{OUTPUT_PROCESSOR}",
)
ABORT_WHY = ("vLLM's in-process engine: a stopped generate leaves its requests there "
             "(vllm/entrypoints/llm.py:1595-1613), and they are aborted before the next call")
TRAIN_WHY = ("unsloth's patched training loop and GRPO loss (unsloth_zoo's grpo_compute_loss), "
             "generating with vLLM")
SAVE_WHY = "unsloth rebinds save_pretrained on its model (unsloth_model_save_pretrained)"
GENERATE_WHY = "unsloth's fast generate (unsloth_fast_generate) after for_inference"
LOAD_WHY = "unsloth's GPU loader (FastQwen2Model, bitsandbytes CUDA); fast_inference starts vLLM"
LORA_WHY = "unsloth's GPU LoRA patching (fused kernels, its gradient checkpointing)"
CONFIG_WHY = "unsloth rewrites trl's GRPOConfig on GPU: it drops unknown keywords with a warning"
TRAINER_WHY = "unsloth's patched GRPOTrainer, generating with the model's vLLM engine"

GPU_CALLS: list[GpuCall] = [
    GpuCall("helpers/loading.py", "load_trained", "FastLanguageModel.from_pretrained",
            FROM_PRETRAINED, (*LOAD_KWARGS, "dtype"),
            why=LOAD_WHY + " (adapter folder: PEFT branch)"),
    GpuCall("helpers/loading.py", "load_trained", "FastLanguageModel.for_inference",
            FOR_INFERENCE, (), positional=1, why="unsloth's GPU inference mode"),
    GpuCall("helpers/export.py", "merge_to_16bit", "model.save_pretrained_merged",
            ("unsloth/save.py::unsloth_generic_save_pretrained_merged",), ("save_method",),
            positional=2, bound=True,
            why="dequantizes the 4-bit base on GPU and downloads the 16-bit base to merge into"),
    GpuCall("helpers/export.py", "export_gguf", "model.save_pretrained_gguf",
            ("unsloth/save.py::unsloth_save_pretrained_gguf",), ("quantization_method",),
            positional=2, bound=True, why="merge + llama.cpp conversion; GPU profiles only"),
    GpuCall("helpers/evaluation.py", "generate_vllm", "SamplingParams",
            ("vllm/sampling_params.py::SamplingParams",),
            ("temperature", "top_p", "n", "max_tokens", "seed"),
            why="vLLM is not installed on CPU"),
    GpuCall("helpers/evaluation.py", "generate_vllm", "model.fast_generate",
            ("vllm/entrypoints/llm.py::LLM.generate",),
            ("sampling_params", "lora_request", "use_tqdm"), positional=1, bound=True,
            reads=("outputs@vllm/outputs.py::RequestOutput",
                   "text@vllm/outputs.py::CompletionOutput",
                   "token_ids@vllm/outputs.py::CompletionOutput",
                   "finish_reason@vllm/outputs.py::CompletionOutput", *FAST_GENERATE_SET),
            why="unsloth's model.fast_generate is vLLM's LLM.generate"),
    GpuCall("helpers/evaluation.py", "generate_side", "model.load_lora",
            ("unsloth_zoo/vllm_utils.py::load_lora",), (), positional=1, bound=True,
            reads=LOAD_LORA_SET,
            why="builds a vLLM LoRARequest for the saved adapter"),
    GpuCall("helpers/grpo_config.py", "make_grpo_config", "GRPOConfig", GRPO_CONFIG, GRPO_KWARGS,
            reads=("per_device_train_batch_size@transformers/training_args.py::"
                   "TrainingArguments",),
            why=CONFIG_WHY),
    GpuCall("helpers/loading.py", "load_unsloth", "FastLanguageModel.from_pretrained",
            FROM_PRETRAINED, LOAD_KWARGS, why=LOAD_WHY),
    GpuCall("helpers/loading.py", "load_unsloth", "FastLanguageModel.get_peft_model",
            GET_PEFT_MODEL, LORA_KWARGS, positional=1, why=LORA_WHY),
    GpuCall("helpers/grpo_run.py", "build_trainer", "GRPOTrainer", GRPO_TRAINER, TRAINER_KWARGS,
            reads=("_logs@trl/trainer/grpo_trainer.py::GRPOTrainer",
                   "reward_func_names@trl/trainer/grpo_trainer.py::GRPOTrainer",
                   "reward_weights@trl/trainer/grpo_trainer.py::GRPOTrainer"),
            read_in="helpers/callbacks.py::CompletionSampler.capture",
            why=TRAINER_WHY + " (the script, the smoke runs and make gpu-check)"),
    GpuCall("notebooks/01_load_4bit_lora.ipynb", NOTEBOOK_SCOPE,
            "FastLanguageModel.from_pretrained", FROM_PRETRAINED, LOAD_KWARGS, why=LOAD_WHY),
    GpuCall("notebooks/01_load_4bit_lora.ipynb", NOTEBOOK_SCOPE,
            "FastLanguageModel.from_pretrained", FROM_PRETRAINED, LOAD_KWARGS, nth=2,
            why=LOAD_WHY + " (Solution 2: 16-bit, fast_inference off, so no second vLLM)"),
    GpuCall("notebooks/01_load_4bit_lora.ipynb", NOTEBOOK_SCOPE,
            "FastLanguageModel.get_peft_model", GET_PEFT_MODEL, LORA_KWARGS, positional=1,
            why=LORA_WHY),
    GpuCall("notebooks/01_load_4bit_lora.ipynb", NOTEBOOK_SCOPE,
            "FastLanguageModel.for_inference", FOR_INFERENCE, (), positional=1,
            why="unsloth's GPU inference mode"),
    GpuCall("notebooks/05_grpo_training.ipynb", NOTEBOOK_SCOPE,
            "FastLanguageModel.from_pretrained", FROM_PRETRAINED, LOAD_KWARGS, why=LOAD_WHY),
    GpuCall("notebooks/05_grpo_training.ipynb", NOTEBOOK_SCOPE,
            "FastLanguageModel.get_peft_model", GET_PEFT_MODEL, LORA_KWARGS, positional=1,
            why=LORA_WHY),
    GpuCall("notebooks/05_grpo_training.ipynb", NOTEBOOK_SCOPE, "GRPOConfig", GRPO_CONFIG,
            GRPO_SETTINGS_KWARGS, why=CONFIG_WHY + " (the config cell)"),
    GpuCall("notebooks/05_grpo_training.ipynb", NOTEBOOK_SCOPE, "GRPOTrainer", GRPO_TRAINER,
            TRAINER_KWARGS,
            reads=("_logs@trl/trainer/grpo_trainer.py::GRPOTrainer",
                   "reward_func_names@trl/trainer/grpo_trainer.py::GRPOTrainer",
                   "reward_weights@trl/trainer/grpo_trainer.py::GRPOTrainer"),
            read_in="helpers/callbacks.py::CompletionSampler.capture", why=TRAINER_WHY),
    GpuCall("notebooks/05_grpo_training.ipynb", NOTEBOOK_SCOPE, "GRPOTrainer", GRPO_TRAINER,
            TRAINER_KWARGS, nth=2, why=TRAINER_WHY + " (Solution 2, beta > 0)"),
    # make gpu-check runs the t4 path's calls for real on a GPU (it refuses on CPU).
    GpuCall("scripts/gpu_check.py", "PhaseSteps.load_4bit_vllm",
            "FastLanguageModel.from_pretrained", FROM_PRETRAINED, (*LOAD_KWARGS, "dtype"),
            reads=LOAD_LORA_SET[:1], why=LOAD_WHY + " (--precision fp16: dtype=torch.float16)"),
    GpuCall("scripts/gpu_check.py", "PhaseSteps.lora", "FastLanguageModel.get_peft_model",
            GET_PEFT_MODEL, LORA_KWARGS, positional=1, why=LORA_WHY),
    # Before each vLLM call the course makes, and in train_or_resume: a stopped cell's leftovers.
    GpuCall("helpers/loading.py", "abort_unfinished", "engine.has_unfinished_requests",
            (f"{LLM_ENGINE}.has_unfinished_requests",), (), bound=True, reads=ENGINE_READS,
            why=ABORT_WHY),
    GpuCall("helpers/loading.py", "abort_unfinished", "engine.abort_request",
            (f"{LLM_ENGINE}.abort_request",), (), positional=1, bound=True, why=ABORT_WHY),
    # The free-memory query unsloth sizes vLLM's pool from (unsloth_zoo vllm_utils.py:250):
    # checked before a vLLM start, and read by gpu-check's meter. Stock torch (2.9 on the GPU).
    GpuCall("helpers/loading.py", "gpu_memory", "torch.cuda.mem_get_info", MEM_GET_INFO, (),
            why="CUDA only; the room check before a vLLM start (vllm_start_announced)"),
    GpuCall("scripts/gpu_check.py", "cuda_meter.peak", "torch.cuda.mem_get_info", MEM_GET_INFO,
            (), why="CUDA only; a step's peak memory, vLLM's pool included"),
    # Calls of stock names that run unsloth's GPU code on its trainer or model.
    GpuCall("helpers/resume.py", "train_or_resume", "trainer.train", TRAIN,
            ("resume_from_checkpoint",), bound=True, why=TRAIN_WHY),
    GpuCall("notebooks/05_grpo_training.ipynb", NOTEBOOK_SCOPE, "kl_trainer.train", TRAIN, (),
            bound=True, why=TRAIN_WHY + " (Solution 2, beta > 0)"),
    GpuCall("helpers/resume.py", "load_finished_run", "trainer._load_from_checkpoint",
            LOAD_CHECKPOINT, (), positional=1, bound=True,
            why="a private transformers method, called on unsloth's patched trainer"),
    GpuCall("helpers/resume.py", "save_adapter", "model.save_pretrained", SAVE_PRETRAINED, (),
            positional=1, bound=True, why=SAVE_WHY),
    GpuCall("helpers/export.py", "export_adapter", "model.save_pretrained", SAVE_PRETRAINED, (),
            positional=1, bound=True, why=SAVE_WHY),
    # The training notebook's held-out accuracy: on a GPU the adapter goes to vLLM through a folder.
    GpuCall("helpers/callbacks.py", "HeldOutAccuracy.measure", "model.save_pretrained",
            SAVE_PRETRAINED, (), positional=1, bound=True, why=SAVE_WHY),
    GpuCall("helpers/evaluation.py", "generate_hf", "model.generate", GENERATE,
            HF_GENERATE_KWARGS, bound=True, kwargs_into=GENERATION_CONFIG,
            why=GENERATE_WHY + " (notebook 07 loads without vLLM)"),
    GpuCall("notebooks/01_load_4bit_lora.ipynb", NOTEBOOK_SCOPE, "model.generate", GENERATE,
            ("input_ids", "attention_mask", "max_new_tokens", "do_sample"), bound=True,
            kwargs_into=GENERATION_CONFIG, why=GENERATE_WHY + " (greedy)"),
    GpuCall("notebooks/01_load_4bit_lora.ipynb", NOTEBOOK_SCOPE, "model.generate", GENERATE,
            ("input_ids", "attention_mask", "max_new_tokens", "do_sample", "temperature"),
            bound=True, kwargs_into=GENERATION_CONFIG, why=GENERATE_WHY + " (sampled)", nth=2),
]

TRL_PROOF = ("notebook 08's proof against trl never imports unsloth: stock trl on every machine, "
             "CI included")
SMOKE = "always the smoke profile (the tiny offline model): CI runs this very call on CPU"
PLAIN = ("a plain transformers model that unsloth never loaded (notebooks 07, 08 and 09): the "
         "same stock code on every machine")
STOCK_CALLS: list[StockCall] = [
    StockCall("helpers/trl_compare.py", "compare_with_trl", "GRPOConfig", TRL_PROOF),
    StockCall("helpers/trl_compare.py", "compare_with_trl", "GRPOTrainer", TRL_PROOF),
    StockCall("helpers/lab/engine.py", "train_and_score", "trainer.train", SMOKE),
    StockCall("tools/smoke_recipe.py", "build_smoke_model", "model.save_pretrained",
              "builds the smoke model with plain transformers, on CPU everywhere"),
    StockCall("helpers/export.py", "transformers_generate", "model.generate", PLAIN),
    StockCall("helpers/grpo_scratch.py", "rollout", "model.generate", PLAIN),
    StockCall("helpers/toy_r1.py", "greedy_answers", "model.generate", PLAIN),
]


@dataclass(frozen=True)
class CallSite:
    """A call to a GPU-only name found in the course's code."""

    file: str
    function: str
    callee: str
    where: str  # "line 171" or "cell 13, line 3": for humans only
    kwargs: tuple[str, ...]  # literal keyword names
    spreads: tuple[str, ...]  # the `**expr` sources, unparsed
    positional: int
    node: ast.Call = field(repr=False, compare=False)
    scope: ast.AST = field(repr=False, compare=False)  # the enclosing def, cell or module
    nth: int = 1  # which call of `callee` in `function` (in reading order)

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.file, self.function, self.callee, self.nth)


def dotted(node: ast.AST) -> str:
    """'a.b.c' for a Name/Attribute chain; '?' stands in for anything else (a call, a subscript)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return "?"


def is_gpu_only(callee: str) -> bool:
    """True when a call to `callee` runs GPU-only code on a GPU profile."""
    receiver, _, method = callee.rpartition(".")
    receiver = receiver.rsplit(".", 1)[-1]
    return (callee in GPU_ONLY_NAMES or method in GPU_ONLY_METHODS or method in VLLM_ENGINE_METHODS
            or (receiver.endswith("trainer") and method in GPU_ONLY_TRAINER_METHODS)
            or (receiver == "model" and method in GPU_ONLY_MODEL_METHODS))


def numbered(sites: list[CallSite]) -> list[CallSite]:
    """The sites with `nth` set: the how-manieth call of its callee in its function it is."""
    seen: dict[tuple[str, str, str], int] = {}
    out = []
    for site in sites:
        key = (site.file, site.function, site.callee)
        seen[key] = seen.get(key, 0) + 1
        out.append(replace(site, nth=seen[key]))
    return out


def _walk_scopes(tree: ast.AST, scope_name: str) -> Iterator[tuple[str, ast.AST, ast.Call]]:
    """(enclosing function's qualified name, that scope's node, call) for every call."""

    def visit(node: ast.AST, name: str, scope: ast.AST, prefix: str) -> Iterator:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = f"{prefix}{child.name}"
                yield from visit(child, qual, child, f"{qual}.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, name, scope, f"{prefix}{child.name}.")
            else:
                if isinstance(child, ast.Call):
                    yield name, scope, child
                yield from visit(child, name, scope, prefix)

    yield from visit(tree, scope_name, tree, "")


def _site(file: str, function: str, scope: ast.AST, call: ast.Call, where: str) -> CallSite:
    return CallSite(
        file=file, function=function, callee=dotted(call.func), where=where,
        kwargs=tuple(k.arg for k in call.keywords if k.arg is not None),
        spreads=tuple(ast.unparse(k.value) for k in call.keywords if k.arg is None),
        positional=len(call.args), node=call, scope=scope,
    )


def scan_source(source: str, file: str, scope_name: str = MODULE_SCOPE,
                wanted: Callable[[str], bool] = is_gpu_only) -> list[CallSite]:
    """Every call to a `wanted` callee (by default: GPU-only) in one Python source text, in
    reading order (numbered per file by scan_file)."""
    tree = ast.parse(source)
    sites = [
        _site(file, function, scope, call, f"line {call.lineno}")
        for function, scope, call in _walk_scopes(tree, scope_name)
        if wanted(dotted(call.func))
    ]
    return sorted(sites, key=lambda s: (s.node.lineno, s.node.col_offset))


def notebook_code(path: Path) -> list[tuple[int, str]]:
    """(cell index, source) of each code cell, IPython magics and shell lines blanked out."""
    cells = json.loads(path.read_text())["cells"]
    found = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        text = "".join(cell["source"])
        found.append((index, re.sub(r"(?m)^\s*[%!].*$", "", text)))
    return found


def scan_file(path: Path, root: Path = ROOT,
              wanted: Callable[[str], bool] = is_gpu_only) -> list[CallSite]:
    """Every wanted call in a .py file or in the code cells of a notebook."""
    file = path.relative_to(root).as_posix()
    if path.suffix == ".py":
        return numbered(scan_source(path.read_text(), file, MODULE_SCOPE, wanted))
    sites, run_so_far = [], ast.Module(body=[], type_ignores=[])
    for index, source in notebook_code(path):
        # A cell's top-level code sees what earlier cells defined: its scope is the notebook so far.
        run_so_far = ast.Module(body=[*run_so_far.body, *ast.parse(source).body], type_ignores=[])
        for site in scan_source(source, file, NOTEBOOK_SCOPE, wanted):
            line = site.where.removeprefix("line ")
            scope = run_so_far if site.function == NOTEBOOK_SCOPE else site.scope
            sites.append(replace(site, where=f"cell {index}, line {line}", scope=scope))
    return numbered(sites)


def course_files(root: Path = ROOT) -> list[Path]:
    """The scanned files: helpers/, scripts/ and notebooks/ (not tests, not bench)."""
    files: list[Path] = []
    for folder in SCANNED:
        files += sorted((root / folder).rglob("*.py")) + sorted((root / folder).glob("*.ipynb"))
    return [f for f in files if ".ipynb_checkpoints" not in f.parts]


def scan_course(root: Path = ROOT, wanted: Callable[[str], bool] = is_gpu_only) -> list[CallSite]:
    """Every call site of a wanted callee (by default: GPU-only) in the course."""
    return [site for path in course_files(root) for site in scan_file(path, root, wanted)]


def render_table(sites: list[CallSite]) -> str:
    """The GPU_CALLS table as markdown, with where each entry is today."""
    where = {site.key: site.where for site in sites}
    rows = [
        "| file:line | function | callee | pinned target | keywords | runs on GPU only because |",
        "|---|---|---|---|---|---|",
    ]
    for call in GPU_CALLS:
        target = "<br>".join(call.target)
        callee = call.callee if call.nth == 1 else f"{call.callee} (call {call.nth})"
        rows.append(
            f"| {call.file} ({where.get(call.key, 'MISSING')}) | {call.function} | `{callee}` | "
            f"{target} | {', '.join(call.kwargs) or '-'} | {call.why} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print(render_table(scan_course()))
    print(f"\n{len(GPU_CALLS)} GPU-only call sites; {len(STOCK_CALLS)} stock-code calls exempted.")
