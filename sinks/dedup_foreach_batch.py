"""Dedup and the exactly-once Kafka write of each micro-batch in one pass over its rows.

The operator (:func:`dedup.deduplicate`) followed by the sink moves every row
into a Python worker twice: once for the dedup decision (its IDs), once for
the write (the whole row). Here both happen in the same task::

    config = DedupConfig("orders-v1", redis=RedisConfig(redis_url))
    writer = deduplicate_to_kafka(df, config, {"kafka.bootstrap.servers": ..., "topic": "out"})
    query = writer.option("checkpointLocation", ...).start()

Each micro-batch is shuffled by shard as the operator does; each partition
then decides its rows (one idempotent claim per shard, recorded under the
query and batch, so a retry decides what the first attempt did) and writes
the kept ones through the sink's core (:func:`sinks.writer.write_batches`:
checkpoint first, one Kafka transaction with the batch marker). The
guarantees are those of the operator followed by the sink. The sink takes
its app id and its Redis (the checkpoint store) from the ``DedupConfig``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from typing import Any

from pyspark.sql.types import StringType, StructField, StructType

from dedup.config import DedupConfig, InvalidIdPolicy, parse_bool, redact_url
from dedup.metrics import DedupMetrics
from dedup.operator import Deduplicator
from dedup.spark_session import before_stop, check_worker_imports, is_connect
from sinks.config import normalize_options
from sinks.exceptions import QueryIdReusedError, SinkConfigError
from sinks.foreach_batch import WORKER_MODULES, WRITTEN_SCHEMA, ExactlyOnceKafkaForeachBatch

# Hidden columns computed in the streaming plan (so the batch timestamp is the
# one Spark keeps in its offset log) and dropped before the write. The ID problem
# codes are not one of them: the task computes them from the IDs it receives
# (dedup.partition_step.arrow_problem_codes), which spares the JVM a column.
SHARD, BATCH_TIME, EVENT_SECONDS = ("_dedup_shard", "_dedup_batch_time", "_dedup_event_seconds")
HIDDEN = (SHARD, BATCH_TIME, EVENT_SECONDS)
FUSED_SCHEMA = StructType([*WRITTEN_SCHEMA.fields, StructField("metrics", StringType())])
RECENT_BATCHES = 64
"""How many micro-batches' dedup counts :meth:`DedupKafkaForeachBatch.batch_metrics` keeps."""


