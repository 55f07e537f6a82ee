"""A user's script, start to exit, in both Spark modes: ``script_exit_cases_passed`` (issue 51).

Runs ``tests/integration/connect/test_user_scripts.py`` (each of README's three forms
pasted into a script, run as a subprocess under a classic session and under Spark
Connect, with and without ``spark.stop()``: 12 cases) in a pytest process of its own,
reads each case's outcome from pytest's junit XML and counts the cases that passed
(exact output, exit within the bound, no trace or false warning, lease released).
Writes ``benchmarks/results/user_scripts.json`` (date, machine, commit, each case's
outcome and the first line of each failure, minutes) and merges
``script_exit_cases_passed`` into ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks.common import merge_summary, run_metadata, write_json
from benchmarks.connect_forms import commit, run_tests

TESTS = "tests/integration/connect/test_user_scripts.py"
CASES = 12  # three forms x two Spark modes x spark.stop() or not


def cases_passed(results: dict[str, str]) -> int:
    """The cases of the script test that passed (a parametrized case per name)."""
    return sum(1 for name, outcome in results.items()
               if name.startswith("test_a_users_script_runs_to_its_end_and_exits[")
               and outcome == "passed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds before the pytest process is stopped")
    args = parser.parse_args(argv)
    started = time.monotonic()
    results, why, exit_code = run_tests(TESTS, args.timeout)
    passed = cases_passed(results)
    write_json("user_scripts.json", {
        "metadata": {**run_metadata(), "commit": commit()},
        "tests": results, "failures": why, "script_exit_cases_passed": passed,
        "cases": CASES, "pytest_exit": exit_code,
        "minutes": round((time.monotonic() - started) / 60, 1),
    })
    merge_summary({"script_exit_cases_passed": passed})
    print(json.dumps({"script_exit_cases_passed": passed, "cases": CASES,
                      "pytest_exit": exit_code}))
    return 0 if passed == CASES else 1


if __name__ == "__main__":
    sys.exit(main())
