"""The chaos kinds that need a three-broker Kafka cluster (``KAFKA_CLUSTER_KINDS``).

``kafka_leader_kill`` holds one sink partition write of batch ``k`` at
``sink.mid_produce`` (half its records in the log, its transaction open) and
kill -9s the node leading an output partition that has an open transaction;
``kafka_coordinator_kill`` holds it at ``sink.before_commit`` (all records and
the marker sent) and kill -9s the node coordinating the held write's
transactional id. Either way the write goes on with two nodes (RF 3,
``min.insync.replicas`` 2) and the node is restarted once the hold is over.

A fault is confirmed only on evidence that it hit: the output topic had an
open transaction when the node was picked (the held write was not empty and
in flight), the same node was still the leader / coordinator when re-read
just before the kill, the killed pid was that node's live process, and the
held write was still held (its process alive, within the hold) when the kill
landed.

The cluster is started on first use and shared by every run of the process;
``ChaosEnv.stop`` stops it.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchmarks.chaos.faults import arm_sync, held_alive, hold_evidence
from dedup.local.kafka_cluster import KafkaCluster

if TYPE_CHECKING:
    from benchmarks.chaos.model import ChaosEnv, Run

HOLD_S = 8.0  # kill about 1 s in; the dead node is fenced ~4 s later; the write goes on
RESTART_AFTER_HOLD_S = 3.0  # the write runs on two nodes for a while before the restart
POINTS = {"kafka_leader_kill": "sink.mid_produce",
          "kafka_coordinator_kill": "sink.before_commit"}

_cluster: KafkaCluster | None = None


def cluster(env: ChaosEnv) -> KafkaCluster:
    """The process's three-broker cluster, started on first use under ``env.workdir``."""
    global _cluster
    if _cluster is None:
        started = KafkaCluster(env.workdir / "kafka-cluster", heap_mb=320, overrides={
            # as ChaosEnv's broker: timed-out transactions aborted within ~1 s
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        })
        started.start()
        _cluster = started
    return _cluster


def stop() -> None:
    """Stop the cluster if one was started. Safe to repeat."""
    global _cluster
    if _cluster is not None:
        _cluster.stop()
        _cluster = None


def env_for(env: ChaosEnv) -> ChaosEnv:
    """A view of ``env`` whose ``kafka`` is the cluster: the run's topic, sink, clock and
    verifier all talk to the cluster; Redis and the SparkSession stay shared."""
    _ = env.spark  # created on the shared env first, so the view does not make its own
    view = copy.copy(env)
    view.kafka = cluster(env)  # type: ignore[assignment]
    return view


def prepare(run: Run) -> Callable[[], None]:
    """Arm the held write of ``run``'s batch and return its injector (run in a thread)."""
    kind, batch = run.spec.kind, run.spec.batch
    point = POINTS[kind]
    arm_sync(run.fp_dir, point, batch, HOLD_S)
    return lambda: _kill_during_hold(run, point)


def _pick(run: Run, kafka: KafkaCluster, context: dict[str, Any],
          open_parts: list[int]) -> int | None:
    if not open_parts:
        return None
    if run.spec.kind == "kafka_leader_kill":
        return kafka.leader_of(run.topic, open_parts[0])
    from sinks.config import SinkConfig

    config = SinkConfig.from_options({
        "app.id": run.app_id, "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "topic": run.topic, "strong.productions": "false",
    })
    return kafka.transaction_coordinator(config.transactional_id(int(context["partition"])))


def _kill_during_hold(run: Run, point: str) -> None:
    from sinks.verify import open_transaction_partitions

    kafka: KafkaCluster = run.env.kafka  # type: ignore[assignment]
    hit = run._wait_sync(point)
    if hit is None:
        return
    held_at = time.monotonic()
    context = hit.get("context", {})
    evidence = run.fault.evidence
    role = "leader" if run.spec.kind == "kafka_leader_kill" else "coordinator"
    node: int | None = None
    clock: threading.Thread | None = None
    try:
        time.sleep(1.0)  # the batch's other writes commit; the held one stays open
        open_parts = open_transaction_partitions(kafka.bootstrap_servers, run.topic)
        node = _pick(run, kafka, context, open_parts)
        evidence.update(open_partitions=open_parts, node=node, role=role)
        if node is None:
            run.fault.detail = f"no {role} to kill: no open transaction on {run.topic}"
            return
        # Read before the kill: afterwards the dead leader leaves no reading for a while.
        baseline = run.clock.committed_end()
        pid = kafka.pid(node)
        still = _pick(run, kafka, context, open_parts) == node
        alive, started = held_alive(hit), time.time()
        killed = kafka.kill(node)
        hold = hold_evidence(hit, started, time.time(), alive)
        run.fault.injected_at = time.monotonic()
        evidence.update(hold, pid=pid, killed_pid=killed, still_chosen=still,
                        held_write_in_flight=hold["in_hold"])
        run.fault.confirmed = (still and killed is not None and killed == pid
                               and hold["in_hold"])
        clock = threading.Thread(target=_measure_recovery, args=(run, baseline), daemon=True)
        clock.start()
        run.fault.detail = (f"kill -9 of node {node} (pid {killed}), the {role} of the held "
                            f"write at {point} (batch {context.get('batch')}, partition "
                            f"{context.get('partition')}; open output partitions {open_parts})")
        time.sleep(max(0.0, HOLD_S + RESTART_AFTER_HOLD_S - (time.monotonic() - held_at)))
    finally:
        if node is not None and not kafka.alive(node):
            kafka.start(node)
            evidence["restarted_pid"] = kafka.pid(node)
        if clock is not None:
            clock.join(120)  # the run's result reads run.recovery_s once this returns


def _measure_recovery(run: Run, baseline: int | None) -> None:
    injected = run.fault.injected_at or time.monotonic()
    run.recovery_s = run.clock.measure(injected, baseline, run.finished.is_set)
