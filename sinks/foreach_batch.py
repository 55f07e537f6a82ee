"""The exactly-once Kafka sink as a ``foreachBatch`` callable.

For pipelines that already use ``foreachBatch`` (or need it, e.g. to write one
micro-batch to several places)::

    sink = ExactlyOnceKafkaForeachBatch({"kafka.bootstrap.servers": ..., "topic": "out",
                                         "app_id": "orders-v1", "redis.url": ...})
    df.writeStream.foreachBatch(sink).option("checkpointLocation", ...).start()

Each partition of the micro-batch DataFrame is written by the same core as
the data source (:func:`sinks.writer.write_batches`), with the batch id that
Spark passes to the callable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sinks.admin import prepare
from sinks.checkpoint import CheckpointStore
from sinks.config import SinkConfig
from sinks.exceptions import SinkConfigError
from sinks.records import check_schema


class ExactlyOnceKafkaForeachBatch:
    """``foreachBatch`` function that writes each micro-batch exactly once.

    Parameters
    ----------
    options:
        The data source's options (see :class:`sinks.config.SinkConfig`), plus
        optional ``query_id``: a stable name used in markers and checkpoint
        keys when Spark's ``sql.streaming.queryId`` is not visible to the
        callable. It must stay the same across restarts from one checkpoint.

    Calling it again for the same batch id is safe (the batch is skipped).
    A failure raises, and the query fails or Spark retries the batch.
    """

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        self.config = SinkConfig.from_options(self.options)
        self.fixed_query_id = self.options.get("query_id")
        self._prepared = False

    def _query_id(self, df: Any) -> str:
        if self.fixed_query_id:
            return str(self.fixed_query_id)
        query_id = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        if not query_id:
            raise SinkConfigError(
                "the streaming query id is not visible in foreachBatch here: pass option "
                "query_id (a stable name, the same across restarts of this query)"
            )
        return str(query_id)

    def __call__(self, df: Any, batch_id: int) -> None:
        config = self.config
        if not self._prepared:
            prepare(config)
            if config.strong_productions:
                assert config.redis is not None
                CheckpointStore(config.redis, config.app_id).check_persistence()
            self._prepared = True
        layout = check_schema(df.schema, config)
        columns = list(df.columns)
        query_id = self._query_id(df)
        batch = int(batch_id)

        def write(batches: Iterator[Any]) -> Iterator[Any]:
            import pyarrow as pa
            from pyspark import TaskContext

            from sinks.writer import write_batches

            context = TaskContext.get()
            assert context is not None
            result = write_batches(config, layout, columns, batches, query_id, batch,
                                   context.partitionId(), context.attemptNumber())
            yield pa.RecordBatch.from_pydict({"produced": pa.array([result.produced],
                                                                   pa.int64())})

        df.mapInArrow(write, "produced long").collect()
        if config.strong_productions:
            assert config.redis is not None
            CheckpointStore(config.redis, config.app_id).collect_garbage(query_id, batch)
