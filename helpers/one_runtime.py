"""Notebooks 06 and 07 executed from notebook 05's runtime: the cheapest Colab path, one install.

Each notebook opened from its Colab badge gets a runtime of its own, so 06 and 07 can share 05's
install (and read its run without Google Drive) only if 05 runs them. `run_06_07_here` executes
them as "Run all" would, each in a fresh kernel of this runtime, with their parameters set to
05's run, saves the executed copies in the run folder and prints each one's key results (the
cells tagged `key-result`). A kernel that still holds the GPU is refused first: a second vLLM
start beside the first runs out of memory.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from helpers.paths import ROOT, shown
from helpers.run_folder import find_run

FOLLOWERS = ("06_evaluation.ipynb", "07_save_and_use.ipynb")
KEY_RESULT = "key-result"  # the tag of a cell whose output the runner prints
EXECUTED = "notebooks"  # inside the run folder: the executed copies
BUSY_MIB = 2048  # more GPU memory in use than a fresh kernel's CUDA context: a model is loaded
CELL_TIMEOUT = 3600  # s: 06's vLLM start and 200 problems on a T4 fit well inside
RESTART = ("Runtime → Restart session, run the first two cells (install and parameters), then "
           "this one")


class GpuBusyError(RuntimeError):
    """This runtime's GPU still holds a model: 06 and 07 would run out of memory beside it."""


def gpu_memory_used_mib() -> int | None:
    """GPU memory in use here, from nvidia-smi (which makes no CUDA context); None: no GPU."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    done = subprocess.run(query, capture_output=True, text=True, check=False)
    lines = done.stdout.split()
    return int(lines[0]) if done.returncode == 0 and lines and lines[0].isdigit() else None


def check_gpu_free(used_mib: int | None) -> None:
    """Stop, in one sentence, while more than BUSY_MIB of the GPU is in use (05's model, vLLM)."""
    if used_mib is not None and used_mib > BUSY_MIB:
        raise GpuBusyError(
            f"This runtime's GPU still holds {used_mib / 1024:.1f} GiB (this notebook's model and "
            f"vLLM), and 06's vLLM start beside them would run out of memory: {RESTART}.")


def with_parameters(notebook: Any, **values: Any) -> Any:
    """`notebook` with `NAME = value` lines appended to its parameters cell (as papermill does)."""
    cell = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    cell.source += "".join(f"\n{name} = {value!r}" for name, value in values.items())
    return notebook


def key_results(notebook: Any) -> list[str]:
    """The printed lines of the executed notebook's cells tagged `key-result`, in order."""
    lines = []
    for cell in notebook.cells:
        if KEY_RESULT in cell.metadata.get("tags", []):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and output.get("name") == "stdout":
                    lines += [line for line in output["text"].splitlines() if line.strip()]
    return lines


def execute_here(path: Path, copy: Path, **parameters: Any) -> Any:
    """Run the notebook at `path` in a fresh kernel of this runtime and save it to `copy`."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = with_parameters(nbformat.read(path, as_version=4), **parameters)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    copy.parent.mkdir(parents=True, exist_ok=True)
    try:
        client.execute()
    except CellExecutionError as error:
        nbformat.write(notebook, copy)
        last = str(error).strip().splitlines()[-1]
        raise RuntimeError(f"{path.name} stopped in this runtime ({last}): its executed copy, "
                           f"{shown(copy)}, shows the cell; fix it, then run this cell again."
                           ) from None
    nbformat.write(notebook, copy)
    return notebook


def run_06_07_here(profile: str | None, use_drive: bool, run_folder: str = "",
                   **parameters: Any) -> list[Path]:
    """Execute notebooks 06 and 07 on 05's run, here; print their key results; return the copies.

    `profile`, `use_drive` and `run_folder` are 05's parameters; `parameters` go to both notebooks
    too (a test passes smaller sizes). The notebooks read the run from its folder, never mounting
    Google Drive themselves: a kernel started from here cannot ask for permission.
    """
    check_gpu_free(gpu_memory_used_mib())
    from helpers.hardware import detect_hardware
    from helpers.profiles import select_profile

    name = select_profile(detect_hardware(), profile).name
    run = find_run(name, use_drive, run_folder)  # mounts Drive here if the run is there
    copies = []
    for notebook in FOLLOWERS:
        copy = run.root / EXECUTED / notebook
        print(f"Running {notebook} in this runtime ...", flush=True)
        done = execute_here(ROOT / "notebooks" / notebook, copy, PROFILE=name, USE_DRIVE=False,
                            RUN_FOLDER=str(run.root), **parameters)
        print(f"{notebook}, saved as {shown(copy)}:")
        for line in key_results(done):
            print(f"    {line}")
        copies.append(copy)
    return copies

