"""`make test` runs the unit tests and the notebooks in one pytest session on two processes.

pytest-xdist sends each group whole to one process (the scheduler below), in the order of
runs/bench/test_durations.json, the longest first; tools/test_groups.py says what a group is and
which tier runs it (docs/ci.md). Options:
    --fast              leave out the longest groups (make test-fast; tools/test_groups.py)
    --store-durations   write this session's seconds per group into the durations file
(xdist's own `--dist loadgroup` cannot do this with pytest 9, whose test ids it no longer rewrites.)
"""

from __future__ import annotations

import os
import shlex

import pytest

from tools.test_groups import (
    FAST_SHARE,
    group_of,
    group_seconds,
    is_release,
    ordered,
    read_durations,
    slow_groups,
    store_durations,
    timing_key,
)

# One OpenMP thread in every test process and the processes they start, as the notebooks have on a
# CPU (helpers.hardware.use_one_cpu_thread): two processes share two cores, and one on two threads
# beside a busy one waits on its own spinning threads. Measured: notebook 05 stopped and resumed
# (tests/test_gpu_check.py) took 26 s alone, 50 s beside a busy core, 26 s there on one thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help=f"leave out the groups that take {FAST_SHARE:.0%} or more of the "
                          "stored time (runs/bench/test_durations.json)")
    parser.addoption("--store-durations", action="store_true",
                     help="write each group's seconds into runs/bench/test_durations.json")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "release: run by .ci/run after `make test`, which leaves "
                                       "it out (tools/test_groups.py RELEASE)")
    # xdist's controller receives every worker's reports, so it alone stores them.
    if config.getoption("store_durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationStore(), "store-durations")


class DurationStore:
    """Adds up each group's seconds (setup, call and teardown) and stores them at the end."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, float]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        release = "release" in report.keywords
        self.reports.append((timing_key(report.nodeid, release), report.duration))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.reports and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            args = session.config.invocation_params.args
            store_durations(group_seconds(self.reports), shlex.join(["pytest", *args]))


def pytest_itemcollected(item: pytest.Item) -> None:
    if is_release(item.nodeid, getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.release)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = read_durations()
    items[:] = ordered(items, seconds, key_of)
    if config.getoption("fast"):
        slow = slow_groups(seconds)
        left_out = [item for item in items if key_of(item) in slow]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if key_of(item) not in slow]


def key_of(item: pytest.Item) -> str:
    """The name the item's group is timed under (tools.test_groups.timing_key)."""
    return timing_key(item.nodeid, item.get_closest_marker("release") is not None)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's scope scheduler with our groups as the scopes (run with --no-loadscope-reorder)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)
