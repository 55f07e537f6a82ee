"""The suite's time within its budgets, and every test timed when it is added (issue 52).

Reads ``benchmarks/results/test_times.json`` (``python -m benchmarks.test_times``);
no test here times anything itself.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from benchmarks import test_times as times

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "results" / times.RESULT


@pytest.fixture(scope="module")
def record() -> dict:  # type: ignore[type-arg]
    assert RECORD.exists(), "no recorded test times: run python -m benchmarks.test_times"
    return times.load(RECORD)


def test_every_tier_is_recorded_within_its_budget(record: dict) -> None:  # type: ignore[type-arg]
    tiers = record["tiers"]
    assert set(tiers) == set(times.TIERS), sorted(tiers)
    for name, tier in tiers.items():
        assert tier["minutes"] <= times.BUDGET_MINUTES[name], (
            f"tier {name} took {tier['minutes']} min, its budget is "
            f"{times.BUDGET_MINUTES[name]}: make the slow tests faster (docs/development.md)")
        summed = sum(tier["seconds_by_test"].values()) / 60 / times.workers(times.TIERS[name])
        assert summed <= times.BUDGET_MINUTES[name], (
            f"the recorded tests of tier {name} sum to {summed:.1f} min per worker, over its "
            f"budget of {times.BUDGET_MINUTES[name]}: the newest are the slow ones")
    ci = times.totals(record)["ci_minutes"]
    assert ci is not None and ci <= times.BUDGET_MINUTES["ci"], ci


def test_no_test_of_readmes_command_is_slow(record: dict) -> None:  # type: ignore[type-arg]
    """README's test command is the fast tier: a test whose call is recorded at
    ``SLOW_SECONDS`` or more in it is marked ``slow``, and CI's second command runs it."""
    fast = record["tiers"]["test_command"]["call_seconds_by_test"]
    assert set(fast) == set(record["tiers"]["test_command"]["seconds_by_test"]), (
        "tests of README's command without their call's seconds: record them again")
    slow = sorted(f"{key} ({seconds:.0f} s)" for key, seconds in fast.items()
                  if seconds >= times.SLOW_SECONDS)
    assert not slow, (f"{len(slow)} tests of README's test command took "
                      f"{times.SLOW_SECONDS:.0f} s or more, e.g. {slow[:3]}: make them faster "
                      "or mark them @pytest.mark.slow, then record them with "
                      "python -m benchmarks.test_times --only <their files>")


def test_a_test_belongs_to_the_first_tier_whose_markers_select_it() -> None:
    assert times.tier_by_marks(set()) == "test_command"
    assert times.tier_by_marks({"integration", "spark", "slow"}) == "long"
    assert times.tier_by_marks({"chaos", "slow"}) == times.tier_by_marks({"cluster"}) == "long"
    assert times.tier_by_marks({"integration", "connect"}) == "connect"


def test_a_timed_test_is_recorded_in_the_tier_its_markers_select() -> None:
    tiers = times.tiers_of(["tests/model/test_model.py"])
    assert tiers["tests/model/test_model.py::test_the_reduction_keeps_the_verdict"] == "long"
    assert tiers["tests/model/test_model.py::test_the_bounds_meet_the_minimum"] \
        == "test_command", tiers


def test_every_test_function_has_recorded_seconds(record: dict) -> None:  # type: ignore[type-arg]
    recorded = {key for tier in record["tiers"].values() for key in tier["seconds_by_test"]}
    missing = sorted(times.test_functions(ROOT) - recorded)
    assert not missing, (
        f"{len(missing)} test functions have no recorded time, e.g. {missing[:3]}: run "
        "python -m benchmarks.test_times --only <their files> and commit "
        "benchmarks/results/test_times.json")


def test_the_tiers_are_the_commands_of_readme_and_ci() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for name, args in times.TIERS.items():
        shown = " ".join(f'"{a}"' if " " in a else a for a in args)
        assert f"pytest {shown}" in readme and f"pytest {shown}" in ci, (name, shown)


def test_the_connect_marker_is_on_every_connect_test_and_only_there() -> None:
    """README's test command leaves out the Connect tier by its marker (its tests need a
    process without a classic session, and run in CI's last command)."""
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        marks = ""
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
                marks = ast.unparse(node.value)
        inside = "tests/integration/connect/" in path.as_posix()
        assert bool(re.search(r"pytest\.mark\.connect\b", marks)) == inside, path


def test_the_record_reads_junit_cases_per_function() -> None:
    xml = ('<testsuites><testsuite>'
           '<testcase classname="tests.unit.test_test_times" name="test_a[x]" time="1.5">'
           '<properties><property name="call_seconds" value="0.5"/></properties></testcase>'
           '<testcase classname="tests.unit.test_test_times" name="test_a[y]" time="2.0">'
           '<properties><property name="call_seconds" value="0.75"/></properties>'
           '<skipped message="no"/></testcase>'
           '<testcase classname="tests.unit.test_test_times" name="test_b" time="0.25">'
           '<failure message="boom"/></testcase></testsuite></testsuites>')
    read = times.read_junit(xml, ROOT)
    assert read["seconds_by_test"] == {"tests/unit/test_test_times.py::test_a": 3.5,
                                       "tests/unit/test_test_times.py::test_b": 0.25}
    assert read["call_seconds_by_test"] == {"tests/unit/test_test_times.py::test_a": 1.25}
    assert (read["passed"], read["skipped"], read["failed"]) == (1, 1, 1)


