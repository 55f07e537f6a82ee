"""The exactly-once sink on a three-broker KRaft cluster (RF 3, min.insync.replicas 2).

Each test runs Kafka source -> record IDs -> dedup -> exactly-once sink (the
pipeline of the sink tests) against :class:`~dedup.local.kafka_cluster.KafkaCluster`
and compares the ``read_committed`` output with the failure-free output
(losses, duplicates and phantoms apart). The fault tests hold one sink
partition write of batch 1 at a fail-point and, while it is held with its
records in the log (an open transaction on the output), kill -9 the node
that matters: the leader of the open output partition, or the transaction
coordinator of the held write's transactional id. The node is restarted
once the write went on without it. The evidence that the fault hit (the
node was leader / coordinator at the moment of the kill, the write was in
flight) is asserted as well as the output.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

import sinks
from dedup.failpoints import arm, fired
from dedup.local.kafka_cluster import KafkaCluster
from dedup.local.services import process_alive
from sinks.config import SinkConfig
from sinks.verify import open_transaction_partitions, verify_topic
from tests.integration.sinks.pipeline import (
    OUT_PARTITIONS,
    Topics,
    build_stream,
    fill_input,
    run_to_end,
    sink_options,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.cluster,
              pytest.mark.spark, pytest.mark.redis]

HOLD_S = 8.0  # the held write: kill at ~1 s, the node fenced ~4 s later, then it goes on


def _topics_rf3(cluster: KafkaCluster, app_id: str) -> None:
    """Input and output topics at replication factor 3, before ``fill_input`` sees them."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([NewTopic(f"{app_id}-in", 2, 3),
                                   NewTopic(f"{app_id}-out", OUT_PARTITIONS, 3)])
    for future in futures.values():
        future.result(30)

    def replicas() -> int:
        try:
            return cluster.replication_factor(f"{app_id}-out")
        except KafkaException as exc:
            # created, but not yet in the metadata of the node asked (seen in CI)
            if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return 0
            raise

    assert wait_for(lambda: replicas() == 3)


def _assert_exact(cluster: KafkaCluster, topic: str, expected: dict[str, bytes]) -> None:
    report = verify_topic(cluster.bootstrap_servers, topic, expected)
    assert (report.lost, report.duplicated, report.phantoms) == (0, 0, 0), report.summary()
    assert report.open_transactions == 0, report.summary()
    assert report.ok, report.summary()


class _KillDuringHold:
    """In a thread: wait for the held write, pick a node, kill -9 it, restart it later."""

    def __init__(self, cluster: KafkaCluster, faults: str, point: str,
                 pick: Callable[[dict[str, Any], list[int]], int | None]) -> None:
        self.cluster, self.faults, self.point, self.pick = cluster, faults, point, pick
        self.evidence: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            if not wait_for(lambda: any("pid" in hit for hit in fired(self.faults, self.point)),
                            timeout=120):
                return
            held_at = time.monotonic()
            hit = fired(self.faults, self.point)[0]
            context = hit.get("context", {})
            time.sleep(1.0)  # the batch's other writes commit; the held one stays open
            open_parts = open_transaction_partitions(self.cluster.bootstrap_servers,
                                                     self.evidence["topic"])
            node = self.pick(context, open_parts)
            self.evidence.update(context=context, open_partitions=open_parts, node=node)
            if node is None:
                return
            pid = self.cluster.pid(node)
            still_chosen = self.pick(context, open_parts) == node  # re-read just before
            self.evidence.update(killed_pid=self.cluster.kill(node), pid=pid,
                                 still_chosen=still_chosen)
            # the held write was still held when the kill landed
            self.evidence["in_flight"] = (time.monotonic() - held_at < HOLD_S
                                          and process_alive(int(hit["pid"])))
            time.sleep(max(0.0, HOLD_S + 3.0 - (time.monotonic() - held_at)))
            self.cluster.start(node)
            self.evidence["restarted_pid"] = self.cluster.pid(node)
        except BaseException as exc:  # handed to the test's thread
            self.error = exc


def _run_with_kill(spark: Any, cluster: KafkaCluster, redis_url: str, app_id: str,
                   checkpoint: str, tmp_path: Path, point: str,
                   pick: Callable[[KafkaCluster, Topics, dict[str, str], dict[str, Any],
                                   list[int]], int | None]) -> dict[str, Any]:
    sinks.register(spark)
    bootstrap = cluster.bootstrap_servers
    faults = str(tmp_path / "faults")
    arm(faults, point, "sleep", match={"batch": 1}, seconds=HOLD_S)
    _topics_rf3(cluster, app_id)
    topics, expected = fill_input(bootstrap, app_id)
    options = sink_options(bootstrap, topics, app_id, redis_url, faults)
    killer = _KillDuringHold(cluster, faults, point,
                             lambda context, parts: pick(cluster, topics, options, context,
                                                         parts))
    killer.evidence["topic"] = topics.out
    killer.thread.start()
    try:
        run_to_end(build_stream(spark, bootstrap, topics, app_id, redis_url), options,
                   checkpoint, timeout=180)
    finally:
        killer.thread.join(90)
    if killer.error is not None:
        raise killer.error
    _assert_exact(cluster, topics.out, expected)
    assert cluster.replication_factor(topics.out) == 3
    # The topics the sink creates itself take the cluster's replication factor: a
    # marker topic on one node would stop every commit when that node dies. (A
    # failure-free run on the cluster was a test of its own until issue 52: both kill
    # tests check the same exact output and these factors.)
    marker_topic = SinkConfig.from_options(options).marker_topic
    assert cluster.replication_factor(marker_topic) == 3
    return killer.evidence


