"""Write locks/colab.txt: what a fresh Colab kernel has imported before the first cell runs.

    python3 -m scripts.colab_kernel_modules --freeze pip-freeze.gpu.txt --colabtools DIR \\
        --python python3.13 --venv /tmp/colab-kernel --colab-python 3.13.15 \\
        --source "googlecolab/backend-info@a724079 (2026-08-19), googlecolab/colabtools@3c07d77"

Colab's image is not public, but what it holds is: googlecolab/backend-info publishes the
`pip freeze` of each image (pip-freeze.gpu.txt; os-info-gpu.txt gives its Python), and
googlecolab/colabtools is the source of `google.colab`, whose kernel Colab runs. So this script
rebuilds that kernel in a scratch venv and asks it:

1. a venv with `--python` (Colab's minor version), holding Colab's versions of the kernel's
   packages (the freeze is passed to pip as constraints): ipykernel, IPython, jupyter_client,
   pyzmq, tornado, traitlets, the dependencies colabtools' setup.py declares, and whatever
   `import google.colab` still asks for, added until it imports;
2. google.colab itself, installed from the colabtools source folder (`--colabtools`);
3. a kernel started the way google.colab expects: ipykernel's IPKernelApp with
   `google.colab._kernel.Kernel` as its kernel class and google.colab loaded as an IPython
   extension (`load_ipython_extension`);
4. in that kernel, before any cell: `colab_bootstrap.loaded_versions()`, the very function the
   bootstrap cell uses to decide on a restart (a module counts for the distribution whose files
   hold it).

The distributions found are written with Colab's versions, tagged `# imported`; the packages the
light install keeps (lock_stack.KEPT_ON_COLAB: torch) are added from the freeze, tagged
`# preinstalled`. lock_stack.py then holds the imported ones at Colab's versions where it can.

What this cannot see: Colab's own kernel launcher and IPython configuration are not public, so a
module that they import in addition is missed. The bootstrap cell does not rely on this list: it
compares what the session really imported with what the install changed, and asks for a restart
(unless the package is one colab_bootstrap.STALE_IS_SAFE lists, at the version checked).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from datetime import date
from pathlib import Path

from helpers.paths import ROOT
from scripts.lock_stack import COLAB_RECORD, KEPT_ON_COLAB, normalize

KERNEL_PACKAGES = ("ipykernel", "ipython", "jupyter_client", "pyzmq", "tornado", "traitlets")
# Import names whose distribution is named otherwise, for what google.colab imports.
DISTRIBUTION_OF = {"PIL": "pillow", "yaml": "pyyaml", "dateutil": "python-dateutil",
                   "zmq": "pyzmq", "cv2": "opencv-python", "sklearn": "scikit-learn"}
# Starts a kernel as google.colab expects, runs one probe, prints its JSON; run in the venv.
DRIVER = r'''
import json, os, pathlib, sys, tempfile
from jupyter_client import KernelManager
launch = ("from ipykernel import kernelapp\nfrom google.colab import _kernel\n"
          "kernelapp.IPKernelApp.launch_instance(kernel_class=_kernel.Kernel)")
specs = pathlib.Path(tempfile.mkdtemp())
(specs / "kernels" / "colab").mkdir(parents=True)
(specs / "kernels" / "colab" / "kernel.json").write_text(json.dumps({
    "argv": [sys.executable, "-c", launch, "-f", "{connection_file}",
             "--IPKernelApp.extensions=google.colab"],
    "display_name": "colab", "language": "python"}))
os.environ["JUPYTER_PATH"] = str(specs)
manager = KernelManager(kernel_name="colab")
manager.start_kernel()
client = manager.client()
client.start_channels()
client.wait_for_ready(timeout=120)
client.execute(sys.argv[1])
out = []
while True:
    message = client.get_iopub_msg(timeout=120)
    kind, content = message["msg_type"], message["content"]
    if kind == "stream" and content["name"] == "stdout":
        out.append(content["text"])
    elif kind == "error":
        raise SystemExit("\n".join(content["traceback"]))
    elif kind == "status" and content["execution_state"] == "idle":
        break
client.stop_channels()
manager.shutdown_kernel(now=True)
print("PROBE " + "".join(out).strip())
'''
# The kernel starts in the course's root (the driver's working folder), so `scripts` imports.
PROBE = """
import json, sys
from scripts.colab_bootstrap import loaded_versions
print(json.dumps({"colab": "google.colab" in sys.modules, "versions": loaded_versions()}))
"""


def read_freeze(text: str) -> dict[str, str]:
    """{normalized name: version} of a `pip freeze`; `name @ url` lines keep the url's version."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, _, version = line.partition("==")
            pins[normalize(name)] = version.strip()
        elif " @ " in line:  # torch @ https://.../torch-2.11.0%2Bcpu-cp313-...whl
            name, _, url = line.partition(" @ ")
            found = re.search(r"-(\d[^-]*?)(?:-|\.tar)", url.rsplit("/", 1)[-1])
            if found:
                pins[normalize(name)] = found.group(1).replace("%2B", "+")
    return pins


