"""Committed notebooks: valid, render on GitHub, follow the skeleton, stay in sync with the code."""

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers import course
from helpers.course import COLAB_GPU, notebook_install, notebook_key
from helpers.paths import ROOT
from scripts.sync_notebooks import BOOTSTRAP_TITLE, colab_line, with_forms

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

ABSOLUTE_ARTEFACT_PATH = re.compile(r"/[\w./-]+/(\.cache|runs|models)/")
SECRET = re.compile(r"(hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9]{20,}|api[_-]?key\s*=\s*['\"][^'\"]+)")
# A home directory, or a file inside a virtual environment or an installed package (a warning's
# location, a traceback): what a machine leaks into an output when a path is printed in full.
LOCAL_PATH = re.compile(r"(?<![\w.])(?:/root/|/home/[^/\s\"']+/|/Users/[^/\s\"']+/)"
                        r"|[^\s\"']*/(?:\.venv|site-packages)/")


def local_paths(text: str, root: Path = ROOT) -> list[str]:
    """The machine-specific paths in `text`: home folders, installs, and the course root itself."""
    found = [m.group(0) for m in LOCAL_PATH.finditer(text)]
    return found + ([str(root)] if str(root) in text else [])


def test_the_core_notebooks_exist_in_reading_order():
    names = [path.name for path in NOTEBOOKS]
    assert names[:2] == ["00_setup.ipynb", "01_load_4bit_lora.ipynb"]
    assert names == sorted(names)
    assert all(re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", name) for name in names)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
class TestNotebook:
    def test_valid_nbformat_without_widget_state(self, path):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        # Colab stores widget state without a 'state' key, which GitHub refuses to render.
        assert "widgets" not in nb.metadata
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                assert "application/vnd.jupyter.widget-view+json" not in output.get("data", {})

    def test_skeleton(self, path):
        nb = nbformat.read(path, as_version=4)
        first = nb.cells[0]
        assert first.cell_type == "markdown" and first.source.startswith("# ")
        assert "colab-badge.svg" in first.source
        code = [c for c in nb.cells if c.cell_type == "code"]
        # the bootstrap cell, folded on Colab into a form that shows its title only
        assert code[0].source.splitlines()[0] == BOOTSTRAP_TITLE
        assert '{ display-mode: "form" }' in BOOTSTRAP_TITLE
        params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
        assert len(params) == 1 and "PROFILE = None" in params[0].source
        for line in params[0].source.splitlines():  # a Colab form field for every parameter
            if re.match(r"[A-Z][A-Z0-9_]* = ", line):
                assert "  #@param {type:" in line, f"no Colab form: {line}"
        headings = [c.source for c in nb.cells if c.cell_type == "markdown"]
        assert any(re.search(r"^## 1\. ", s, re.M) for s in headings)
        assert any("## Summary" in s for s in headings)
        assert any("## Exercises" in s for s in headings)

    def test_unsloth_comes_before_anything_that_touches_cuda(self, path):
        """On a GPU unsloth sets its memory allocator when imported, which only takes effect
        before CUDA is first used; `start()` asks torch for the GPU, so unsloth comes first."""
        code = [c.source for c in nbformat.read(path, as_version=4).cells
                if c.cell_type == "code"]
        first = next((i for i, s in enumerate(code) if re.search(r"^\s*(from|import) unsloth",
                                                                   s, re.M)), None)
        touches = next((i for i, s in enumerate(code) if "= start(" in s or "torch.cuda" in s),
                       None)
        if first is not None and touches is not None:
            assert first <= touches, (
                f"code cell {touches} starts the session (CUDA) before unsloth is imported in "
                f"code cell {first}: import unsloth first, as notebook 05 does")

    def test_no_secrets_logins_or_hub_pushes_by_default(self, path):
        text = path.read_text()
        assert not SECRET.search(text)
        assert "notebook_login()" not in text
        assert "push_to_hub=True" not in text

    def test_outputs_are_stored_and_error_free(self, path):
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        unexecuted = [c.source[:40] for c in code[1:] if c.execution_count is None]
        assert not unexecuted, f"run `make execute-notebooks`: {unexecuted}"
        for cell in code:
            assert not [o for o in cell.outputs if o.output_type == "error"]
            for output in cell.outputs:  # stored outputs must not show this machine's paths
                assert not ABSOLUTE_ARTEFACT_PATH.search(json.dumps(output)), output


def test_every_notebook_has_one_row_and_every_row_a_notebook():
    keys = [notebook_key(path.name) for path in NOTEBOOKS]
    assert sorted(keys) == sorted(course.NOTEBOOKS), "update helpers/course.py NOTEBOOKS"
    assert {b.install for b in course.NOTEBOOKS.values()} == {"full", "light"}


def colab_gpu_notebooks() -> list[str]:
    """The notebooks whose metadata asks Colab for a GPU runtime."""
    found = []
    for path in NOTEBOOKS:
        metadata = nbformat.read(path, as_version=4).metadata
        if metadata.get("accelerator") == "GPU" and metadata.get("colab", {}).get("gpuType"):
            assert metadata["colab"]["gpuType"] == COLAB_GPU
            found.append(path.name)
        else:
            assert "accelerator" not in metadata and "gpuType" not in metadata.get("colab", {})
    return found


def test_the_notebooks_that_need_a_gpu_ask_colab_for_a_t4_and_say_so(capsys):
    """Colab reads `accelerator` and `colab.gpuType` when it opens a notebook: a full-install
    notebook asks for a T4; one that needs no GPU asks for nothing. The title says the same."""
    gpu = colab_gpu_notebooks()
    with capsys.disabled():
        print(f"\nnotebooks with Colab GPU metadata: {', '.join(gpu)}")
    assert gpu == [p.name for p in NOTEBOOKS if notebook_install(p.name) == "full"]
    assert {"01_load_4bit_lora.ipynb", "05_grpo_training.ipynb", "06_evaluation.ipynb",
            "07_save_and_use.ipynb"} <= set(gpu)
    for path in NOTEBOOKS:
        title = nbformat.read(path, as_version=4).cells[0].source
        assert colab_line(path.name) in title.split("\n\n"), path.name
        if path.name in gpu:
            assert "No GPU? Runtime → Change runtime type → T4 GPU" in colab_line(path.name)


def test_light_notebooks_import_neither_unsloth_nor_vllm():
    """A light notebook runs on Colab's own torch, where neither is installed (00 reads the full
    stack's pins from its lock as text instead)."""
    light = [p for p in NOTEBOOKS if notebook_install(p.name) == "light"]
    assert "00_setup.ipynb" in [p.name for p in light]
    for path in light:
        code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                         if c.cell_type == "code")
        assert not re.search(r"^\s*(from|import) (unsloth|vllm)\b", code, re.M), path.name


