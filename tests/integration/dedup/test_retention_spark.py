"""README, Limits, "Retention", end to end on Spark with a short horizon.

The catalog remembers an ID for at least the horizon: a duplicate inside it
is dropped. Its time-bucket sets expire (Redis TTL) after the horizon, and a
duplicate arriving after that is not caught. With an event-time column, a
record older than the horizon follows ``late_policy``: ``drop`` drops it
(``late_dropped``), even with an ID never seen; ``pass`` checks it against
what the catalog still holds and keeps it if absent (``late_passed``), which
lets through a late copy of an expired ID.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from dedup import DedupConfig, Deduplicator, RedisConfig, RetentionConfig
from dedup.constants import DEFAULT_ID_COLUMN, KEY_PREFIX
from dedup.metrics import DedupMetrics

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.redis]

HORIZON, BUCKET = 10, 2
FRESH = 4_102_444_800.0  # 2100-01-01: never older than the horizon
LATE = 1_000_000.0       # 1970: always older than the horizon
_STAMP = time.time() - 100_000


def _write(folder: Path, index: int, rows: list[tuple[str, str, float]]) -> None:
    """One JSON-lines file, read as one batch (maxFilesPerTrigger=1, ordered by mtime)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".f{index}.tmp"
    tmp.write_text("\n".join(json.dumps({DEFAULT_ID_COLUMN: rid, "v": v, "ts": ts})
                             for rid, v, ts in rows) + "\n")
    os.utime(tmp, (_STAMP + 10 * index, _STAMP + 10 * index))
    tmp.rename(folder / f"f{index}.json")


def _run(spark: Any, dedup: Deduplicator, source: Path, checkpoint: str,
         out: dict[int, list[tuple[str, str]]]
         ) -> tuple[dict[int, DedupMetrics], dict[int, float]]:
    """Process the new files (one batch each); returns each new batch's metrics and
    its batch time (epoch seconds, the time the dedup step decides with)."""
    from datetime import datetime

    stream = (spark.readStream.schema(f"{DEFAULT_ID_COLUMN} string, v string, ts double")
              .option("maxFilesPerTrigger", 1).json(str(source)))

    def collect(df: Any, batch_id: int) -> None:
        out[batch_id] = sorted((r[DEFAULT_ID_COLUMN], r["v"]) for r in df.collect())

    query = (dedup.apply(stream).writeStream.foreachBatch(collect)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120), "the query did not finish"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, str(query.exception())
    progress = [p for p in query.recentProgress
                if dedup.metric_name in (p["observedMetrics"] or {})]
    metrics = {int(p["batchId"]): DedupMetrics.from_observed(
        p["observedMetrics"][dedup.metric_name]) for p in progress}
    times = {int(p["batchId"]): datetime.fromisoformat(p["timestamp"]).timestamp()
             for p in progress}
    return metrics, times


def _bucket_keys(client: Any, app_id: str) -> list[str]:
    return sorted(client.scan_iter(match=f"{KEY_PREFIX}:{{{app_id}:s*}}:idx:*"))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["drop", "pass"])
def test_ids_expire_after_the_horizon_and_late_records_follow_the_policy(
        spark: Any, redis_url: str, app_id: str, tmp_path: Path, policy: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    retention = RetentionConfig(horizon_seconds=HORIZON, bucket_seconds=BUCKET,
                                event_time_column="ts", late_policy=policy)
    dedup = Deduplicator(DedupConfig(app_id=app_id, redis=RedisConfig(redis_url),
                                     num_shards=2, retention=retention), num_partitions=2)
    source, checkpoint = tmp_path / "in", str(tmp_path / "ck")
    # Warm the Python workers up first (another app id): on a cold session the
    # first batch alone took 16 s, and batch 1 must follow batch 0 within the horizon.
    warm = Deduplicator(DedupConfig(app_id=f"{app_id}-warm", redis=RedisConfig(redis_url),
                                    num_shards=2), num_partitions=2)
    warm.apply(spark.createDataFrame([("w", "w")], f"{DEFAULT_ID_COLUMN} string, v string")
               ).collect()
    out: dict[int, list[tuple[str, str]]] = {}

    # Batches 0 and 1 in one run, seconds apart: well inside the horizon.
    _write(source, 0, [(f"o{i}", f"o{i}-first", FRESH) for i in range(6)])
    _write(source, 1, [
        ("o0", "o0-copy", FRESH),    # a duplicate inside the horizon
        ("o1", "o1-copy", LATE),     # late, and its ID is still in the catalog
        ("n1", "n1-late", LATE),     # late, an ID never seen
    ])
    metrics, times = _run(spark, dedup, source, checkpoint, out)
    assert times[1] - times[0] < HORIZON - BUCKET, f"batches 0 and 1 too far apart: {times}"
    assert out[0] == [(f"o{i}", f"o{i}-first") for i in range(6)]

    # The catalog's buckets carry a TTL of at most horizon + bucket, and expire.
    keys = _bucket_keys(client, app_id)
    assert keys, "no bucket set was written"
    ttls = [client.ttl(key) for key in keys]
    assert all(0 < ttl <= HORIZON + BUCKET for ttl in ttls), dict(zip(keys, ttls, strict=True))
    deadline = time.monotonic() + HORIZON + BUCKET + 10
    while _bucket_keys(client, app_id):
        assert time.monotonic() < deadline, f"still there: {_bucket_keys(client, app_id)}"
        time.sleep(0.5)

    # After the horizon: the catalog has forgotten o2 and o3.
    _write(source, 2, [
        ("o2", "o2-again", FRESH),   # a duplicate after the horizon: not caught
        ("o3", "o3-again", LATE),    # late, and its original expired
    ])
    later, _ = _run(spark, dedup, source, checkpoint, out)
    metrics.update(later)

    if policy == "drop":
        assert out[1] == []
        assert out[2] == [("o2", "o2-again")]
        assert (metrics[1].late_dropped, metrics[1].late_passed) == (2, 0), metrics[1]
        assert (metrics[1].duplicates_catalog, metrics[1].kept) == (1, 0), metrics[1]
        assert (metrics[2].late_dropped, metrics[2].late_passed) == (1, 0), metrics[2]
    else:
        # Checked against what the catalog holds: o1 is a duplicate, n1 new.
        assert out[1] == [("n1", "n1-late")]
        # o3's late copy passes: the documented possible duplicate of an expired ID.
        assert out[2] == [("o2", "o2-again"), ("o3", "o3-again")]
        assert (metrics[1].late_dropped, metrics[1].late_passed) == (0, 2), metrics[1]
        assert (metrics[1].duplicates_catalog, metrics[1].kept) == (2, 1), metrics[1]
        assert (metrics[2].late_dropped, metrics[2].late_passed) == (0, 1), metrics[2]
    assert metrics[2].duplicates_catalog == 0, metrics[2]
