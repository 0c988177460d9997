"""The session's groups, their order from the stored durations, and the tiers."""

import json
from dataclasses import dataclass

import pytest

from helpers.paths import ROOT
from tools import test_groups
from tools.test_groups import (
    DURATIONS,
    RELEASE,
    RELEASE_SUFFIX,
    RUN_CHAIN_GROUP,
    group_of,
    group_seconds,
    is_release,
    ordered,
    read_durations,
    slow_groups,
    store_durations,
    timing_key,
)


@dataclass
class Item:
    """A pytest item as the ordering sees it."""

    nodeid: str
    release: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return name if name == "release" and self.release else None


def ids(items: list[Item]) -> list[str]:
    return [item.nodeid for item in items]


def test_the_longest_group_goes_first_and_an_unknown_one_last():
    items = [Item("tests/test_new.py::a"), Item("tests/test_a.py::x"), Item("tests/test_b.py::y"),
             Item("notebooks/06_evaluation.ipynb::Cell 0"), Item("tests/test_a.py::z")]
    seconds = {"tests/test_a.py": 3.0, "tests/test_b.py": 1.0, RUN_CHAIN_GROUP: 9.0}
    assert ids(ordered(items, seconds)) == [
        "notebooks/06_evaluation.ipynb::Cell 0", "tests/test_a.py::x", "tests/test_a.py::z",
        "tests/test_b.py::y", "tests/test_new.py::a"]


def test_the_run_chain_is_one_group_that_keeps_its_order():
    chain = ["notebooks/05_grpo_training.ipynb::Cell 3", "notebooks/06_evaluation.ipynb::Cell 0",
             "notebooks/07_save_and_use.ipynb::Cell 1"]
    assert {group_of(nodeid) for nodeid in chain} == {RUN_CHAIN_GROUP}
    items = [Item(chain[0]), Item("tests/test_a.py::x"), Item(chain[1]), Item(chain[2])]
    assert ids(ordered(items, {RUN_CHAIN_GROUP: 5.0, "tests/test_a.py": 1.0}))[:3] == chain


def test_conftest_orders_the_session_by_the_stored_file(tmp_path, monkeypatch, request):
    """The hook pytest calls reads the durations file: change the file, the order changes."""
    root_conftest = next(plugin for plugin in request.config.pluginmanager.get_plugins()
                         if getattr(plugin, "__file__", None) == str(ROOT / "conftest.py"))
    stored = tmp_path / "durations.json"
    monkeypatch.setattr(test_groups, "DURATIONS", stored)
    monkeypatch.setattr(request.config.option, "fast", False)  # the order alone, also in test-fast
    a, b, c = "tests/test_a.py::x", "tests/test_b.py::y", "tests/test_c.py::z"
    items = [Item(a), Item(b), Item(c, release=True)]
    for seconds, order in (({"tests/test_b.py": 2.0}, [b, a, c]),  # unknown: last, in order
                           ({"tests/test_c.py (release)": 2.0, "tests/test_b.py": 1.0}, [c, b, a]),
                           ({"tests/test_c.py": 2.0, "tests/test_b.py": 1.0}, [b, a, c])):
        stored.write_text(json.dumps({"command": "x", "seconds": seconds}))
        session = list(items)
        root_conftest.pytest_collection_modifyitems(request.config, session)
        assert ids(session) == order


def test_the_stored_file_names_only_groups_that_exist():
    seconds = read_durations()
    assert seconds, f"{DURATIONS} is missing: run `make test PYTEST_ADDOPTS=--store-durations`"
    groups = {key.removesuffix(RELEASE_SUFFIX) for key in seconds}
    stale = [group for group in groups if group != RUN_CHAIN_GROUP and not (ROOT / group).exists()]
    assert not stale, (f"{DURATIONS.name} times groups that are gone: {stale}; delete them or "
                       "rerun `make test PYTEST_ADDOPTS=--store-durations`")
    assert all(s >= 0 for s in seconds.values())


def test_storing_merges_a_sessions_groups_into_the_file(tmp_path):
    """A release session's seconds land beside `make test`'s for the same file, not over them."""
    path = tmp_path / "durations.json"
    store_durations({"tests/test_a.py": 4.04, "tests/test_b.py": 1.0}, "pytest one", path)
    reports = [(timing_key("tests/test_b.py::x", False), 0.5), ("tests/test_b.py", 2.0),
               (timing_key("tests/test_b.py::y", True), 9.0),
               (timing_key("notebooks/05_grpo_training.ipynb::Cell 1", False), 3.0)]
    store_durations(group_seconds(reports), "pytest two", path)
    assert read_durations(path) == {"tests/test_a.py": 4.0, "tests/test_b.py": 2.5,
                                    "tests/test_b.py (release)": 9.0, RUN_CHAIN_GROUP: 3.0}
    assert json.loads(path.read_text())["command"] == "pytest two"


def test_a_broken_file_names_the_fix(tmp_path):
    path = tmp_path / "durations.json"
    path.write_text('{"seconds": [1, 2]}')
    with pytest.raises(ValueError, match="--store-durations"):
        read_durations(path)
    assert read_durations(tmp_path / "absent.json") == {}


def test_fast_leaves_out_the_groups_at_or_over_their_share_of_the_session():
    """A share of the session, so a slower machine's figures draw the same line."""
    seconds = {"a": 10.0, "b": 30.0, "c": 60.0, "d (release)": 500.0}
    assert slow_groups(seconds, 0.3) == {"b", "c"}
    assert slow_groups({k: 9 * s for k, s in seconds.items()}, 0.3) == {"b", "c"}


def test_each_release_check_names_a_file_and_fixture_that_exist():
    for key in RELEASE:
        group, _, fixture = key.partition("::")
        assert (ROOT / group).exists(), key
        if fixture:
            assert f"def {fixture}(" in (ROOT / group).read_text(), key


def test_a_release_check_is_a_whole_file_or_the_tests_using_its_fixture():
    assert is_release("tests/test_smoke_promise.py::test_grpo_keeps_the_smoke_promise", [])
    assert is_release("tests/test_faults.py::test_x", ["tmp_path", "faults"])
    assert not is_release("tests/test_faults.py::test_y", ["tmp_path"])
    assert not is_release("tests/test_paths.py::test_z", ["faults"])
    no_ops = "tests/test_ablations.py::test_no_op_arms_match_the_course_and_the_null_arm_differs"
    assert is_release(no_ops, ["tmp_path"])  # a test named in RELEASE by itself
    assert not is_release("tests/test_ablations.py::test_the_no_ops_say_why", ["tmp_path"])


def test_docs_ci_lists_each_release_check():
    text = (ROOT / "docs" / "ci.md").read_text()
    missing = [key for key in RELEASE if f"`{key.split('::')[0]}`" not in text]
    assert not missing, f"docs/ci.md's tiers do not name {missing}"
