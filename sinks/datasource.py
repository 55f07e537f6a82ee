"""The exactly-once Kafka sink as a PySpark Python data source.

Use it like Spark's Kafka sink, with ``app.id`` (and ``redis.url`` for
strong productions) added::

    sinks.register(spark)
    (df.writeStream.format("exactly_once_kafka")
       .option("kafka.bootstrap.servers", "host:9092").option("topic", "out")
       .option("app.id", "orders-v1").option("redis.url", "redis://host:6379/0")
       .option("checkpointLocation", "/chk/orders-v1").start())

Spark pickles these classes by reference, so they live in this installed module.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

try:  # Spark >= 4.1: the documented Arrow stream writer
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamArrowWriter
except ImportError:  # Spark 4.0: its runner honours the Arrow mixin on a stream writer

    class _StreamArrowWriter(DataSourceStreamWriter, DataSourceArrowWriter):  # type: ignore[no-redef,misc]
        """Spark 4.0's way to receive Arrow batches in a stream writer."""

from dedup.spark_session import check_worker_imports, make_active
from sinks.admin import prepare
from sinks.checkpoint import CheckpointStore
from sinks.config import DATA_SOURCE_NAME, SinkConfig
from sinks.exceptions import SinkError
from sinks.records import InputLayout, check_schema
from sinks.timing import append_phase_timings
from sinks.writer import write_batches

log = logging.getLogger(__name__)


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task wrote: sent to the driver's ``commit``."""

    query_id: str
    batch: int
    partition: int
    produced: int
    skipped: bool
    replayed: bool
    attempts: int
    phases: dict[str, float] = field(default_factory=dict)


def task_identity() -> tuple[str, int, int, int]:
    """``(query id, batch id, partition id, attempt)`` of the running Spark task."""
    context = TaskContext.get()
    if context is None:
        raise SinkError("the sink writer must run inside a Spark task")
    batch = context.getLocalProperty("streaming.sql.batchId")
    query_id = context.getLocalProperty("sql.streaming.queryId")
    if batch is None or query_id is None:
        raise SinkError(
            "no micro-batch id in the task's local properties: the exactly_once_kafka "
            "data source works only in writeStream; for batch writes use "
            "ExactlyOnceKafkaForeachBatch with an explicit batch id"
        )
    return query_id, int(batch), context.partitionId(), context.attemptNumber()


