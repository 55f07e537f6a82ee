"""A real Redis Cluster (3 primaries, 1 replica each) for the cluster tier, started once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dedup.local.redis_cluster import LocalRedisCluster


@pytest.fixture(scope="session")
def redis_cluster(services_dir: Path) -> Iterator[LocalRedisCluster]:
    cluster = LocalRedisCluster(services_dir / "redis-cluster")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
