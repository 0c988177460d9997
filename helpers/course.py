"""Where the course is published, and what each notebook needs on Colab.

Change either here, then run `make sync-notebooks`: it writes the badges, each notebook's Colab
runtime metadata, its header line about Colab and its bootstrap cell from this file.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Literal

# The repository Colab clones, and the pinned tag it checks out (never a moving branch).
COURSE_REPO = "https://github.com/grpo-course/grpo-course"
COURSE_REF = "v0.1.0"
COLAB_DIR = "/content/grpo-course"

Install = Literal["full", "light"]
# What each notebook installs on Colab, keyed by its name without the number, so renumbering
# changes nothing here and a rename is one line. "full": the GPU lock (torch, vLLM, unsloth), and
# Colab is asked for a T4. "light": the course's CPU-side packages at their locked versions on top
# of Colab's own torch (locks/light.txt), on any runtime. Only this table decides; a test fails
# when a notebook has no entry or an entry has no notebook.
NOTEBOOK_INSTALLS: dict[str, Install] = {
    "setup": "full",  # imports the whole GPU stack, vLLM included, to check it
    "load_4bit_lora": "full",
    "gsm8k_formatting": "light",
    "reward_design": "light",
    "policy_gradient": "light",  # plain transformers and torch on the smoke model
    "grpo_training": "full",
    "evaluation": "full",
    "save_and_use": "full",
    "grpo_from_scratch": "light",
    "r1_recipe_toy": "light",
    "scaling_up": "light",
}
# The Colab runtime a "full" notebook asks for (its notebook metadata).
COLAB_GPU = "T4"
# How long each install takes on Colab, as the first cell and the header say. Full: an estimate
# (about 3.5 GB of downloads on Colab's image); light: measured on a stand-in (docs/colab.md).
INSTALL_MINUTES: dict[Install, str] = {"full": "3-5 min", "light": "1-2 min"}


def notebook_key(name: str) -> str:
    """'notebooks/02_gsm8k_formatting.ipynb' (or its stem) -> 'gsm8k_formatting'."""
    stem = PurePath(name).name.removesuffix(".ipynb")
    number, sep, rest = stem.partition("_")
    return rest if sep and number.isdigit() else stem


def notebook_install(name: str) -> Install:
    """The install a notebook needs on Colab; an unknown notebook is an error that names the fix."""
    key = notebook_key(name)
    if key not in NOTEBOOK_INSTALLS:
        raise KeyError(f"{name} has no entry in helpers/course.py NOTEBOOK_INSTALLS: add "
                       f'"{key}": "full" or "light", then run `make sync-notebooks`.')
    return NOTEBOOK_INSTALLS[key]


def needs_gpu(name: str) -> bool:
    """True for a notebook that only means something on a GPU runtime (the full install)."""
    return notebook_install(name) == "full"