class ExactlyOnceKafkaDataSource(DataSource):
    """``format("exactly_once_kafka")``: transactional, exactly-once Kafka output."""

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Validate options and schema, and (at most every :data:`START_CHECK_TTL_S` per
        process) the broker limits, marker topic and Redis persistence; build the writer."""
        config = SinkConfig.from_options(self.options)
        layout = check_schema(schema, config)
        _start_checks(config, self.options)
        return ExactlyOnceKafkaStreamWriter(config, layout, [f.name for f in schema.fields])


START_CHECK_TTL_S = 300.0
"""How long a process trusts the start checks it ran for one set of options."""
# Bound: one entry per distinct option set this process wrote with (a handful:
# one per sink, plus one per change of its options); entries older than the
# TTL are dropped whenever a new one is recorded, so it cannot grow per batch.
_CHECKED: dict[tuple[tuple[str, str], ...], float] = {}
_CHECKED_LOCK = threading.Lock()


def _start_checks(config: SinkConfig, options: Mapping[str, Any]) -> None:
    # Spark asks for the writer in a (reused) planner process before every
    # micro-batch and again in the process that commits it: running the
    # admin and Redis round trips each time cost about 0.25 s per batch. The
    # checks are start checks; what they guard is enforced again where it
    # matters (a producer whose transaction timeout the broker no longer
    # accepts fails init_transactions; a missing marker topic fails the write).
    key = tuple(sorted((str(k).lower(), str(v)) for k, v in options.items()))
    now = time.monotonic()
    with _CHECKED_LOCK:
        checked = _CHECKED.get(key)
    if checked is not None and now - checked < START_CHECK_TTL_S:
        return
    prepare(config)
    if config.strong_productions:
        assert config.redis is not None
        CheckpointStore.for_config(config).check_persistence()
    with _CHECKED_LOCK:
        for stale in [k for k, at in _CHECKED.items() if now - at >= START_CHECK_TTL_S]:
            del _CHECKED[stale]
        _CHECKED[key] = now


class ExactlyOnceKafkaStreamWriter(_StreamArrowWriter):
    """Per-partition transactional writer; receives Arrow batches.

    On Spark 4.1 and later it is a ``DataSourceStreamArrowWriter``; on 4.0 a
    stream writer with the ``DataSourceArrowWriter`` mixin, which 4.0 reads
    the same way.

    Picklable: holds only the frozen config, the input layout and column names.
    """

    def __init__(self, config: SinkConfig, layout: InputLayout, columns: list[str]) -> None:
        self.config = config
        self.layout = layout
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        query_id, batch, partition, attempt = task_identity()
        result = write_batches(self.config, self.layout, self.columns, iterator, query_id,
                               batch, partition, attempt)
        return SinkCommitMessage(query_id, batch, partition, result.produced, result.skipped,
                                 result.replayed, result.attempts, result.phases)

    def commit(self, messages: list[WriterCommitMessage | None],
               batchId: int) -> None:
        """Batch ``batchId`` is complete; garbage-collect checkpoints of older batches.

        Batch ``batchId`` has started, so every older batch is in Spark's commit
        log (docs/design.md, invariant 7); ``batchId`` itself may still be
        replayed.
        """
        if self.config.timings_path:
            append_phase_timings(self.config.timings_path, [
                (m.batch, m.partition, m.phases) for m in messages
                if isinstance(m, SinkCommitMessage) and m.phases])
        if not self.config.strong_productions:
            return
        query_ids = {m.query_id for m in messages if isinstance(m, SinkCommitMessage)}
        assert self.config.redis is not None
        store = CheckpointStore.for_config(self.config)
        for query_id in query_ids:
            try:
                store.collect_garbage(query_id, batchId)
            except SinkError as exc:  # GC is best effort; the next commit retries it
                log.warning("sink checkpoint GC after batch %s failed: %s", batchId, exc)

    def abort(self, messages: list[WriterCommitMessage | None],
              batchId: int) -> None:
        """Nothing to undo: uncommitted Kafka transactions are invisible, checkpoints are kept."""
        log.warning("exactly_once_kafka: batch %s aborted; Spark will retry it", batchId)


def release_when_stopped(spark: Any, query: Any, options: Mapping[str, Any]) -> bool:
    """Release the output lease of ``query`` (started by ``spark`` with ``options``) when
    it terminates; return whether that was arranged. Safe to repeat.

    Without it the lease lapses ``lease.seconds`` after the query's last write, and
    a new query on the same output (a checkpoint reset right after a clean
    stop) is refused until then.
    """
    from sinks.checkpoint import release_on_stop

    query_id = str(query.id)
    return release_on_stop(spark, query_id, query_id, SinkConfig.from_options(options))


def register(spark: Any) -> None:
    """Register ``format("exactly_once_kafka")`` with ``spark`` (classic or Spark
    Connect). Safe to repeat.

    Also makes ``spark`` the calling thread's active session, where classic
    Spark looks Python data sources up (:func:`dedup.spark_session.make_active`),
    and checks once per application that Spark's Python workers can import the
    sink (:func:`dedup.spark_session.check_worker_imports`: a one-line
    :class:`~dedup.spark_session.WorkerImportError` saying what
    ``PYSPARK_PYTHON`` must be).
    """
    from sinks.foreach_batch import WORKER_MODULES

    spark.dataSource.register(ExactlyOnceKafkaDataSource)
    make_active(spark)
    check_worker_imports(spark, WORKER_MODULES)
