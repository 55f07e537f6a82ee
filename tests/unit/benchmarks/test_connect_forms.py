"""``connect_forms_passed``: a form counts when every one of its Connect tests passed."""

from __future__ import annotations

from benchmarks.connect_forms import FORMS, failures, forms_passed, outcomes

DS_FAILURE = "test_the_data_source_is_exact_after_a_failure_after_its_commit_under_connect"
DS_DEDUP = "test_deduplicate_then_the_data_source_is_exact_under_connect"
FB_DEDUP = "test_deduplicate_then_the_foreach_batch_sink_is_exact_under_connect"
ONE_PASS_RERUN = (
    "test_one_pass_rerun_of_a_written_batch_after_a_driver_failure_is_exact_under_connect")
XML = f"""<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="c" name="test_one_pass_is_exact_under_connect" time="1"/>
<testcase classname="c" name="{DS_FAILURE}"><failure message="x">x</failure></testcase>
<testcase classname="c" name="{DS_DEDUP}"><skipped message="y"/></testcase>
<testcase classname="c" name="{FB_DEDUP}"><error message="z"/></testcase>
</testsuite></testsuites>"""


def test_outcomes_are_read_from_junit_xml() -> None:
    assert outcomes(XML) == {
        "test_one_pass_is_exact_under_connect": "passed",
        DS_FAILURE: "failed", DS_DEDUP: "skipped", FB_DEDUP: "error",
    }


def test_the_first_line_of_each_failure_is_kept() -> None:
    assert failures(XML) == {DS_FAILURE: "x", DS_DEDUP: "y", FB_DEDUP: "z"}


def test_a_form_counts_only_when_all_its_tests_passed() -> None:
    every = {test: "passed" for tests in FORMS.values() for test in tests}
    assert sum(forms_passed(every).values()) == 4
    one_missing = dict(every)
    del one_missing[ONE_PASS_RERUN]
    assert forms_passed(one_missing) == {"deduplicate": True, "data_source": True,
                                         "foreach_batch": True, "one_pass": False}
    skipped = {**every, DS_DEDUP: "skipped"}
    assert forms_passed(skipped) == {"deduplicate": False, "data_source": False,
                                     "foreach_batch": True, "one_pass": True}


def test_every_form_test_exists() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "tests" / "integration" / "connect"
            / "test_connect_sinks.py").read_text()
    for tests in FORMS.values():
        for test in tests:
            assert f"def {test}(" in text, test
