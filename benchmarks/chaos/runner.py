"""Run the pipeline many times under a seeded schedule of faults and verify each run.

One run: a fresh app id, output topic and checkpoint; the synthetic source
(finite, replayable) -> record IDs -> dedup -> exactly-once Kafka sink, built by
the CLI's pipeline composer; one fault of the scheduled kind injected at a
random batch; the query restarted from its checkpoint whenever it dies; then
the ``read_committed`` output compared with the failure-free output computed
from the input (:mod:`dedup.verify`). Most kinds run in one long-lived
``local[2,4]`` SparkSession; the driver and executor kills run the pipeline in
a child ``dedup run`` process so that a whole driver can be killed.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from benchmarks.chaos import cluster_kafka, cluster_spark
from benchmarks.chaos.faults import (
    FAULT_KINDS,
    KAFKA_CLUSTER_KINDS,
    NON_EMPTY,
    OPERATIONAL_KINDS,
    SPARK_CLUSTER_KINDS,
    SUBPROCESS_KINDS,
    TXN_TIMEOUT_MS,
    WORKER_KILL_POINTS,
    FaultOutcome,
    ancestor_with,
    arm_sync,
    classify_error,
    fired_rows,
    freeze,
    held_alive,
    hold_evidence,
    wait_fired,
)
from dedup.constants import RECORD_ID_HEADER
from dedup.failpoints import arm, resume
from dedup.local.services import KafkaBroker, RedisServer, process_alive
from sinks.kafka_io import consume_all, ensure_topic
from sinks.verify import verify_topic

ROWS = 1200
ROWS_PER_BATCH = 200
MAX_RESTARTS = 6
# Spark's task attempts in local[2,4] / local-cluster: a fault the task retries absorb
# never reaches the query; one that outlasts them all fails it.
TASK_ATTEMPTS = 4
# The codes of a fenced producer: a newer one with its transactional id took over.
FENCING_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                           KafkaError.INVALID_PRODUCER_EPOCH})
# redis_unreachable: the pipeline's Redis client gives up after this (a query-string
# option of the URL, which redis-py prefers to RedisConfig's 10 s), and redis-py tries
# a call REDIS_PY_TRIES times with up to REDIS_PY_BACKOFF_S of waits in between (its
# default Retry). The freeze outlasts all of Spark's task attempts: with the default
# 10 s the outage had to last over 3 minutes, or the retries absorbed it (seen in the
# strict subset: a 60 s freeze, no query error, the batch went through afterwards).
FROZEN_CLIENT_TIMEOUT_S = 2.0
REDIS_PY_TRIES = 4
REDIS_PY_BACKOFF_S = 7.0
FREEZE_S = TASK_ATTEMPTS * (REDIS_PY_TRIES * FROZEN_CLIENT_TIMEOUT_S + REDIS_PY_BACKOFF_S) + 15
# Kinds whose fault needs the batch after the faulted one (it must exist).
NEEDS_NEXT_BATCH = frozenset({"two_outputs_foreach_batch"})


@dataclass(frozen=True)
class RunSpec:
    """One scheduled run: which fault, where, on which seeded input."""

    index: int
    kind: str
    seed: int
    batch: int
    point: str
    # broken variant switched on for the run (benchmarks.chaos.mutant_patches.KNOWN_MUTANTS)
    mutant: str = ""
    # pipeline variant of the run (benchmarks.chaos.mutants.VARIANTS), "" the plain one
    variant: str = ""


@dataclass
class RunResult:
    spec: RunSpec
    fault: FaultOutcome
    report: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0
    recovery_s: float | None = None
    duration_s: float = 0.0
    error: str = ""
    # "exact", "refused" (operational kinds: refused with a clear message, an
    # exact prefix before, exact after the restart with the original settings)
    # or "failed"; "" in progress files written before outcomes were recorded
    outcome: str = ""
    # each query error's expected class (benchmarks.chaos.faults.EXPECTED_ERRORS) and
    # how often it happened; the errors no class expects (each fails the run). Absent
    # from progress files written before errors were classified.
    error_classes: dict[str, int] = field(default_factory=dict)
    unexpected_errors: list[str] = field(default_factory=list)
    # the toolkit's commit the run ran on (a matrix spans sittings and code changes);
    # "" in progress files written before it was recorded
    commit: str = ""
    # what recovery_s was timed to: "partition" (the killed sink partition's output
    # committed) or "topic" (the first growth of the topic's committed end); "" in
    # progress files written before 2026-11-26, whose kill runs were timed to the topic
    recovery_of: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fault"] = asdict(self.fault)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """The inverse of :meth:`as_dict` (a resumed matrix reads its finished runs back)."""
        fields = dict(data)
        fields["spec"] = RunSpec(**fields["spec"])
        fields["fault"] = FaultOutcome(**fields["fault"])
        return cls(**fields)


def schedule(runs: int, seed: int, kinds: list[str] | None = None) -> list[RunSpec]:
    """``runs`` specs cycling through ``kinds`` (so each is hit), seeded batches and points.

    The faulted batch is any of the input's, the first (no marker, no commit yet)
    and the last (its fault still happens before the query stops: every injector
    waits for its hold, and the query cannot end while a task is held) included,
    except where a kind cannot fault it (:data:`NEEDS_NEXT_BATCH`).
    """
    kinds = kinds or list(FAULT_KINDS)
    rng = random.Random(seed)
    batches = ROWS // ROWS_PER_BATCH
    specs = []
    for i in range(runs):
        kind = kinds[i % len(kinds)]
        last = batches - 2 if kind in NEEDS_NEXT_BATCH else batches - 1
        specs.append(RunSpec(index=i, kind=kind, seed=rng.randrange(1, 1_000_000),
                             batch=rng.randint(0, last), point=rng.choice(WORKER_KILL_POINTS)))
    return specs


class ChaosEnv:
    """The services every run shares (Redis x2, Kafka) and the long-lived SparkSession."""

    def __init__(self, workdir: Path, spark: Any = None) -> None:
        from benchmarks.chaos.mutant_patches import enable_in_workers

        # The mutants' wrappers, here and in every process started from here on (the
        # SparkSession's JVM and Python workers, `dedup run` children): each acts only
        # when its run armed it. A given ``spark`` must have been started after it
        # (tests/chaos/conftest.py): see check_mutants_reach_workers.
        enable_in_workers()
        self.workdir = workdir
        self._owns_spark = spark is None
        self.redis = {
            "always": RedisServer(workdir / "redis-always", appendfsync="always"),
            "everysec": RedisServer(workdir / "redis-everysec", appendfsync="everysec"),
        }
        # Timed-out transactions are aborted within ~1 s instead of the default 10 s.
        self.kafka = KafkaBroker(workdir / "kafka", heap_mb=448, overrides={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        })
        self._spark: Any = spark
        self._redis_cluster: Any = None

    @property
    def redis_cluster(self) -> Any:
        """A Redis Cluster (3 primaries, 1 replica each), started on first use."""
        if self._redis_cluster is None:
            from dedup.local.redis_cluster import LocalRedisCluster

            self._redis_cluster = LocalRedisCluster(self.workdir / "redis-cluster").start()
        return self._redis_cluster

    def start(self) -> ChaosEnv:
        for server in self.redis.values():
            server.start()
        self.kafka.start()
        return self

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from dedup.local.spark import local_spark_session

            self._spark = local_spark_session("dedup-chaos", master="local[2,4]",
                                              shuffle_partitions=4)
        return self._spark

    def check_mutants_reach_workers(self) -> None:
        """Raise unless this SparkSession's Python workers install the mutants' wrappers
        (a session started before :func:`~benchmarks.chaos.mutant_patches.enable_in_workers`
        never does: its mutant runs would test the unbroken toolkit)."""
        from benchmarks.chaos.mutant_patches import WORKER_SITE, workers_patched

        if self._spark is not None and not workers_patched(self._spark):
            raise RuntimeError(f"the SparkSession's Python workers do not start with "
                               f"{WORKER_SITE} on PYTHONPATH, so no mutant reaches them: "
                               "start the session after benchmarks.chaos.mutant_patches."
                               "enable_in_workers() (tests/chaos/conftest.py does)")

    def stop(self) -> None:
        if self._spark is not None and self._owns_spark:
            self._spark.stop()
        cluster_spark.stop_cluster()
        self.kafka.stop()
        cluster_kafka.stop()
        for server in self.redis.values():
            server.stop()
        if self._redis_cluster is not None:
            self._redis_cluster.stop()


def pipeline_text(app_id: str, topic: str, spec: RunSpec, master: str = "local[2,4]",
                  num_shards: int = 4, bucket_seconds: int = 24 * 3600,
                  horizon_seconds: int = 7 * 24 * 3600) -> str:
    dup90 = spec.kind == "dup90_tiny_bloom"
    sink_options = ""
    # The form is a setting of the file, so every path that writes or parses a run's
    # pipeline (the operational kinds' own starts included) runs it; written both ways
    # because one pass is the default of a file that does not choose.
    one_pass = f"one_pass = {str('one_pass' in spec.variant.split('+')).lower()}\n"
    if spec.kind == "txn_timeout":
        sink_options = (f'"kafka.transaction.timeout.ms" = "{TXN_TIMEOUT_MS}"\n'
                        f'"max.batch.duration.seconds" = "{(TXN_TIMEOUT_MS - 1000) / 1000:g}"\n')
    return f"""
