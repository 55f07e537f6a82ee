"""A Redis Cluster that wants a password and speaks only TLS (client, replication and
cluster-bus links), under the dedup operator and the sink, through Spark.

Each of cluster, password and TLS is tested on its own elsewhere; together they
meet in the places a cluster client opens connections by itself: to every node
it learns of from ``CLUSTER SLOTS`` and to the replicas the safety checks find
in each primary's ``INFO``. Each of those connections must carry the URL's
password and CA, and no message may show the password.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dedup import CatalogUnavailableError, DedupConfig, RedisCatalog, RedisConfig
from dedup.local.redis_cluster import LocalRedisCluster
from dedup.local.tls import make_certificates
from tests.integration.sinks.pipeline import assert_pipeline_exact

pytestmark = [pytest.mark.integration, pytest.mark.redis, pytest.mark.cluster]

PASSWORD = "s3cr3t-Clu5ter-pa55"  # grep-able: no message may contain it


@pytest.fixture(scope="module")
def secured_cluster(services_dir: Path) -> Iterator[LocalRedisCluster]:
    certs = make_certificates(services_dir / "certs-cluster")
    cluster = LocalRedisCluster(services_dir / "redis-cluster-secured", password=PASSWORD,
                                tls=certs)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_every_node_checked_over_tls_and_a_wrong_password_fails_closed(
        secured_cluster: LocalRedisCluster, app_id: str) -> None:
    url = secured_cluster.url
    assert url.startswith("rediss+cluster://") and PASSWORD in url
    catalog = RedisCatalog(DedupConfig(app_id, RedisConfig(url)))
    # check_setup reads every node's persistence settings, replicas included
    assert catalog.check_setup()["num_shards"]
    wrong = url.replace(PASSWORD, "not-the-password")
    with pytest.raises(CatalogUnavailableError) as caught:
        RedisCatalog(DedupConfig(app_id, RedisConfig(wrong))).check_setup()
    assert "not-the-password" not in str(caught.value) and PASSWORD not in str(caught.value)
    plain = url.replace("rediss+cluster://", "redis+cluster://").split("?")[0]
    with pytest.raises(CatalogUnavailableError) as caught:
        RedisCatalog(DedupConfig(app_id, RedisConfig(plain, socket_timeout=2,
                                                     replica_timeout=1))).check_setup()
    assert PASSWORD not in str(caught.value)
    assert PASSWORD not in repr(RedisConfig(url))


@pytest.mark.spark
@pytest.mark.kafka
def test_pipeline_exact_on_a_secured_cluster(spark: Any, kafka_bootstrap: str,
                                             secured_cluster: LocalRedisCluster, app_id: str,
                                             tmp_checkpoint: str) -> None:
    assert_pipeline_exact(spark, kafka_bootstrap, app_id, secured_cluster.url, tmp_checkpoint)
