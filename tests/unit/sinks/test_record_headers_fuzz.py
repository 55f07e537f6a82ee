"""A header name with a NUL character (issue 50, found by fuzzing the records).

librdkafka takes header names as C strings: ``"a\\x00b"`` reached Kafka as ``"a"`` and
``"\\x00"`` as ``""``, a record changed silently. The sink now treats such a record
as one it cannot write: refused in one line, or sent to the dead-letter topic with
the NUL written as ``\\x00`` (tests/integration/dedup/test_records_fuzz.py reads them
back).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from dedup.constants import DEFAULT_ID_COLUMN
from sinks import SinkConfig, SinkRecordError
from sinks.records import ERROR_HEADER, InputLayout, to_records

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "value": pa.array([b"v1", b"v2"]),
        "headers": pa.array([[{"key": "ok", "value": b"1"}],
                             [{"key": "a\x00b", "value": b"2"}]], HEADERS),
        DEFAULT_ID_COLUMN: pa.array(["id-1", "id-2"])})


def _config(dead_letter: str | None) -> SinkConfig:
    return SinkConfig(app_id="fuzz-nul", bootstrap_servers="127.0.0.1:9092", topic="out",
                      strong_productions=False, dead_letter_topic=dead_letter)


LAYOUT = InputLayout(has_key=False, has_topic=False, has_partition=False, has_headers=True,
                     has_record_id=True)


def test_a_header_name_with_a_nul_is_refused_in_one_line() -> None:
    with pytest.raises(SinkRecordError) as refused:
        to_records([_batch()], _config(None), LAYOUT, 3, 0)
    message = str(refused.value)
    assert "\n" not in message and "NUL" in message and "batch 3" in message


def test_a_header_name_with_a_nul_goes_to_the_dead_letter_topic_written_out() -> None:
    records, dead = to_records([_batch()], _config("dead"), LAYOUT, 3, 0)
    assert [r.record_id for r in records] == [b"id-1"]
    assert len(dead) == 1 and dead[0].topic == "dead"
    names = [name for name, _ in dead[0].headers]
    assert names == ["a\\x00b", ERROR_HEADER]
