"""The three-node cluster's settings and coordinator arithmetic, without starting Kafka."""

from __future__ import annotations

from pathlib import Path

from dedup.local.kafka_cluster import (
    KafkaCluster,
    java_string_hash,
    transaction_state_partition,
)


def test_java_string_hash_matches_java() -> None:
    # Values of String.hashCode() computed by a JVM.
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("\u00e9t\u00e9") == 227742  # non-ASCII: UTF-16 code units
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair, two units


def test_transaction_state_partition_is_kafkas_partition_for() -> None:
    # Utils.abs maps Integer.MIN_VALUE to 0, any other value to its absolute value.
    assert transaction_state_partition("polygenelubricants", 50) == 0
    assert transaction_state_partition("hello", 50) == 99162322 % 50
    negative = next(f"app-{i}.p0" for i in range(1000) if java_string_hash(f"app-{i}.p0") < 0)
    assert transaction_state_partition(negative, 4) == -java_string_hash(negative) % 4


def test_nodes_share_quorum_and_cluster_id(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, overrides={"transaction.max.timeout.ms": "60000"})
    props = [cluster.broker(node).server_properties() for node in cluster.node_ids]
    assert cluster.node_ids == [1, 2, 3]
    assert {p["node.id"] for p in props} == {"1", "2", "3"}
    assert len({p["controller.quorum.voters"] for p in props}) == 1
    assert props[0]["controller.quorum.voters"].count("@127.0.0.1:") == 3
    assert {cluster.broker(node).cluster_id for node in cluster.node_ids} == {cluster.cluster_id}
    for p in props:
        assert p["process.roles"] == "broker,controller"
        assert p["default.replication.factor"] == "3"
        assert p["min.insync.replicas"] == "2"
        assert p["offsets.topic.replication.factor"] == "3"
        assert p["transaction.state.log.replication.factor"] == "3"
        assert p["transaction.state.log.min.isr"] == "2"
        assert p["transaction.max.timeout.ms"] == "60000"
    assert len(cluster.bootstrap_servers.split(",")) == 3
    assert len({p["log.dirs"] for p in props}) == 3
