"""Which sink forms pass under Spark Connect: ``connect_forms_passed`` (issue 34).

Runs ``tests/integration/connect/test_connect_sinks.py`` in a pytest process of
its own (Connect needs a process without a classic SparkSession), reads the
outcome of each test from pytest's junit XML, and counts the forms all of whose
tests passed. The four forms and their tests are :data:`FORMS`; a form with a
test that did not run (missing, skipped) does not count. Writes
``benchmarks/results/connect.json`` (date, machine, commit, each test's
outcome and the first line of each failure, each form's verdict) and merges
``connect_forms_passed`` into ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks.common import merge_summary, run_metadata, write_json

ROOT = Path(__file__).resolve().parents[1]
TESTS = "tests/integration/connect/test_connect_sinks.py"
FORMS: dict[str, tuple[str, ...]] = {
    # dedup.deduplicate upstream of a sink (two steps)
    "deduplicate": (
        "test_deduplicate_then_the_data_source_is_exact_under_connect",
        "test_deduplicate_then_the_foreach_batch_sink_is_exact_under_connect",
        "test_deduplicate_before_a_foreach_batch_in_batch_scope_keeps_each_id_once_under_connect",
    ),
    "data_source": (
        "test_deduplicate_then_the_data_source_is_exact_under_connect",
        "test_the_data_source_is_exact_after_a_failure_after_its_commit_under_connect",
    ),
    "foreach_batch": (
        "test_deduplicate_then_the_foreach_batch_sink_is_exact_under_connect",
        "test_the_foreach_batch_sink_is_exact_after_a_driver_failure_after_its_commit",
    ),
    "one_pass": (
        "test_one_pass_is_exact_under_connect",
        "test_one_pass_rerun_of_a_written_batch_after_a_driver_failure_is_exact_under_connect",
    ),
}


def outcomes(junit_xml: str) -> dict[str, str]:
    """``{test name: passed | failed | error | skipped}`` from pytest's junit XML."""
    return {name: outcome for name, (outcome, _) in _cases(junit_xml).items()}


def failures(junit_xml: str) -> dict[str, str]:
    """``{test name: the first line of its failure}`` for each test that did not pass."""
    return {name: why for name, (outcome, why) in _cases(junit_xml).items()
            if outcome != "passed"}


def _cases(junit_xml: str) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for case in ET.fromstring(junit_xml).iter("testcase"):
        outcome, why = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "failed" if child.tag == "failure" else child.tag
                text = (child.get("message") or child.text or "").strip()
                why = text.splitlines()[0][:400] if text else ""
                break
        found[case.get("name", "")] = (outcome, why)
    return found


def forms_passed(results: dict[str, str]) -> dict[str, bool]:
    """Each form of :data:`FORMS`: whether every one of its tests passed."""
    return {form: all(results.get(test) == "passed" for test in tests)
            for form, tests in FORMS.items()}


def commit() -> str:
    """The checkout's short commit hash ('' outside git)."""
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()


def run_tests(tests: str, timeout: float) -> tuple[dict[str, str], dict[str, str], int]:
    """Run pytest on ``tests`` in a process of its own: ``(outcomes, failures, exit code)``
    read from its junit XML (see :func:`outcomes`, :func:`failures`)."""
    with tempfile.TemporaryDirectory() as tmp:
        xml_path = Path(tmp) / "tests.xml"
        run = subprocess.run(
            [sys.executable, "-m", "pytest", tests, "-q", "-p", "no:cacheprovider",
             f"--junitxml={xml_path}"],
            cwd=ROOT, capture_output=True, text=True, check=False, timeout=timeout)
        junit = xml_path.read_text() if xml_path.exists() else ""
    return (outcomes(junit) if junit else {}), (failures(junit) if junit else {}), run.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds before the pytest process is stopped")
    args = parser.parse_args(argv)
    started = time.monotonic()
    results, why, exit_code = run_tests(TESTS, args.timeout)
    forms = forms_passed(results)
    passed = sum(forms.values())
    write_json("connect.json", {
        "metadata": {**run_metadata(), "commit": commit()},
        "tests": results, "failures": why, "forms": forms, "connect_forms_passed": passed,
        "pytest_exit": exit_code,
        "minutes": round((time.monotonic() - started) / 60, 1),
    })
    merge_summary({"connect_forms_passed": passed})
    print(json.dumps({"connect_forms_passed": passed, "forms": forms,
                      "pytest_exit": exit_code}))
    return 0 if passed == len(FORMS) else 1


if __name__ == "__main__":
    sys.exit(main())