class DedupKafkaForeachBatch:
    """``foreachBatch`` function that deduplicates a micro-batch and writes it exactly once.

    Parameters
    ----------
    config:
        The dedup operator's :class:`~dedup.DedupConfig`.
    options:
        The sink's options, as for :class:`~sinks.ExactlyOnceKafkaForeachBatch`,
        without ``app.id`` and ``redis.*``: the sink takes the app id and its
        Redis from ``config``. Such an option that disagrees with ``config`` is
        refused (:class:`~sinks.SinkConfigError`); one that agrees is accepted.
    num_partitions:
        Partitions of the shuffle by shard, which are also the sink's
        partitions (pinned per dedup app id, as for the operator).

    Build the query with :meth:`write_stream` (it adds the columns the
    decision needs). Calling it again for the same batch id is safe: the
    claims replay their decisions and the sink skips committed partitions.
    A failure raises, and the query fails or Spark retries the batch.

    Under Spark Connect the function runs in a Python process of the server,
    on a copy taken when the query is built: :attr:`last_metrics` and
    :meth:`batch_metrics` of the client's instance stay empty there, and the
    app id's lease lapses ``lease_seconds`` after the last batch instead of being
    released when the query stops.
    """

    def __init__(self, config: DedupConfig, options: Mapping[str, Any],
                 num_partitions: int | None = None) -> None:
        self.dedup = Deduplicator(config, num_partitions, gc_listener=False)
        self.sink = ExactlyOnceKafkaForeachBatch(one_pass_options(config, options),
                                                 redis=config.redis)
        # What each batch needs of the plan (its columns stay on the client).
        self._partitions: int | None = None
        self._step_config: DedupConfig | None = None
        self._placement: Any = None  # the shuffle's column, built once (Py4J per shard)
        self._held: set[str] = set()
        self.last_metrics: DedupMetrics | None = None
        self._recent: dict[int, DedupMetrics] = {}
        self._connect_client = False  # built for a Spark Connect query (counts stay remote)

    def __getstate__(self) -> dict[str, Any]:
        # Spark Connect pickles the function when the query is built (see the class).
        state = dict(self.__dict__)
        state.update(_held=set(), _placement=None, last_metrics=None, _recent={},
                     _connect_client=False)
        return state

    def write_stream(self, df: Any) -> Any:
        """``df.writeStream`` with this function as its ``foreachBatch``.

        Runs the operator's start-up checks (ID column, Redis, recorded
        layout). Raises what :meth:`dedup.Deduplicator.apply` raises.
        """
        taken = sorted(set(HIDDEN) & set(df.columns))
        if taken:
            raise SinkConfigError(f"columns {taken} are reserved by deduplicate_to_kafka; "
                                  "rename them")
        plan = self.dedup.plan(df)
        _, shard, _problem, batch_time, *event = plan.inputs
        hidden = [shard.alias(SHARD), batch_time.alias(BATCH_TIME)]
        if event:
            hidden.append(event[0].alias(EVENT_SECONDS))
        check_worker_imports(df.sparkSession, WORKER_MODULES)
        # no listener here under Spark Connect, but the user's spark.stop() must still
        # let the client's last release RPCs land first (dedup.spark_session.before_stop)
        before_stop(df.sparkSession)
        self._partitions, self._step_config = plan.partitions, plan.step_config
        self._placement = None
        self._connect_client = is_connect(df)
        # a query of this app id stopped just before holds its lease until the session's
        # listener hears its end: this query's first batch would be refused
        from dedup.gc import await_stopped_queries

        await_stopped_queries(df.sparkSession)
        return df.select("*", *hidden).writeStream.foreachBatch(self)

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as sf

        from dedup.placement import placement_column

        if self._partitions is None or self._step_config is None:
            raise SinkConfigError("start the query with DedupKafkaForeachBatch.write_stream(df) "
                                  "(or deduplicate_to_kafka): it adds the columns the dedup "
                                  "decision needs")
        partitions, step_config = self._partitions, self._step_config
        columns = [c for c in df.columns if c not in HIDDEN]
        layout, _, query_id, batch = self.sink.begin_batch(df, batch_id, columns)
        self._refuse_reused_query_id(query_id, batch)
        sink_config = self.sink.config
        self._hold_lease(df, query_id)

        def write(batches: Iterator[Any]) -> Iterator[Any]:
            import pyarrow as pa
            from pyspark import TaskContext

            from dedup.worker_imports import settle_worker
            from sinks.foreach_batch import written_row
            from sinks.timing import PhaseClock
            from sinks.transactions import producer_ahead
            from sinks.writer import write_batches

            settle_worker()
            context = TaskContext.get()
            assert context is not None
            partition = context.partitionId()
            clock = PhaseClock()
            with clock("receive"):
                received = [b for b in batches if b.num_rows]
            # the partition's new producer (if this worker needs one) is made while it
            # decides: Spark moves partitions between workers at about every batch
            with (producer_ahead(sink_config, partition, query_id, batch) if received
                  else nullcontext()):
                with clock("dedup"):
                    kept, metrics = keep_rows(step_config, received, columns, query_id, batch,
                                              partition)
                written = write_batches(sink_config, layout, columns, kept, query_id, batch,
                                        partition, context.attemptNumber())
            row = written_row(partition, written.produced, {**clock.seconds, **written.phases})
            yield row.append_column("metrics", pa.array([json.dumps(metrics)], pa.string()))

        if self._placement is None:
            self._placement = placement_column(sf.col(SHARD), step_config.num_shards,
                                               partitions)
        sharded = df.repartition(partitions, self._placement)
        written = sharded.mapInArrow(write, FUSED_SCHEMA).collect()
        self.sink.end_batch(written, query_id, batch)
        # Every partition of the batch is committed in Kafka: a re-run of it
        # (Spark had not yet written its commit log) writes nothing, so its
        # decisions are no longer needed for a replay.
        self.dedup.catalog.commit_progress(query_id, batch)
        totals: dict[str, int] = {}
        for row in written:
            for name, value in json.loads(row["metrics"]).items():
                totals[name] = totals.get(name, 0) + value
        self.last_metrics = DedupMetrics.from_observed(totals)
        self._recent[batch_id] = self.last_metrics
        for old in sorted(self._recent)[:-RECENT_BATCHES]:
            del self._recent[old]

    def batch_metrics(self, batch_id: int) -> DedupMetrics | None:
        """The dedup counts of micro-batch ``batch_id`` if it is among the last
        :data:`RECENT_BATCHES` this function wrote, else None. Safe to repeat.

        A one-pass query has no ``observedMetrics`` of the dedup step (the
        decision runs in a job of its own inside ``foreachBatch``): read its
        counts here, by the ``batchId`` of its progress reports. Raises
        :class:`~sinks.SinkConfigError` under Spark Connect, where the counts
        stay in the server's copy of this function.
        """
        if self._connect_client:
            raise SinkConfigError(
                "DedupKafkaForeachBatch.batch_metrics is not available under Spark Connect: "
                "the function runs on a copy in a Python process of the server, and its "
                "counts stay there")
        return self._recent.get(batch_id)

    def _refuse_reused_query_id(self, query_id: str, batch: int) -> None:
        """Refuse a batch below one the query id already committed, before any claim.

        The sink's own check (the batch marker, in each task) comes after the
        decision: the batch's new IDs would be claimed, then never written, and a
        query under a new ``query.id`` (the refusal's advice) would drop them as seen.
        """
        committed = self.dedup.catalog.committed_batch(query_id)
        if committed is not None and committed > batch:
            raise QueryIdReusedError(
                f"one-pass batch {batch}: the dedup catalog of app id "
                f"{self.dedup.config.app_id!r} records that query id {query_id!r} already "
                f"committed batch {committed}: the query id was reused (a reset or new "
                "checkpoint location, or two queries with one id). Give this query a new "
                "option query.id (it then writes every record the earlier query did not), "
                "or restore the old checkpoint location; nothing of this batch was claimed "
                "or written")

    def _hold_lease(self, df: Any, query_id: str) -> None:
        """Keep the dedup app id's lease while the query idles, release it when the
        query stops (as the operator's listener does for its queries)."""
        if query_id in self._held or is_connect(df):
            # Spark Connect: the function's process ends with the query, before a
            # listener there would hear it stop; the lease lapses by itself.
            return
        from dedup.gc import session_listener

        spark = self.sink._manager  # the session that runs the query (begin_batch found it)
        spark_query_id, _ = self.sink.identity(df)
        if spark is None or spark_query_id != query_id:
            return  # a fixed query.id, or no session that hears the query: the lease lapses
        session_listener(spark).hold(query_id, self.dedup.metric_name, self.dedup.catalog)
        self._held.add(query_id)

    def release(self) -> None:
        """Give up the sink's output (see :meth:`ExactlyOnceKafkaForeachBatch.release`).
        Safe to repeat."""
        self.sink.release()


