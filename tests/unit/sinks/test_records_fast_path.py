"""``to_records`` makes a common batch's records without a Python step per record.

A batch whose records all go to option ``topic`` with their own IDs, no header and none
too large (no ``topic`` or ``headers`` column) takes the fast path; every other batch
the record-by-record loop. Both must give the same records: the fast path's output is
compared with the loop's on the same rows (the loop forced by an all-null ``headers``
column, which adds no header), over random batches, and a batch the fast path must not
take (an empty or null ID, a record too large) is still refused or dead-lettered.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from dedup.constants import DEFAULT_ID_COLUMN
from sinks import SinkConfig, SinkRecordError
from sinks.records import InputLayout, OutRecord, SizeLimit, to_records

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _config(dead_letter: str | None = None) -> SinkConfig:
    return SinkConfig(app_id="records-fast-path", bootstrap_servers="127.0.0.1:9092",
                      topic="out", strong_productions=False, dead_letter_topic=dead_letter)


def _layout(has_key: bool, has_partition: bool, has_headers: bool) -> InputLayout:
    return InputLayout(has_key=has_key, has_topic=False, has_partition=has_partition,
                       has_headers=has_headers, has_record_id=True)


def _batch(rng: random.Random, rows: int, has_key: bool, has_partition: bool,
           ids_as_text: bool, headers: bool) -> pa.RecordBatch:
    columns: dict[str, Any] = {
        "value": pa.array([None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 40))
                           for _ in range(rows)], pa.binary())}
    if has_key:
        columns["key"] = pa.array([None if rng.random() < 0.2 else f"k{rng.randint(0, 9)}"
                                   for _ in range(rows)], pa.string())
    if has_partition:
        columns["partition"] = pa.array([rng.choice([None, 0, 1, 2]) for _ in range(rows)],
                                        pa.int32())
    if headers:
        columns["headers"] = pa.array([None] * rows, HEADERS)
    ids = [f"id-{rng.getrandbits(48):x}-é" for _ in range(rows)]
    columns[DEFAULT_ID_COLUMN] = (pa.array(ids, pa.string()) if ids_as_text
                                  else pa.array([i.encode() for i in ids], pa.binary()))
    return pa.RecordBatch.from_pydict(columns)


def _limits(topic: str, fresh: bool) -> SizeLimit:
    return SizeLimit(topic, 1_000_000, 1_000_000)


@pytest.mark.parametrize("seed", range(12))
def test_the_fast_path_gives_the_records_of_the_loop(seed: int) -> None:
    rng = random.Random(seed)
    has_key, has_partition, as_text = (rng.random() < 0.5 for _ in range(3))
    rows = [rng.randint(0, 30) for _ in range(rng.randint(1, 4))]
    state = rng.getstate()
    fast = [_batch(rng, n, has_key, has_partition, as_text, headers=False) for n in rows]
    rng.setstate(state)
    loop = [_batch(rng, n, has_key, has_partition, as_text, headers=True) for n in rows]
    limits = _limits if seed % 2 else None
    records, dead = to_records(fast, _config(), _layout(has_key, has_partition, False), 1, 0,
                               limits)
    expected, expected_dead = to_records(loop, _config(),
                                         _layout(has_key, has_partition, True), 1, 0, limits)
    assert records == expected and dead == expected_dead == []
    assert len(records) == sum(rows)
    assert all(type(r) is OutRecord and r.topic == "out" and r.headers == () and r.record_id
               for r in records)
    ids = [i if isinstance(i, bytes) else i.encode()
           for b in fast for i in b.column(DEFAULT_ID_COLUMN).to_pylist()]
    assert [r.record_id for r in records] == ids


@pytest.mark.parametrize("bad_id", [None, ""])
def test_a_batch_with_an_id_missing_is_refused_or_dead_lettered(bad_id: str | None) -> None:
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"a", b"b", b"c"]),
                                        DEFAULT_ID_COLUMN: pa.array(["id-1", bad_id, "id-3"])})
    layout = _layout(False, False, False)
    with pytest.raises(SinkRecordError, match="batch 4"):
        to_records([batch], _config(), layout, 4, 0)
    records, dead = to_records([batch], _config("dead"), layout, 4, 0)
    assert [r.record_id for r in records] == [b"id-1", b"id-3"]
    assert [d.topic for d in dead] == ["dead"]


def test_a_batch_with_a_record_too_large_takes_the_loop() -> None:
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"a", b"x" * 500]),
                                        DEFAULT_ID_COLUMN: pa.array(["id-1", "id-2"])})

    def small(topic: str, fresh: bool) -> SizeLimit:
        return SizeLimit(topic, 300 if topic == "out" else 1_000_000, 1_000_000)

    records, dead = to_records([batch], _config("dead"), _layout(False, False, False), 2, 0,
                               small)
    assert [r.record_id for r in records] == [b"id-1"]
    assert [d.record_id for d in dead] == [b"id-2"]
