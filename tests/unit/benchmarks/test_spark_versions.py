"""The Spark-version matrix reads pytest's summary line right."""

from __future__ import annotations

from benchmarks.spark_versions import counts, default_version
from dedup.local.paths import repo_root


def test_counts_read_the_last_summary_line() -> None:
    out = "tests/x.py::t FAILED\n....\n3 failed, 97 passed, 1 error, 2 skipped in 12.0s\n"
    assert counts(out) == {"passed": 97, "failed": 3, "errors": 1, "skipped": 2, "xfailed": 0}
    assert counts("101 passed in 555.2s (0:09:15)")["passed"] == 101
    assert counts("no tests ran") == {"passed": 0, "failed": 0, "errors": 0, "skipped": 0,
                                      "xfailed": 0}


def test_default_version_is_setups() -> None:
    assert default_version(repo_root()).count(".") == 2