app_id = "{app_id}"
[source]
type = "synthetic"
seed = {spec.seed}
rows_per_batch = {ROWS_PER_BATCH}
total_rows = {ROWS}
duplicate_rate = {0.9 if dup90 else 0.2}
duplicate_distance = "later_batches"
duplicate_gap_batches = 3
num_partitions = 2
[ids]
strategy = "column"
column = "event_id"
[dedup]
num_shards = {num_shards}
retention.bucket_seconds = {bucket_seconds}
retention.horizon_seconds = {horizon_seconds}
bloom.capacity = {20 if dup90 else 100000}
bloom.error_rate = {0.5 if dup90 else 0.01}
[sink]
type = "kafka"
{one_pass}topic = "{topic}"
partitions = 2
key_column = "key"
value_column = "payload"
[sink.options]
{sink_options}
[run]
master = "{master}"
stop_after_idle_seconds = 5.0
"""


class _RecoveryClock:
    """Time from the fault to the commit of the output it interrupted.

    With a ``target`` (partition, next batch), the time until that sink
    partition's batch marker reaches the next batch: the interrupted
    partition's own output is committed. Without one (a fault that hits no
    single partition), the time to the next growth of the topic's committed
    end offsets. A commit of another partition, in flight when the fault hit,
    must not count: it made a driver kill look recovered in 0.4 s.
    """

    def __init__(self, bootstrap: str, topic: str, app_id: str = "") -> None:
        self.bootstrap, self.topic, self.app_id = bootstrap, topic, app_id
        self.target: tuple[int, int] | None = None

    def committed_end(self) -> int | None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "chaos-clock",
                             "isolation.level": "read_committed", "log_level": 0})
        try:
            return sum(consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                      timeout=2, cached=False)[1]
                       for p in range(2))
        except Exception:  # broker down during the fault: no reading
            return None
        finally:
            consumer.close()

    def marker(self, partition: int) -> int | None:
        """The committed batch marker (next batch) of sink partition ``partition``."""
        from sinks.config import SinkConfig

        config = SinkConfig.from_options({
            "app.id": self.app_id, "kafka.bootstrap.servers": self.bootstrap,
            "topic": self.topic, "strong.productions": "false"})
        consumer = Consumer({"bootstrap.servers": self.bootstrap,
                             "group.id": config.marker_group(partition),
                             "isolation.level": "read_committed", "log_level": 0})
        try:
            [tp] = consumer.committed([TopicPartition(config.marker_topic, 0)], timeout=2)
            return int(tp.offset)
        except Exception:  # broker down, coordinator loading: no reading
            return None
        finally:
            consumer.close()

    def _reached(self, baseline: int | None) -> bool:
        if self.target is not None:
            partition, next_batch = self.target
            marker = self.marker(partition)
            return marker is not None and marker >= next_batch
        now_end = self.committed_end()
        return now_end is not None and baseline is not None and now_end > baseline

    def measure(self, injected_at: float, baseline: int | None, done: Callable[[], bool],
                ) -> float | None:
        while not done():
            if self._reached(baseline):
                return time.monotonic() - injected_at
            time.sleep(0.3)
        if self._reached(baseline):
            return time.monotonic() - injected_at
        return None


def recovery_target(point: str, context: dict[str, Any]) -> tuple[int, int] | None:
    """(sink partition, next batch) whose commit ends the recovery from a kill at
    fail-point ``point`` in ``context``; None when the context names no partition.

    A kill after the Kafka commit interrupted no output of its batch: the
    partition's next batch is the output it delays. The operator's partitions
    are the sink's (the sink writes the operator's shuffle as it is).
    """
    batch, partition = str(context.get("batch", "")), str(context.get("partition", ""))
    if not (batch.isdigit() and partition.lstrip("-").isdigit()) or int(partition) < 0:
        return None
    return int(partition), int(batch) + (2 if point == "sink.after_commit" else 1)


def _wait_marker(config: Any, partition: int, next_batch: int, timeout: float,
                 stop: Callable[[], bool]) -> bool:
    """Wait until the sink's marker of ``partition`` reaches ``next_batch`` (committed)."""
    consumer = Consumer({"bootstrap.servers": config.bootstrap_servers,
                         "group.id": config.marker_group(partition),
                         "isolation.level": "read_committed", "log_level": 0})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                [tp] = consumer.committed([TopicPartition(config.marker_topic, 0)], timeout=5)
                if tp.offset >= next_batch:
                    return True
            except Exception:  # coordinator loading, pending offsets: try again
                pass
            if time.monotonic() > deadline or stop():
                return False
            time.sleep(0.2)
    finally:
        consumer.close()


