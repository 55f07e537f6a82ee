"""Hostile record IDs that the record fuzzing found (issue 50), checked without services.

``decide_partition`` takes IDs as str, bytes or None; its Python twin of the JVM's ID
check and the catalog's digests took str only. A string ID column holding bytes that
are not UTF-8 (Spark's strings may) made the one-pass step and the Arrow entry raise
pyarrow's ``ArrowException`` ("Wrapping ... failed") instead of one refusal line.
``benchmarks.fuzz_records`` and tests/integration/dedup/test_records_fuzz.py run the
generated records end to end.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from dedup.catalog import id_digests
from dedup.config import DedupConfig, RedisConfig
from dedup.constants import DEFAULT_ID_COLUMN
from dedup.exceptions import RecordIdError
from dedup.ids import MAX_ID_LENGTH
from dedup.partition_step import (
    ID_EMPTY,
    ID_NEWLINE,
    ID_NULL,
    ID_OK,
    ID_TOO_LONG,
    arrow_problem_codes,
    id_problem_codes,
)

HOSTILE_TEXT = ["a", "x\ny", "", None, "\n", " ", "\r", "\x00", "é", "\U0001f4a5",
                "L" * (MAX_ID_LENGTH - 1), "L" * MAX_ID_LENGTH, "L" * (MAX_ID_LENGTH + 1),
                # 1,024 characters of two bytes each: within the limit (Spark's length
                # counts characters), 2,048 bytes
                "é" * MAX_ID_LENGTH, "é" * (MAX_ID_LENGTH + 1), "é\n"]
HOSTILE_BINARY = [b"a", b"x\ny", b"", None, b"L" * MAX_ID_LENGTH, b"L" * (MAX_ID_LENGTH + 1),
                  "é".encode() * MAX_ID_LENGTH, b"\xff\xfe", b"\n\xff"]


def test_binary_ids_get_the_problem_codes_of_the_jvm_column() -> None:
    ids = [b"a", b"x\ny", b"", None, b"L" * (MAX_ID_LENGTH + 1), b"\xff\xfe"]
    assert list(id_problem_codes(ids)) == [ID_OK, ID_NEWLINE, ID_EMPTY, ID_NULL, ID_TOO_LONG,
                                           ID_OK]


@pytest.mark.parametrize("ids, kind", [(HOSTILE_TEXT, pa.string()),
                                       (HOSTILE_TEXT, pa.large_string()),
                                       (HOSTILE_BINARY, pa.binary())])
def test_the_arrow_problem_codes_are_those_of_the_jvm_column(ids: list, kind: pa.DataType) -> None:
    # The one-pass task computes the codes from the Arrow ID column instead of carrying
    # the JVM's column (issue 53): the same codes, whatever the ID, in one array or chunked.
    expected = list(id_problem_codes(ids))
    assert list(arrow_problem_codes(pa.array(ids, kind))) == expected
    chunked = pa.chunked_array([pa.array(ids[:3], kind), pa.array(ids[3:], kind)])
    assert list(arrow_problem_codes(chunked)) == expected
    assert arrow_problem_codes(pa.array([], kind)).tolist() == []


def test_a_binary_id_has_the_digest_of_its_text() -> None:
    assert id_digests([b"a", "a"]) == id_digests(["a", "a"])
    assert len(id_digests([b"\xff"])[0]) == 16


def test_a_string_id_column_that_is_not_utf8_is_refused_in_one_line() -> None:
    from sinks.dedup_foreach_batch import BATCH_TIME, SHARD, keep_rows

    ids = pa.array([b"ok", b"\xff\xfe"], pa.binary()).view(pa.string())
    batch = pa.RecordBatch.from_pydict({
        "value": pa.array([b"v1", b"v2"]), DEFAULT_ID_COLUMN: ids,
        SHARD: pa.array([0, 0], pa.int32()),
        BATCH_TIME: pa.array([1e9, 1e9], pa.float64())})
    # an unreachable Redis: the refusal comes before any claim
    config = DedupConfig(app_id="fuzz-utf8", redis=RedisConfig(url="redis://127.0.0.1:1/0"))
    with pytest.raises(RecordIdError) as refused:
        keep_rows(config, [batch], ["value", DEFAULT_ID_COLUMN], "q", 0, 0)
    message = str(refused.value)
    assert "\n" not in message and "UTF-8" in message and DEFAULT_ID_COLUMN in message


def test_one_pass_finds_the_id_problems_without_a_column_of_them() -> None:
    # The one-pass plan no longer adds the JVM's problem column (issue 53): the task
    # finds a null and an empty ID from the Arrow IDs and refuses them before any claim.
    from sinks.dedup_foreach_batch import BATCH_TIME, SHARD, keep_rows

    batch = pa.RecordBatch.from_pydict({
        "value": pa.array([b"v1", b"v2", b"v3"]),
        DEFAULT_ID_COLUMN: pa.array(["ok", None, ""], pa.string()),
        SHARD: pa.array([0, 0, 0], pa.int32()),
        BATCH_TIME: pa.array([1e9] * 3, pa.float64())})
    config = DedupConfig(app_id="fuzz-codes", redis=RedisConfig(url="redis://127.0.0.1:1/0"))
    with pytest.raises(RecordIdError) as refused:
        keep_rows(config, [batch], ["value", DEFAULT_ID_COLUMN], "q", 0, 0)
    message = str(refused.value)
    assert "\n" not in message and "1 null" in message and "1 empty" in message
