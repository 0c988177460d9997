"""Where the course is published, and what each notebook needs on Colab.

Change either here, then run `make sync-notebooks`: it writes the badges, each notebook's Colab
runtime metadata, its header line about Colab and its bootstrap cell from this file.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Literal, NamedTuple

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
Minutes = tuple[float, float]  # (low, high)


class Notebook(NamedTuple):  # not a dataclass: the bootstrap loads this file without importing it
    """What one notebook needs on Colab and what it costs there.

    `install`: "full" is the GPU lock (torch, vLLM, unsloth), and Colab is asked for a T4; "light"
    is the course's CPU-side packages at their locked versions on Colab's own torch
    (locks/light.txt), on any runtime. `work_minutes`: the notebook's own work on its runtime,
    beyond the install and vLLM's first start (an estimate). `starts_vllm`: it loads with
    `fast_inference` on a T4. `trains`: it also trains for the profile's steps
    (helpers.profiles.expected_t4_minutes), on top of `work_minutes`.
    """

    install: Install
    work_minutes: Minutes
    starts_vllm: bool = False
    trains: bool = False


# Every notebook, in reading order, keyed by its name without the number, so renumbering changes
# nothing here and a rename is one line. The headers' Colab and time lines (make sync-notebooks),
# the journey (helpers.journey) and the bootstrap's install all read this table; a test fails
# when a notebook has no entry or an entry has no notebook.
NOTEBOOKS: dict[str, Notebook] = {
    "setup": Notebook("light", (1, 1)),  # the GPU through Colab's torch, the lock as text
    "load_4bit_lora": Notebook("full", (2, 5), starts_vllm=True),  # 1.2 GB download, generations
    "gsm8k_formatting": Notebook("light", (1, 1)),  # light notebooks run smoke on a CPU runtime
    "reward_design": Notebook("light", (1, 1)),
    "policy_gradient": Notebook("light", (1, 1)),  # plain transformers and torch, smoke model
    "grpo_training": Notebook("full", (1, 2), starts_vllm=True, trains=True),  # + held-out scores
    # 200 problems greedy, base and trained, then 4 sampled answers a problem each (section 9)
    "evaluation": Notebook("full", (7, 15), starts_vllm=True),
    "save_and_use": Notebook("full", (5, 10)),  # 3 GB 16-bit download, merge, reload; no vLLM
    "grpo_from_scratch": Notebook("light", (2, 4)),  # measured 115 s on the light stand-in
    "r1_recipe_toy": Notebook("light", (4, 8)),  # measured 269 s on the light stand-in
    "scaling_up": Notebook("light", (1, 1)),
    "ablation_lab": Notebook("light", (2, 4)),  # a quick look at your own arm: short runs
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


def notebook(name: str) -> Notebook:
    """A notebook's row of NOTEBOOKS; an unknown notebook is an error that names the fix."""
    key = notebook_key(name)
    if key not in NOTEBOOKS:
        raise KeyError(f"{name} has no entry in helpers/course.py NOTEBOOKS: add "
                       f'"{key}": Notebook("full" or "light", (low, high) minutes), then run '
                       "`make sync-notebooks`.")
    return NOTEBOOKS[key]


def notebook_install(name: str) -> Install:
    """The install a notebook needs on Colab."""
    return notebook(name).install


def needs_gpu(name: str) -> bool:
    """True for a notebook that only means something on a GPU runtime (the full install)."""
    return notebook_install(name) == "full"


LOCKS = Path(__file__).resolve().parent.parent / "locks"  # loaded alone by path: no helpers.paths
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
