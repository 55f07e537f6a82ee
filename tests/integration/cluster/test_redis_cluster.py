"""The ID catalog and the sink's checkpoints on a real Redis Cluster.

Every Lua call's keys share one hash tag, so each call stays in one slot; the
shards of one app id spread over the primaries. A claim waits (``WAIT``) for the
replica of the primary that holds its shard, on the connection that wrote it,
so a failover cannot forget an acknowledged claim.
"""

from __future__ import annotations

import os
import signal
import uuid
from typing import Any

import pytest

from dedup import DedupConfig, RedisCatalog, RedisConfig, ReplicaAckError, ShardClaimer
from dedup.bloom import FilterCache
from dedup.catalog import decisions_key, queries_key, query_apps_key, state_key
from dedup.local.redis_cluster import LocalRedisCluster

pytestmark = [pytest.mark.integration, pytest.mark.redis, pytest.mark.cluster]

SHARDS = 8


def _config(cluster: LocalRedisCluster, app: str, **redis: Any) -> DedupConfig:
    return DedupConfig(app, RedisConfig(cluster.url, **redis), num_shards=SHARDS)


def test_claims_spread_over_primaries_and_stay_in_one_slot(
        redis_cluster: LocalRedisCluster) -> None:
    app = f"rc-{uuid.uuid4().hex[:8]}"
    cfg = _config(redis_cluster, app)
    catalog = RedisCatalog(cfg)
    recorded = catalog.check_setup()
    # every primary has its replica, so claims wait for one
    assert recorded["replicas"] == "1"
    claimer = ShardClaimer(cfg, catalog, FilterCache())
    owners = {redis_cluster.primary_port_for_key(state_key(app, s)) for s in range(SHARDS)}
    assert len(owners) >= 2, "the app's shards should live on several primaries"
    for shard in range(SHARDS):
        ids = [f"s{shard}-{i}" for i in range(50)]
        first = claimer.claim("q", 0, shard, ids, "q")
        assert first.kept == frozenset(ids)
        again = claimer.claim("q", 0, shard, ids, "q")  # a retry replays
        assert again.replay and again.kept == first.kept
        later = claimer.claim("q", 1, shard, [*ids, f"s{shard}-new"], "q")
        assert later.kept == frozenset({f"s{shard}-new"})
    # the garbage collector's script runs per shard, across slots and nodes
    assert catalog.commit_progress("q", 1) == SHARDS
    client = redis_cluster.client()
    try:
        assert not client.hexists(decisions_key(app, 0), "q:0")
        assert client.hexists(decisions_key(app, 0), "q:1")
    finally:
        client.close()
    catalog.release("q")


def test_claim_waits_for_the_replica_of_its_own_primary(
        redis_cluster: LocalRedisCluster) -> None:
    app = f"rw-{uuid.uuid4().hex[:8]}"
    cfg = _config(redis_cluster, app, replica_timeout=1.0)
    catalog = RedisCatalog(cfg)
    catalog.check_setup()
    claimer = ShardClaimer(cfg, catalog, FilterCache())
    primary = redis_cluster.primary_port_for_key(state_key(app, 0))
    replica = redis_cluster.layout()[primary][0]
    # a shard on another primary, whose replica keeps running
    other = next(s for s in range(SHARDS)
                 if redis_cluster.primary_port_for_key(state_key(app, s)) != primary)
    # a query whose own record (its joined app ids) lives on another primary too
    q = next(q for q in (f"q-{uuid.uuid4().hex[:12]}" for _ in range(1000))
             if redis_cluster.primary_port_for_key(query_apps_key(cfg.redis.user, q)) != primary)
    frozen = redis_cluster.node(replica).pid
    assert frozen is not None
    os.kill(frozen, signal.SIGSTOP)
    try:
        assert claimer.claim(q, 0, other, ["x"], q).kept == {"x"}
        with pytest.raises(ReplicaAckError, match="0 of 1 replicas"):
            claimer.claim(q, 0, 0, ["y"], q)
    finally:
        os.kill(frozen, signal.SIGCONT)
    # the retry of the batch, once the replica is back, decides the same
    assert claimer.claim(q, 0, 0, ["y"], q).kept == {"y"}
    catalog.release(q)