class Run:
    """State of one run while it executes."""

    def __init__(self, env: ChaosEnv, spec: RunSpec) -> None:
        self.env, self.spec = env, spec
        self.app_id = f"chaos-{spec.index}-{spec.kind.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
        self.topic = f"{self.app_id}-out"
        self.dir = env.workdir / "runs" / self.app_id
        self.fp_dir = self.dir / "failpoints"
        self.fp_dir.mkdir(parents=True, exist_ok=True)
        if spec.mutant:  # before anything starts: every process reads it once
            from benchmarks.chaos.mutant_patches import arm_mutant

            env.check_mutants_reach_workers()
            arm_mutant(self.fp_dir, spec.mutant)
        self.checkpoint = str(self.dir / "checkpoint")
        self.redis = (env.redis_cluster if spec.kind == "redis_primary_kill" else
                      env.redis["everysec" if spec.kind == "redis_kill_everysec" else "always"])
        self.fault = FaultOutcome(kind=spec.kind)
        self.finished = threading.Event()
        self.component_back = threading.Event()
        self.component_back.set()
        self.clock = _RecoveryClock(env.kafka.bootstrap_servers, self.topic, self.app_id)
        self.recovery_s: float | None = None
        # operational kinds: the refusal's one-line message, None when not refused
        self.refused: str | None = None
        # further output topics of the run, each verified like ``topic`` (counts summed)
        self.extra_topics: list[str] = []

    # -- the fault, in a thread beside the pipeline -----------------------------
    def prepare(self) -> Callable[[], None] | None:
        """Arm the fail-points of this run; return the injector to run in a thread."""
        kind, k = self.spec.kind, self.spec.batch
        if kind in KAFKA_CLUSTER_KINDS:
            return cluster_kafka.prepare(self)
        if kind in {"worker_kill", "dup90_tiny_bloom"}:
            point = self.spec.point if kind == "worker_kill" else "dedup.after_claim"
            arm(self.fp_dir, point, "kill", match={"batch": k, **NON_EMPTY})
            self.fault.detail = f"SIGKILL at {point}, batch {k}"
            return lambda: self._confirm_fired(point)
        if kind == "txn_timeout":
            arm(self.fp_dir, "sink.before_commit", "stop", match={"batch": k, **NON_EMPTY})
            self.fault.detail = f"SIGSTOP at sink.before_commit, batch {k}, " \
                                f"{TXN_TIMEOUT_MS} ms timeout"
            return self._txn_timeout
        if kind in {"redis_kill_always", "redis_kill_everysec"}:
            arm_sync(self.fp_dir, "dedup.after_claim", k, 3)
            return self._redis_kill
        if kind == "redis_primary_kill":
            from benchmarks.chaos.cluster_redis import HOLD_S, kill_primary

            arm_sync(self.fp_dir, "dedup.after_claim", k, HOLD_S)
            return lambda: kill_primary(self)
        if kind == "redis_unreachable":
            arm_sync(self.fp_dir, "dedup.after_claim", k, 2)
            return self._redis_freeze
        if kind == "kafka_kill":
            arm_sync(self.fp_dir, "sink.after_checkpoint", k, 3)
            return self._kafka_kill
        if kind == "zombie_producer":
            arm_sync(self.fp_dir, "sink.after_checkpoint", k, 2)
            return self._zombie
        if kind == "driver_kill":
            arm_sync(self.fp_dir, "sink.after_checkpoint", k, 5)
            return None  # the subprocess runner kills the driver itself
        if kind == "executor_kill":
            arm_sync(self.fp_dir, "dedup.after_claim", k, 5)
            return self._executor_kill
        if kind in SPARK_CLUSTER_KINDS:
            return cluster_spark.prepare(self)
        raise ValueError(f"unknown fault kind {kind!r}")

    def _wait_sync(self, name: str) -> dict[str, Any] | None:
        hit = wait_fired(self.fp_dir, name, timeout=300, stop=self.finished.is_set)
        if hit is not None:
            self.fault.injected_at = time.monotonic()
            self.fault.evidence["fired"] = hit.get("context", {})
        return hit

    def _start_clock(self) -> None:
        baseline = self.clock.committed_end()
        injected = self.fault.injected_at or time.monotonic()
        self.recovery_s = self.clock.measure(injected, baseline, self.finished.is_set)

    def _confirm_fired(self, point: str) -> None:
        """A kill fail-point: hit when it fired in a partition with rows and its process
        is gone (a record without pid: the process died before it could say where)."""
        hit = self._wait_sync(point)
        if hit is None:
            return
        pid = int(hit["pid"]) if "pid" in hit else None
        self.clock.target = recovery_target(point, hit.get("context", {}))
        self._start_clock()  # first: its baseline is read right after the kill
        deadline = time.monotonic() + 10
        while pid is not None and process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        gone = pid is not None and not process_alive(pid)
        rows = fired_rows(hit)
        self.fault.evidence.update(killed_pid=pid, killed_process_gone=gone, rows=rows)
        self.fault.confirmed = gone and rows > 0

    def _txn_timeout(self) -> None:
        hit = self._wait_sync("sink.before_commit")
        if hit is None or "pid" not in hit:  # no pid: the stopped process is gone
            return
        pid = int(hit["pid"])
        context = hit.get("context", {})
        time.sleep(TXN_TIMEOUT_MS / 1000 + 4)  # the coordinator aborts it meanwhile
        alive = resume(hit, timeout=5)
        self.fault.evidence.update(
            stopped_pid=pid, stopped_until_continued=alive,
            stopped_s=round(time.time() - float(hit.get("time", time.time())), 1),
            rows=fired_rows(hit), first_id=context.get("first_id", ""),
            last_id=context.get("last_id", ""))
        self._start_clock()

    def _redis_kill(self) -> None:
        hit = self._wait_sync("dedup.after_claim")
        if hit is None:
            return
        before = self.redis.pid
        self.component_back.clear()
        try:
            alive, started = held_alive(hit), time.time()
            self.redis.kill()
            hold = hold_evidence(hit, started, time.time(), alive)
            self.fault.evidence.update(hold)
            time.sleep(1.0)
            self.redis.start()
        finally:
            self.component_back.set()
        self.fault.confirmed = (before is not None and before != self.redis.pid
                                and hold["in_hold"])
        self.fault.detail = f"kill -9 of redis-server pid {before}, restarted as {self.redis.pid}"
        self._start_clock()

    def _redis_freeze(self) -> None:
        hit = self._wait_sync("dedup.after_claim")
        if hit is None or self.redis.pid is None:
            return
        # Longer than every task attempt's client timeouts together: Spark's task
        # retries must not absorb the outage, the query has to fail (closed) on it.
        seconds = FREEZE_S
        self.component_back.clear()
        ev = self.fault.evidence
        try:
            ev.update(hold_evidence(hit, time.time(), time.time(), held_alive(hit)))
            ev.update(frozen_url=self.redis.url, frozen_from=time.time(),
                      frozen_seconds=seconds)
            freeze(self.redis.pid, seconds)
        finally:
            ev["frozen_until"] = time.time()
            self.component_back.set()
        self.fault.detail = f"redis-server SIGSTOPped {seconds:.0f} s (client timeout " \
                            f"{FROZEN_CLIENT_TIMEOUT_S:.0f} s)"
        self._start_clock()

    def _kafka_kill(self) -> None:
        hit = self._wait_sync("sink.after_checkpoint")
        if hit is None:
            return
        broker = self.env.kafka
        before = broker.pid
        self.component_back.clear()
        try:
            alive, started = held_alive(hit), time.time()
            broker.kill()
            hold = hold_evidence(hit, started, time.time(), alive)
            self.fault.evidence.update(hold)
            time.sleep(1.0)
            broker.start()
        finally:
            self.component_back.set()
        self.fault.confirmed = before is not None and before != broker.pid and hold["in_hold"]
        self.fault.detail = f"kill -9 of the broker pid {before}, restarted as {broker.pid}"
        self._start_clock()

    def _zombie(self) -> None:
        """An earlier writer of the held partition comes back after the retry took over.

        While one sink task of batch k is held at ``sink.after_checkpoint``, a
        producer with that partition's transactional id begins a transaction of
        5 foreign records (its init fences whatever producer the task had).
        It tries to commit only once the task's own commit of batch k shows in
        the partition's marker: a sink that fences correctly has fenced it by
        then (by its redo after the fence, or its new producer's
        init_transactions), so the commit must be refused; a sink that does
        not would let 5 phantom records through. (A producer that is not this
        sink and commits first with its transactional id cannot be told from a
        legitimate newer writer: that is outside the guarantee, see README.)
        """
        hit = self._wait_sync("sink.after_checkpoint")
        if hit is None:
            return
        from sinks.config import SinkConfig

        context = hit.get("context", {})
        partition = int(context.get("partition", 0))
        batch = int(context.get("batch", self.spec.batch))
        config = SinkConfig.from_options({
            "app.id": self.app_id, "kafka.bootstrap.servers": self.env.kafka.bootstrap_servers,
            "topic": self.topic, "strong.productions": "false",
        })
        txn_id = config.transactional_id(partition)
        zombie = Producer({"bootstrap.servers": self.env.kafka.bootstrap_servers,
                           "transactional.id": txn_id, "log_level": 0})
        zombie.init_transactions(30)
        zombie.begin_transaction()
        for i in range(5):
            zombie.produce(self.topic, value=b"zombie", headers=[(RECORD_ID_HEADER, f"z{i}")])
        zombie.flush(30)
        self.fault.detail = (f"zombie producer {txn_id} began a transaction of 5 records; "
                             f"it commits after the task's commit of batch {batch}")
        self._start_clock()
        # Not stopped by the query's end: when k is the last batch the query may end
        # right after the task's commit, and the marker is readable from then on.
        took_over = _wait_marker(config, partition, batch + 1, timeout=120,
                                 stop=lambda: False)
        ev = self.fault.evidence
        ev.update(task_committed_before_zombie=took_over, zombie_transactional_id=txn_id,
                  rows=fired_rows(hit))
        try:
            zombie.commit_transaction(30)
            ev["zombie_commit"] = "succeeded"
        except KafkaException as exc:  # the expected outcome: it was fenced
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            code = error.code() if error is not None else None
            ev["zombie_commit"] = f"refused: {exc}"
            ev["zombie_error_code"] = error.name() if error is not None else ""
            # librdkafka's message does not repeat the id: the error is this
            # producer's, the one created with the sink partition's transactional id
            ev["fenced"] = code in FENCING_CODES
            self.fault.confirmed = took_over and ev["fenced"] and fired_rows(hit) > 0

    def _executor_kill(self) -> None:
        hit = self._wait_sync("dedup.after_claim")
        if hit is None or "pid" not in hit:  # no pid: the firing process is gone
            return
        executor = ancestor_with(int(hit["pid"]), "CoarseGrainedExecutorBackend")
        if executor is not None and process_alive(executor):
            alive, started = held_alive(hit), time.time()
            os.kill(executor, signal.SIGKILL)
            hold = hold_evidence(hit, started, time.time(), alive)
            self.fault.evidence.update(hold, executor=executor)
            self.fault.confirmed = hold["in_hold"]
            self.fault.detail = f"SIGKILL of executor JVM pid {executor}"
        self.clock.target = recovery_target("dedup.after_claim", hit.get("context", {}))
        self._start_clock()