def test_every_chaos_kind_left_out_of_ci_names_tests_of_ci_that_inject_its_fault() -> None:
    """The chaos subset leaves a kind to dedicated tests (``GUARDED_IN_CI``) only if each
    named test exists and runs in one of CI's commands (not in the Connect tier's folder,
    whose command runs nothing else)."""
    from benchmarks.chaos.faults import FAULT_KINDS
    from tests.chaos.test_chaos_subset import GUARDED_IN_CI

    assert GUARDED_IN_CI and set(GUARDED_IN_CI) <= set(FAULT_KINDS), GUARDED_IN_CI
    known = times.test_functions(ROOT)
    for kind, node_ids in GUARDED_IN_CI.items():
        assert node_ids, kind
        for node_id in node_ids:
            assert node_id in known, f"{kind}: {node_id} does not exist"
            path, name = node_id.split("::")
            assert not path.startswith("tests/integration/connect/"), node_id
            [function] = [n for n in ast.parse((ROOT / path).read_text()).body
                          if isinstance(n, ast.FunctionDef) and n.name == name]
            assert not any("skip" in ast.unparse(d) for d in function.decorator_list), node_id


def test_timing_new_tests_alone_keeps_the_date_machine_and_commit_of_the_tiers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--only`` adds a new test's seconds to a record whose tier minutes were measured
    on another day, machine and commit: the record must keep saying which."""
    xml = ('<testsuites><testsuite><testcase classname="tests.unit.test_test_cpu" '
           'name="test_files_sum_their_tests" time="0.5"/></testsuite></testsuites>')
    old = {"commit": "0988ddf", "date": "2026-11-30 08:33 UTC", "machine": "the other one"}
    written: dict[str, dict] = {}  # type: ignore[type-arg]
    monkeypatch.setattr(times, "load", lambda: {"metadata": dict(old), "tiers": {
        "test_command": {"minutes": 4.1, "seconds_by_test": {}}}})
    monkeypatch.setattr(times, "_run", lambda args, timeout: (xml, 1.0, 0))
    monkeypatch.setattr(times, "tiers_of", lambda files: {})
    monkeypatch.setattr(times, "write_json", lambda name, data: written.update(data=data))
    monkeypatch.setattr(times, "merge_summary", lambda figures: None)
    assert times.main(["--only", "tests/unit/test_test_cpu.py"]) == 0
    data = written["data"]
    assert data["tiers"]["test_command"]["seconds_by_test"] == {
        "tests/unit/test_test_cpu.py::test_files_sum_their_tests": 0.5}
    assert {k: data["metadata"].get(k) for k in old} == old, data["metadata"]


def test_the_longest_recorded_files_run_first_and_each_keeps_its_order() -> None:
    from tests.order import longest_files_first

    ids = ["a.py::t1[x]", "a.py::t1[y]", "a.py::t2", "b.py::t1", "c.py::t1", "d.py::t9",
           "e.py::C::t1"]
    seconds = {"a.py::t1": 5.0, "a.py::t2": 1.0, "b.py::t1": 30.0, "c.py::t1": 2.0,
               "e.py::C::t1": 6.5, "a.py::t3": 100.0}  # a.py::t3 is not among this tier's
    assert longest_files_first(ids, seconds) == [
        "b.py::t1", "e.py::C::t1", "a.py::t1[x]", "a.py::t1[y]", "a.py::t2", "c.py::t1",
        "d.py::t9"]  # d.py has no record: last


def test_every_worker_orders_the_files_alike_whatever_its_hash_seed() -> None:
    """pytest-xdist refuses a run whose workers collected different orders; each worker
    is a process with its own string-hash seed. A file's seconds summed in the order of a
    set of names came out 0.6 or 0.6000000000000001 by seed, and a file of 0.6 went
    before or after it (seen in a fresh clone's README command, 2026-12-04)."""
    import json
    import os
    import subprocess
    import sys

    ids = ["y.py::t1", "x.py::a", "x.py::b", "x.py::c", "x.py::d", "x.py::e"]
    seconds = {"y.py::t1": 0.6, "x.py::a": 0.1, "x.py::b": 0.2, "x.py::c": 0.3,
               "x.py::d": 0.0, "x.py::e": 0.0}
    code = ("import json, sys; from tests.order import longest_files_first; "
            "print(json.dumps(longest_files_first(*json.loads(sys.argv[1]))))")
    orders = set()
    for seed in range(24):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run([sys.executable, "-c", code, json.dumps([ids, seconds])],
                             cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        orders.add(out.stdout.strip())
    assert len(orders) == 1, orders


def test_the_suite_runs_its_files_longest_first_even_under_loadfile() -> None:
    import subprocess
    import sys
    from types import SimpleNamespace

    import tests.conftest as conftest

    option = SimpleNamespace(loadscopereorder=True)  # pytest-xdist's default
    conftest.pytest_configure(SimpleNamespace(option=option))  # type: ignore[arg-type]
    assert option.loadscopereorder is False
    # the record: test_lint.py takes seconds, test_readme.py none
    files = ["tests/unit/test_readme.py", "tests/unit/test_lint.py"]
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *files], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    order = [line.split("::")[0] for line in listed.splitlines() if "::" in line]
    assert order == sorted(order, key=lambda path: path != files[1]), listed
