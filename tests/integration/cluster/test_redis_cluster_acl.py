"""A Redis ACL user on a Redis Cluster (docs/operations.md, "Redis ACL"): the line of its
app id with the cluster client's own commands, set on every node (ACLs are per node).

The cluster has replicas, so the calls here send ``WAIT`` too (the single Redis of
``tests/integration/security/test_redis_acl.py`` has none). A user missing one of the
cluster client's commands, or ``WAIT``, is refused naming it; redis-py's own error for a
refused ``CLUSTER SLOTS`` says "Cluster mode is not enabled on this node".
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from dedup.keys import acl_setuser_line
from dedup.local.redis_cluster import LocalRedisCluster
from tests.integration.security.acl import assert_refused_naming, every_call, make_user, new_query

pytestmark = [pytest.mark.integration, pytest.mark.redis, pytest.mark.cluster]

MakeUser = Callable[[str, str], str]


@pytest.fixture
def cluster_acl_user(redis_cluster: LocalRedisCluster) -> Iterator[MakeUser]:
    """``make(app_id, line)``: the user of ``line`` on every node, and its URL; every user
    made is deleted from every node."""
    admins = [redis.Redis(port=node.port) for node in redis_cluster.nodes]
    made: list[str] = []

    def make(app_id: str, line: str) -> str:
        made.append(f"dedup-{app_id}")
        return make_user(admins, redis_cluster.url, app_id, line)

    yield make
    for admin in admins:
        for user in made:
            admin.execute_command("ACL", "DELUSER", user)
        admin.close()


def test_the_cluster_line_lets_every_call_of_a_pipeline_through(
        cluster_acl_user: MakeUser) -> None:
    app_id = f"acl-{uuid.uuid4().hex[:10]}"
    every_call(cluster_acl_user(app_id, acl_setuser_line(app_id, cluster=True)), app_id,
               new_query())


@pytest.mark.parametrize("missing", ["+cluster|slots", "+command", "+wait"])
def test_a_cluster_user_missing_a_command_is_refused_naming_it(
        redis_cluster: LocalRedisCluster, cluster_acl_user: MakeUser, missing: str) -> None:
    app_id = f"acl-{uuid.uuid4().hex[:10]}"
    line = f"{acl_setuser_line(app_id, cluster=True)} "
    assert f" {missing} " in line
    url = cluster_acl_user(app_id, line.replace(f" {missing} ", " ").strip())
    query = new_query()
    assert_refused_naming(url, app_id, query, missing)
    for node in redis_cluster.nodes:
        admin = redis.Redis(port=node.port)
        admin.execute_command("ACL", "SETUSER", f"dedup-{app_id}", missing)
        admin.close()
    every_call(url, app_id, query)
