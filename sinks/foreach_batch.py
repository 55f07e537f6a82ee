"""The exactly-once Kafka sink as a ``foreachBatch`` callable.

For pipelines that already use ``foreachBatch`` (or need it, e.g. to write one
micro-batch to several places)::

    sink = ExactlyOnceKafkaForeachBatch({"kafka.bootstrap.servers": ..., "topic": "out",
                                         "app.id": "orders-v1", "redis.url": ...})
    df.writeStream.foreachBatch(sink).option("checkpointLocation", ...).start()

Each partition of the micro-batch DataFrame is written by the same core as
the data source (:func:`sinks.writer.write_batches`), with the batch id that
Spark passes to the callable.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.types import LongType, StringType, StructField, StructType

from dedup.config import RedisConfig
from dedup.spark_session import (
    batch_identity,
    batch_scope,
    check_worker_imports,
    is_connect,
    query_session,
)
from sinks.admin import prepare
from sinks.checkpoint import CheckpointStore, release_on_stop
from sinks.config import SinkConfig, normalize_options
from sinks.exceptions import OutputNameInUseError, SinkConfigError
from sinks.records import check_schema
from sinks.timing import append_phase_timings

# (app_id, output.name) -> the first sink instance of this process that wrote it.
# Two sinks of one pair would share transactional ids, markers and checkpoints:
# the second would find the first one's marker and skip every batch, silently.
# Weak references, so a sink that is gone (its query over) frees its name.
# Bound: one entry per (app.id, output name) pair this driver process ever
# wrote to, a fixed set per application; a dead reference is replaced in place.
_OUTPUTS: dict[tuple[str, str], weakref.ref[Any]] = {}
_OUTPUTS_LOCK = threading.Lock()


class ExactlyOnceKafkaForeachBatch:
    """``foreachBatch`` function that writes each micro-batch exactly once.

    Parameters
    ----------
    options:
        The data source's options (see :class:`sinks.config.SinkConfig`), plus
        optional ``query.id``: a stable name used in markers and checkpoint
        keys when Spark's query id is not visible to the callable (under
        Spark Connect: when the session runs several streaming queries). It
        must stay the same across restarts from one checkpoint.
    redis:
        The checkpoint store's :class:`~dedup.config.RedisConfig`, in place of
        the options ``redis.url`` and ``redis.require.persistence``
        (:class:`DedupKafkaForeachBatch` passes its ``DedupConfig``'s).

    Calling it again for the same batch id is safe (the batch is skipped).
    A failure raises, and the query fails or Spark retries the batch.
    Building it raises :class:`~sinks.SinkConfigError` for invalid options.

    Several sinks of one app id (several outputs per batch) need distinct
    ``output.name`` options: a second live instance of one (app_id,
    output.name) in this process is refused at its first call.
    """

    def __init__(self, options: Mapping[str, Any], *, redis: RedisConfig | None = None) -> None:
        self.options = normalize_options(options)
        self.config = SinkConfig.from_options(self.options, redis)
        self.fixed_query_id = self.options.get("query.id")
        self._prepared = False
        self._owners: set[str] = set()  # query ids whose output lease this instance took
        self._stop_hooks: set[str] = set()  # Spark query ids whose stop releases it
        # Spark query id -> the runs of it this instance wrote for
        self._runs: dict[str, set[str]] = {}
        # Spark query id -> whether it was seen active in the session that started it,
        # whose query manager then tells when it has stopped (see claim_output)
        self._watched: dict[str, bool] = {}
        # Spark Connect: the (query id, run id) of the run this copy was unpickled for
        self._connect_identity: tuple[str | None, str | None] | None = None
        self._manager: Any = None  # the session whose query manager runs the query

    def __getstate__(self) -> dict[str, Any]:
        # Spark Connect pickles the function to run it in a Python process of the
        # server: the copy starts afresh there (sessions do not travel).
        state = dict(self.__dict__)
        state.update(_prepared=False, _owners=set(), _stop_hooks=set(), _runs={},
                     _watched={}, _connect_identity=None, _manager=None)
        return state

    def claim_output(self, spark_query_id: str | None = None,
                     run_id: str | None = None) -> None:
        """Register this instance as the writer of its (app_id, output.name) in this process.

        ``spark_query_id`` and ``run_id``: the streaming query run this instance
        writes for. Another live instance that wrote for the same query in another
        run is replaced: Spark runs one query id at a time, so that instance
        belongs to an earlier run (a restart after a failure, with a new sink).
        So is one whose every query has stopped, as the query manager of the
        process's first session tells (a checkpoint reset in the same process,
        with a new writer). Raises :class:`OutputNameInUseError` (fatal) when
        another live instance holds the pair for a query that runs or whose state
        is unknown here, or for the same run (two outputs of one batch under one
        name). Safe to repeat on the same instance.
        """
        key = (self.config.app_id, self.config.output_name)
        with _OUTPUTS_LOCK:
            ref = _OUTPUTS.get(key)
            owner = ref() if ref is not None else None
            if spark_query_id and run_id:
                self._runs.setdefault(spark_query_id, set()).add(run_id)
            earlier_run = (owner is not None and owner is not self and bool(spark_query_id)
                           and bool(run_id) and spark_query_id in owner._runs
                           and run_id not in owner._runs[spark_query_id])
            if owner is self:
                return
            if owner is None or earlier_run or owner._stopped():
                _OUTPUTS[key] = weakref.ref(self)
                return
        raise OutputNameInUseError(
            f"another ExactlyOnceKafkaForeachBatch of app.id {key[0]!r} already writes "
            f"output.name={key[1]!r} in this process; both would share transactional ids and "
            "batch markers and the second would skip every batch: give each output its own "
            "option output.name (e.g. output.name=audit); stop the other query first (its "
            "writer is then replaced), or release() that writer once its query has stopped "
            "if the query ran in another SparkSession or under option query.id"
        )

    def _watch(self, spark_query_id: str | None) -> None:
        """Remember whether the session that started the query runs ``spark_query_id``
        (only its query manager can later say it stopped). One lookup per query id."""
        if not spark_query_id or spark_query_id in self._watched:
            return
        spark = self._manager
        try:
            seen = spark is not None and spark.streams.get(spark_query_id) is not None
        except Exception:  # py4j errors of a stopping session: not watched
            seen = False
        self._watched[spark_query_id] = seen

    def _stopped(self) -> bool:
        """Whether every query this instance wrote for is known to have stopped.

        False when one of them is unknown to the session that started it (run by
        another session, or named only by the ``query.id`` option): the instance
        may still write, and taking its name over would make two writers of one
        output."""
        if not self._runs or not all(self._watched.get(query_id) for query_id in self._runs):
            return False
        spark = self._manager
        try:
            return spark is not None and all(spark.streams.get(query_id) is None
                                             for query_id in self._runs)
        except Exception:  # py4j errors of a stopping session: not known to be stopped
            return False

    def release(self) -> None:
        """Give up this instance's (app_id, output.name) and its output lease in Redis,
        so that another instance or query may write the output. Call once its query
        has stopped. Safe to repeat.

        The lease is also released when the query terminates, where this process's
        first SparkSession runs it; otherwise (and always under Spark Connect, whose
        copy of this function writes in a process of the server) it lapses
        ``lease.seconds`` after the last write.
        """
        key = (self.config.app_id, self.config.output_name)
        with _OUTPUTS_LOCK:
            ref = _OUTPUTS.get(key)
            if ref is not None and ref() is self:
                del _OUTPUTS[key]
        if self._owners and self.config.strong_productions and self.config.redis is not None:
            store = CheckpointStore.for_config(self.config)
            for owner in sorted(self._owners):
                store.release_lease(owner)
            self._owners.clear()

    def _release_on_stop(self, df: Any, spark_query_id: str | None, owner: str) -> None:
        if not spark_query_id or spark_query_id in self._stop_hooks:
            return
        if is_connect(df):
            # The function runs in a Python process of the Connect server that ends
            # with the query, before a listener there would hear it stop: the lease
            # lapses lease.seconds after the last write (release() cannot reach it either).
            return
        # The micro-batch DataFrame belongs to the query's cloned session, whose
        # listener bus never hears the query's events (see query_session).
        spark = self._manager
        if spark is not None and release_on_stop(spark, spark_query_id, owner, self.config):
            self._stop_hooks.add(spark_query_id)

    def identity(self, df: Any) -> tuple[str | None, str | None]:
        """``(Spark query id, run id)`` of the query whose micro-batch ``df`` is, as far
        as it can be told here (see :func:`dedup.spark_session.batch_identity`); also
        remembers the session that runs it. Under Spark Connect one lookup per run."""
        if is_connect(df):
            if self._connect_identity is None or self._connect_identity[0] is None:
                self._connect_identity = batch_identity(df)
            identity = self._connect_identity
        else:
            identity = batch_identity(df)
        if self._manager is None or not is_connect(df):
            self._manager = query_session(df)
        return identity

    def _query_id(self, spark_query_id: str | None, connect: bool) -> str:
        if self.fixed_query_id:
            return str(self.fixed_query_id)
        if not spark_query_id:
            if connect:
                raise SinkConfigError(
                    "under Spark Connect foreachBatch cannot tell its streaming query while "
                    "its session runs several: pass option query.id (a stable name, the same "
                    "across restarts of this query)")
            raise SinkConfigError(
                "the streaming query id is not visible in foreachBatch here: pass option "
                "query.id (a stable name, the same across restarts of this query)"
            )
        return str(spark_query_id)

    def __call__(self, df: Any, batch_id: int) -> None:
        layout, columns, query_id, batch = self.begin_batch(df, batch_id)
        config = self.config
        spark_query_id, _ = self.identity(df)

        def write(batches: Iterator[Any]) -> Iterator[Any]:
            from pyspark import TaskContext

            from sinks.writer import write_batches

            context = TaskContext.get()
            assert context is not None
            result = write_batches(config, layout, columns, batches, query_id, batch,
                                   context.partitionId(), context.attemptNumber())
            yield written_row(context.partitionId(), result.produced, result.phases)

        # Under Spark Connect the tasks learn the batch from a job tag (a dedup
        # step upstream records its decisions under it); classic: nothing to do.
        with batch_scope(df, batch, query_id, spark_query_id):
            written = df.mapInArrow(write, WRITTEN_SCHEMA).collect()
        self.end_batch(written, query_id, batch)

    def begin_batch(self, df: Any, batch_id: int, columns: list[str] | None = None
                    ) -> tuple[Any, list[str], str, int]:
        """Checks before a micro-batch is written: returns its input layout, columns,
        query id and batch id. ``columns``: the ones written (default: all of ``df``'s;
        a subset costs no ``select`` on the driver). Raises what the call raises
        before writing."""
        config = self.config
        spark_query_id, run_id = self.identity(df)
        # before anything is written: a shared output is refused
        self.claim_output(spark_query_id, run_id)
        self._watch(spark_query_id)
        if not self._prepared:
            check_worker_imports(df.sparkSession, WORKER_MODULES)
            prepare(config)
            if config.strong_productions:
                assert config.redis is not None
                CheckpointStore.for_config(config).check_persistence()
            self._prepared = True
        schema = df.schema
        if columns is not None:
            schema = StructType([field for field in schema.fields if field.name in columns])
        layout = check_schema(schema, config)
        query_id = self._query_id(spark_query_id, is_connect(df))
        self._owners.add(query_id)
        self._release_on_stop(df, spark_query_id, query_id)
        return layout, [field.name for field in schema.fields], query_id, int(batch_id)

    def end_batch(self, written: list[Any], query_id: str, batch: int) -> None:
        """After every partition of ``batch`` was written (rows of :data:`WRITTEN_SCHEMA`):
        record the phase timings, collect older checkpoints. Safe to repeat."""
        config = self.config
        append_phase_timings(config.timings_path, [
            (batch, row["partition"], json.loads(row["phases"])) for row in written])
        if config.strong_productions:
            assert config.redis is not None
            CheckpointStore.for_config(config).collect_garbage(query_id, batch)


# What the sink's tasks import in Spark's Python workers (checked once per application).
WORKER_MODULES = ("sinks", "confluent_kafka")

# One row per written partition, collected by the driver (a StructType: a DDL
# string would be parsed by the JVM at every micro-batch).
WRITTEN_SCHEMA = StructType([StructField("partition", LongType()),
                             StructField("produced", LongType()),
                             StructField("phases", StringType())])


def written_row(partition: int, produced: int, phases: Mapping[str, Any]) -> Any:
    """The Arrow batch of one written partition (:data:`WRITTEN_SCHEMA`)."""
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({
        "partition": pa.array([partition], pa.int64()),
        "produced": pa.array([produced], pa.int64()),
        "phases": pa.array([json.dumps(phases)], pa.string())})
