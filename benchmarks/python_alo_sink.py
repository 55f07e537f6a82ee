"""A plain at-least-once Kafka sink written the way our sink is, for the benchmarks only.

``format("python_alo_kafka")`` reads each partition through the same Python
data-source path as ``exactly_once_kafka`` (Arrow batches, the same record
conversion and record-ID header, a producer cached per Python worker) and
produces with an idempotent, non-transactional confluent-kafka producer:
no checkpoint, no marker, no transaction, no lease. Against it the
exactly-once sink's line in ``bench_sink`` is the cost of exactly-once alone;
against Spark's own Kafka sink it is the cost of the Python path.

:func:`python_alo_one_pass` is the same producer in the job shape of
:func:`sinks.deduplicate_to_kafka` (``foreachBatch``, a shuffle by shard, one
``mapInArrow`` task per partition), with no dedup decision and no
transaction: against it ``bench_e2e``'s one-pass line is the cost of the dedup
decision and exactly-once alone, and against Spark's pipeline it is the most
any implementation of that shape could reach.

Options: ``kafka.bootstrap.servers``, ``topic`` and ``app.id`` (required by the
shared option parser; names nothing here). Spark pickles these classes by
reference, so they live in this module, importable from the repository root.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from confluent_kafka import KafkaError, Producer
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from dedup.constants import RECORD_ID_HEADER
from dedup.worker_imports import settle_worker
from sinks.config import SinkConfig
from sinks.records import InputLayout, check_schema, to_records
from sinks.writer import _as_arrow

NAME = "python_alo_kafka"
_PRODUCERS: dict[str, Producer] = {}


class PythonAloKafkaSink(DataSource):
    """``format("python_alo_kafka")``: at-least-once output through the Python path."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        config = SinkConfig.from_options({**self.options, "strong.productions": "false"})
        return PythonAloKafkaWriter(config, check_schema(schema, config),
                                    [f.name for f in schema.fields])


class PythonAloKafkaWriter(DataSourceStreamWriter, DataSourceArrowWriter):
    """Produces a partition's rows and waits for their acknowledgements; nothing else."""

    def __init__(self, config: SinkConfig, layout: InputLayout, columns: list[str]) -> None:
        self.config = config
        self.layout = layout
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        settle_worker()  # as our sink does
        produce_at_least_once(self.config, self.layout, list(_as_arrow(iterator, self.columns)))
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None],  # type: ignore[override]
               batchId: int) -> None:
        pass  # at-least-once: what was acknowledged is out already

    def abort(self, messages: list[WriterCommitMessage | None],  # type: ignore[override]
              batchId: int) -> None:
        pass  # at-least-once: a retry writes the partition again


def produce_at_least_once(config: SinkConfig, layout: InputLayout, arrow: list[Any]) -> int:
    """Produce Arrow batches as our sink converts them, wait for the acknowledgements;
    return the records produced. Raises when one was not delivered."""
    records, dead = to_records(arrow, config, layout, 0, 0)
    producer = _producer(config)
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            failures.append(error)

    produce = producer.produce
    for topic, part, key, value, own, record_id in records + dead:  # as the sink's loop
        headers: list[tuple[str, str | bytes | None]] = (
            [*own, (RECORD_ID_HEADER, record_id)] if own else [(RECORD_ID_HEADER, record_id)])
        while True:
            try:
                if part is None:
                    produce(topic, value, key, headers=headers, on_delivery=delivered)
                else:
                    produce(topic, value, key, part, headers=headers, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) or failures:
        raise RuntimeError(f"python_alo_kafka: {len(failures)} records not delivered "
                           f"({failures[:1]})")
    return len(records) + len(dead)


def _producer(config: SinkConfig) -> Producer:
    """This worker's producer (one per bootstrap list), as a user's sink would cache it."""
    producer = _PRODUCERS.get(config.bootstrap_servers)
    if producer is None:
        settings = config.producer_settings(0)
        for key in ("transactional.id", "transaction.timeout.ms"):
            settings.pop(key, None)
        producer = _PRODUCERS[config.bootstrap_servers] = Producer(settings)
    return producer


def python_alo_one_pass(df: Any, options: dict[str, str], num_shards: int,
                        partitions: int, shuffle: bool = True, hidden: bool = False) -> Any:
    """``df.writeStream`` in the job shape of :func:`sinks.deduplicate_to_kafka`, at least once.

    Each micro-batch is shuffled by shard as the one-pass writer shuffles it
    (``xxhash64`` of the record ID column, the operator's placement of shards
    on partitions), and one ``mapInArrow`` task per partition produces its rows
    with :func:`produce_at_least_once`: no dedup decision, no checkpoint, no
    transaction. ``df`` needs ``_record_id``.

    For :mod:`benchmarks.bench_shape`, which takes the shape apart:
    ``shuffle=False`` leaves the input's own partitions (no shuffle);
    ``hidden=True`` adds the one-pass writer's hidden columns (shard, batch
    time) in the streaming plan, carries them through the
    shuffle and the Arrow hand-over and drops them in the worker, as
    :class:`sinks.DedupKafkaForeachBatch` does.
    """
    from pyspark.sql import functions as sf

    from dedup.partition_step import batch_time_column
    from dedup.placement import placement_column, shard_column

    config = SinkConfig.from_options({**options, "strong.productions": "false"})
    layout = check_schema(df.schema, config)
    columns = list(df.columns)
    shard = shard_column(sf.col("_record_id"), num_shards)
    if hidden:
        df = df.select("*", shard.alias("_shape_shard"),
                       batch_time_column().alias("_shape_batch_time"))
        shard = sf.col("_shape_shard")

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        settle_worker()  # as the one-pass writer does
        received = [b for b in batches if b.num_rows]
        if hidden:  # read as the one-pass writer reads them, then dropped
            received = [pa.RecordBatch.from_arrays([b.column(c) for c in columns], columns)
                        for b in received]
        produced = produce_at_least_once(config, layout, received)
        yield pa.RecordBatch.from_pydict({"produced": [produced]})

    placement = placement_column(shard, num_shards, partitions)  # built once, as one pass does

    def each_batch(batch_df: Any, _batch_id: int) -> None:
        if shuffle:
            batch_df = batch_df.repartition(partitions, placement)
        batch_df.mapInArrow(write, "produced long").collect()

    return df.writeStream.foreachBatch(each_batch)
