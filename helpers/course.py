"""Where the course is published, and what each notebook needs on Colab.

Change either here, then run `make sync-notebooks`: it writes the badges, each notebook's Colab
runtime metadata, its header line about Colab and its bootstrap cell from this file.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Literal

# The repository Colab clones, and the pinned tag it checks out (never a moving branch).
COURSE_REPO = "https://github.com/grpo-course/grpo-course"
COURSE_REF = "v0.1.0"
COLAB_DIR = "/content/grpo-course"
# The target this repository ships with, where nothing is published yet: while COURSE_REPO and
# COURSE_REF are these, every Colab link and clone finds nothing, and `make site` and each
# notebook's first cell say so (docs/publishing.md, "Publishing your own copy").
UNPUBLISHED_TARGET = ("https://github.com/grpo-course/grpo-course", "v0.1.0")


def unpublished_target_line() -> str | None:
    """One line saying the Colab target is the unpublished default, or None once it is set."""
    if (COURSE_REPO, COURSE_REF) != UNPUBLISHED_TARGET:
        return None
    return (f"Unpublished target: {COURSE_REPO} at {COURSE_REF} is the course's placeholder, so "
            "Colab links and clones find nothing; set COURSE_REPO and COURSE_REF in "
            "helpers/course.py (docs/publishing.md).")

Install = Literal["full", "light"]
# What each notebook installs on Colab, keyed by its name without the number, so renumbering
# changes nothing here and a rename is one line. "full": the GPU lock (torch, vLLM, unsloth), and
# Colab is asked for a T4. "light": the course's CPU-side packages at their locked versions on top
# of Colab's own torch (locks/light.txt), on any runtime. Only this table decides; a test fails
# when a notebook has no entry or an entry has no notebook.
NOTEBOOK_INSTALLS: dict[str, Install] = {
    "setup": "light",  # shows the GPU through Colab's torch and the lock as text: no GPU stack
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
    "ablation_lab": "light",  # trains the smoke model on a CPU; reads the stored grid
}
# The Colab runtime a "full" notebook asks for (its notebook metadata).
COLAB_GPU = "T4"
# How long each install takes on Colab, as the first cell and the header say: measured with uv on
# a Python 3.13 + torch 2.11 stand-in for Colab's image (full 2 min 33 s, light 40 s, fetching uv
# included; docs/colab.md, "Two installs"), not yet on Colab itself.
INSTALL_MINUTES: dict[Install, str] = {"full": "2-3 min", "light": "1 min"}
# What the first run of a full notebook asks of the learner after its install, said in every full
# notebook's header before the first cell; None: no restart. The full install replaces setuptools
# and certifi under a running Colab kernel, and neither stale copy can break a later cell
# (docs/colab.md, "The first cell and restarts"), so the first cell goes on without one.
FULL_INSTALL_RESTART: str | None = None


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


LOCKS = Path(__file__).resolve().parent.parent / "locks"
LOCK_FILES: dict[Install, str] = {"full": "t4.txt", "light": "light.txt"}  # ampere.txt = t4.txt


def lock_pins(install: Install) -> dict[str, str]:
    """{package: version} of an install's lock, read as text: nothing of it is imported, so a
    light runtime can show what the full notebooks will install."""
    pins = {}
    for line in (LOCKS / LOCK_FILES[install]).read_text().splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins
