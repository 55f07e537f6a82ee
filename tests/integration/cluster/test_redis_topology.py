"""One Redis <-> a Redis Cluster, the checkpoint kept, a batch partly committed
(issue 33, items 2-3: the row ``Redis topology`` of docs/operational-changes.md)."""

from __future__ import annotations

from typing import Any

import pytest

from dedup.cli.pipeline import Addresses
from dedup.local.redis_cluster import LocalRedisCluster
from tests.integration.cli.test_pipeline_key_changes import (
    RECORDS,
    _more_input,
    _partial_batch,
    _pipeline,
    _run,
)
from tests.integration.sinks.pipeline import check_exact, fill_input

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.spark,
              pytest.mark.kafka, pytest.mark.redis]


@pytest.mark.parametrize("to_cluster", [True, False], ids=["to-cluster", "from-cluster"])
def test_a_move_between_one_redis_and_a_cluster_mid_batch_is_refused_at_start(
        spark: Any, kafka_bootstrap: str, redis_url: str, redis_cluster: LocalRedisCluster,
        app_id: str, tmp_checkpoint: str, tmp_path: Any, to_cluster: bool) -> None:
    """``dedup run`` moved from one Redis to a Redis Cluster (or back) while a batch is
    partly committed: the catalog does not move with it, so the other topology has no
    record of the query, and the restart is refused at start, writing nothing; as the
    refusal says, the Redis the query used finishes the batch and later input, re-sent
    copies included, exactly."""
    used, other = (redis_url, redis_cluster.url) if to_cluster else \
        (redis_cluster.url, redis_url)
    topics, expected = fill_input(kafka_bootstrap, app_id, records=RECORDS, duplicates=30)
    pipeline = _pipeline(app_id, topics)
    _partial_batch(spark, pipeline, Addresses(used, kafka_bootstrap, kafka_bootstrap),
                   tmp_checkpoint, str(tmp_path / "f"))
    partial = check_exact(kafka_bootstrap, topics.out, expected)
    _more_input(kafka_bootstrap, topics.source, expected)
    error = _run(spark, pipeline, Addresses(other, kafka_bootstrap, kafka_bootstrap),
                 tmp_checkpoint)
    assert "has no record of it under app id" in error and \
        "Point redis.url at the Redis the query used" in error, error
    refused = check_exact(kafka_bootstrap, topics.out, expected)
    assert refused.observed == partial.observed, refused.summary()
    assert not _run(spark, pipeline, Addresses(used, kafka_bootstrap, kafka_bootstrap),
                    tmp_checkpoint)
    final = check_exact(kafka_bootstrap, topics.out, expected)
    assert final.ok and final.open_transactions == 0, final.summary()
