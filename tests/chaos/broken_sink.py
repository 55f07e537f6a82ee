"""A deliberately broken copy of the exactly-once sink: it ignores the batch marker
(the Kafka one and its Redis copy).

Used only to prove that the chaos checks catch a sink that is not exactly-once.
Importable by Spark's Python workers (data sources are pickled by reference).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter
from pyspark.sql.types import StructType

import sinks.transactions
from sinks.datasource import (
    ExactlyOnceKafkaDataSource,
    ExactlyOnceKafkaStreamWriter,
    SinkCommitMessage,
)

BROKEN_FORMAT = "broken_marker_kafka"


class BrokenMarkerDataSource(ExactlyOnceKafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return BROKEN_FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        writer = super().streamWriter(schema, overwrite)
        assert isinstance(writer, ExactlyOnceKafkaStreamWriter)
        return BrokenMarkerWriter(writer.config, writer.layout, writer.columns)


class BrokenMarkerWriter(ExactlyOnceKafkaStreamWriter):
    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        # The patch lives only for this call: the worker process is reused by
        # other tests, which must get the real sink.
        real = sinks.transactions.read_marker
        real_copy = sinks.transactions._committed_per_redis
        sinks.transactions.read_marker = lambda config, partition, **_: (None, -1)
        sinks.transactions._committed_per_redis = lambda *_: False
        try:
            return super().write(iterator)
        finally:
            sinks.transactions.read_marker = real
            sinks.transactions._committed_per_redis = real_copy