def constraints(freeze: dict[str, str]) -> str:
    """The freeze as pip constraints, without the packages the kernel does not need (torch's
    CUDA stack would be gigabytes)."""
    skipped = ("torch", "nvidia-", "triton", "jax", "tensorflow")
    return "".join(f"{name}=={version}\n" for name, version in sorted(freeze.items())
                   if not name.startswith(skipped) and "+" not in version)


def missing_module(stderr: str) -> str | None:
    """The top-level module an ImportError names, or None."""
    found = re.search(r"No module named '([^'.]+)", stderr)
    return found.group(1) if found else None


def record_text(imported: dict[str, str], freeze: dict[str, str], python: str,
                source: str, rebuilt_on: str) -> str:
    """locks/colab.txt: a header that says where the list comes from, then one package a line."""
    lines = [
        "# locks/colab.txt: the distributions a fresh Colab GPU kernel has imported before the",
        "# first cell (`# imported`: lock_stack.py holds them at these versions where every",
        "# locked package accepts them), and what the light install keeps (`# preinstalled`).",
        f"# Written by scripts/colab_kernel_modules.py on {date.today().isoformat()} from",
        f"# {source}:",
        f"# Colab's kernel rebuilt from those on Python {rebuilt_on}, asked before any cell (the",
        "# script's docstring says how). Colab's Python:",
        f"# python: {python}",
    ]
    lines += [f"{name}=={version}  # imported" for name, version in sorted(imported.items())]
    lines += [f"{name}=={freeze[name]}  # preinstalled" for name in KEPT_ON_COLAB if name in freeze]
    return "\n".join(lines) + "\n"


def declared_dependencies(colabtools: Path) -> list[str]:
    """The names in colabtools' setup.py DEPENDENCIES (installed at Colab's versions, so that an
    optional import inside google.colab finds what Colab has)."""
    setup = (colabtools / "setup.py").read_text()
    block = re.search(r"DEPENDENCIES = \((.*?)\)", setup, re.S)
    return re.findall(r"'([A-Za-z0-9_.-]+)[=<>!]", block.group(1)) if block else []


def pip_install(python: str, constraint_file: Path, *names: str) -> None:
    command = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "-c", str(constraint_file), *names]
    subprocess.run(command, check=True)


def build_kernel_venv(folder: Path, base_python: str, freeze: dict[str, str],
                      colabtools: Path) -> str:
    """The scratch venv with Colab's kernel packages and google.colab; returns its python."""
    python = str(folder / "bin" / "python")
    if not Path(python).exists():
        subprocess.run([base_python, "-m", "venv", str(folder)], check=True)
    constraint_file = folder / "colab-constraints.txt"
    constraint_file.write_text(constraints(freeze))
    pip_install(python, constraint_file, *KERNEL_PACKAGES, *declared_dependencies(colabtools))
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", str(colabtools)],
                   check=True)
    for _ in range(20):  # google.colab imports more than its setup.py declares
        done = subprocess.run([python, "-c", "import google.colab"], capture_output=True,
                              text=True)
        module = missing_module(done.stderr)
        if done.returncode == 0:
            return python
        dist = normalize(DISTRIBUTION_OF.get(module or "", module or ""))
        if module is None or dist not in freeze:
            raise SystemExit(f"import google.colab failed in {folder}:\n{done.stderr[-2000:]}")
        pip_install(python, constraint_file, dist)
    raise SystemExit("import google.colab still fails after 20 installs; see the venv.")


def probe(python: str) -> dict[str, str]:
    """{distribution: version} that the fresh kernel has imported (run inside the venv)."""
    done = subprocess.run([python, "-c", DRIVER, PROBE], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"The kernel probe failed:\n{done.stderr[-3000:]}")
    found = json.loads(line.removeprefix("PROBE "))
    if not found["colab"]:
        raise SystemExit("The kernel started without google.colab: check the colabtools folder.")
    return found["versions"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--freeze", type=Path, required=True, help="backend-info's pip freeze")
    parser.add_argument("--colabtools", type=Path, required=True, help="colabtools source")
    parser.add_argument("--python", default="python3.13", help="Colab's Python, to build with")
    parser.add_argument("--venv", type=Path, default=Path("/tmp/colab-kernel"))
    parser.add_argument("--source", required=True, help="where --freeze and --colabtools "
                        "come from (repository@commit), written into the header")
    parser.add_argument("--colab-python", required=True,
                        help="the image's Python, from backend-info's os-info-gpu.txt")
    parser.add_argument("--out", type=Path, default=COLAB_RECORD)
    args = parser.parse_args()
    freeze = read_freeze(args.freeze.read_text())
    python = build_kernel_venv(args.venv, args.python, freeze, args.colabtools)
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    found = probe(python)
    off = {n: (v, freeze.get(n)) for n, v in found.items() if freeze.get(n) not in (None, v)}
    if off:
        print(f"Note: the venv's versions differ from the freeze for {off}; the freeze's are "
              "recorded.")
    # Only what Colab has: the venv's extras (jedi, pulled by its IPython) are not on the image.
    imported = {name: freeze[name] for name in found if name in freeze}
    args.out.write_text(record_text(imported, freeze, args.colab_python, args.source, version))
    print(f"{len(imported)} imported distributions written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
