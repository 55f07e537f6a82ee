"""benchmarks/test_cpu.py gives each process's CPU to the right test (issue 52)."""

from __future__ import annotations

from benchmarks.common import ProcStat
from benchmarks.test_cpu import attribute, by_file


def _proc(pid: int, comm: str, ppid: int) -> ProcStat:
    return ProcStat(pid=pid, comm=comm, ppid=ppid, utime=1, stime=0, cutime=0, cstime=0,
                    starttime=pid)


PROCS = {p.pid: p for p in (
    _proc(1, "init", 0),
    _proc(10, "python", 1),      # an xdist worker
    _proc(11, "java", 10),       # its SparkSession
    _proc(12, "python", 11),     # a Python worker of that session
    _proc(20, "java", 1),        # a `dedup run` child's JVM, orphaned
    _proc(30, "kdamond.0", 2),   # a kernel thread
)}


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
