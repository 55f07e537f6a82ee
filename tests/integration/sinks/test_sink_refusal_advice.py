"""The sink's refusals followed literally, one partition write at a time (no Spark).

``write_batches`` is what each Spark task of the sink runs: the Arrow input of one
partition, checkpointed in Redis, then one Kafka transaction. Driving it directly
puts the refusal and the write that follows its advice side by side; the output
is read back ``read_committed`` and compared with the failure-free output.
The registry of refusals is docs/refusals.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from dedup.constants import DEFAULT_ID_COLUMN, RECORD_ID_HEADER
from sinks import SinkConfig, SinkRecordError
from sinks.admin import prepare
from sinks.kafka_io import consume_all, ensure_topic
from sinks.records import check_schema
from sinks.transactions import close_clients
from sinks.writer import write_batches

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.redis]

COLUMNS = ["key", "value", DEFAULT_ID_COLUMN]
SCHEMA = StructType([StructField(c, StringType()) for c in COLUMNS])


@pytest.fixture(autouse=True)
def _close_cached_clients() -> Iterator[None]:
    yield
    close_clients()


def _batch(rows: list[tuple[str, str, str | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {name: pa.array([row[i] for row in rows], pa.string())
         for i, name in enumerate(COLUMNS)})


def test_a_record_without_an_id_is_refused_and_a_dead_letter_topic_as_told_is_exact(
        kafka_bootstrap: str, redis_url: str, app_id: str) -> None:
    """A null record ID with no dead-letter topic: "fix the input or set option
    dead.letter.topic". Set as told (the same batch, the same query), the batch's
    records reach the output once and the one without an ID the dead-letter topic once.
    """
    out, dead = f"{app_id}-out", f"{app_id}-dead"
    ensure_topic(kafka_bootstrap, out, 1)
    ensure_topic(kafka_bootstrap, dead, 1)
    rows: list[tuple[str, str, str | None]] = [(f"k{i}", f"v{i}", f"id-{i}") for i in range(10)]
    rows.append(("k-x", "v-x", None))
    options = {"kafka.bootstrap.servers": kafka_bootstrap, "topic": out, "app.id": app_id,
               "redis.url": redis_url}
    plain = SinkConfig.from_options(options)
    prepare(plain)
    layout = check_schema(SCHEMA, plain)
    with pytest.raises(SinkRecordError, match=r"set option dead\.letter\.topic") as refusal:
        write_batches(plain, layout, COLUMNS, [_batch(rows)], "query-1", 0, 0)
    assert "fix the input or set option dead.letter.topic" in str(refusal.value)
    assert consume_all(kafka_bootstrap, out, "read_uncommitted") == []
    told = SinkConfig.from_options({**options, "dead.letter.topic": dead})
    written = write_batches(told, check_schema(SCHEMA, told), COLUMNS, [_batch(rows)],
                            "query-1", 0, 0)
    assert written.produced == 11
    ids = Counter((r.header(RECORD_ID_HEADER) or b"").decode()
                  for r in consume_all(kafka_bootstrap, out, "read_committed"))
    assert ids == Counter(f"id-{i}" for i in range(10)), ids
    letters = consume_all(kafka_bootstrap, dead, "read_committed")
    assert [r.value for r in letters] == [b"v-x"]