def one_pass_options(config: DedupConfig, options: Mapping[str, Any]) -> dict[str, Any]:
    """The sink options of one pass: ``options`` with ``config``'s app id.

    The app id and the Redis are the ``DedupConfig``'s: an ``app.id``,
    ``redis.url`` or ``redis.require.persistence`` option is only accepted
    when it says the same (a pipeline whose claims and checkpoints lived under
    two app ids or in two Redis would not be the one pipeline it looks like).
    Pure; safe to repeat.

    Raises
    ------
    SinkConfigError
        Such an option disagrees with ``config`` (one line naming both values).
    """
    opts = normalize_options(options)
    given = opts.get("app.id")
    if given is not None and str(given) != config.app_id:
        raise SinkConfigError(
            f"option app.id={str(given)!r} disagrees with DedupConfig.app_id="
            f"{config.app_id!r}: deduplicate_to_kafka takes the app id from the DedupConfig; "
            "remove option app.id")
    url = opts.get("redis.url")
    if url is not None and str(url) != config.redis.url:
        raise SinkConfigError(
            f"option redis.url={redact_url(str(url))!r} disagrees with DedupConfig.redis.url="
            f"{redact_url(config.redis.url)!r}: deduplicate_to_kafka takes the Redis from the "
            "DedupConfig; remove option redis.url")
    persistence = opts.get("redis.require.persistence")
    if persistence is not None and parse_bool(
            "option redis.require.persistence", persistence,
            error=SinkConfigError) != config.redis.require_persistence:
        raise SinkConfigError(
            f"option redis.require.persistence={persistence!r} disagrees with "
            f"DedupConfig.redis.require_persistence={config.redis.require_persistence}: "
            "deduplicate_to_kafka takes the Redis from the DedupConfig; remove option "
            "redis.require.persistence")
    return {**opts, "app.id": config.app_id}