def run_inprocess(run: Run) -> int:
    """Run the pipeline in this process's SparkSession; return the query restarts."""
    from dedup.cli.config_file import parse_pipeline
    from dedup.cli.pipeline import Addresses, start_query

    text, transform = pipeline_text(run.app_id, run.topic, run.spec), None
    if run.spec.variant:
        from benchmarks.chaos.mutants import apply_variant

        text, transform = apply_variant(run, text)
    pipeline = parse_pipeline(text)
    bootstrap = run.env.kafka.bootstrap_servers
    url = run.redis.url
    if run.spec.kind == "redis_unreachable":
        url += f"?socket_timeout={FROZEN_CLIENT_TIMEOUT_S}"
    addresses = Addresses(url, bootstrap, bootstrap)
    return run_to_end(run, lambda: start_query(run.env.spark, pipeline, addresses,
                                               run.checkpoint, str(run.fp_dir), transform),
                      run.component_back)


def run_to_end(run: Run, start: Callable[[], Any], back: threading.Event | None = None) -> int:
    """Start a query with ``start`` and run it to the end of the input, restarting it
    from its checkpoint each time it dies (up to ``MAX_RESTARTS``, every error kept in
    the evidence); ``back`` is waited for before each start. Returns the restarts."""
    restarts = 0
    while True:
        if back is not None:
            back.wait(120)
        query = start()
        try:
            query.processAllAvailable()
            query.stop()
            return restarts
        except Exception as exc:  # a query death is what we recover from
            run.fault.evidence.setdefault("query_errors", []).append(_first_line(exc))
            run.fault.evidence.setdefault("query_error_times", []).append(time.time())
            _stop_quietly(query)
            restarts += 1
            if restarts > MAX_RESTARTS:
                raise
            time.sleep(1.0)