def test_a_querys_records_wait_for_the_replica_of_their_own_primary(
        redis_cluster: LocalRedisCluster) -> None:
    """Issue 33, finding 4. The query's records (the app ids that joined it, its last
    committed batch) hash to slots of their own ({query}, {app}), often on another
    primary than the claimed shard, whose WAIT does not cover them: lost in a failover,
    every later claim of the query would be refused as run against another Redis. Each
    must be acknowledged by its own primary's replica, or fail closed."""
    app = f"rq-{uuid.uuid4().hex[:8]}"
    cfg = _config(redis_cluster, app, replica_timeout=1.0, failover_wait=0)
    catalog = RedisCatalog(cfg)
    catalog.check_setup()
    claimer = ShardClaimer(cfg, catalog, FilterCache())
    shard_primary = redis_cluster.primary_port_for_key(state_key(app, 0))
    query = next(q for q in (f"q-{uuid.uuid4().hex[:12]}" for _ in range(1000))
                 if redis_cluster.primary_port_for_key(query_apps_key(cfg.redis.user, q))
                 != shard_primary)
    record_primary = redis_cluster.primary_port_for_key(query_apps_key(cfg.redis.user, query))
    frozen = redis_cluster.node(redis_cluster.layout()[record_primary][0]).pid
    assert frozen is not None
    os.kill(frozen, signal.SIGSTOP)
    try:
        with pytest.raises(ReplicaAckError, match="0 of 1 replicas"):
            claimer.claim(query, 0, 0, ["x"], query)
    finally:
        os.kill(frozen, signal.SIGCONT)
    assert claimer.claim(query, 0, 0, ["x"], query).kept == {"x"}  # the retry, acknowledged
    progress_primary = redis_cluster.primary_port_for_key(queries_key(app))
    frozen = redis_cluster.node(redis_cluster.layout()[progress_primary][0]).pid
    assert frozen is not None
    os.kill(frozen, signal.SIGSTOP)
    try:
        with pytest.raises(ReplicaAckError, match="0 of 1 replicas"):
            catalog.commit_progress(query, 0)
    finally:
        os.kill(frozen, signal.SIGCONT)
    catalog.commit_progress(query, 0)
    catalog.release(query)


def test_failover_keeps_every_acknowledged_claim(redis_cluster: LocalRedisCluster) -> None:
    app = f"rf-{uuid.uuid4().hex[:8]}"
    # failover_wait=0: the claims fail closed at once, as they do once the wait ran out
    cfg = _config(redis_cluster, app, replica_timeout=1.0, failover_wait=0)
    catalog = RedisCatalog(cfg)
    catalog.check_setup()
    claimer = ShardClaimer(cfg, catalog, FilterCache())
    primary = redis_cluster.primary_port_for_key(state_key(app, 0))
    ids = [f"a{i}" for i in range(200)]
    assert claimer.claim("q", 0, 0, ids, "q").kept == frozenset(ids)
    redis_cluster.node(primary).kill()  # right after the acknowledgement
    assert redis_cluster.promoted(state_key(app, 0), primary) is not None, \
        "the replica was not promoted"
    # The promoted replica has no replica of its own yet: claims fail closed ...
    with pytest.raises(ReplicaAckError):
        ShardClaimer(cfg, catalog, FilterCache()).claim("q", 1, 0, [*ids, "b"], "q")
    # ... until the old primary is back, as the new primary's replica.
    redis_cluster.node(primary).start()
    redis_cluster.wait_healthy()
    fresh = ShardClaimer(cfg, catalog, FilterCache())  # no Bloom filter: asks the catalog
    later = fresh.claim("q", 1, 0, [*ids, "b"], "q")
    assert later.kept == frozenset({"b"}), "an acknowledged claim was forgotten"
    catalog.release("q")


def test_every_node_must_persist(redis_cluster: LocalRedisCluster) -> None:
    """A replica without AOF is refused too: a failover would make it the primary."""
    import redis

    from dedup import UnsafeSettingError
    from sinks.checkpoint import CheckpointStore
    from sinks.exceptions import UnsafeSinkSettingError

    app = f"rp-{uuid.uuid4().hex[:8]}"
    replica = next(iter(redis_cluster.layout().values()))[0]
    node = redis.Redis(port=replica)
    node.config_set("appendonly", "no")
    try:
        with pytest.raises(UnsafeSettingError, match=f"node 127.0.0.1:{replica}"):
            RedisCatalog(_config(redis_cluster, app)).check_setup()
        with pytest.raises(UnsafeSinkSettingError, match=f"127.0.0.1:{replica}"):
            CheckpointStore(RedisConfig(redis_cluster.url), app).check_persistence()
    finally:
        node.config_set("appendonly", "yes")
        node.close()


