"""A three-node Apache Kafka cluster in KRaft mode on loopback, for tests and chaos runs.

Production runs the sink on several brokers with replication factor 3 and
``min.insync.replicas=2``; a single broker cannot show what a leader change or
a transaction coordinator moving to another node does to a transaction in
flight. :class:`KafkaCluster` runs three :class:`~dedup.local.services.KafkaBroker`
nodes, each ``process.roles=broker,controller`` with one shared
``controller.quorum.voters`` and one cluster id, and the replication settings
of a production cluster. ``kill(node)`` is the kill -9 of one node and
``start(node)`` brings it back on the same ports and data; ``leader_of`` and
``transaction_coordinator`` say which node a fault has to hit.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any, NamedTuple

from dedup.exceptions import ServiceError
from dedup.local.services import KafkaBroker, free_ports, kafka_cluster_id

TRANSACTION_STATE_TOPIC = "__transaction_state"

CLUSTER_DEFAULTS: dict[str, str] = {
    # What exactly-once needs on a real cluster (README, "Running on a cluster").
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    # A killed node is fenced (its partitions get new leaders) after 4 s
    # instead of 9 s: the faults of the tests cost seconds, not tens of seconds.
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "1000",
    # The restarted node takes its partitions back within seconds, so the next
    # fault finds leaders spread over the nodes again.
    "leader.imbalance.check.interval.seconds": "5",
}


class PartitionState(NamedTuple):
    """One partition as the cluster reports it: node ids, -1 for no leader."""

    id: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text`` (a signed 32-bit int over UTF-16 units)."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def transaction_state_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition whose leader coordinates ``transactional_id``.

    Kafka's ``TransactionStateManager.partitionFor``: ``Utils.abs(id.hashCode())
    % partitions``, where ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0.
    """
    hashed = java_string_hash(transactional_id)
    return (0 if hashed == -(1 << 31) else abs(hashed)) % partitions