def run_subprocess(run: Run) -> int:
    """Run ``dedup run`` in a child process (killable driver); return the restarts."""
    master = "local-cluster[2,1,1024]" if run.spec.kind == "executor_kill" else "local[2,4]"
    if run.spec.kind in SPARK_CLUSTER_KINDS:
        master = cluster_spark.master_url(run)
    config = run.dir / "pipeline.toml"
    text = pipeline_text(run.app_id, run.topic, run.spec, master=master)
    if run.spec.variant:
        from benchmarks.chaos.mutants import apply_variant

        text, transform = apply_variant(run, text)
        if transform is not None:
            raise ValueError(f"variant {run.spec.variant!r} needs code between the steps, "
                             "which a `dedup run` child cannot take")
    config.write_text(text)
    bootstrap = run.env.kafka.bootstrap_servers
    argv = [str(Path(sys.executable).parent / "dedup"), "run", str(config), "--quiet",
            "--redis-url", run.redis.url, "--bootstrap", bootstrap,
            "--checkpoint", run.checkpoint, "--max-seconds", "300"]
    env = {**os.environ, "DEDUP_FAIL_POINT_DIR": str(run.fp_dir)}
    log = open(run.dir / "driver.log", "ab")  # noqa: SIM115 - closed below
    restarts = 0
    try:
        driver = subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)
        if run.spec.kind == "driver_kill":
            hit = wait_fired(run.fp_dir, "sink.after_checkpoint", 300,
                             stop=lambda: driver.poll() is not None)
            if hit is not None:
                run.fault.injected_at = time.monotonic()
                alive, started = held_alive(hit), time.time()
                os.killpg(driver.pid, signal.SIGKILL)
                code = driver.wait(60)
                hold = hold_evidence(hit, started, time.time(), alive)
                run.fault.evidence.update(hold, fired=hit.get("context", {}), driver_exit=code)
                run.fault.confirmed = code == -signal.SIGKILL and hold["in_hold"]
                run.fault.detail = f"SIGKILL of the driver process group (pid {driver.pid})"
                restarts += 1
                run.clock.target = recovery_target("sink.after_checkpoint",
                                                   hit.get("context", {}))
                threading.Thread(target=run._start_clock, daemon=True).start()
                driver = subprocess.Popen(argv, env=env, stdout=log, stderr=log,
                                          start_new_session=True)
        code = driver.wait(420)
        if code != 0:
            log.flush()
            said = child_error(run.dir / "driver.log")
            raise RuntimeError(f"dedup run exited with {code}{': ' + said if said else ''}; "
                               f"see {run.dir / 'driver.log'}")
        return restarts
    finally:
        log.close()


