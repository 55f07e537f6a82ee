"""The per-partition Arrow step of the operator (runs in Spark's Python workers).

All rows of a shard are in one partition (the operator repartitions by
shard), so the step reads the whole partition, validates the IDs
vectorised, drops within-batch duplicates (first occurrence wins), and makes
ONE catalog claim per shard present. It returns every row with status
columns; the operator then observes metrics and keeps status ``KEPT``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dedup.claim import ShardClaimer
from dedup.config import DedupConfig, LatePolicy
from dedup.exceptions import RecordIdError
from dedup.failpoints import fail_point
from dedup.ids import MAX_ID_LENGTH
from dedup.metrics import (
    DUP_CATALOG,
    DUP_IN_BATCH,
    KEPT,
    LATE_DROPPED,
)

SHARD_COLUMN = "_dedup_shard"
STATIC_QUERY_ID = "static"
OUTPUT_CHUNK = 10_000


@dataclass(frozen=True)
class ArrowStep:
    """Picklable callable given to ``mapInArrow``.

    ``static_token`` identifies one batch (non-streaming) DataFrame: task
    retries and re-executions of it replay the same decisions.
    """

    config: DedupConfig
    static_token: str

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
        batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        partition = ctx.partitionId() if ctx else -1
        lease_owner = query_id or ""
        if not query_id or batch_id is None:
            query_id, batch_id = STATIC_QUERY_ID, self.static_token
        chunks = [b for b in batches if b.num_rows]
        if not chunks:
            return
        table = pa.Table.from_batches(chunks)
        out = process_table(self.config, table, query_id, str(batch_id), lease_owner,
                            partition)
        yield from out.to_batches(max_chunksize=OUTPUT_CHUNK)


def validate_ids(config: DedupConfig, column: pa.ChunkedArray, query_id: str,
                 batch_id: str) -> None:
    """Raise :class:`RecordIdError` for null, empty, too long or multi-line IDs."""
    name = config.id_column
    where = f"batch {batch_id} of query {query_id}"
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise RecordIdError(
            f"record id column {name!r} has type {column.type} in {where}: it must be a "
            "string; cast it or use with_record_id(strategy='column' or 'hash')"
        )
    problems = []
    if column.null_count:
        problems.append(f"{column.null_count} null")
    lengths = pc.utf8_length(column)
    empty = pc.sum(pc.equal(lengths, 0)).as_py() or 0
    if empty:
        problems.append(f"{empty} empty")
    long = pc.sum(pc.greater(lengths, MAX_ID_LENGTH)).as_py() or 0
    if long:
        problems.append(f"{long} longer than {MAX_ID_LENGTH} characters")
    newline = pc.sum(pc.match_substring(column, "\n")).as_py() or 0
    if newline:
        problems.append(f"{newline} containing a newline")
    if problems:
        raise RecordIdError(
            f"record id column {name!r} has {', '.join(problems)} value(s) in {where}: "
            "filter such rows out before deduplicate(), or derive IDs with "
            "with_record_id(strategy='hash')"
        )


def late_mask(config: DedupConfig, table: pa.Table, now: float) -> np.ndarray | None:
    """Rows whose event time is older than ``now - horizon`` (None: no event time)."""
    column = config.retention.event_time_column
    if column is None:
        return None
    values = table.column(column)
    if pa.types.is_timestamp(values.type):
        micros = pc.cast(pc.cast(values, pa.timestamp("us", tz="UTC")), pa.int64())
    else:  # numeric epoch seconds
        micros = pc.multiply(pc.cast(values, pa.float64()), 1e6)
    cutoff = (now - config.retention.horizon_seconds) * 1e6
    late = pc.fill_null(pc.less(micros, cutoff), False)
    return np.asarray(late.to_numpy(zero_copy_only=False), dtype=bool)


def process_table(config: DedupConfig, table: pa.Table, query_id: str, batch_id: str,
                  lease_owner: str, partition: int, claimer: ShardClaimer | None = None,
                  now: float | None = None) -> pa.Table:
    """Decide every row of one partition; return it with the status columns."""
    now = time.time() if now is None else now
    claimer = claimer or ShardClaimer(config)
    n = table.num_rows
    id_column = table.column(config.id_column)
    validate_ids(config, id_column, query_id, batch_id)
    ids: list[str] = id_column.to_pylist()
    shards = np.asarray(table.column(SHARD_COLUMN).to_numpy(zero_copy_only=False),
                        dtype=np.int64)
    status = np.full(n, DUP_IN_BATCH, dtype=np.int8)
    late = late_mask(config, table, now)
    if late is not None and config.retention.late_policy == LatePolicy.DROP:
        status[late] = LATE_DROPPED
        rows = np.flatnonzero(~late)
        # reversed: the last write wins, so the dict keeps the FIRST occurrence
        first = dict(zip([ids[i] for i in rows[::-1]], rows[::-1].tolist(), strict=True))
    else:
        first = dict(zip(reversed(ids), range(n - 1, -1, -1), strict=True))
    bloom_pos = np.zeros(n, dtype=np.int32)
    false_pos = np.zeros(n, dtype=np.int32)
    round_trips = np.zeros(n, dtype=np.int32)
    lookups = np.zeros(n, dtype=np.int32)
    if first:
        unique_ids = np.array(list(first.keys()), dtype=object)
        unique_rows = np.fromiter(first.values(), dtype=np.int64, count=len(first))
        status[unique_rows] = DUP_CATALOG
        unique_shards = shards[unique_rows]
        order = np.argsort(unique_shards, kind="stable")
        cuts = np.flatnonzero(np.diff(unique_shards[order])) + 1
        for group in np.split(order, cuts):
            shard = int(unique_shards[group[0]])
            candidates: list[str] = unique_ids[group].tolist()
            outcome = claimer.claim(query_id, batch_id, shard, candidates, lease_owner, now)
            fail_point("dedup.after_claim", config.fail_points.directory, batch=batch_id,
                       shard=shard, partition=partition, query=query_id)
            kept = outcome.kept
            keep = (np.ones(len(candidates), dtype=bool) if len(kept) == len(candidates) else
                    np.fromiter((key in kept for key in candidates), dtype=bool,
                                count=len(candidates)))
            status[unique_rows[group[keep]]] = KEPT
            anchor = unique_rows[group[0]]
            bloom_pos[anchor] = outcome.bloom_positives
            false_pos[anchor] = outcome.false_positives
            round_trips[anchor] = outcome.round_trips
            lookups[anchor] = outcome.lookups
    out = table.drop_columns([SHARD_COLUMN])
    late_col = late.astype(np.int8) if late is not None else np.zeros(n, dtype=np.int8)
    for name, values in (("_dedup_status", status), ("_dedup_late", late_col),
                         ("_dedup_bloom_pos", bloom_pos), ("_dedup_bloom_fp", false_pos),
                         ("_dedup_round_trips", round_trips), ("_dedup_lookups", lookups)):
        out = out.append_column(name, pa.array(values))
    return out