def _leader_of_open_partition(cluster: KafkaCluster, topics: Topics, options: dict[str, str],
                              context: dict[str, Any], open_parts: list[int]) -> int | None:
    return cluster.leader_of(topics.out, open_parts[0]) if open_parts else None


def _coordinator_of_held_write(cluster: KafkaCluster, topics: Topics, options: dict[str, str],
                               context: dict[str, Any], open_parts: list[int]) -> int | None:
    if not open_parts:
        return None
    txn_id = SinkConfig.from_options(options).transactional_id(int(context["partition"]))
    return cluster.transaction_coordinator(txn_id)


def test_leader_killed_mid_write(spark: Any, kafka_cluster: KafkaCluster, redis_url: str,
                                 app_id: str, tmp_checkpoint: str, tmp_path: Path) -> None:
    """kill -9 of the leader of an output partition while a write into it is half done."""
    evidence = _run_with_kill(spark, kafka_cluster, redis_url, app_id, tmp_checkpoint,
                              tmp_path, "sink.mid_produce", _leader_of_open_partition)
    _assert_hit(evidence)


def test_coordinator_killed_before_commit(spark: Any, kafka_cluster: KafkaCluster,
                                          redis_url: str, app_id: str, tmp_checkpoint: str,
                                          tmp_path: Path) -> None:
    """kill -9 of the held write's transaction coordinator just before its commit."""
    evidence = _run_with_kill(spark, kafka_cluster, redis_url, app_id, tmp_checkpoint,
                              tmp_path, "sink.before_commit", _coordinator_of_held_write)
    _assert_hit(evidence)


def _assert_hit(evidence: dict[str, Any]) -> None:
    """The kill landed: on the chosen node, while the held write was open, and the node
    came back as a new process."""
    assert evidence.get("open_partitions"), f"the held write was not in flight: {evidence}"
    assert evidence.get("node") is not None and evidence["still_chosen"], evidence
    assert evidence["in_flight"], evidence
    assert evidence["killed_pid"] == evidence["pid"] is not None, evidence
    assert evidence.get("restarted_pid") not in (None, evidence["pid"]), evidence


def test_an_output_moved_to_another_kafka_cluster_mid_batch_is_refused(
        spark: Any, kafka_bootstrap: str, kafka_cluster: KafkaCluster, redis_url: str,
        app_id: str, tmp_checkpoint: str) -> None:
    """The driver dies after the sink committed batch 1 but before Spark recorded it; the
    query restarts with ``kafka.bootstrap.servers`` pointing at another cluster. The
    Redis copy of the markers says batch 1's partitions are committed, so without a
    guard they are skipped and the new cluster never gets them."""
    from tests.integration.sinks.pipeline import check_exact, dies_after_commit, run_foreach_batch

    topics, expected = fill_input(kafka_bootstrap, app_id)
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url)
    first = sinks.ExactlyOnceKafkaForeachBatch(options)

    def stream() -> Any:
        return build_stream(spark, kafka_bootstrap, topics, app_id, redis_url)

    failed = run_foreach_batch(stream(), dies_after_commit(first, 1), tmp_checkpoint)
    assert failed.exception() is not None and "injected" in str(failed.exception())
    first.release()
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    for future in admin.create_topics([NewTopic(topics.out, OUT_PARTITIONS, 3)]).values():
        future.result(30)
    moved = sinks.ExactlyOnceKafkaForeachBatch(
        {**options, "kafka.bootstrap.servers": kafka_cluster.bootstrap_servers})
    refused = run_foreach_batch(stream(), moved, tmp_checkpoint)
    there = verify_topic(kafka_cluster.bootstrap_servers, topics.out, expected)
    assert refused.exception() is not None, (
        f"the move to another cluster was not refused; there: {there.summary()}")
    assert "cluster" in str(refused.exception()) and "batch 1" in str(refused.exception())
    moved.release()
    # the way out: the old cluster once, until the batch is committed
    restored = sinks.ExactlyOnceKafkaForeachBatch(options)
    done = run_foreach_batch(stream(), restored, tmp_checkpoint)
    assert done.exception() is None, done.exception()
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
    restored.release()