def child_error(log: Path) -> str:
    """The last one-line error a child ``dedup run`` printed to ``log`` (``dedup:
    error: ...``), or "" when it printed none (killed, or died in the JVM)."""
    prefix = "dedup: error: "
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    said = [line[len(prefix):].strip() for line in lines if line.startswith(prefix)]
    return said[-1][:300] if said else ""


def run_one(env: ChaosEnv, spec: RunSpec) -> RunResult:
    """Execute one scheduled run and verify its output. Never raises."""
    from sources.synthetic_rows import SyntheticOptions, expected_output

    env = cluster_kafka.env_for(env) if spec.kind in KAFKA_CLUSTER_KINDS else env
    run = Run(env, spec)
    started = time.monotonic()
    result = RunResult(spec=spec, fault=run.fault)
    injector: threading.Thread | None = None
    try:
        ensure_topic(env.kafka.bootstrap_servers, run.topic, partitions=2,
                     replication_factor=3 if spec.kind in KAFKA_CLUSTER_KINDS else 1)
        inject = None if spec.kind in OPERATIONAL_KINDS else run.prepare()
        if inject is not None:
            injector = threading.Thread(target=inject, daemon=True)
            injector.start()
        if spec.kind in OPERATIONAL_KINDS:
            from benchmarks.chaos.operational import run_operational

            result.restarts = run_operational(run)
        elif spec.kind in SUBPROCESS_KINDS:
            result.restarts = run_subprocess(run)
        else:
            result.restarts = run_inprocess(run)
    except Exception as exc:  # recorded; the run counts as failed
        result.error = _first_line(exc)
    finally:
        run.finished.set()
        if injector is not None:
            injector.join(120)
    if spec.kind in {"txn_timeout", "redis_unreachable"}:
        run.fault.confirmed = _confirm_extra(run)
    _classify_errors(run, result)
    if spec.mutant:  # the processes in which its broken branch was taken
        from benchmarks.chaos.mutant_patches import mutant_hits

        run.fault.evidence["mutant_hits"] = mutant_hits(run.fp_dir).get(spec.mutant, [])
    options = SyntheticOptions(seed=spec.seed, rows_per_batch=ROWS_PER_BATCH, total_rows=ROWS,
                               duplicate_rate=0.9 if spec.kind == "dup90_tiny_bloom" else 0.2,
                               duplicate_distance="later_batches", duplicate_gap_batches=3,
                               num_partitions=2)
    expected = {rid: payload.encode() for rid, payload in expected_output(options).items()}
    try:
        result.report = verify_topic(env.kafka.bootstrap_servers, run.topic, expected).as_dict()
        for topic in run.extra_topics:
            _add_output(result.report, topic,
                        verify_topic(env.kafka.bootstrap_servers, topic, expected).as_dict())
    except Exception as exc:  # a verifier failure fails the run
        result.error = result.error or f"verify: {_first_line(exc)}"
    result.recovery_s = run.recovery_s
    if run.recovery_s is not None:
        result.recovery_of = "partition" if run.clock.target is not None else "topic"
    result.duration_s = time.monotonic() - started
    result.outcome = _outcome(run, result)
    return result


