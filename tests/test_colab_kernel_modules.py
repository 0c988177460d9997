"""scripts/colab_kernel_modules.py: how locks/colab.txt is derived. The parsing is checked on small
inputs; the kernel probe runs for real, with this venv's ipykernel and a stand-in google.colab
(a kernel class and an IPython extension that imports one small distribution)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from scripts import colab_kernel_modules as ckm
from scripts.lock_stack import parse_colab_record, read_colab_record
from tests.test_colab_bootstrap import write_distribution

FREEZE = """\
# a comment
ipykernel==6.17.1
PyYAML==6.0.3
google-colab @ file:///colabtools/dist/google_colab-1.0.0.tar.gz
torch @ https://download.pytorch.org/whl/cpu/torch-2.11.0%2Bcpu-cp313-cp313-manylinux_2_28_x86_64.whl
torchvision==0.26.0+cu128
nvidia-cublas-cu12==12.8.4.1
"""


def test_the_freeze_is_read_with_the_versions_of_url_lines():
    freeze = ckm.read_freeze(FREEZE)
    assert freeze == {"ipykernel": "6.17.1", "pyyaml": "6.0.3", "google-colab": "1.0.0",
                      "torch": "2.11.0+cpu", "torchvision": "0.26.0+cu128",
                      "nvidia-cublas-cu12": "12.8.4.1"}
    # the constraints leave out torch's CUDA stack and local builds: the kernel needs neither
    assert ckm.constraints(freeze).splitlines() == ["google-colab==1.0.0", "ipykernel==6.17.1",
                                                    "pyyaml==6.0.3"]


def test_a_missing_module_is_named_and_mapped_to_its_distribution():
    assert ckm.missing_module("ModuleNotFoundError: No module named 'PIL.Image'") == "PIL"
    assert ckm.missing_module("SyntaxError: x") is None
    assert ckm.DISTRIBUTION_OF["PIL"] == "pillow"


def test_colabtools_declared_dependencies_are_read_from_setup_py(tmp_path):
    (tmp_path / "setup.py").write_text("DEPENDENCIES = (\n    'google-auth==2.47.0',\n"
                                       "    'pandas==2.2.2',\n)\n")
    assert ckm.declared_dependencies(tmp_path) == ["google-auth", "pandas"]


def test_the_record_says_where_it_comes_from_and_parses_back():
    text = ckm.record_text({"pyzmq": "26.2.1"}, {"torch": "2.11.0+cu128"}, "3.13.15",
                           "backend-info@abc", "3.13.0")
    assert "backend-info@abc" in text and "Python 3.13.0" in text
    record = parse_colab_record(text)
    assert record.imported == {"pyzmq": "26.2.1"} and record.python == "3.13.15"
    assert record.preinstalled == {"torch": "2.11.0+cu128"}


def test_the_committed_record_holds_what_the_issue_expected_a_colab_kernel_to_import():
    record = read_colab_record()
    assert {"numpy", "pillow", "pyzmq", "python-dateutil", "psutil", "packaging"} <= set(
        record.imported)
    assert "google-colab" in record.imported and "torch" in record.preinstalled


STAND_IN_KERNEL = """\
from ipykernel.ipkernel import IPythonKernel


class Kernel(IPythonKernel):
    pass
"""
STAND_IN_EXTENSION = """\
def load_ipython_extension(ipython):
    import colabfake_startup  # what a Colab startup import looks like to the probe
"""


def test_the_probe_starts_a_kernel_with_colabs_kernel_class_and_extension(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "google" / "colab").mkdir(parents=True)
    (site / "google" / "colab" / "__init__.py").write_text(STAND_IN_EXTENSION)
    (site / "google" / "colab" / "_kernel.py").write_text(STAND_IN_KERNEL)
    write_distribution(site, "colabfake-startup", "4.2", "colabfake_startup")
    write_distribution(site, "colabfake-never", "1.0", "colabfake_never")
    monkeypatch.setenv("PYTHONPATH", str(site))
    found = ckm.probe(sys.executable)
    assert found.get("colabfake-startup") == "4.2"  # imported by the extension at kernel start
    assert "colabfake-never" not in found
    assert "ipykernel" in found and "pyzmq" in found  # the kernel's own


def test_the_script_documents_its_sources():
    doc = textwrap.dedent(ckm.__doc__)
    assert "googlecolab/backend-info" in doc and "googlecolab/colabtools" in doc
    assert "cannot see" in doc and Path(ckm.__file__).name == "colab_kernel_modules.py"