def test_a_start_after_a_failover_sees_the_new_primaries(redis_cluster: LocalRedisCluster) -> None:
    """A process whose client knew the cluster before a failover (a driver between two
    starts of a query) must count replicas on the primaries of now, not of then."""
    app = f"rs-{uuid.uuid4().hex[:8]}"
    catalog = RedisCatalog(_config(redis_cluster, app))
    assert catalog.check_setup()["replicas"] == "1"  # the client caches the layout
    primary = redis_cluster.primary_port_for_key(state_key(app, 0))
    redis_cluster.node(primary).kill()
    assert redis_cluster.promoted(state_key(app, 0), primary) is not None, \
        "the replica was not promoted"
    redis_cluster.node(primary).start()  # back as a replica: every primary has one again
    redis_cluster.wait_healthy()
    assert catalog.check_setup()["replicas"] == "1"


def test_the_sinks_redis_commands_ride_out_a_failover(redis_cluster: LocalRedisCluster) -> None:
    """A primary killed under the sink's checkpoints: its writes are repeated until the
    replica is promoted (RedisConfig.failover_wait), as a claim is, instead of failing
    the task (Spark's four attempts all fall inside a failover: the query died in 3
    of 26 redis_primary_kill runs of the full chaos matrix)."""
    from sinks.checkpoint import CheckpointStore

    app = f"rk-{uuid.uuid4().hex[:8]}"
    store = CheckpointStore(RedisConfig(redis_cluster.url, failover_wait=30), app)
    assert store.put_if_absent("q", 0, 0, b"batch 0") == (b"batch 0", True)
    primary = redis_cluster.primary_port_for_key(store.key("q", 1, 0))
    redis_cluster.node(primary).kill()
    try:
        assert store.put_if_absent("q", 1, 0, b"batch 1") == (b"batch 1", True)
        store.record_intent("q", 1, 0)
        store.record_committed("q", 1, 0)
        assert store.read_marker_copy(0, "q")[0] == ("q", 1)
        assert redis_cluster.promoted(store.key("q", 1, 0), primary) is not None
    finally:
        redis_cluster.node(primary).start()
        redis_cluster.wait_healthy()
    # a repeat of a write whose reply was lost finds its own checkpoint
    assert store.put_if_absent("q", 1, 0, b"batch 1")[0] == b"batch 1"


def test_a_node_whose_port_is_taken_at_its_first_start_gets_other_ports(tmp_path: Any) -> None:
    """A node's client or cluster-bus port taken between the choice and the bind (a
    client's outgoing connection in the ephemeral range; seen in the fresh-clone check:
    'Failed listening on port 45881 (cluster), aborting') is given other free ports at
    the cluster's first start, instead of failing the tests that use it."""
    import socket

    cluster = LocalRedisCluster(tmp_path / "c", primaries=3, replicas=0)
    bus = int(cluster.nodes[1].extra_args[-1])
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", bus))
    holder.listen()
    try:
        cluster.start()
        assert int(cluster.nodes[1].extra_args[-1]) != bus
        ports = [n.port for n in cluster.nodes] + [int(n.extra_args[-1]) for n in cluster.nodes]
        assert len(set(ports)) == len(ports)
    finally:
        holder.close()
        for node in cluster.nodes:
            node.stop()


def test_a_cluster_whose_creation_hangs_is_made_again_on_other_ports(tmp_path: Any) -> None:
    """``redis-cli --cluster create`` waited out its 120 s on "Waiting for the cluster to
    join" once in the long tier (2026-12-03, the TLS cluster, under load) and failed the
    module. A creation that hangs is given up after ``create_timeout``: the nodes are
    made again on other ports and the creation tried once more. Here a node that does
    not answer (SIGSTOPped) hangs the first creation."""
    cluster = LocalRedisCluster(tmp_path / "c", primaries=3, replicas=0)
    for node in cluster.nodes:
        node.start()
    stopped = cluster.nodes[2]
    before = {n.port for n in cluster.nodes}
    assert stopped.pid is not None
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        cluster.start(create_timeout=5.0)
        assert not before & {n.port for n in cluster.nodes}
        client = cluster.client()
        try:
            for i in range(30):
                client.set(f"k{i}", i)
            assert [int(client.get(f"k{i}")) for i in range(30)] == list(range(30))
        finally:
            client.close()
    finally:
        for node in cluster.nodes:
            node.stop()
