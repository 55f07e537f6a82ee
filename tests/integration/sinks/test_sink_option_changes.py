"""The sink's options changed between runs at the worst moment (issue 33, items 2-3).

One output topic of two partitions, driven by ``write_batches`` (what each Spark
task of the sink runs) against real Kafka and Redis: batch 0 is written; of
batch 1, partition 0 is committed and partition 1 is checkpointed and then dies
(fail-point ``sink.after_checkpoint``); the query restarts with the option
changed, retries batch 1 (partition 0 must be skipped, partition 1 replayed)
and writes batch 2. The ``read_committed`` output must be each batch's records
once (the sink alone does not deduplicate its input); an option the replay
cannot serve must be refused, with nothing written twice. Verdicts are in
docs/operational-changes.md ("Every name, its verdict").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from dedup.constants import RECORD_ID_HEADER
from dedup.exceptions import InjectedFault
from dedup.failpoints import arm, fired
from sinks import SinkConfig
from sinks.admin import prepare
from sinks.exceptions import CheckpointSchemaError
from sinks.kafka_io import consume_all, ensure_topic
from sinks.records import check_schema
from sinks.transactions import close_clients
from sinks.writer import write_batches

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.redis]

PARTITIONS = 2
# option -> (value before, value after) for the "down" direction; "up" swaps them.
# None: the option is not set.
CHANGES: dict[str, tuple[str | None, str | None]] = {
    "lease.seconds": ("60", "5"),
    "max.batch.duration.seconds": ("50", "20"),
    "transaction.retries": ("5", "1"),
    "timings.path": ("TIMINGS", None),
    "marker.topic": ("MARKERS-A", "MARKERS-B"),
    "strong.productions": ("true", "false"),
    "kafka.transaction.timeout.ms": ("90000", "70000"),
    "kafka.linger.ms": ("50", "0"),
}
CASES = [(name, d) for name in CHANGES for d in ("down", "up")]


@pytest.fixture(autouse=True)
def _close_cached_clients() -> Iterator[None]:
    yield
    close_clients()


def _rows(batch: int, partition: int, id_column: str = "_record_id") -> pa.RecordBatch:
    ids = [f"b{batch}-p{partition}-{i}" for i in range(20)]
    return pa.RecordBatch.from_pydict({
        "key": pa.array([f"k-{r}" for r in ids], pa.string()),
        "value": pa.array([f"v-{r}" for r in ids], pa.string()),
        id_column: pa.array(ids, pa.string())})


def _write(config: SinkConfig, query: str, batch: int, partition: int,
           id_column: str = "_record_id") -> Any:
    columns = ["key", "value", id_column]
    schema = StructType([StructField(c, StringType()) for c in columns])
    return write_batches(config, check_schema(schema, config), columns,
                         [_rows(batch, partition, id_column)], query, batch, partition)


def _options(app_id: str, kafka: str, redis_url: str, faults: str, tmp: Path,
             name: str, value: str | None) -> dict[str, str]:
    options = {"kafka.bootstrap.servers": kafka, "topic": f"{app_id}-out", "app.id": app_id,
               "redis.url": redis_url, "fail.points.directory": faults,
               "kafka.transaction.timeout.ms": "60000"}
    if value is not None:
        value = value.replace("TIMINGS", str(tmp / "timings.jsonl"))
        value = value.replace("MARKERS", f"{app_id}-markers")
        options[name] = value
    return options


def _output_ids(kafka: str, topic: str) -> Counter[str]:
    return Counter((r.header(RECORD_ID_HEADER) or b"").decode()
                   for r in consume_all(kafka, topic, "read_committed"))


@pytest.mark.slow
@pytest.mark.parametrize(("name", "direction"), CASES, ids=[f"{n}-{d}" for n, d in CASES])
def test_a_sink_option_changed_mid_batch_keeps_the_output_exact(
        kafka_bootstrap: str, redis_url: str, app_id: str, tmp_path: Path,
        name: str, direction: str) -> None:
    faults = str(tmp_path / "faults")
    ensure_topic(kafka_bootstrap, f"{app_id}-out", PARTITIONS)
    first, second = CHANGES[name] if direction == "down" else CHANGES[name][::-1]
    before = SinkConfig.from_options(
        _options(app_id, kafka_bootstrap, redis_url, faults, tmp_path, name, first))
    after = SinkConfig.from_options(
        _options(app_id, kafka_bootstrap, redis_url, faults, tmp_path, name, second))
    prepare(before)
    query = "query-1"
    for partition in range(PARTITIONS):
        _write(before, query, 0, partition)
    _write(before, query, 1, 0)
    arm(faults, "sink.after_checkpoint", "raise", match={"batch": 1, "partition": 1})
    with pytest.raises(InjectedFault):
        _write(before, query, 1, 1)  # checkpointed, then the task (and the query) died
    assert fired(faults, "sink.after_checkpoint")
    close_clients()  # the restart: new producers and clients

    prepare(after)
    retried = [_write(after, query, 1, p) for p in range(PARTITIONS)]
    assert retried[0].skipped, "the committed partition of batch 1 was written again"
    for partition in range(PARTITIONS):
        _write(after, query, 2, partition)
    want = Counter(f"b{b}-p{p}-{i}" for b in range(3) for p in range(PARTITIONS)
                   for i in range(20))
    got = _output_ids(kafka_bootstrap, f"{app_id}-out")
    assert got == want, (f"{name} {direction}: lost {sorted((want - got).elements())[:5]}, "
                         f"duplicated {sorted((got - want).elements())[:5]}")


def test_a_record_id_column_renamed_mid_batch_is_refused_at_the_replay(
        kafka_bootstrap: str, redis_url: str, app_id: str, tmp_path: Path) -> None:
    """``record.id.column`` renamed while a checkpoint of the old column waits for its
    replay: the records would be made from a column the checkpoint lacks, so the replay
    is refused (the previous name until the batch is committed, as it says)."""
    faults = str(tmp_path / "faults")
    ensure_topic(kafka_bootstrap, f"{app_id}-out", PARTITIONS)
    base = _options(app_id, kafka_bootstrap, redis_url, faults, tmp_path, "", None)
    before = SinkConfig.from_options(base)
    after = SinkConfig.from_options({**base, "record.id.column": "rid"})
    prepare(before)
    _write(before, "query-1", 0, 0)
    arm(faults, "sink.after_checkpoint", "raise", match={"batch": 0, "partition": 1})
    with pytest.raises(InjectedFault):
        _write(before, "query-1", 0, 1)
    close_clients()
    with pytest.raises(CheckpointSchemaError, match="restore the previous code"):
        _write(after, "query-1", 0, 1, id_column="rid")
    _write(before, "query-1", 0, 1)  # the old name until the batch is committed
    _write(after, "query-1", 1, 0, id_column="rid")
    _write(after, "query-1", 1, 1, id_column="rid")
    want = Counter(f"b{b}-p{p}-{i}" for b in range(2) for p in range(PARTITIONS)
                   for i in range(20))
    assert _output_ids(kafka_bootstrap, f"{app_id}-out") == want