def test_full_notebook_headers_announce_a_restart_only_while_one_remains(monkeypatch):
    """A restart, where the full install still needs one, is said in every full notebook's header
    before the first cell, in the words of helpers.course.FULL_INSTALL_RESTART; with None (today:
    no replaced package can break a later cell, docs/colab.md) no header mentions one."""
    from helpers.course import FULL_INSTALL_RESTART
    from scripts import sync_notebooks

    restart = "Runtime → Restart session, then Runtime → Run all"
    for path in NOTEBOOKS:
        assert "restart" not in colab_line(path.name).lower() or FULL_INSTALL_RESTART, path.name
    monkeypatch.setattr(sync_notebooks, "FULL_INSTALL_RESTART", f"asks for one restart: {restart}")
    for path in NOTEBOOKS:
        line = sync_notebooks.colab_line(path.name)
        assert (restart in line) == (notebook_install(path.name) == "full"), path.name


def test_local_paths_are_found_and_course_paths_are_not():
    leak = ("/opt/course/.venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:238: "
            "UserWarning: None of the inputs have requires_grad=True")
    assert local_paths(leak) == ["/opt/course/.venv/lib/python3.11/site-packages/"]
    assert local_paths("cached in /root/.cache/huggingface") == ["/root/"]
    assert local_paths("see /home/ana/grpo/runs") == ["/home/ana/"]
    assert local_paths(f"Run folder: {ROOT}/runs/course/smoke") == [str(ROOT)]
    for fine in ("Run folder: runs/course/smoke", "Adapter: runs/course/smoke/adapter",
                 "MyDrive/grpo-course/runs/course/t4", "unsloth/models/rl.py", "a/root/b"):
        assert local_paths(fine) == [], fine


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_stored_outputs_hold_no_local_paths(path):
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            # Images hold no paths, and scanning megabytes of base64 would only cost time.
            data = {k: v for k, v in output.get("data", {}).items() if not k.startswith("image/")}
            found = local_paths(json.dumps({**output, "data": data}))
            assert not found, (
                f"{path.name}, cell {index}: a stored output shows {found[0]!r}, a path of the "
                "machine that ran it: print it with helpers.paths.shown(...), or silence the "
                "warning that carries it in helpers/prelude.py, then re-execute the notebook")


def test_badges_and_bootstrap_match_helpers_course():
    result = subprocess.run(
        [sys.executable, "-m", "scripts.sync_notebooks", "--check"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout


def test_colab_forms_keep_the_value_and_the_comment():
    source = 'PROFILE = None  # None: from the hardware\nMAX_STEPS = 30\nRATE = 0.5  # why\nX = "a"'
    assert with_forms(source).splitlines() == [
        "# None: from the hardware",
        'PROFILE = None  #@param {type:"raw"}',
        'MAX_STEPS = 30  #@param {type:"integer"}',
        "# why",
        'RATE = 0.5  #@param {type:"number"}',
        'X = "a"  #@param {type:"string"}',
    ]
    assert with_forms(with_forms(source)) == with_forms(source)
    # Only one-line values become form fields:
    assert with_forms("SIZES = {\n    1: 2,\n}") == "SIZES = {\n    1: 2,\n}"
    namespace: dict = {}
    exec(with_forms(source), namespace)  # papermill and nbval still see plain assignments
    assert (namespace["PROFILE"], namespace["MAX_STEPS"], namespace["X"]) == (None, 30, "a")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_solutions_open_folded_in_colab_and_jupyterlab(path):
    nb = nbformat.read(path, as_version=4)
    (heading,) = [c for c in nb.cells
                  if c.cell_type == "markdown" and c.source.startswith("## Solutions")]
    assert nb.metadata["colab"]["collapsed_sections"] == [heading.id] == [heading.metadata["id"]]
    assert heading.metadata["jp-MarkdownHeadingCollapsed"] is True
    exercises = next(c.source for c in nb.cells if c.source.startswith("## Exercises"))
    assert "folded section below" in exercises
