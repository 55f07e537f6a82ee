"""Per-batch metrics of the dedup operator.

The operator's partition step gives every row a small result struct
(:data:`RESULT_COLUMN`); Spark's ``observe`` sums its fields per batch, so they appear in
``query.lastProgress["observedMetrics"][<name>]`` and in the listener events,
and :class:`DedupMetrics` reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

RESULT_COLUMN = "_dedup"
"""The operator's per-row result (a struct of the fields below), dropped before output."""
STATUS, LATE, BLOOM_POSITIVES, FALSE_POSITIVES, ROUND_TRIPS, LOOKUPS = (
    "status", "late", "bloom_pos", "bloom_fp", "round_trips", "lookups")
RESULT_FIELDS = (STATUS, LATE, BLOOM_POSITIVES, FALSE_POSITIVES, ROUND_TRIPS, LOOKUPS)
"""``status`` and ``late`` are per row (int8); the other four carry a shard's
claim figures on one row of the shard (int32) and are 0 elsewhere."""

KEPT, DUP_IN_BATCH, DUP_CATALOG, LATE_DROPPED, INVALID_ID = 0, 1, 2, 3, 4
"""Values of the status column (``INVALID_ID``: passed on with a null ID, for the
sink's dead-letter topic, under ``DedupConfig(invalid_ids="dead_letter")``)."""


@dataclass(frozen=True)
class DedupMetrics:
    """What the operator did in one batch (or, for a batch job, in one run).

    Attributes
    ----------
    records_in:
        Rows that entered the operator.
    kept:
        Rows passed on (first occurrence of a new ID).
    duplicates_in_batch, duplicates_catalog:
        Dropped because the ID occurred earlier in the same batch / was
        already in the catalog (an earlier batch, another query, a replay).
    late_dropped, late_passed:
        Rows older than the retention horizon, dropped / checked and passed.
    invalid_ids:
        Rows whose ID was null or malformed, passed on with a null ID for the
        sink's dead-letter topic (``invalid_ids="dead_letter"``).
    bloom_positives, bloom_false_positives:
        Bloom hits, and hits the catalog then called new (a cost, never a loss).
    round_trips:
        Redis calls (1 per batch and shard in steady state).
    catalog_lookups:
        IDs the catalog had to look up (the rest were decided by a current filter).
    catalog_size:
        IDs remembered by the catalog, when read (``None`` otherwise).
    """

    records_in: int = 0
    kept: int = 0
    duplicates_in_batch: int = 0
    duplicates_catalog: int = 0
    late_dropped: int = 0
    late_passed: int = 0
    invalid_ids: int = 0
    bloom_positives: int = 0
    bloom_false_positives: int = 0
    round_trips: int = 0
    catalog_lookups: int = 0
    catalog_size: int | None = None

    @property
    def duplicates_dropped(self) -> int:
        return self.duplicates_in_batch + self.duplicates_catalog

    @classmethod
    def from_observed(cls, row: Mapping[str, Any] | Any,
                      catalog_size: int | None = None) -> DedupMetrics:
        """Build from an observed-metrics row (a ``Row`` or a dict)."""
        data = row.asDict() if hasattr(row, "asDict") else dict(row)
        names = {f.name for f in fields(cls)} - {"catalog_size"}
        values = {name: int(data.get(name) or 0) for name in names}
        return cls(**values, catalog_size=catalog_size)


def observed_columns() -> list[Any]:
    """The aggregate expressions ``observe`` computes (named like the fields above)."""
    from pyspark.sql import functions as sf

    def field(name: str) -> Any:
        return sf.col(f"{RESULT_COLUMN}.{name}")

    status = field(STATUS)

    def count_if(cond: Any) -> Any:
        return sf.coalesce(sf.sum(sf.when(cond, 1).otherwise(0)), sf.lit(0)).cast("long")

    def total(name: str) -> Any:
        return sf.coalesce(sf.sum(field(name)), sf.lit(0)).cast("long")

    return [
        sf.count(sf.lit(1)).alias("records_in"),
        count_if(status == KEPT).alias("kept"),
        count_if(status == DUP_IN_BATCH).alias("duplicates_in_batch"),
        count_if(status == DUP_CATALOG).alias("duplicates_catalog"),
        count_if(status == LATE_DROPPED).alias("late_dropped"),
        count_if((field(LATE) == 1) & (status != LATE_DROPPED)).alias("late_passed"),
        count_if(status == INVALID_ID).alias("invalid_ids"),
        total(BLOOM_POSITIVES).alias("bloom_positives"),
        total(FALSE_POSITIVES).alias("bloom_false_positives"),
        total(ROUND_TRIPS).alias("round_trips"),
        total(LOOKUPS).alias("catalog_lookups"),
    ]


def partition_metrics(result: Mapping[str, Any]) -> dict[str, int]:
    """The fields of :func:`observed_columns` summed over one partition's step result
    (the arrays of :func:`dedup.partition_step.decide_partition`), for front ends that
    run the step without ``observe``. Pure."""
    import numpy as np

    status, late = np.asarray(result[STATUS]), np.asarray(result[LATE])
    return {
        "records_in": len(status),
        "kept": int((status == KEPT).sum()),
        "duplicates_in_batch": int((status == DUP_IN_BATCH).sum()),
        "duplicates_catalog": int((status == DUP_CATALOG).sum()),
        "late_dropped": int((status == LATE_DROPPED).sum()),
        "late_passed": int(((late == 1) & (status != LATE_DROPPED)).sum()),
        "invalid_ids": int((status == INVALID_ID).sum()),
        "bloom_positives": int(np.asarray(result[BLOOM_POSITIVES]).sum()),
        "bloom_false_positives": int(np.asarray(result[FALSE_POSITIVES]).sum()),
        "round_trips": int(np.asarray(result[ROUND_TRIPS]).sum()),
        "catalog_lookups": int(np.asarray(result[LOOKUPS]).sum()),
    }
