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


@pytest.fixture(autouse=True)
def _healthy_redis_cluster(request: pytest.FixtureRequest) -> None:
    """A test of the shared cluster starts with every primary's replica online.

    The cluster outlives each test module on its worker, and a test that killed a
    primary may end while the old one restarts as a replica and copies its new
    primary: until it is online, a claim's WAIT reaches no replica. Seen once in CI's
    long tier on a loaded machine (2026-12-03: the ACL module's fourth claim of one
    slot, ``ReplicaAckError ... 0 of 1 replicas within 5 s``, after three acknowledged).
    """
    if "redis_cluster" in request.fixturenames:
        request.getfixturevalue("redis_cluster").wait_healthy()
