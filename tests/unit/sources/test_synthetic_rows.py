"""The synthetic stream is a pure function of (seed, row) with the promised duplicates."""

from __future__ import annotations

from collections import Counter

import pytest

from sources.exceptions import SourceConfigError
from sources.synthetic_rows import (
    SyntheticOptions,
    duplicate_of,
    expected_output,
    original_of,
    synthetic_rows,
)


def test_same_seed_same_rows_and_any_range_replays_identically() -> None:
    opts = SyntheticOptions(seed=5, rows_per_batch=100, duplicate_rate=0.3)
    whole = list(synthetic_rows(opts, 0, 1000))
    assert whole == list(synthetic_rows(opts, 0, 1000))
    pieces = [row for start in range(0, 1000, 37)
              for row in synthetic_rows(opts, start, min(start + 37, 1000))]
    assert pieces == whole
    other = list(synthetic_rows(SyntheticOptions(seed=6, rows_per_batch=100,
                                                 duplicate_rate=0.3), 0, 1000))
    assert [r[0] for r in other] != [r[0] for r in whole]


def test_duplicates_copy_the_original_id_key_and_time_but_not_payload_or_seq() -> None:
    # Every copy carries its own payload, so a check that compares payloads with
    # the failure-free output catches a later copy kept in place of the first.
    opts = SyntheticOptions(seed=1, rows_per_batch=50, duplicate_rate=0.4)
    rows = list(synthetic_rows(opts, 0, 500))
    first: dict[str, tuple[object, ...]] = {}
    payloads: dict[str, set[object]] = {}
    dups = 0
    for row in rows:
        assert len(str(row[2])) == opts.payload_bytes
        if row[0] in first:
            dups += 1
            assert (row[1], row[3]) == (first[row[0]][1], first[row[0]][3])
            assert row[2] not in payloads[row[0]], "two copies with one payload"
            assert row[4] != first[row[0]][4]
        else:
            first[row[0]] = row
        payloads.setdefault(row[0], set()).add(row[2])
    assert expected_output(opts, 500) == {rid: row[2] for rid, row in first.items()}
    assert [r[4] for r in rows] == list(range(500))
    assert 0.25 * 450 < dups < 0.55 * 450
    assert all(len(rid) == 32 for rid in first)  # 128-bit IDs


@pytest.mark.parametrize("distance", ["same_batch", "later_batches", "beyond_horizon"])
def test_duplicate_distance_is_respected(distance: str) -> None:
    per, gap = 40, 3
    opts = SyntheticOptions(seed=2, rows_per_batch=per, duplicate_rate=0.5,
                            duplicate_distance=distance, duplicate_gap_batches=gap)
    found = 0
    for n in range(2000):
        target = duplicate_of(opts, n)
        if target is None:
            continue
        found += 1
        assert target < n
        batch_gap = n // per - target // per
        if distance == "same_batch":
            # and in the same input partition (default 2 per batch), whose order
            # the operator keeps: the first copy is then defined
            assert batch_gap == 0
            assert (n % per) * 2 // per == (target % per) * 2 // per
        elif distance == "later_batches":
            assert 1 <= batch_gap <= gap
        else:
            assert batch_gap == gap
        assert duplicate_of(opts, original_of(opts, n)) is None
    assert found > 500


def test_expected_output_keeps_first_occurrence_payloads() -> None:
    opts = SyntheticOptions(seed=3, rows_per_batch=100, total_rows=800, duplicate_rate=0.25)
    rows = list(synthetic_rows(opts, 0, 800))
    expected = expected_output(opts)
    assert len(expected) == len({r[0] for r in rows}) < 800
    first: dict[str, str] = {}
    for rid, _key, payload, _t, _seq in rows:
        first.setdefault(rid, payload)
    assert expected == first


def test_key_skew_concentrates_keys() -> None:
    uniform = Counter(r[1] for r in synthetic_rows(
        SyntheticOptions(seed=4, duplicate_rate=0.0, num_keys=100), 0, 5000))
    skewed = Counter(r[1] for r in synthetic_rows(
        SyntheticOptions(seed=4, duplicate_rate=0.0, num_keys=100, key_skew=1.2), 0, 5000))
    assert skewed.most_common(1)[0][1] > 5 * uniform.most_common(1)[0][1]
    assert skewed.most_common(1)[0][0] == "k0"


def test_options_from_spark_strings_and_errors() -> None:
    opts = SyntheticOptions.from_options({"seed": "9", "rows_per_batch": "10",
                                          "duplicate_rate": "0.5", "path": "ignored"})
    assert (opts.seed, opts.rows_per_batch, opts.duplicate_rate) == (9, 10, 0.5)
    assert SyntheticOptions.from_options(opts.as_options()) == opts
    with pytest.raises(SourceConfigError, match="unknown option 'sed'"):
        SyntheticOptions.from_options({"sed": "1"})
    with pytest.raises(SourceConfigError, match="duplicate_rate"):
        SyntheticOptions(duplicate_rate=1.5)
    with pytest.raises(SourceConfigError, match="duplicate_distance"):
        SyntheticOptions(duplicate_distance="far")
    with pytest.raises(SourceConfigError, match="not a valid int"):
        SyntheticOptions.from_options({"seed": "x"})