def _add_output(report: dict[str, Any], topic: str, other: dict[str, Any]) -> None:
    """Fold the report of a further output topic into the run's (counts add up)."""
    report.setdefault("outputs", {})[topic] = other
    for key in ("expected", "observed", "lost", "duplicated", "phantoms", "mismatched",
                "open_transactions"):
        if isinstance(other.get(key), int):
            report[key] = int(report.get(key, 0)) + other[key]
    report["ok"] = bool(report.get("ok", False)) and bool(other.get("ok", False))


def _classify_errors(run: Run, result: RunResult) -> None:
    """Count the run's query errors by expected class; keep the unexpected ones."""
    for error in run.fault.evidence.get("query_errors", []):
        name = classify_error(run.spec.kind, error)
        if name is None:
            result.unexpected_errors.append(error)
        else:
            result.error_classes[name] = result.error_classes.get(name, 0) + 1


def _outcome(run: Run, result: RunResult) -> str:
    """``exact``, ``refused`` (see :data:`FAULT_KINDS`) or ``failed``.

    A run fails, besides on wrong output, when its fault was not confirmed (it
    did not hit, so the exact output proves nothing) or a query died of an error
    its kind does not expect (a restart must not hide a bug).
    """
    if not result.error and result.unexpected_errors:
        result.error = (f"unexpected query error ({len(result.unexpected_errors)}): "
                        f"{result.unexpected_errors[0]}")
    if not result.error and not run.fault.confirmed:
        result.error = f"not hit: {run.spec.kind} ({run.fault.detail or 'no evidence'})"
    exact = not result.error and bool(result.report.get("ok", False))
    if not exact:
        return "failed"
    if run.refused is None:
        return "exact"
    prefix = run.fault.evidence.get("prefix_check", {})
    if not prefix.get("ok", False):
        result.error = (f"refused, but the output before the restart was not an exact "
                        f"prefix: {prefix}")
        return "failed"
    return "refused"


