"""``script_exit_cases_passed`` counts the script cases that passed, nothing else."""

from __future__ import annotations

from benchmarks.user_scripts import CASES, cases_passed


def test_only_passed_script_cases_count() -> None:
    results = {
        "test_a_users_script_runs_to_its_end_and_exits[one_pass-classic-stop]": "passed",
        "test_a_users_script_runs_to_its_end_and_exits[one_pass-connect-stop]": "failed",
        "test_a_users_script_runs_to_its_end_and_exits[data_source-connect-stop]": "skipped",
        "test_something_else": "passed",
    }
    assert cases_passed(results) == 1
    assert CASES == 12
