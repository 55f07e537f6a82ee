"""The chaos runs' model: what a run is (:class:`RunSpec`, :class:`RunResult`), the
seeded schedule, the services every run shares (:class:`ChaosEnv`), one run's state and
its in-process faults (:class:`Run`), the pipeline file a run uses, and the helpers the
kinds share. Imports no kind and no runner: the kinds (``cluster_kafka``,
``cluster_spark``, ``operational``, ``sequences``) and :mod:`benchmarks.chaos.runner`
import it (``tests/unit/test_layering.py`` finds no import circle).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from benchmarks.chaos.faults import (
    FAULT_KINDS,
    NON_EMPTY,
    TXN_TIMEOUT_MS,
    WORKER_KILL_POINTS,
    FaultOutcome,
    ancestor_with,
    arm_sync,
    fired_rows,
    freeze,
    held_alive,
    hold_evidence,
    wait_fired,
)
from dedup.constants import RECORD_ID_HEADER
from dedup.failpoints import arm, resume
from dedup.local.services import KafkaBroker, RedisServer, process_alive

ROWS = 1200
ROWS_PER_BATCH = 200
LAGGING_FAILOVER_WAIT_S = 2.0
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
        self._on_stop: dict[str, Callable[[], None]] = {}

    def on_stop(self, name: str, stop: Callable[[], None]) -> None:
        """Call ``stop`` when the environment stops (once per ``name``): the clusters a
        kind's module starts on first use (``cluster_kafka``, ``cluster_spark``)."""
        self._on_stop[name] = stop

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
        for stop in list(self._on_stop.values()):
            stop()  # the clusters the kinds started on first use
        # Killed, not stopped: its data goes with the work folder, and a controlled
        # shutdown took this broker 9 s in CI's long tier, once over 20 s (the SIGKILL).
        self.kafka.kill()
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
    redis_table = ""
    if spec.kind == "redis_failover_lagging_replica":
        # A claim no replica holds fails its task attempt after replica_timeout (5 s)
        # plus failover_wait, which waits for a failover no one runs here: 2 s instead
        # of 20 is the same refusal, 18 s sooner (issue 52).
        redis_table = f"[redis]\nfailover_wait = {LAGGING_FAILOVER_WAIT_S}\n"
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
{redis_table}[run]
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
        """Arm the fail-points of this run; return the injector to run in a thread
        (the cluster kinds' modules prepare their own: ``runner.prepare``)."""
        kind, k = self.spec.kind, self.spec.batch
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
        # Redis comes back once the query died of it (what the kind checks: its planning
        # fails ~15 s in, no task retry absorbs that), not ~60 s later; an error of another
        # kind leaves the freeze as long as before.
        seconds = FREEZE_S
        self.component_back.clear()
        ev = self.fault.evidence
        try:
            ev.update(hold_evidence(hit, time.time(), time.time(), held_alive(hit)))
            ev.update(frozen_url=self.redis.url, frozen_from=time.time(),
                      frozen_seconds=seconds)
            freeze(self.redis.pid, seconds, until=lambda: any(
                "CatalogUnavailableError" in e or "CheckpointUnavailableError" in e
                for e in ev.get("query_errors", [])))
        finally:
            ev["frozen_until"] = time.time()
            self.component_back.set()
        frozen = float(ev["frozen_until"]) - float(ev["frozen_from"])
        self.fault.detail = f"redis-server SIGSTOPped {frozen:.0f} s, until the query died " \
                            f"or {seconds:.0f} s (client timeout {FROZEN_CLIENT_TIMEOUT_S:.0f} s)"
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
