"""The per-partition write core shared by the data source and the foreachBatch sink.

Arrow batches -> Kafka records -> (strong productions) checkpoint, first
attempt wins -> one Kafka transaction with the batch marker.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from dedup.failpoints import fail_point
from dedup.worker_imports import keep_static_archive_caches
from sinks.checkpoint import CheckpointStore, decode_batches, encode_batches
from sinks.config import SinkConfig
from sinks.records import InputLayout, iter_rows_as_batches, to_records
from sinks.transactions import PartitionResult, write_partition


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
    keep_static_archive_caches()  # per-task overhead of the worker, see the module
    arrow = list(_as_arrow(batches, columns))
    replayed = False
    if config.strong_productions:
        assert config.redis is not None  # checked by SinkConfig
        store = CheckpointStore.for_config(config)
        # The checkpoint is the Arrow input as received (cheap: no per-row
        # work); the Kafka records derive from it deterministically.
        stored, won = store.put_if_absent(query_id, batch, partition, encode_batches(arrow))
        # A checkpoint left under this key by an earlier life of a reused
        # query_id (foreachBatch option) is never emitted: such leftovers are of
        # the old life's last batch or two (GC removed older ones), so that
        # life's markers are ahead of every earlier batch number, and
        # write_partition refuses the new life (QueryIdReusedError, marker >
        # batch + 1) at its first batch with rows in a partition, long before it
        # reaches the leftover's batch. Not distinguishable: an old life that
        # committed only batch 0, whose marker equals a re-run of batch 0's.
        if not won:
            arrow, replayed = decode_batches(stored), True
    records, dead = to_records(arrow, config, layout, batch, partition)
    fail_point("sink.after_checkpoint", config.failpoint_dir, batch=batch,
               partition=partition, attempt=attempt)
    return write_partition(config, records + dead, query_id, batch, partition,
                           replayed=replayed)
