"""The Spark-version matrix reads pytest's summary line right."""

from __future__ import annotations

from benchmarks.spark_versions import counts, default_version, failure_lines
from dedup.local.paths import repo_root


def test_counts_read_the_last_summary_line() -> None:
    out = "tests/x.py::t FAILED\n....\n3 failed, 97 passed, 1 error, 2 skipped in 12.0s\n"
    assert counts(out) == {"passed": 97, "failed": 3, "errors": 1, "skipped": 2, "xfailed": 0}
    assert counts("101 passed in 555.2s (0:09:15)")["passed"] == 101
    assert counts("no tests ran") == {"passed": 0, "failed": 0, "errors": 0, "skipped": 0,
                                      "xfailed": 0}


def test_default_version_is_setups() -> None:
    assert default_version(repo_root()).count(".") == 2


def test_a_result_counts_only_for_the_code_it_ran() -> None:
    """A run recorded at this code passes; at an unknown commit, or with a failure, or
    (for the version change) with a skipped test, it does not."""
    import subprocess

    from benchmarks.spark_versions import passed, same_code

    root = repo_root()
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    here = same_code(root, head)  # False only while the work tree has uncommitted code
    good = {"commit": head, "exit": 0, "failed": 0, "passed": 2, "skipped": 0}
    assert passed(good, root, tests=2, skips=False) is here
    assert not passed({**good, "commit": "0" * 40}, root)
    assert not same_code(root, None)
    assert not passed({**good, "failed": 1, "exit": 1}, root)
    assert not passed({**good, "skipped": 2, "passed": 0}, root, tests=2, skips=False)
    assert not passed({**good, "skipped": 1}, root, tests=2, skips=False)
    assert passed({**good, "skipped": 1}, root) is here


def test_a_failed_tier_records_the_failed_tests_names_before_the_error_lines() -> None:
    out = "\n".join(["E   boom"] * 30 + ["FAILED tests/a.py::t1 - boom", "ERROR tests/b.py::t2",
                                          "1 failed, 1 error in 3.0s"])
    lines = failure_lines(out)
    assert lines[:2] == ["FAILED tests/a.py::t1 - boom", "ERROR tests/b.py::t2"]
    assert lines[2:] == ["E   boom"] * 18
    assert failure_lines("3 passed in 1.0s") == []
