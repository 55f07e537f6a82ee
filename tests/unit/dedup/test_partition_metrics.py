"""The fused front end's per-partition metrics count what ``observe`` counts."""

from __future__ import annotations

import numpy as np

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
    ROUND_TRIPS,
    STATUS,
    DedupMetrics,
    partition_metrics,
)


def test_partition_metrics_count_each_status_and_sum_the_claim_figures() -> None:
    status = np.array([KEPT, KEPT, DUP_IN_BATCH, DUP_CATALOG, DUP_CATALOG, LATE_DROPPED,
                       INVALID_ID, KEPT], dtype=np.int8)
    late = np.array([0, 1, 0, 0, 1, 1, 0, 0], dtype=np.int8)
    figures = {name: np.array([3, 0, 0, 0, 0, 0, 0, 2], dtype=np.int32)
               for name in (BLOOM_POSITIVES, FALSE_POSITIVES, ROUND_TRIPS, LOOKUPS)}
    metrics = DedupMetrics.from_observed(partition_metrics({STATUS: status, LATE: late,
                                                            **figures}))
    assert metrics == DedupMetrics(
        records_in=8, kept=3, duplicates_in_batch=1, duplicates_catalog=2, late_dropped=1,
        # late and not dropped: the kept row 1 and the catalog duplicate row 4
        late_passed=2, invalid_ids=1, bloom_positives=5, bloom_false_positives=5,
        round_trips=5, catalog_lookups=5)
