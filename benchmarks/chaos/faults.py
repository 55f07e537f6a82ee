"""The fault kinds of the chaos suite and how each is injected and confirmed.

Every fault is synchronised with the pipeline through a fail-point: either the
fail-point is the fault itself (a Python worker kills itself), or a ``sleep``
fail-point holds one task of batch ``k`` still while the runner breaks a
component under it. A fault counts as *confirmed* only on evidence that it
hit: the fired fail-point file, a changed process id, a fenced zombie, the
aborted records of a timed-out transaction.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dedup.failpoints import arm, fired

FAULT_KINDS: dict[str, str] = {
    "worker_kill": "SIGKILL of a Python worker at a fail-point (task retry)",
    "executor_kill": "SIGKILL of an executor JVM (Spark local-cluster, task re-run)",
    "driver_kill": "SIGKILL of the driver, restart from the checkpoint",
    "redis_kill_always": "kill -9 and restart of Redis, AOF appendfsync always",
    "redis_kill_everysec": "kill -9 and restart of Redis, AOF appendfsync everysec",
    "kafka_kill": "kill -9 and restart of the Kafka broker",
    "zombie_producer": "a zombie producer with the sink's transactional id, back after "
                       "the retry took over",
    "txn_timeout": "the writing worker SIGSTOPped past transaction.timeout.ms",
    "redis_unreachable": "Redis frozen (SIGSTOP) past the client timeout: must fail closed",
    "dup90_tiny_bloom": "90% duplicate input, undersized Bloom filter, plus a worker kill",
    # Operational kinds: what operators do to a running pipeline. A run passes
    # when its output is exact, or when the change was refused at start with a
    # clear message naming it, nothing wrong was committed before (an exact
    # prefix), and the restart with the original settings is exact.
    "restart_shuffle_partitions": "partial batch, restart with another "
                                  "spark.sql.shuffle.partitions (4 -> 2 or 6)",
    "restart_shard_count": "partial batch, restart with another dedup.num_shards (4 -> 8)",
    "restart_bucket_seconds": "partial batch, restart with another "
                              "dedup.retention_bucket_seconds (1 day -> 1 hour)",
    "checkpoint_reset": "partial batch, restart under a fresh checkpoint with the same app "
                        "id (refused), old query finished, then the reset",
    "second_pipeline": "a second pipeline with the same app id (own checkpoint) while the "
                       "first is mid-batch",
    "redis_maxmemory": "Redis maxmemory (noeviction) reached mid-run, then raised",
    "redis_failover_lagging_replica": "failover to a lagging Redis replica (primary killed, "
                                      "replica promoted, pipeline pointed at it)",
    "two_outputs_foreach_batch": "two exactly-once outputs of one query in foreachBatch; "
                                 "a worker kill and a driver failure between the outputs",
    "clock_skew": "one partition's batch clock a bucket width behind (60 s buckets)",
    "marker_retention": "crash after a Kafka commit, restart after the broker expired the "
                        "batch markers (offsets.retention.minutes=1)",
    # Cluster kinds: a part of a multi-node service fails and another takes over.
    "redis_primary_kill": "kill -9 of the Redis Cluster primary serving a held claim's shard; "
                          "its replica takes over, the old primary returns as a replica",
    "spark_worker_kill": "kill -9 of a Spark standalone worker and its executor mid-batch "
                         "(a lost node), worker restarted",
    "kafka_leader_kill": "3 brokers, RF 3: kill -9 of the leader of an output partition "
                         "while a write into it is half done, then its restart",
    "kafka_coordinator_kill": "3 brokers, RF 3: kill -9 of the held write's transaction "
                              "coordinator just before its commit, then its restart",
}
# Each family starts its own cluster on first use (benchmarks/chaos/cluster_*.py).
REDIS_CLUSTER_KINDS = ("redis_primary_kill",)
SPARK_CLUSTER_KINDS = ("spark_worker_kill",)
KAFKA_CLUSTER_KINDS = ("kafka_leader_kill", "kafka_coordinator_kill")
CLUSTER_KINDS = REDIS_CLUSTER_KINDS + SPARK_CLUSTER_KINDS + KAFKA_CLUSTER_KINDS
OPERATIONAL_KINDS = ("restart_shuffle_partitions", "restart_shard_count",
                     "restart_bucket_seconds", "checkpoint_reset", "second_pipeline",
                     "redis_maxmemory", "redis_failover_lagging_replica",
                     "two_outputs_foreach_batch", "clock_skew", "marker_retention")
CRASH_KINDS = tuple(k for k in FAULT_KINDS if k not in OPERATIONAL_KINDS + CLUSTER_KINDS)
# Kinds whose check fails for a known reason (a finding, reported with its
# numbers); the check itself is not weakened, the report marks them.
KNOWN_FAILING: dict[str, str] = {}
SUBPROCESS_KINDS = {"driver_kill", "executor_kill", *SPARK_CLUSTER_KINDS}
WORKER_KILL_POINTS = ("dedup.after_claim", "sink.after_checkpoint", "sink.mid_produce",
                      "sink.before_commit", "sink.after_commit")
TXN_TIMEOUT_MS = 6000


@dataclass
class FaultOutcome:
    """What happened to one injected fault."""

    kind: str
    detail: str = ""
    confirmed: bool = False
    injected_at: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def wait_fired(fp_dir: Path, name: str, timeout: float, stop: Any = None) -> dict[str, Any] | None:
    """Wait until fail-point ``name`` fired; its record, or None on timeout / stop.

    The firing process renames the armed file, then writes its record (context,
    pid): a poll in between reads the bare spec. Such a record is returned
    only if it stays bare for 2 s (the firing process died in between).
    """
    deadline = time.monotonic() + timeout
    bare_since: float | None = None
    while time.monotonic() < deadline:
        hits = fired(fp_dir, name)
        if hits:
            if "pid" in hits[0]:
                return hits[0]
            bare_since = bare_since or time.monotonic()
            if time.monotonic() - bare_since > 2.0:
                return hits[0]
        if stop is not None and stop():
            return None
        time.sleep(0.05)
    return None


def arm_sync(fp_dir: Path, point: str, batch: int, seconds: float) -> None:
    """Hold one task of ``batch`` at ``point`` for ``seconds`` (the fault window)."""
    arm(fp_dir, point, "sleep", match={"batch": batch}, seconds=seconds)


def ancestor_with(pid: int, marker: str) -> int | None:
    """The nearest ancestor of ``pid`` (or itself) whose command line contains ``marker``."""
    current = pid
    for _ in range(8):
        try:
            cmdline = Path(f"/proc/{current}/cmdline").read_bytes().replace(b"\0", b" ")
            if marker.encode() in cmdline:
                return current
            stat = Path(f"/proc/{current}/stat").read_text()
            current = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if current <= 1:
            return None
    return None


def freeze(pid: int, seconds: float) -> None:
    """SIGSTOP ``pid`` for ``seconds``, then SIGCONT (always, even on error)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
