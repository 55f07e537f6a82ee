"""The fault kinds of the chaos suite and how each is injected and confirmed.

Every fault is synchronised with the pipeline through a fail-point: either the
fail-point is the fault itself (a Python worker kills itself), or a ``sleep``
fail-point holds one task of batch ``k`` still while the runner breaks a
component under it. Every fail-point is armed for a partition with rows
(``rows_min``): a kill of an empty partition's task proves nothing.

A fault counts as *confirmed* only on evidence that it hit inside the window
it claims (kept in ``FaultOutcome.evidence``): a killed worker's fired record
with rows and its process gone; a kill of a service or node while the held
task was alive and still inside its hold (:func:`hold_evidence`); a fenced
zombie (a fencing error code from the producer with the sink's transactional
id); the records of the stopped transaction aborted; the toolkit's
catalog-unavailable error naming the frozen Redis. An unconfirmed fault fails
its run ("not hit"). Every query error of a run is classified against the
kind's expected errors (:data:`EXPECTED_ERRORS`); an unexpected one fails it.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dedup.failpoints import arm, fired
from dedup.local.services import process_alive

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
                              "dedup.retention.bucket_seconds (1 day -> 1 hour)",
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
# Kinds whose pipeline exists only in the two-step form (two exactly-once outputs of
# one query in foreachBatch): a matrix of the one_pass variant leaves them out.
TWO_STEP_ONLY_KINDS = frozenset({"two_outputs_foreach_batch"})
CRASH_KINDS = tuple(k for k in FAULT_KINDS if k not in OPERATIONAL_KINDS + CLUSTER_KINDS)
# Kinds whose check fails for a known reason (a finding, reported with its
# numbers); the check itself is not weakened, the report marks them.
KNOWN_FAILING: dict[str, str] = {}
SUBPROCESS_KINDS = {"driver_kill", "executor_kill", *SPARK_CLUSTER_KINDS}
WORKER_KILL_POINTS = ("dedup.after_claim", "sink.after_checkpoint", "sink.mid_produce",
                      "sink.before_commit", "sink.after_commit")
TXN_TIMEOUT_MS = 6000
NON_EMPTY = {"rows_min": 1}
"""The match part that keeps a fail-point off empty partitions (their context has rows=0)."""

# -- the query errors each kind may cause ------------------------------------------
# (class, pattern searched in the error's telling line, see runner._first_line).
# A query that dies of anything else hides a bug behind the runner's restart.
_WORKER_CRASH = ("python worker crash",
                 r"Python worker exited unexpectedly|crashed|EOFError|"
                 r"Task \S+ in stage \S+ failed \d+ times")
_EXECUTOR_LOST = ("executor lost", r"ExecutorLostFailure|[Ll]ost executor|Executor .* exited")
_REDIS_DOWN = ("redis unavailable",
               r"CatalogUnavailableError|ReplicaAckError|CheckpointUnavailableError")
_KAFKA_TXN = ("kafka transaction failure",
              r"TransactionFailedError|ProducerFencedError|CommitOutcomeUnknownError|"
              r"ProducerStuckError|KafkaUnavailableError|MarkerPendingError")
_APP_ID_REFUSAL = ("refusal: app id in use", r"AppIdInUseError")
_SETTING_REFUSAL = ("refusal: setting changed", r"SettingChangedError|ShardCountMismatchError")
EXPECTED_ERRORS: dict[str, tuple[tuple[str, str], ...]] = {
    "worker_kill": (_WORKER_CRASH,),
    "dup90_tiny_bloom": (_WORKER_CRASH,),
    "executor_kill": (_EXECUTOR_LOST, _WORKER_CRASH),
    "spark_worker_kill": (_EXECUTOR_LOST, _WORKER_CRASH),
    "driver_kill": (),  # the driver dies whole; its restart is not a query error
    "redis_kill_always": (_REDIS_DOWN,),
    "redis_kill_everysec": (_REDIS_DOWN,),
    "redis_unreachable": (_REDIS_DOWN,),
    "redis_primary_kill": (_REDIS_DOWN,),
    "kafka_kill": (_KAFKA_TXN,),
    "kafka_leader_kill": (_KAFKA_TXN,),
    "kafka_coordinator_kill": (_KAFKA_TXN,),
    "zombie_producer": (_KAFKA_TXN,),
    "txn_timeout": (_KAFKA_TXN,),
    "restart_shuffle_partitions": (),
    "restart_shard_count": (_SETTING_REFUSAL,),
    "restart_bucket_seconds": (_SETTING_REFUSAL,),
    "checkpoint_reset": (_APP_ID_REFUSAL,),
    "second_pipeline": (_APP_ID_REFUSAL,),
    "redis_maxmemory": (("redis out of memory",
                         r"OOM|maxmemory|CatalogStateError|CheckpointStateError"), _REDIS_DOWN),
    "redis_failover_lagging_replica": (_REDIS_DOWN,),
    "two_outputs_foreach_batch": (("injected driver failure",
                                   r"injected: the driver failed batch \d+ between its two "
                                   r"outputs"), _WORKER_CRASH),
    "clock_skew": (),
    "marker_retention": (("marker lost", r"MarkerLostError"),),
}


# Expected of every kind: Spark (4.2) waits a fixed 10 s, not configurable, for a
# fresh Python process (a Python data source's runner, started with each query) to
# connect back. On a loaded machine one missed it (CI, long tier): the query dies
# before any code of ours ran in that process, and the restart must absorb it as any
# other crash. A worker that connects and then fails is not this error.
ANY_KIND_ERRORS: tuple[tuple[str, str], ...] = (
    ("spark python launch timeout", r"Python worker failed to connect back"),
)


def classify_error(kind: str, error: str) -> str | None:
    """The expected class of query error ``error`` for fault ``kind``; None: unexpected."""
    for name, pattern in EXPECTED_ERRORS.get(kind, ()) + ANY_KIND_ERRORS:
        if re.search(pattern, error):
            return name
    return None


def hold_evidence(hit: dict[str, Any], kill_started: float, kill_ended: float,
                  held_alive: bool) -> dict[str, Any]:
    """Did a kill land inside the hold of fired sleep fail-point ``hit``?

    ``kill_started`` / ``kill_ended`` are wall-clock times (``time.time()``, as the
    fired record's); ``held_alive``: the held process was alive when the kill
    began. ``in_hold`` is the verdict: the kill began and ended inside
    ``[start, start + seconds)`` of a hold of a partition with rows, while the
    held task was alive (so the held write was in flight when the service died).
    """
    context = hit.get("context", {})
    start = float(hit.get("time", 0.0))
    seconds = float(hit.get("seconds", 0.0))
    try:
        rows = int(context.get("rows", 0))
    except ValueError:
        rows = 0
    evidence = {"hold_start": start, "hold_seconds": seconds, "held_pid": hit.get("pid"),
                "held_rows": rows, "kill_started": kill_started, "kill_ended": kill_ended,
                "held_alive_at_kill": held_alive}
    evidence["in_hold"] = bool(start and rows > 0 and held_alive
                               and start <= kill_started <= kill_ended < start + seconds)
    return evidence


def held_alive(hit: dict[str, Any]) -> bool:
    """Whether the process that fired ``hit`` still runs (a held task in its hold)."""
    return "pid" in hit and process_alive(int(hit["pid"]))


def fired_rows(hit: dict[str, Any] | None) -> int:
    """The row count of a fired record's context; 0 when absent (an empty partition)."""
    try:
        return int((hit or {}).get("context", {}).get("rows", 0))
    except ValueError:
        return 0


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
    """Hold one task of ``batch`` with rows at ``point`` for ``seconds`` (the fault window)."""
    arm(fp_dir, point, "sleep", match={"batch": batch, **NON_EMPTY}, seconds=seconds)


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


def freeze(pid: int, seconds: float, until: Callable[[], bool] | None = None) -> None:
    """SIGSTOP ``pid`` for ``seconds``, or until ``until()`` holds (checked every 0.2 s),
    then SIGCONT (always, even on error)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until is not None and until()):
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    finally:
        os.kill(pid, signal.SIGCONT)