def _confirm_extra(run: Run) -> bool:
    """Evidence read after the run: the stopped transaction aborted, Redis failed closed."""
    ev = run.fault.evidence
    if run.spec.kind == "txn_timeout":
        # THAT transaction was aborted by the coordinator: its first and last
        # records are in the log (read_uncommitted) once more than read_committed
        # readers see them (the retry's copy is the visible one)
        if not ev.get("stopped_until_continued") or not ev.get("first_id"):
            return False
        bootstrap = run.env.kafka.bootstrap_servers
        ids = {ev["first_id"].encode(), ev["last_id"].encode()}

        def copies(isolation: str) -> dict[bytes, int]:
            found = dict.fromkeys(ids, 0)
            for record in consume_all(bootstrap, run.topic, isolation):
                rid = record.header(RECORD_ID_HEADER)
                if rid in found:
                    found[rid] += 1
            return found

        everything, visible = copies("read_uncommitted"), copies("read_committed")
        aborted = {rid.decode(): everything[rid] - visible[rid] for rid in ids}
        ev["aborted_copies"] = aborted
        return all(n > 0 for n in aborted.values())
    if run.spec.kind == "redis_unreachable":
        # fail closed: the query died of the toolkit's catalog- or checkpoint-unavailable
        # error for the frozen Redis (the sink keeps its checkpoints there too), raised
        # while it was frozen (or within a client timeout)
        url, start = ev.get("frozen_url", ""), float(ev.get("frozen_from", 0.0))
        end = float(ev.get("frozen_until", start)) + REDIS_PY_TRIES * FROZEN_CLIENT_TIMEOUT_S
        closed = [error for error, at in zip(ev.get("query_errors", []),
                                             ev.get("query_error_times", []), strict=False)
                  if ("CatalogUnavailableError" in error or "CheckpointUnavailableError" in error)
                  and f"Redis at {url}" in error
                  and start <= at <= end]
        ev["failed_closed"] = bool(closed)
        return bool(closed) and bool(ev.get("in_hold"))
    return True


def _first_line(exc: BaseException) -> str:
    """The most telling line of an error: the toolkit's error anywhere in its chain (a
    sink task's failure reaches the driver as Spark's "Writing job failed", ours further
    down), else for a Py4J error the Java cause, else its first line."""
    from dedup.cli.errors import exception_texts, find_toolkit_error
    from dedup.exceptions import DedupError

    chained: BaseException | None = exc
    for _ in range(20):  # a toolkit error raised in this process, wrapped
        if chained is None:
            break
        if isinstance(chained, DedupError):
            return f"{type(chained).__name__}: {chained}".splitlines()[0][:300]
        chained = chained.__cause__ or chained.__context__
    found = find_toolkit_error(exception_texts(exc))  # named in a worker's traceback
    if found is not None:
        return found.line[:300]
    text = f"{type(exc).__name__}: {exc}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line for line in lines if not line.startswith("at ")
              and ("Exception:" in line or "Error:" in line)
              and not line.startswith("Py4JJavaError")]
    if causes:
        return causes[-1][:300]
    return lines[0][:300] if lines else type(exc).__name__


def _stop_quietly(query: Any) -> None:
    with contextlib.suppress(Exception):  # the query is already dead
        query.stop()


def finished_runs(progress: Path, specs: list[RunSpec]) -> list[RunResult]:
    """Runs recorded in ``progress`` that belong to this schedule (same specs); a run of
    another schedule ends the program with the fix (rerun without --resume)."""
    import json

    if not progress.exists():
        return []
    scheduled = {spec.index: spec for spec in specs}
    finished = []
    for line in progress.read_text().splitlines():
        if not line.strip():
            continue
        result = RunResult.from_dict(json.loads(line))
        if scheduled.get(result.spec.index) != result.spec:
            raise SystemExit(f"{progress} holds a run of another schedule (run "
                             f"{result.spec.index}); rerun without --resume to start over")
        finished.append(result)
    return finished


def _commit(root: Path | None = None) -> str:
    """The checkout's commit (with ``+dirty`` for uncommitted changes), "" outside git."""
    import subprocess

    root = root or Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root,
                              capture_output=True, text=True, check=True).stdout.strip()
        # the results folder is not code: the matrix writes its progress there
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)benchmarks/results"],
                               cwd=root, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("+dirty" if dirty else "")


def run_schedule(specs: list[RunSpec], results: list[RunResult], progress: Path,
                 max_minutes: float, line: Callable[[RunResult], str],
                 wanted: range | None = None) -> list[RunResult]:
    """Run every spec not in ``results`` (and in ``wanted``) on shared services, each
    result appended to ``results`` and, as one JSON line, to ``progress`` the moment it
    is known (a matrix of hours survives the loss of its own process: ``--resume``
    reads the lines back); stops starting runs after ``max_minutes`` (0: no limit)."""
    import json
    import shutil
    import tempfile

    done = {r.spec.index for r in results}
    commit = _commit()
    workdir = Path(tempfile.mkdtemp(prefix="dedup-chaos-"))
    env = ChaosEnv(workdir).start()
    started = time.monotonic()
    try:
        for spec in specs:
            if spec.index in done or (wanted is not None and spec.index not in wanted):
                continue
            if max_minutes and time.monotonic() - started > max_minutes * 60:
                print(f"time limit reached after {len(results)} runs", flush=True)
                break
            result = run_one(env, spec)
            result.commit = commit
            results.append(result)
            with progress.open("a") as handle:
                handle.write(json.dumps(result.as_dict(), default=str) + "\n")
            print(line(result), flush=True)
    finally:
        env.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return results