class KafkaCluster:
    """Three (or ``nodes``) KRaft nodes on 127.0.0.1, each broker and controller.

    Parameters
    ----------
    data_dir:
        Folder holding one sub-folder per node (``node-1`` ...), reused across
        restarts of a node.
    nodes:
        Number of nodes; 3 tolerates one dead node with ``min.insync.replicas=2``.
    heap_mb:
        JVM heap per node; about 320 MB each keeps three nodes and Spark on a
        2-core machine.
    overrides:
        Extra ``server.properties`` entries for every node, applied over
        :data:`CLUSTER_DEFAULTS`.
    die_with_parent:
        Kill the nodes when the starting Python process dies (as
        :class:`~dedup.local.services.KafkaBroker` does).
    """

    def __init__(self, data_dir: Path, nodes: int = 3, heap_mb: int = 320,
                 overrides: dict[str, str] | None = None, die_with_parent: bool = True,
                 log_level: str = "WARN") -> None:
        if nodes < 1:
            raise ValueError(f"a Kafka cluster needs at least one node, not {nodes}")
        self.data_dir = Path(data_dir)
        self.cluster_id = kafka_cluster_id()
        free = free_ports(2 * nodes)
        ports = {node: (free[2 * node - 2], free[2 * node - 1]) for node in range(1, nodes + 1)}
        voters = ",".join(f"{node}@127.0.0.1:{controller}"
                          for node, (_, controller) in ports.items())
        settings = {**CLUSTER_DEFAULTS, **(overrides or {})}
        self.brokers: dict[int, KafkaBroker] = {
            node: KafkaBroker(self.data_dir / f"node-{node}", port=port,
                              controller_port=controller, heap_mb=heap_mb, overrides=settings,
                              die_with_parent=die_with_parent, log_level=log_level,
                              node_id=node, quorum_voters=voters, cluster_id=self.cluster_id)
            for node, (port, controller) in ports.items()
        }

    @property
    def bootstrap_servers(self) -> str:
        """Every node's listener, comma-separated (clients survive any one node's death)."""
        return ",".join(broker.bootstrap_servers for broker in self.brokers.values())

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.brokers)

    def broker(self, node_id: int) -> KafkaBroker:
        """The node ``node_id`` (1-based); ``KeyError`` for an unknown id."""
        return self.brokers[node_id]

    def pid(self, node_id: int) -> int | None:
        return self.brokers[node_id].pid

    def alive(self, node_id: int | None = None) -> bool:
        """Whether node ``node_id`` runs, or with no id, whether every node does."""
        if node_id is not None:
            return self.brokers[node_id].alive()
        return all(broker.alive() for broker in self.brokers.values())

    def start(self, node_id: int | None = None, timeout: float = 150.0) -> KafkaCluster:
        """Start every node (or only ``node_id``, after a kill) and wait until ready.

        Ready: each running node's metadata lists every node, and a probe
        producer's ``init_transactions()`` succeeds (so the transaction state
        log exists with its replication factor). Restarting one node also
        waits until every partition is fully replicated again, so the next
        fault does not meet a shrunken ISR. Safe to call when running. Raises
        :class:`~dedup.exceptions.ServiceError` with the failing node's log.
        """
        started = [node_id] if node_id is not None else self.node_ids
        # All nodes first: none can be ready before a majority of the quorum runs.
        for node in started:
            self.brokers[node].launch()
        wanted = set(self.node_ids)
        for node in self.node_ids:
            if self.brokers[node].alive():
                self.brokers[node].wait_ready(timeout, nodes=wanted, transactions=False)
        self.brokers[started[0]].wait_ready(timeout, nodes=wanted, transactions=True)
        if node_id is not None:
            self.wait_fully_replicated(timeout)
        return self

    def kill(self, node_id: int) -> int | None:
        """kill -9 of node ``node_id``; returns the pid it had. ``start(node_id)`` restarts it."""
        broker = self.brokers[node_id]
        pid = broker.pid if broker.alive() else None
        broker.kill()
        return pid

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to every node (controlled shutdown), SIGKILL after ``timeout``.

        The nodes are signalled together: stopped one by one, the last ones
        would wait for a quorum that is already gone.
        """
        for broker in self.brokers.values():
            broker.signal(signal.SIGTERM)
        for broker in self.brokers.values():
            broker.stop(timeout)

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})

    def partitions(self, topic: str, timeout: float = 10.0) -> dict[int, PartitionState]:
        """Leader, replicas and in-sync replicas of each partition of ``topic``, by id.

        Asks AdminClient ``describe_topics``; while a node has just died,
        librdkafka may still send that to the dead node (its cached
        "controller") and time out, so a failure falls back to the metadata
        of ``list_topics``, which any live node answers. Safe to repeat.
        Raises ``KafkaException`` when neither answers.
        """
        from confluent_kafka import KafkaException, TopicCollection

        admin = self._admin()  # held until the futures resolve: its end cancels them
        try:
            futures = admin.describe_topics(TopicCollection([topic]),
                                            request_timeout=min(timeout, 5.0))
            description = futures[topic].result(timeout)
            return {info.id: PartitionState(
                        info.id, info.leader.id if info.leader is not None else -1,
                        tuple(node.id for node in info.replicas),
                        tuple(node.id for node in info.isr))
                    for info in description.partitions}
        except KafkaException:
            metadata = admin.list_topics(topic, timeout=timeout).topics[topic]
            if metadata.error is not None:
                raise KafkaException(metadata.error) from None
            return {info.id: PartitionState(info.id, info.leader, tuple(info.replicas),
                                            tuple(info.isrs))
                    for info in metadata.partitions.values()}

    def leader_of(self, topic: str, partition: int, timeout: float = 10.0) -> int | None:
        """Node id leading ``topic``/``partition`` now, ``None`` while it has no leader.

        Safe to repeat; the answer can lag a leader change by the time the
        controller takes to fence a dead node. ``KafkaException`` when the
        cluster does not answer, ``KeyError`` for a partition the topic lacks.
        """
        leader = self.partitions(topic, timeout)[partition].leader
        return leader if leader >= 0 else None

    def replication_factor(self, topic: str, timeout: float = 10.0) -> int:
        """Replicas per partition of ``topic`` (the smallest, should they differ)."""
        return min(len(state.replicas) for state in self.partitions(topic, timeout).values())

    def transaction_coordinator(self, transactional_id: str, timeout: float = 10.0
                                ) -> int | None:
        """Node id coordinating ``transactional_id`` now: the leader of its
        ``__transaction_state`` partition; ``None`` while that has no leader."""
        states = self.partitions(TRANSACTION_STATE_TOPIC, timeout)
        leader = states[transaction_state_partition(transactional_id, len(states))].leader
        return leader if leader >= 0 else None

    def wait_fully_replicated(self, timeout: float = 120.0) -> None:
        """Wait until every partition of every topic has its whole replica set in sync.

        Safe to repeat. Raises :class:`~dedup.exceptions.ServiceError` naming
        the partitions still behind after ``timeout``.
        """
        deadline = time.monotonic() + timeout
        behind: list[str] = ["(no answer)"]
        while time.monotonic() < deadline:
            try:
                metadata = self._admin().list_topics(timeout=5)
                behind = [f"{name}/{info.id}"
                          for name, topic in metadata.topics.items()
                          for info in topic.partitions.values()
                          if len(info.isrs) < len(info.replicas)]
            except Exception as exc:  # a node still joining: ask again
                behind = [f"(no answer: {type(exc).__name__}: {exc})"]
            if not behind:
                return
            time.sleep(0.5)
        raise ServiceError(f"Kafka partitions not back in sync after {timeout:.0f} s: "
                           f"{', '.join(behind[:10])}; see the node logs under {self.data_dir}")

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
