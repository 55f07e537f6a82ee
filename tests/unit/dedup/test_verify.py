"""The verifier itself must catch every kind of discrepancy, each counted separately."""

from __future__ import annotations

from dedup.verify import compare, expected_first_occurrences, repeated_ids


def test_expected_keeps_first_occurrence_payload() -> None:
    expected = expected_first_occurrences([("a", 1), ("b", 2), ("a", 3)])
    assert expected == {"a": 1, "b": 2}


def test_exact_output_is_ok() -> None:
    report = compare({"a": b"1", "b": b"2"}, [("b", b"2"), ("a", b"1")])
    assert report.ok
    assert (report.lost, report.duplicated, report.phantoms, report.mismatched) == (0, 0, 0, 0)


def test_loss_and_duplicate_do_not_cancel_out() -> None:
    # same number of records as expected, but one lost and one duplicated
    report = compare({"a": b"1", "b": b"2"}, [("a", b"1"), ("a", b"1")])
    assert not report.ok
    assert report.lost == 1
    assert report.duplicated == 1
    assert report.samples["lost"] == ("b",)


def test_phantoms_and_mismatches() -> None:
    report = compare({"a": b"1"}, [("a", b"changed"), ("zzz", b"x"), (None, b"y")])
    assert report.phantoms == 2
    assert report.mismatched == 1
    assert report.lost == 0


def test_ids_only_comparison_ignores_payloads() -> None:
    report = compare(["a", "b"], [("a", b"whatever"), ("b", None), ("b", None)])
    assert report.duplicated == 1
    assert report.mismatched == 0


def test_repeated_ids_audit() -> None:
    assert repeated_ids([("a", 1), ("b", 1), ("a", 2), ("a", 3)]) == {"a": 3}
