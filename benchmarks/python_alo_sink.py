"""A plain at-least-once Kafka sink written the way our sink is, for the benchmarks only.

``format("python_alo_kafka")`` reads each partition through the same Python
data-source path as ``exactly_once_kafka`` (Arrow batches, the same record
conversion and record-ID header, a producer cached per Python worker) and
produces with an idempotent, non-transactional confluent-kafka producer:
no checkpoint, no marker, no transaction, no lease. Against it the
exactly-once sink's line in ``bench_sink`` is the cost of exactly-once alone;
against Spark's own Kafka sink it is the cost of the Python path.

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
from dedup.worker_imports import keep_static_archive_caches
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
        keep_static_archive_caches()  # as our sink does
        arrow = list(_as_arrow(iterator, self.columns))
        records, dead = to_records(arrow, self.config, self.layout, 0, 0)
        producer = _producer(self.config)
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: Any) -> None:
            if error is not None:
                failures.append(error)

        for record in records + dead:
            headers: list[tuple[str, str | bytes | None]] = [
                *record.headers, (RECORD_ID_HEADER, record.record_id)]
            while True:
                try:
                    if record.partition is None:
                        producer.produce(record.topic, record.value, record.key,
                                         headers=headers, on_delivery=delivered)
                    else:
                        producer.produce(record.topic, record.value, record.key,
                                         record.partition, headers=headers,
                                         on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
        if producer.flush(60) or failures:
            raise RuntimeError(f"python_alo_kafka: {len(failures)} records not delivered "
                               f"({failures[:1]})")
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None],  # type: ignore[override]
               batchId: int) -> None:
        pass  # at-least-once: what was acknowledged is out already

    def abort(self, messages: list[WriterCommitMessage | None],  # type: ignore[override]
              batchId: int) -> None:
        pass  # at-least-once: a retry writes the partition again


def _producer(config: SinkConfig) -> Producer:
    """This worker's producer (one per bootstrap list), as a user's sink would cache it."""
    producer = _PRODUCERS.get(config.bootstrap_servers)
    if producer is None:
        settings = config.producer_settings(0)
        for key in ("transactional.id", "transaction.timeout.ms"):
            settings.pop(key, None)
        producer = _PRODUCERS[config.bootstrap_servers] = Producer(settings)
    return producer
