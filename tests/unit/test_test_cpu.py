"""benchmarks/test_cpu.py gives each process's CPU to the right test (issue 52)."""

from __future__ import annotations

from benchmarks.test_cpu import attribute, by_file

# pid -> (command, parent pid, CPU ticks, start time)
PROCS = {
    1: ("init", 0, 0, 0),
    10: ("python", 1, 5, 1),      # an xdist worker
    11: ("java", 10, 50, 2),      # its SparkSession
    12: ("python", 11, 3, 3),     # a Python worker of that session
    20: ("java", 1, 40, 4),       # a `dedup run` child's JVM, orphaned
    30: ("kdamond.0", 2, 9, 0),   # a kernel thread
}


def test_a_process_counts_for_the_test_its_pytest_ancestor_runs() -> None:
    current = {10: "tests/a.py::test_x"}
    assert attribute(PROCS, current, 10, None) == "tests/a.py::test_x"
    assert attribute(PROCS, current, 12, "tests/old.py::test_y") == "tests/a.py::test_x"


def test_an_orphan_counts_for_the_test_it_was_started_in_and_the_rest_as_other() -> None:
    current = {10: "tests/a.py::test_x"}
    assert attribute(PROCS, current, 20, "tests/b.py::test_z") == "tests/b.py::test_z"
    assert attribute(PROCS, current, 30, None) == "other:kdamond.0"


def test_files_sum_their_tests() -> None:
    assert by_file({"tests/a.py::t1": 1.0, "tests/a.py::t2[x]": 2.5, "tests/b.py::t": 1.0}) \
        == {"tests/a.py": 3.5, "tests/b.py": 1.0}
