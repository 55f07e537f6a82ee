"""The per-partition step of the operator (runs in Spark's Python workers).

All rows of a shard are in one partition (the operator repartitions by
shard placement), so the step reads the whole partition, checks the IDs,
drops within-batch duplicates (first occurrence wins) and makes ONE catalog
claim per shard present. It returns one small result per row (status and
metrics, :data:`dedup.metrics.RESULT_FIELDS`); the operator then observes
the metrics and keeps status ``KEPT``.

Only the ID, the shard, an ID problem code and (with retention by event
time) the event time reach Python: Spark's scalar-iterator UDF (Arrow, or
pandas before PySpark 4.1) keeps every other column in the JVM and zips the
results back onto the rows, so the payload never crosses into Python.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from dedup.catalog import RedisCatalog
from dedup.claim import ShardClaimer
from dedup.config import DedupConfig, InvalidIdPolicy, LatePolicy
from dedup.exceptions import RecordIdError
from dedup.failpoints import clock_offset, fail_point
from dedup.ids import MAX_ID_LENGTH
from dedup.metrics import (
    BLOOM_POSITIVES,
    DUP_CATALOG,
    DUP_IN_BATCH,
    FALSE_POSITIVES,
    INVALID_ID,
    KEPT,
    LATE,
    LATE_DROPPED,
    LOOKUPS,
    RESULT_FIELDS,
    ROUND_TRIPS,
    STATUS,
)
from dedup.spark_session import task_batch, task_spark_query
from dedup.worker_imports import settle_worker

if TYPE_CHECKING:
    # Only PySpark 4.0's pandas UDF needs pandas; importing it costs each new Python
    # worker about 0.5 s of CPU that the Arrow path (PySpark >= 4.1) never uses.
    import pandas as pd

STATIC_QUERY_ID = "static"
OUTPUT_CHUNK = 10_000

ID_OK, ID_NULL, ID_EMPTY, ID_TOO_LONG, ID_NEWLINE = range(5)
_PROBLEM_NAMES = {ID_NULL: "null", ID_EMPTY: "empty",
                  ID_TOO_LONG: f"longer than {MAX_ID_LENGTH} characters",
                  ID_NEWLINE: "containing a newline"}


def id_problem_column(id_column: Any) -> Any:
    """Spark column: the :data:`ID_OK`... code of each record ID, computed in the JVM."""
    from pyspark.sql import functions as sf

    return (sf.when(id_column.isNull(), ID_NULL)
            .when(sf.length(id_column) == 0, ID_EMPTY)
            .when(sf.length(id_column) > MAX_ID_LENGTH, ID_TOO_LONG)
            .when(sf.instr(id_column, "\n") > 0, ID_NEWLINE)
            .otherwise(ID_OK).cast("byte"))


def batch_time_column() -> Any:
    """Spark column: the micro-batch's time in epoch seconds (a double), the one Spark
    keeps in its offset log, so every attempt and executor of a batch reads the same.

    Spark replaces ``current_timestamp()`` in a streaming plan by that time as a
    literal, which code generation inlines: each micro-batch's stage was new code,
    compiled and run interpreted until the JIT caught up (2-3 us of JVM CPU per record
    in bench_e2e, 2026-12-05). Under ``reflect`` (evaluated, never generated) the
    literal stays out of the code, which Spark then reuses from batch to batch; the
    value is the same (microseconds / 1e6, as the timestamp's cast to double).
    """
    from pyspark.sql import functions as sf

    micros = sf.reflect(sf.lit("java.lang.String"), sf.lit("valueOf"),
                        sf.unix_micros(sf.current_timestamp()))
    return micros.cast("long") / sf.lit(1_000_000.0)


def id_problem_codes(ids: Sequence[Any] | np.ndarray) -> np.ndarray:
    """The same codes computed in Python (for callers without the JVM column)."""
    def code(key: Any) -> int:
        if key is None:
            return ID_NULL
        if not key:
            return ID_EMPTY
        if len(key) > MAX_ID_LENGTH:
            return ID_TOO_LONG
        # a binary ID column (bytes) counts bytes and looks for the newline byte, as
        # Spark's length and instr do on binary
        return ID_NEWLINE if (b"\n" if isinstance(key, bytes) else "\n") in key else ID_OK
    return np.fromiter((code(k) for k in ids), dtype=np.int8, count=len(ids))


def arrow_problem_codes(column: Any) -> np.ndarray:
    """The codes of :func:`id_problem_column` computed from an Arrow ID column (Array or
    ChunkedArray; string or binary) in vectorised kernels: a string's length in
    characters, a binary's in bytes, as Spark's ``length`` counts them. Pure.

    The one-pass task takes them from the IDs it receives anyway: carried as a column
    of the plan they cost the JVM about 1 us per record (bench_e2e, 2026-12-05).
    """
    import pyarrow.compute as pc

    text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
    lengths = pc.utf8_length(column) if text else pc.binary_length(column)

    def mask(values: Any) -> np.ndarray:
        return np.asarray(values.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)

    codes = np.full(len(column), ID_OK, dtype=np.int8)
    # the JVM's when() chain takes the first that holds: set the last first
    codes[mask(pc.match_substring(column, "\n"))] = ID_NEWLINE
    codes[mask(pc.greater(lengths, MAX_ID_LENGTH))] = ID_TOO_LONG
    codes[mask(pc.equal(lengths, 0))] = ID_EMPTY
    codes[mask(pc.is_null(column))] = ID_NULL
    return codes


def id_values(column: Any, config: DedupConfig, where: str) -> np.ndarray:
    """The record IDs of an Arrow column (Array or ChunkedArray) as a NumPy object array.

    Spark's strings may hold bytes that are not UTF-8 (a binary cast to string);
    pyarrow cannot make Python strings of them and raises its own ``ArrowException``.
    That is refused here as one :class:`RecordIdError` line naming the column.
    """
    try:
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=object)
    except (pa.ArrowException, UnicodeDecodeError) as exc:
        raise RecordIdError(
            f"record id column {config.id_column!r} holds text that is not UTF-8 ({where}): "
            "derive IDs with with_record_id(strategy='hash') or cast the "
            f"column from valid text ({type(exc).__name__})"
        ) from exc


def raise_for_problems(config: DedupConfig, problems: np.ndarray, query_id: str,
                       batch_id: str) -> None:
    """Raise :class:`RecordIdError` naming the column, the batch and what is wrong."""
    if not problems.any():
        return
    counts = np.bincount(problems, minlength=len(_PROBLEM_NAMES) + 1)
    found = [f"{counts[c]} {name}" for c, name in _PROBLEM_NAMES.items() if counts[c]]
    raise RecordIdError(
        f"record id column {config.id_column!r} has {', '.join(found)} value(s) in batch "
        f"{batch_id} of query {query_id}: filter such rows out before deduplicate(), or "
        "derive IDs with with_record_id(strategy='hash')"
    )


def late_mask(config: DedupConfig, event_seconds: np.ndarray | None,
              now: float) -> np.ndarray | None:
    """Rows whose event time (epoch seconds, NaN for null) is older than the horizon."""
    if event_seconds is None:
        return None
    cutoff = now - config.retention.horizon_seconds
    with np.errstate(invalid="ignore"):
        return np.asarray(event_seconds < cutoff, dtype=bool)  # NaN (null) is not late


def batch_clock(config: DedupConfig, batch_time: float, batch_id: str, partition: int) -> float:
    """The clock a partition's decisions read: the micro-batch's time (Spark's batch
    timestamp, the same in every attempt), moved by the ``dedup.batch_clock``
    fail-point's skew in tests."""
    return batch_time + clock_offset("dedup.batch_clock", config.fail_points.directory,
                                     batch=batch_id, partition=partition, now=batch_time)


def decide_partition(config: DedupConfig, ids: Sequence[Any] | np.ndarray, shards: np.ndarray,
                     query_id: str, batch_id: str, lease_owner: str, partition: int,
                     claimer: ShardClaimer | None = None, now: float | None = None,
                     problems: np.ndarray | None = None,
                     event_seconds: np.ndarray | None = None,
                     strict: bool = False) -> dict[str, np.ndarray]:
    """Decide every row of one partition; returns the result fields as arrays.

    ``ids`` and ``shards`` are aligned; ``problems`` are the ID problem codes
    (computed here when None). Claims are idempotent per (query, batch,
    shard), so running it again for the same batch gives the same result.
    ``strict`` (the streaming forms) refuses a query past its first batch that
    the catalog has no record of: it ran against another Redis.
    """
    now = time.time() if now is None else now
    claimer = claimer or ShardClaimer(config)
    keys = ids if isinstance(ids, np.ndarray) else np.array(ids, dtype=object)
    n = len(keys)
    problems = id_problem_codes(keys) if problems is None else problems
    invalid = np.asarray(problems) != ID_OK
    if config.invalid_ids != InvalidIdPolicy.DEAD_LETTER:
        raise_for_problems(config, problems, query_id, batch_id)
    shards = np.asarray(shards, dtype=np.int64)
    status = np.full(n, DUP_IN_BATCH, dtype=np.int8)
    late = late_mask(config, event_seconds, now)
    eligible = ~invalid
    if late is not None and config.retention.late_policy == LatePolicy.DROP:
        status[late & eligible] = LATE_DROPPED
        eligible &= ~late
    # Invalid IDs are never claimed: they leave with a null ID for the dead letter.
    status[invalid] = INVALID_ID
    rows = np.flatnonzero(eligible)
    # The first row of each ID (a set, not pandas' duplicated(): 0.2 us more per row,
    # against 0.5 s of CPU to import pandas in every new Python worker).
    seen: set[Any] = set()
    add = seen.add
    unique_rows = rows[np.fromiter((not (key in seen or add(key)) for key in keys[rows].tolist()),
                                   dtype=bool, count=len(rows))]
    status[unique_rows] = DUP_CATALOG
    metrics = {name: np.zeros(n, dtype=np.int32)
               for name in (BLOOM_POSITIVES, FALSE_POSITIVES, ROUND_TRIPS, LOOKUPS)}
    unique_shards = shards[unique_rows]
    order = np.argsort(unique_shards, kind="stable")
    cuts = np.flatnonzero(np.diff(unique_shards[order])) + 1
    for group in np.split(order, cuts) if len(order) else []:
        group_rows = unique_rows[group]
        shard = int(shards[group_rows[0]])
        outcome = claimer.claim(query_id, batch_id, shard, keys[group_rows], lease_owner, now,
                                strict)
        fail_point("dedup.after_claim", config.fail_points.directory, batch=batch_id,
                   shard=shard, partition=partition, query=query_id, rows=len(group_rows))
        status[group_rows[outcome.keep]] = KEPT
        anchor = group_rows[0]  # the shard's figures ride on one of its rows
        metrics[BLOOM_POSITIVES][anchor] = outcome.bloom_positives
        metrics[FALSE_POSITIVES][anchor] = outcome.false_positives
        metrics[ROUND_TRIPS][anchor] = outcome.round_trips
        metrics[LOOKUPS][anchor] = outcome.lookups
    late_flags = late.astype(np.int8) if late is not None else np.zeros(n, dtype=np.int8)
    return {STATUS: status, LATE: late_flags, **metrics}


def result_type() -> Any:
    """Spark type of the per-row result struct (field order of RESULT_FIELDS)."""
    from pyspark.sql.types import ByteType, IntegerType, StructField, StructType

    # nullable: Spark reads a UDF's struct result as nullable fields
    return StructType([StructField(name, ByteType() if name in (STATUS, LATE)
                                   else IntegerType()) for name in RESULT_FIELDS])


@dataclass(frozen=True)
class PartitionStep:
    """Picklable body of the operator's UDF (one call per partition).

    Input batches carry ``(id, shard, problem code, batch timestamp[, event seconds])``;
    the batch timestamp (epoch seconds, the same on every row, attempt and
    executor of a batch) is the ``now`` of every decision.
    ``static_token`` identifies one batch (non-streaming) DataFrame: task
    retries and re-executions of it replay the same decisions. ``streaming``:
    the step is part of a streaming plan, whose every batch leaves a record in
    the catalog (the listener's committed batch), so a query past its first
    batch that the catalog has never seen is refused (another Redis); a batch
    DataFrame inside ``foreachBatch`` leaves none and is not checked.
    """

    config: DedupConfig
    static_token: str
    streaming: bool = False

    def __call__(self, batches: Iterator[tuple[pd.Series, ...]]) -> Iterator[pd.DataFrame]:
        """The pandas entry point (PySpark without Arrow UDFs, i.e. 4.0)."""
        import pandas as pd

        result = self._decide([
            (b[0].to_numpy(dtype=object), b[1].to_numpy(), b[2].to_numpy(), b[3].to_numpy(),
             *[s.to_numpy(dtype=np.float64, na_value=np.nan) for s in b[4:]])
            for b in batches if len(b[0])])
        if result is None:
            return
        frame = pd.DataFrame(result, columns=list(RESULT_FIELDS))
        for start in range(0, len(frame), OUTPUT_CHUNK):
            yield frame.iloc[start:start + OUTPUT_CHUNK]

    def arrow(self, batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        """The Arrow entry point (PySpark >= 4.1): no pandas on the way in or out,
        which makes the operator's Python round trip about a quarter cheaper."""
        result = self._decide([
            (id_values(b[0], self.config, "in this task's batch"),
             b[1].to_numpy(zero_copy_only=False),
             b[2].to_numpy(zero_copy_only=False), b[3].to_numpy(zero_copy_only=False),
             *[a.to_numpy(zero_copy_only=False) for a in b[4:]])  # null event time: NaN
            for b in batches if len(b[0])])
        if result is None:
            return
        names = list(RESULT_FIELDS)
        for start in range(0, len(result[STATUS]), OUTPUT_CHUNK):
            yield pa.StructArray.from_arrays(
                [pa.array(result[name][start:start + OUTPUT_CHUNK]) for name in names],
                names=names)

    def _decide(self, parts: list[tuple[np.ndarray, ...]]) -> dict[str, np.ndarray] | None:
        """Decide the whole partition (``parts``: its input batches as NumPy arrays)."""
        from pyspark import TaskContext

        settle_worker()  # per-task overhead of the worker, see the module
        ctx = TaskContext.get()
        query_id, batch_id = task_batch(ctx, self.streaming)  # classic, or Spark Connect's tag
        spark_query_id = task_spark_query(ctx)
        partition = ctx.partitionId() if ctx else -1
        lease_owner = query_id or ""
        if not query_id or batch_id is None:
            query_id, batch_id = STATIC_QUERY_ID, self.static_token
        # The whole partition first: all rows of a shard must be decided together.
        if not parts:
            return None
        columns = list(zip(*parts, strict=True))
        ids = np.concatenate(columns[0])
        shards = np.concatenate(columns[1])
        problems = np.concatenate(columns[2])
        now = batch_clock(self.config, float(columns[3][0][0]), str(batch_id), partition)
        event_seconds = (np.concatenate(columns[4]).astype(np.float64, copy=False)
                         if len(columns) > 4 else None)
        # The lease records Spark's id of the query beside its owner name (they differ
        # under Spark Connect with option query.id): the driver's listener, which hears
        # the query by Spark's id, renews and releases it under the owner's name.
        claimer = ShardClaimer(self.config, RedisCatalog(self.config, spark_query_id))
        return decide_partition(
            self.config, ids, shards, query_id, str(batch_id), lease_owner, partition,
            claimer=claimer, now=now, problems=problems, event_seconds=event_seconds,
            strict=self.streaming and query_id != STATIC_QUERY_ID)


def partition_udf(step: PartitionStep) -> Any:
    """The non-deterministic scalar-iterator UDF that runs ``step``.

    An Arrow UDF where PySpark has them (4.1 and later), else a pandas UDF;
    both see the same columns and give the same results. Non-deterministic,
    so the optimizer neither duplicates nor reorders it.
    """
    return scalar_iter_udf(step, result_type())


def scalar_iter_udf(step: Any, return_type: Any) -> Any:
    """A non-deterministic scalar-iterator UDF of ``step``: ``step.arrow`` through
    ``arrow_udf`` where PySpark has it, else ``step`` itself through ``pandas_udf``."""
    from pyspark.sql import functions as sf

    if hasattr(sf, "arrow_udf"):
        def decide_arrow(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
            return step.arrow(batches)

        return sf.arrow_udf(decide_arrow, return_type).asNondeterministic()  # type: ignore[call-overload]

    import pandas

    def decide(batches: Any) -> Any:
        return step(batches)

    # PySpark tells a scalar-iterator pandas UDF by these hints; as real types, since the
    # module's (strings under ``from __future__ import annotations``) name pandas only
    # for type checkers.
    decide.__annotations__ = {"batches": Iterator[tuple[pandas.Series, ...]],
                              "return": Iterator[pandas.DataFrame]}
    return sf.pandas_udf(decide, return_type).asNondeterministic()  # type: ignore[call-overload]
