"""`make test` runs the unit tests and the notebooks in one pytest session on two processes.

pytest-xdist sends each group whole to one process (the scheduler below), in the order collected:
- a test file is one group, so its module fixtures are built once;
- a notebook is one group, since its cells share one kernel;
- the notebooks that hand a run on (training, then evaluation, then export) are one group, in order;
- the longest groups come first, so that no process is left alone with a long one at the end.
(xdist's own `--dist loadgroup` cannot do this with pytest 9, whose test ids it no longer rewrites.)
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

import pytest

# One OpenMP thread in every test process and the processes they start, as the notebooks have on a
# CPU (helpers.hardware.use_one_cpu_thread): two processes share two cores, and one on two threads
# beside a busy one waits on its own spinning threads. Measured: notebook 05 stopped and resumed
# (tests/test_gpu_check.py) took 26 s alone, 50 s beside a busy core, 26 s there on one thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Notebooks that read what the one before wrote (the training run): one process, in this order.
RUN_CHAIN = ("05_grpo_training", "06_evaluation", "07_save_and_use")
RUN_CHAIN_GROUP = "notebooks/training-evaluation-export"
# Groups that take 20 s or more on a 2-core machine (`pytest --durations`), longest first.
LONG_FIRST = (
    "notebooks/09_r1_recipe_toy.ipynb",  # the toy's cold start, GRPO and three controls
    RUN_CHAIN_GROUP,
    "tests/test_smoke_promise.py",  # 60 GRPO steps on another float kernel path
    "notebooks/11_ablation_lab.ipynb",
    "tests/test_faults.py",
    "tests/test_colab_journey.py",
    "tests/test_site.py",  # the web book built and opened in Chromium
    "tests/test_one_runtime.py",  # notebook 05 edited and run, then 06 and 07 on its run
    "tests/test_train_script.py",
    "tests/test_locks.py",  # pip's dry runs against PyPI
    "notebooks/08_grpo_from_scratch.ipynb",
    "tests/test_gpu_check.py",  # notebook 05's run stopped and resumed, in two processes
)


def group_of(nodeid: str) -> str:
    """The group of a test id: its file, or the run chain for the notebooks in it."""
    path = nodeid.split("::", 1)[0]
    return RUN_CHAIN_GROUP if PurePosixPath(path).stem in RUN_CHAIN else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        group = group_of(item.nodeid)
        return LONG_FIRST.index(group) if group in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)  # stable: each group keeps its own order


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's scope scheduler with our groups as the scopes (run with --no-loadscope-reorder)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)
