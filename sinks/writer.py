"""The per-partition write core shared by the data source and the foreachBatch sink.

Arrow batches -> Kafka records -> (strong productions) checkpoint, first
attempt wins -> one Kafka transaction with the batch marker.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from dedup.failpoints import fail_point
from dedup.worker_imports import settle_worker
from sinks.checkpoint import CheckpointStore, decode_batches, encode_batches
from sinks.config import SinkConfig
from sinks.exceptions import CheckpointSchemaError, OutputNameInUseError
from sinks.records import InputLayout, iter_rows_as_batches, to_records
from sinks.timing import PhaseClock
from sinks.transactions import PartitionResult, cluster_id, topic_limits, write_partition


def _as_arrow(items: Iterable[Any], columns: list[str]) -> Iterable[Any]:
    """Accept Arrow record batches or Spark Rows (whichever the runner hands over)."""
    iterator = iter(items)
    first = next(iterator, None)
    if first is None:
        return []
    chained = itertools.chain([first], iterator)
    if hasattr(first, "num_rows"):
        return chained
    return iter_rows_as_batches(chained, columns)


READ_COLUMNS = ("value", "key", "topic", "partition", "headers")
"""The input columns the sink makes records of (:func:`sinks.records.to_records`), besides
the record ID column."""


def _run_id() -> str:
    """The streaming query run of the calling Spark task ('' outside one): Spark runs
    each micro-batch's jobs under the job group of the run id, new at every start."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return (context.getLocalProperty("spark.jobGroup.id") or "") if context else ""


def _normal_type(arrow_type: Any) -> str:
    """A column type for comparison; large and plain string/binary are the same data."""
    import pyarrow as pa

    if pa.types.is_large_string(arrow_type):
        return "string"
    if pa.types.is_large_binary(arrow_type):
        return "binary"
    return str(arrow_type)


def check_replay_schema(stored: list[Any], current: list[Any], columns: list[str],
                        batch: int, partition: int, record_id_column: str) -> None:
    """Refuse to replay a checkpoint whose columns the sink reads differ from this
    attempt's input.

    The Arrow IPC checkpoint carries its schema. When the code between the
    source and the sink changed after the first attempt stored it (a crash,
    a deploy, the restart), the stored rows no longer fit the input layout
    computed on the driver, and emitting them would write wrong keys, values
    or topics. Only the columns the sink reads (:data:`READ_COLUMNS` and the
    record ID column) are compared: the records are made from those alone, so
    a column it ignores (the event-time column that the one-pass form of
    ``dedup run`` carries and the two-step form does not) cannot make the
    replay emit other records. Pure.
    """
    if not stored:
        return  # the first attempt had no rows: nothing is replayed
    read = {*READ_COLUMNS, record_id_column}
    old = {f.name: _normal_type(f.type) for f in stored[0].schema if f.name in read}
    if current:
        new = {f.name: _normal_type(f.type) for f in current[0].schema if f.name in read}
    else:  # no rows this time: only the names are known
        new = {name: old.get(name, "?") for name in columns if name in read}
    differ = sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))
    if differ:
        detail = ", ".join(f"{name} ({old.get(name, 'absent')} in the checkpoint, "
                           f"{new.get(name, 'absent')} now)" for name in differ)
        raise CheckpointSchemaError(
            f"the sink checkpoint of batch {batch} partition {partition} was written by other "
            f"code: columns differ: {detail}. Replaying it would emit wrong records: restore "
            "the previous code until this batch is committed, then deploy the change"
        )


def write_batches(config: SinkConfig, layout: InputLayout, columns: list[str],
                  batches: Iterable[Any], query_id: str, batch: int, partition: int,
                  attempt: int = 0) -> PartitionResult:
    """Write one partition of one micro-batch exactly once.

    With strong productions the partition's records (with their IDs) are
    stored first under (app, query, batch, partition); if a previous attempt
    stored them, those are emitted instead of this attempt's rows. Safe to
    repeat; a failure leaves nothing visible to ``read_committed`` readers
    and means the Spark task must be retried.
    """
    clock = PhaseClock()
    with clock("input"):
        settle_worker()  # per-task overhead of the worker, see the module
        arrow = list(_as_arrow(batches, columns))
    replayed = won = False
    store: CheckpointStore | None = None
    if config.strong_productions:
        assert config.redis is not None  # checked by SinkConfig
        store = CheckpointStore.for_config(config)
        # The checkpoint is the Arrow input as received (cheap: no per-row
        # work); the Kafka records derive from it deterministically.
        with clock("checkpoint"):
            run_id = _run_id()
            if run_id:  # before anything of the batch is written (none outside a query)
                store.join_query(query_id, run_id, batch, config.topic or "",
                                 cluster_id(config))
            stored, won = store.put_if_absent(query_id, batch, partition,
                                              encode_batches(arrow))
        # A checkpoint left under this key by an earlier life of a reused
        # query_id (foreachBatch option) is never emitted: such leftovers are of
        # the old life's last batch or two (GC removed older ones), so that
        # life's markers are ahead of every earlier batch number, and
        # write_partition refuses the new life (QueryIdReusedError, marker >
        # batch + 1) at its first batch with rows in a partition, long before it
        # reaches the leftover's batch. Not distinguishable: an old life that
        # committed only batch 0, whose marker equals a re-run of batch 0's.
        if not won:
            old = decode_batches(stored)
            check_replay_schema(old, arrow, columns, batch, partition,
                                config.record_id_column)
            arrow, replayed = old, True
    with clock("convert"):
        records, dead = to_records(arrow, config, layout, batch, partition,
                                   topic_limits(config))
    fail_point("sink.after_checkpoint", config.fail_points.directory, batch=batch,
               partition=partition, attempt=attempt, rows=len(records) + len(dead))
    try:
        return write_partition(config, records + dead, query_id, batch, partition,
                               replayed=replayed, clock=clock)
    except OutputNameInUseError:
        if store is not None and won:
            # Refused before anything was produced: this query must not come back
            # to a checkpoint it was never allowed to write (it was created above).
            store.delete(query_id, batch, partition)
        raise