def keep_rows(config: DedupConfig, received: list[Any], columns: list[str], query_id: str,
              batch: int, partition: int) -> tuple[list[Any], dict[str, int]]:
    """Decide one partition's rows (Arrow batches with the hidden columns); return the
    batches to write (``columns`` only) and the step's metrics. A retry of the same
    (query, batch) decides the same: the claims replay their recorded decisions."""
    import pyarrow as pa

    from dedup.metrics import INVALID_ID, KEPT, STATUS, partition_metrics
    from dedup.partition_step import arrow_problem_codes, batch_clock, decide_partition, id_values

    if not received:
        return [], {}
    table = pa.Table.from_batches(received)
    now = batch_clock(config, float(table.column(BATCH_TIME)[0].as_py()), str(batch), partition)
    ids = table.column(config.id_column)
    values = id_values(ids, config, f"batch {batch}")  # refuses text that is not UTF-8 first
    result = decide_partition(
        config, values, table.column(SHARD).to_numpy(), query_id, str(batch), query_id,
        partition, now=now, problems=arrow_problem_codes(ids),
        event_seconds=(table.column(EVENT_SECONDS).to_numpy(zero_copy_only=False)
                       if EVENT_SECONDS in table.column_names else None),
        strict=True)  # every batch of one pass records its commit (commit_progress)
    status = result[STATUS]
    invalid = status == INVALID_ID
    if config.invalid_ids != InvalidIdPolicy.DEAD_LETTER:
        invalid[:] = False  # none: the step failed on an invalid ID
    passed = (status == KEPT) | invalid
    out = table.filter(pa.array(passed)).select(columns)
    if invalid.any():
        # A null ID sends the record to the sink's dead-letter topic.
        index = out.schema.get_field_index(config.id_column)
        ids = out.column(index)
        nulled = pa.array([None if bad else value for bad, value in
                           zip(invalid[passed], ids.to_pylist(), strict=True)], ids.type)
        out = out.set_column(index, config.id_column, nulled)
    return out.to_batches(), partition_metrics(result)


def deduplicate_to_kafka(df: Any, config: DedupConfig, options: Mapping[str, Any],
                         num_partitions: int | None = None) -> Any:
    """Deduplicate ``df`` and write it to Kafka exactly once, in one pass over each batch.

    Returns the ``DataStreamWriter`` (set ``checkpointLocation``, a trigger,
    then ``start()``). Same result as ``deduplicate(df, config)`` followed by
    the ``exactly_once_kafka`` sink, with one Python round trip per row
    instead of two. The sink takes the app id and the Redis from ``config``
    (see :func:`one_pass_options`). Raises the operator's start-up errors and
    :class:`~sinks.SinkConfigError` for invalid sink options, or an ``app.id`` /
    ``redis.*`` option that disagrees with ``config``.
    """
    return DedupKafkaForeachBatch(config, options, num_partitions).write_stream(df)
