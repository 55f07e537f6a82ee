"""A query started right after another of its app id stopped takes the app id at once.

The stopped query's lease is released by the session's listener when it hears the
query's termination, which Spark delivers asynchronously (its listener bus). A new
query whose first claim came before that was refused (``AppIdInUseError``, "stop
the other query", which had stopped): seen in CI's operator-sequence subset
(seq9003, 2026-12-04), a stop and a start with a new checkpoint back to back.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from dedup import DedupConfig, Deduplicator, RedisConfig
from dedup.gc import session_listener
from tests.integration.dedup import helpers

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.redis]

SLOW_BUS_S = 5.0  # the listener's handling of the first query's end, held this long


def _batches(prefix: str, n_batches: int, size: int) -> list[list[helpers.Record]]:
    return [[(f"{prefix}{b}-{i % (size // 2)}", b * 100_000 + i) for i in range(size)]
            for b in range(n_batches)]


def test_a_query_started_right_after_another_stopped_takes_the_app_id_at_once(
        spark: Any, redis_url: str, app_id: str, tmp_path: Path) -> None:
    config = DedupConfig(app_id, RedisConfig(redis_url), num_shards=4)
    first, second = _batches("a", 2, 100), _batches("b", 2, 100)
    helpers.write_batches(tmp_path / "in-a", first)
    helpers.write_batches(tmp_path / "in-b", second)
    source = (spark.readStream.schema("_record_id string, v long")
              .option("maxFilesPerTrigger", 1).json(str(tmp_path / "in-a")))
    collected = helpers.BatchCollector()
    query = (Deduplicator(config).apply(source).writeStream.foreachBatch(collected)
             .option("checkpointLocation", str(tmp_path / "ck-a"))
             .trigger(availableNow=True).start())
    # A slow listener bus, made certain: the first query's end is handled (its lease
    # released) SLOW_BUS_S after it stopped, longer than Spark's retries of a task take.
    session_listener(spark).on_stop(str(query.id), "slow-bus",
                                    lambda: time.sleep(SLOW_BUS_S))
    try:
        query.awaitTermination()
    finally:
        query.stop()
    helpers.assert_exact(collected.rows(), helpers.reference(first))
    started = time.monotonic()
    # A new checkpoint: another query of the same pipeline, at once.
    again = helpers.BatchCollector()
    helpers.run_stream(spark, Deduplicator(config), tmp_path / "in-b", str(tmp_path / "ck-b"),
                       again)
    helpers.assert_exact(again.rows(), helpers.reference(second))
    assert time.monotonic() - started < SLOW_BUS_S + 60
