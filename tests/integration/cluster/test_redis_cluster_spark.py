"""Dedup operator and exactly-once sink on a real Redis Cluster, through Spark.

One run kills (kill -9) the primary that holds a shard's claims right after a
claim of batch 1 was acknowledged, while that task is held; its replica takes
over, the old primary comes back as a replica, and the read_committed output
must equal the failure-free one (losses, duplicates, phantoms counted apart).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

import sinks
from dedup.catalog import state_key
from dedup.failpoints import arm, fired
from dedup.local.redis_cluster import LocalRedisCluster
from tests.integration.sinks.pipeline import (
    Topics,
    assert_pipeline_exact,
    build_stream,
    check_exact,
    fill_input,
    run_to_end,
    sink_options,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.cluster]

COMEBACK = 30.0
"""Seconds after a promotion before the killed primary restarts (as a replica)."""


def test_pipeline_exact_on_redis_cluster(spark: Any, kafka_bootstrap: str,
                                         redis_cluster: LocalRedisCluster, app_id: str,
                                         tmp_checkpoint: str) -> None:
    assert_pipeline_exact(spark, kafka_bootstrap, app_id, redis_cluster.url, tmp_checkpoint)


def _stream_held_at_batch_1(spark: Any, kafka_bootstrap: str,
                            redis_cluster: LocalRedisCluster, app_id: str,
                            fp_dir: Path) -> tuple[Topics, dict[str, bytes], Any]:
    """Input topics, the expected output and the dedup stream on the cluster, with one
    task of batch 1 armed to hold 6 s right after its claim."""
    sinks.register(spark)
    topics, expected = fill_input(kafka_bootstrap, app_id)
    df = build_stream(spark, kafka_bootstrap, topics, app_id, redis_cluster.url,
                      fail_point_dir=str(fp_dir))
    arm(fp_dir, "dedup.after_claim", "sleep", match={"batch": 1}, seconds=6)
    return topics, expected, df


def _kill_primary_when_held(redis_cluster: LocalRedisCluster, fp_dir: Path, app_id: str,
                            killed: list[int], comeback: float = 0.0) -> threading.Thread:
    """A started thread: once a claim is held at ``dedup.after_claim``, kill -9 the
    primary of its shard (its port appended to ``killed``), wait for a replica to take
    over, and ``comeback`` seconds later restart the old primary (back as a replica)."""

    def kill_primary() -> None:
        deadline = time.monotonic() + 150
        while not fired(fp_dir, "dedup.after_claim") and time.monotonic() < deadline:
            time.sleep(0.05)
        hits = fired(fp_dir, "dedup.after_claim")
        if not hits:
            return
        shard = int(hits[0].get("context", {}).get("shard", 0))
        port = redis_cluster.primary_port_for_key(state_key(app_id, shard))
        redis_cluster.node(port).kill()
        killed.append(port)
        if redis_cluster.promoted(state_key(app_id, shard), port,
                                  deadline - time.monotonic()) is None:
            return
        time.sleep(comeback)
        redis_cluster.node(port).start()

    killer = threading.Thread(target=kill_primary, daemon=True)
    killer.start()
    return killer


def test_primary_killed_after_an_acknowledged_claim(spark: Any, kafka_bootstrap: str,
                                                    redis_cluster: LocalRedisCluster,
                                                    app_id: str, tmp_checkpoint: str,
                                                    tmp_path: Path) -> None:
    fp_dir = tmp_path / "fp"
    topics, expected, df = _stream_held_at_batch_1(spark, kafka_bootstrap, redis_cluster,
                                                   app_id, fp_dir)
    killed: list[int] = []
    killer = _kill_primary_when_held(redis_cluster, fp_dir, app_id, killed)
    restarts = 0
    while True:
        try:
            run_to_end(df, sink_options(kafka_bootstrap, topics, app_id, redis_cluster.url),
                       tmp_checkpoint)
            break
        except (AssertionError, StreamingQueryException) as exc:
            # Calls fail closed while the dead primary's slots have no primary, and
            # claims while the promoted one has no replica; a query that used up its
            # task retries then is restarted, as an operator would. Nothing else may
            # fail it.
            restarts += 1
            assert restarts <= 4, f"restart {restarts}: {exc}"
            assert any(name in str(exc) for name in (
                "ReplicaAckError", "CatalogUnavailableError", "CheckpointUnavailableError")), \
                str(exc)
            redis_cluster.wait_healthy()
    killer.join(60)
    redis_cluster.wait_healthy()
    assert killed, "the fault did not hit: no primary was killed"
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


def test_query_rides_out_a_primary_kill_without_a_restart(
        spark: Any, kafka_bootstrap: str, redis_cluster: LocalRedisCluster, app_id: str,
        tmp_checkpoint: str, tmp_path: Path) -> None:
    """The same kill, but the query must finish on its own: claims wait out the failover
    (``RedisConfig.failover_wait``) instead of failing every task attempt within it.

    The old primary comes back only ``COMEBACK`` seconds after the promotion (a machine
    that reboots), so the promoted primary has no replica for longer than Spark's four
    task attempts last (each fails once its ``WAIT`` times out): without the wait the
    query dies every time, not only when a claim lands in the short window without a
    primary."""
    fp_dir = tmp_path / "fp"
    topics, expected, df = _stream_held_at_batch_1(spark, kafka_bootstrap, redis_cluster,
                                                   app_id, fp_dir)
    killed: list[int] = []
    killer = _kill_primary_when_held(redis_cluster, fp_dir, app_id, killed, comeback=COMEBACK)
    try:
        # No restart: a StreamingQueryException (or the AssertionError run_to_end makes
        # of a failed query) fails the test.
        run_to_end(df, sink_options(kafka_bootstrap, topics, app_id, redis_cluster.url),
                   tmp_checkpoint)
    finally:
        killer.join(COMEBACK + 60)
        redis_cluster.wait_healthy()
    assert killed, "the fault did not hit: no primary was killed"
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
