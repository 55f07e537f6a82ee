"""Replay a trace of the protocol model against the real implementation (docs/model.md,
"Conformance").

A trace (:func:`tests.model.explore.walk`) is a list of model steps. Each is made to happen
in the real code, on real Redis and Kafka, in the trace's order:

* a Python *worker* of the model is a thread here, with its own copy of every cache a
  Spark Python worker keeps across tasks (the transactional producers, their markers and
  the marker consumers of :mod:`sinks.transactions`, the lease fences of
  :mod:`dedup.catalog`, the Bloom filters of :mod:`dedup.bloom`): so a zombie's producer
  and its retry's are two producers of one transactional id, as on two executors;
* a *task* runs the function Spark calls per partition, with the arguments Spark would
  give: for the sink alone ``ExactlyOnceKafkaStreamWriter.write`` (the data source's
  writer; ``task_identity`` answers for ``TaskContext``), for one pass the body of
  ``DedupKafkaForeachBatch``'s ``mapInArrow`` function (``keep_rows`` then
  ``write_batches``) less ``producer_ahead``, whose thread is no pause point: replayed
  instances turn the model's producer-ahead step off (``Instance.ahead``), and the
  hand-over is tested apart (``tests/unit/sinks/test_producer_ahead.py``,
  ``tests/integration/sinks/test_sink_producer_ahead.py``);
* every place a model step ends is a *pause point* of the real code, where the task's
  thread stops until the scheduler lets it go on: the code's own fail-points
  (``fail_point``, replaced in this process by one that blocks) and, for the steps
  between them, wrappers of the functions the model names (``RedisCatalog._fence``,
  ``ShardClaimer._rebuild`` of a missing filter, ``get_producer`` creating a producer,
  ``_produce_all``). Product code is not changed: the test monkeypatches these names;
* a model step of a task lets that task's thread run to its next pause point, and checks
  it is the one the model's next state names (a different one is a disagreement);
  ``FAILURE raise at <point>`` makes the paused fail-point raise ``InjectedFault``, as
  the fail-point's ``raise`` action does; a zombie is a thread the driver stops waiting
  for while it runs on;
* the driver's steps call what the real driver calls: ``_refuse_reused_query_id`` when
  a one-pass batch starts, ``end_batch`` and ``commit_progress`` after its tasks
  (``DedupKafkaForeachBatch.__call__``), the data source writer's ``commit``.

At the end the ``read_committed`` output and each partition's batch marker are compared
with the model's final state.
"""

from __future__ import annotations

import queue
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from tests.model.explore import Walk
from tests.model.protocol import State, Task

_local = threading.local()
STEP_TIMEOUT_S = 60.0
"""How long one step may take in the real code before the replay gives up."""
OPERATOR_PROBLEM = "_dedup_problem"  # the two-step operator's ID problem codes (its plan's)


def _worker() -> str:
    return getattr(_local, "worker", "driver")


class PerWorker(MutableMapping[Any, Any]):
    """A module-level cache dict, one per model worker (the thread's), as each Spark
    Python worker process has its own."""

    def __init__(self) -> None:
        self.stores: dict[str, dict[Any, Any]] = {}
        self._lock = threading.Lock()

    def _d(self) -> dict[Any, Any]:
        with self._lock:
            return self.stores.setdefault(_worker(), {})

    def __getitem__(self, key: Any) -> Any:
        return self._d()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._d()[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._d()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._d()))

    def __len__(self) -> int:
        return len(self._d())


class PerWorkerFilters:
    """:data:`dedup.bloom.WORKER_FILTERS`, one :class:`~dedup.bloom.FilterCache` per worker."""

    def __init__(self) -> None:
        from dedup.bloom import FilterCache

        self._make = FilterCache
        self.caches: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _c(self) -> Any:
        with self._lock:
            return self.caches.setdefault(_worker(), self._make())

    def get(self, app_id: str, shard: int) -> Any:
        return self._c().get(app_id, shard)

    def put(self, app_id: str, shard: int, bf: Any) -> None:
        self._c().put(app_id, shard, bf)

    def clear(self) -> None:
        self._c().clear()


class WorkerKilled(BaseException):
    """The model's SIGKILL of a task's Python worker: raised at the task's pause point, so
    the thread ends there; the worker's caches are then forgotten (:func:`forget_worker`).
    (The code's ``except BaseException`` handlers run on the way out, which a SIGKILL would
    not do; they only drop the cached producer, which the kill drops anyway.)"""


_CACHES: list[Any] = []
"""The per-worker caches installed (:func:`install`)."""


def forget_worker(worker: str) -> None:
    """A killed worker's caches are gone with its process."""
    for cache in _CACHES:
        with cache._lock:
            (cache.stores if isinstance(cache, PerWorker) else cache.caches).pop(worker, None)


def close_workers() -> None:
    """Close every replayed worker's cached producers and consumers (each worker's own
    :func:`sinks.transactions.close_clients`)."""
    from sinks.transactions import close_clients

    names: set[str] = set()
    for cache in _CACHES:
        names |= set(cache.stores if isinstance(cache, PerWorker) else cache.caches)
    before = getattr(_local, "worker", None)
    try:
        for name in sorted(names):
            _local.worker = name
            close_clients()
    finally:
        if before is not None:
            _local.worker = before
        elif hasattr(_local, "worker"):
            del _local.worker


class DisagreementError(AssertionError):
    """The real code did not take the step the model took."""


@dataclass
class RealTask:
    """One model task attempt, running in a thread of its worker."""

    key: tuple[int, int, int, int]
    """(query, batch, partition, worker) of the model task."""
    attempt: int
    events: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue)
    go: queue.Queue[str] = field(default_factory=queue.Queue)
    at: str = ""
    """The pause point the thread waits at ('' before it started, 'done'/'error' after)."""
    outcome: Any = None
    thread: threading.Thread | None = None
    leased: bool = False
    """The task's first claim took (or found cached) the lease."""
    notes: list[tuple[str, Any]] = field(default_factory=list)
    """What the real code decided on the way (claims, checkpoints), for the step's check."""


def pause(name: str) -> str:
    """Called by the real code at a pause point: report it, wait for the scheduler's
    word ('go' or 'raise'). Outside a replayed task (the driver, other tests) a no-op."""
    task: RealTask | None = getattr(_local, "task", None)
    if task is None:
        return "go"
    task.events.put(("pause", name))
    word = task.go.get()
    if word == "kill":
        raise WorkerKilled(name)
    return str(word)


def _note(what: str, value: Any) -> None:
    task: RealTask | None = getattr(_local, "task", None)
    if task is not None:
        task.notes.append((what, value))


def blocking_fail_point(name: str, directory: str | None = None,
                        before: Any = None, **context: Any) -> None:
    """Replaces :func:`dedup.failpoints.fail_point` in the replay: every fail-point is a
    pause point, and the scheduler's 'raise' is the ``raise`` action (``before`` first,
    as there)."""
    from dedup.exceptions import InjectedFault

    if pause(name) == "raise":
        if before is not None:
            before()
        raise InjectedFault(f"injected fault at fail-point {name} ({context})")


def install(monkeypatch: Any) -> None:
    """Patch the real code's names for the replay (see the module docstring)."""
    import dedup.catalog as catalog
    import dedup.claim as claim
    import dedup.partition_step as partition_step
    import sinks.checkpoint as checkpoint
    import sinks.datasource as datasource
    import sinks.transactions as tx
    import sinks.writer as writer

    for module in (partition_step, writer, tx):
        monkeypatch.setattr(module, "fail_point", blocking_fail_point)
    _CACHES.clear()
    for module, name in ((tx, "_PRODUCERS"), (tx, "_CONSUMERS"), (tx, "_MARKERS"),
                         (catalog, "_FENCES")):
        _CACHES.append(PerWorker())
        monkeypatch.setattr(module, name, _CACHES[-1])
    _CACHES.append(PerWorkerFilters())
    monkeypatch.setattr(claim, "WORKER_FILTERS", _CACHES[-1])

    get_producer = tx.get_producer

    def paused_get_producer(config: Any, partition: int) -> Any:
        if config.transactional_id(partition) not in tx._PRODUCERS:
            pause("get_producer")  # a new producer: the model's producer step starts here
        producer, fresh = get_producer(config, partition)
        if fresh:
            pause("init")
        return producer, fresh

    monkeypatch.setattr(tx, "get_producer", paused_get_producer)
    produce_all = tx._produce_all

    def paused_produce_all(*args: Any, **kwargs: Any) -> None:
        pause("sent")  # send_offsets_to_transaction returned
        produce_all(*args, **kwargs)

    monkeypatch.setattr(tx, "_produce_all", paused_produce_all)
    fence = catalog.RedisCatalog._fence

    def paused_fence(self: Any, lease_owner: str, decision: str) -> int:
        # the model's lease step: the task's first claim, or a lease taken afresh
        task: RealTask | None = getattr(_local, "task", None)
        known = catalog._FENCES.get((self.config.app_id, lease_owner))
        value = fence(self, lease_owner, decision)
        if task is not None and (not task.leased or known is None or known[0] != decision):
            task.leased = True
            pause("lease")
        return value

    monkeypatch.setattr(catalog.RedisCatalog, "_fence", paused_fence)
    rebuild = claim.ShardClaimer._rebuild

    def paused_rebuild(self: Any, shard: int, now: float, extra: int = 0) -> Any:
        missing = self.filters.get(self.config.app_id, shard) is None
        bf = rebuild(self, shard, now, extra)
        if missing:  # the model's rebuild step; a stale filter's rebuild is in the claim
            pause("rebuild")
        return bf

    monkeypatch.setattr(claim.ShardClaimer, "_rebuild", paused_rebuild)
    claim_shard = claim.ShardClaimer.claim

    def noted_claim(self: Any, *args: Any, **kwargs: Any) -> Any:
        outcome = claim_shard(self, *args, **kwargs)
        _note("claim", (outcome.replay, sorted(outcome.kept)))
        return outcome

    monkeypatch.setattr(claim.ShardClaimer, "claim", noted_claim)
    put_if_absent = checkpoint.CheckpointStore.put_if_absent

    def noted_put(self: Any, *args: Any, **kwargs: Any) -> Any:
        stored, won = put_if_absent(self, *args, **kwargs)
        _note("checkpoint", won)
        return stored, won

    monkeypatch.setattr(checkpoint.CheckpointStore, "put_if_absent", noted_put)
    monkeypatch.setattr(datasource, "task_identity", lambda: _local.identity)
    import pyspark

    spark_context_get = pyspark.TaskContext.get

    def task_context() -> Any:
        identity = getattr(_local, "identity", None)
        return _TaskContext(*identity) if identity else spark_context_get()

    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(task_context))


@dataclass(frozen=True)
class _TaskContext:
    """What the code reads of Spark's ``TaskContext`` in a replayed task: the partition,
    the attempt and the micro-batch's local properties
    (:func:`dedup.spark_session.task_batch`)."""

    query: str
    batch: int
    partition: int
    attempt: int

    def partitionId(self) -> int:
        return self.partition

    def attemptNumber(self) -> int:
        return self.attempt

    def taskAttemptId(self) -> int:
        """Unique per task attempt, as Spark's is (``settle_worker`` reads it)."""
        return hash((self.query, self.batch, self.partition, self.attempt))

    def getLocalProperty(self, name: str) -> str | None:
        from dedup.spark_session import BATCH_ID_PROPERTY, QUERY_ID_PROPERTY

        return {QUERY_ID_PROPERTY: self.query, BATCH_ID_PROPERTY: str(self.batch)}.get(name)


# --------------------------------------------------------------------------- the world


@dataclass
class Setup:
    """The real pipeline of one replay: a fresh app id, topic and query id."""

    form: str
    redis_url: str
    bootstrap: str
    app_id: str = field(default_factory=lambda: f"conf-{uuid.uuid4().hex[:10]}")
    query_ids: tuple[str, str] = field(
        default_factory=lambda: (f"query0-{uuid.uuid4().hex[:6]}",
                                 f"query1-{uuid.uuid4().hex[:6]}"))
    batch_time: float = field(default_factory=time.time)

    @property
    def topic(self) -> str:
        return f"{self.app_id}-out"

    @staticmethod
    def real_id(model_id: str) -> str:
        return f"id-{model_id}"

    @staticmethod
    def real_value(payload: int) -> bytes:
        return f"v{payload}".encode()

    def build(self, num_shards: int) -> None:
        from pyspark.sql.types import BinaryType, StringType, StructField, StructType

        from dedup.config import DedupConfig, RedisConfig
        from sinks.admin import prepare
        from sinks.config import SinkConfig
        from sinks.kafka_io import ensure_topic
        from sinks.records import check_schema

        options = {"app.id": self.app_id, "kafka.bootstrap.servers": self.bootstrap,
                   "topic": self.topic, "redis.url": self.redis_url}
        self.options = options
        self.sink = SinkConfig.from_options(options)
        prepare(self.sink)
        ensure_topic(self.bootstrap, self.topic, 1)
        self.columns = ["value", "_record_id"]
        schema = StructType([StructField("value", BinaryType()),
                             StructField("_record_id", StringType())])
        self.layout = check_schema(schema, self.sink)
        if self.form != "sink_only":
            self.dedup = DedupConfig(self.app_id, redis=RedisConfig(self.redis_url),
                                     num_shards=num_shards)
        self.build_driver()

    def build_driver(self) -> None:
        """The driver's objects: made again when the model's driver restarts (a new
        process: what the old one held in memory, e.g. the listener's pending progress
        event, is gone)."""
        options = self.options
        from dedup.catalog import RedisCatalog

        # the driver's start-up check, which every form runs when it plans the dedup
        # step: it sets up the app id's catalog (the listener records in no other)
        if self.form != "sink_only":
            RedisCatalog(self.dedup).check_setup()
        if self.form == "one_pass":
            from sinks.dedup_foreach_batch import DedupKafkaForeachBatch

            self.fused = DedupKafkaForeachBatch(self.dedup, options, num_partitions=2)
        else:
            from sinks.datasource import ExactlyOnceKafkaStreamWriter

            self.writer = ExactlyOnceKafkaStreamWriter(self.sink, self.layout, self.columns)
        if self.form == "two_step":
            from dedup.gc import DecisionGcListener
            from dedup.operator import metric_name
            from dedup.partition_step import PartitionStep

            # deduplicate(df): the step its UDF runs (streaming), and the session's
            # listener that records each committed batch (commit_progress)
            self.step = PartitionStep(self.dedup, uuid.uuid4().hex, streaming=True)
            self.listener = DecisionGcListener()
            self.listener.watch(metric_name(self.app_id), RedisCatalog(self.dedup))

    def input_batch(self, rows: tuple[tuple[str, int], ...], shard_of: Any,
                    batch: int) -> list[Any]:
        """The partition's Arrow input as Spark hands it to the task (one pass: with the
        hidden columns the plan adds; the shard is the model's)."""
        import pyarrow as pa

        from sinks.dedup_foreach_batch import BATCH_TIME, SHARD

        if not rows:
            return []
        data: dict[str, Any] = {
            "value": pa.array([self.real_value(p) for _, p in rows], pa.binary()),
            "_record_id": pa.array([self.real_id(i) for i, _ in rows], pa.string())}
        if self.form != "sink_only":
            data[SHARD] = pa.array([shard_of(i) for i, _ in rows], pa.int32())
            if self.form == "two_step":  # the operator's plan carries the ID problem codes
                data[OPERATOR_PROBLEM] = pa.array([0] * len(rows), pa.int8())
            data[BATCH_TIME] = pa.array([self.batch_time + batch] * len(rows), pa.float64())
        return [pa.RecordBatch.from_pydict(data)]

    def task_body(self, batch: int, partition: int, attempt: int, query: str,
                  received: list[Any]) -> Any:
        """What Spark runs for one partition of the form."""
        if self.form == "one_pass":
            from sinks.dedup_foreach_batch import keep_rows
            from sinks.writer import write_batches

            # DedupKafkaForeachBatch.__call__'s mapInArrow function, less TaskContext
            # and producer_ahead (see the module docstring)
            kept, _ = keep_rows(self.dedup, received, self.columns, query, batch, partition)
            return write_batches(self.sink, self.layout, self.columns, kept, query, batch,
                                 partition, attempt)
        _local.identity = (query, batch, partition, attempt)
        if self.form == "two_step":
            # Spark pipelines the operator's UDF into the sink's task: the writer pulls
            # the whole partition (write_batches), so every claim comes first; then
            # the filter on KEPT and the projection back to the input's columns
            import pyarrow as pa

            from dedup.metrics import KEPT, STATUS
            from sinks.dedup_foreach_batch import BATCH_TIME, SHARD

            if received:
                table = pa.Table.from_batches(received)
                inputs = (table.column("_record_id").combine_chunks(),
                          table.column(SHARD).combine_chunks(),
                          table.column(OPERATOR_PROBLEM).combine_chunks(),
                          table.column(BATCH_TIME).combine_chunks())
                status = [row[STATUS] for out in self.step.arrow(iter([inputs]))
                          for row in out.to_pylist()]
                kept = table.filter(pa.array([x == KEPT for x in status])).select(self.columns)
                received = kept.to_batches()
        return self.writer.write(iter(received))


_TASK = re.compile(r"task q(\d+) b(\d+) p(\d+) #\d+ on w(\d+)")


def _task_of(s: State, key: tuple[int, int, int, int]) -> Task | None:
    return next((t for t in s.tasks if (t.q, t.b, t.p, t.w) == key), None)


def expected_point(label: str, after: Task | None, last: str) -> str:
    """The pause point the real task must reach once the model step ``label`` is taken."""
    if after is None:
        return "done" if "returns" in label else "error"
    if after.fp:
        return after.fp
    if after.pc == "claim":
        return "rebuild" if "rebuilt" in label else "lease"
    return {"marker": "init", "produce1": "sent", "producer": "get_producer"}.get(
        after.pc, f"? pc {after.pc} after {last}")


@dataclass
class Replay:
    walk: Walk
    setup: Setup
    log: list[str] = field(default_factory=list)
    """Each replayed step: the model's label, then what the real code did."""
    tasks: dict[tuple[int, int, int, int], RealTask] = field(default_factory=dict)
    results: dict[int, list[Any]] = field(default_factory=dict)
    _did: str = ""
    _q: int = 0
    """The query the model's driver runs before the current step."""
    _offset: dict[int, int | None] = field(default_factory=lambda: {0: 0, 1: None})
    attempts: Counter[tuple[int, int, int]] = field(default_factory=Counter)

    def run(self) -> None:
        inst = self.walk.inst
        self.setup.build(inst.shards)
        try:
            for label, kind, after in self.walk.steps:
                self.log.append(label)
                self._step(label, kind, after)
                self.log[-1] += f"  => {self._did}"
                self._q = after.drv.q
        finally:
            self._finish_threads()

    def _finish_threads(self) -> None:
        for task in self.tasks.values():
            if task.thread is not None and task.thread.is_alive():
                task.go.put("kill")  # end a task left at a pause (after a disagreement)
                task.thread.join(STEP_TIMEOUT_S)

    def _step(self, label: str, kind: str, after: State) -> None:
        inst = self.walk.inst
        m = _TASK.search(label)
        key = tuple(int(x) for x in m.groups()) if m else None
        self._did = "nothing (driver bookkeeping)"
        if label.startswith("driver runs batch"):
            batch = self.real_batch(after.drv.q, int(label.split()[3]))
            if inst.form == "one_pass":
                self.setup.fused._refuse_reused_query_id(self.setup.query_ids[after.drv.q],
                                                         batch)
            return
        if label.startswith("driver launches") and key is not None:
            self._launch(key)  # type: ignore[arg-type]
            self._did = "thread started, at 'start'"
            return
        if label.startswith("driver: end_batch and commit_progress"):
            batch = self.real_batch(after.drv.q, int(label.rstrip(")").split()[-1]))
            query = self.setup.query_ids[after.drv.q]
            # DedupKafkaForeachBatch.__call__ after the collect
            self.setup.fused.sink.end_batch([], query, batch)
            self.setup.fused.dedup.catalog.commit_progress(query, batch)
            self._did = "end_batch, commit_progress"
            return
        if label.startswith("driver: writer commit"):
            model_batch = int(label.split()[-1])
            messages = self.results.get(model_batch, [])
            self.setup.writer.commit(messages, self.real_batch(after.drv.q, model_batch))
            self._did = f"writer.commit({len(messages)} messages)"
            return
        if label.startswith("listener: commit_progress"):
            batch = self.real_batch(after.drv.q, int(label.rstrip(")").split()[-1]))
            query = self.setup.query_ids[after.drv.q]
            # Spark's progress event of the committed batch, carrying the step's metric
            from dedup.operator import metric_name

            progress = type("Progress", (), {"id": query, "batchId": batch,
                                             "observedMetrics": {
                                                 metric_name(self.setup.app_id): {}}})
            self.setup.listener.onQueryProgress(type("Event", (), {"progress": progress}))
            self._did = "DecisionGcListener.onQueryProgress"
            return
        if label.startswith("FAILURE takeover: query 1 starts"):
            # query 0 is down and its leases lapsed: the replay plays the clock, ending
            # them as a lapse does (lease.lua's 'until' in the past), then query 1 (a new
            # checkpoint location, so a new query id) starts: a new driver
            from dedup.catalog import RedisCatalog
            from sinks.checkpoint import CheckpointStore

            self._offset[1] = after.commits[0]
            query0 = self.setup.query_ids[0]
            RedisCatalog(self.setup.dedup).release(query0)
            CheckpointStore.for_config(self.setup.sink).release_lease(query0)
            self.setup.build_driver()
            self._did = "query 0's leases lapsed; query 1's driver"
            return
        if label.startswith("operator restarts query 0"):
            self.setup.build_driver()
            self._did = "query 0's driver again" + self._record_at_start(label, after)
            return
        if label.startswith("FAILURE kill the driver"):
            self._did = "the driver is gone; its tasks run on"
            return
        if label.startswith("driver restarts from its checkpoint"):
            self.setup.build_driver()
            self._did = "new driver objects" + self._record_at_start(label, after)
            return
        if label.startswith("driver: Spark commits"):
            return  # Spark's commit log: nothing of ours to do
        if label.startswith("FAILURE the driver gives up"):
            return  # the thread runs on; the driver no longer waits for it
        if label.startswith("FAILURE raise at") and key is not None:
            point = label.split()[3]
            task = self.tasks[key]  # type: ignore[index]
            if task.at != point:
                raise DisagreementError(f"{label}: the real task is at {task.at!r}, not {point!r}")
            self._advance(task, "error", word="raise")
            if not isinstance(task.outcome, Exception) or "injected fault" not in str(
                    task.outcome):
                raise DisagreementError(f"{label}: the task ended with {task.outcome!r}")
            del self.tasks[key]  # type: ignore[arg-type]
            return
        if label.startswith("FAILURE kill the worker of") and key is not None:
            task = self.tasks.pop(key)  # type: ignore[arg-type]
            self._advance(task, "error", word="kill")
            if not isinstance(task.outcome, WorkerKilled):
                raise DisagreementError(f"{label}: the task ended with {task.outcome!r}")
            forget_worker(f"w{key[3]}")
            return
        if kind == "failure" or key is None:
            raise NotImplementedError(f"no replay of model step {label!r}")
        task = self.tasks[key]  # type: ignore[index]
        want = expected_point(label, _task_of(after, key), task.at)  # type: ignore[arg-type]
        passing = {"get_producer"}
        if want == "dedup.after_claim":
            # the model's task takes the current lease; a worker's fence cached for the
            # batch (_FENCES, not modelled) may be stale, and a claim refused with it takes
            # the lease afresh and claims again (RedisCatalog.claim) inside this step
            passing.add("lease")
        if ("take_lease" in label or "begin_transaction" in label) and key[0] == self._q:
            self._lapse_other_query()
        if want == "done" and task.at == "sink.after_checkpoint":
            # an empty partition: the code passes sink.after_commit on its way out
            # (write_partition with no records), the model returns at once
            passing.add("sink.after_commit")
        task.notes.clear()
        self._advance(task, want, passing=passing)
        self._check_decisions(label, task)
        if want == "done":
            del self.tasks[key]  # type: ignore[arg-type]
            if "the driver counts" in label:
                self.results.setdefault(key[1], []).append(task.outcome)
        elif want == "error":
            del self.tasks[key]  # type: ignore[arg-type]
            named = re.findall(r"\b([A-Z][A-Za-z]+Error)\b", label)
            if named and type(task.outcome).__name__ != named[-1]:
                raise DisagreementError(f"{label}: the real task failed with {task.outcome!r}")

    def _lapse_other_query(self) -> None:
        """The model lets the live query take a lease the other (down) query holds: its
        leases have lapsed by then (no clocks in the model). The replay plays the clock:
        it ends the other query's app id lease and sink output lease (lease.lua's
        'until' in the past, as a lapse leaves it) before such a step; a zombie of the
        down query may have renewed them since the takeover."""
        if self._offset[1] is None:
            return  # no second query: nobody else holds a lease
        from dedup.catalog import RedisCatalog
        from sinks.checkpoint import CheckpointStore

        other = self.setup.query_ids[1 - self._q]
        if self.setup.form != "sink_only":
            RedisCatalog(self.setup.dedup).release(other)
        CheckpointStore.for_config(self.setup.sink).release_lease(other)

    def _record_at_start(self, label: str, after: State) -> str:
        """``dedup run``'s record_checkpoint_commit at a start, where the model's step does
        it (its label says so): the catalog's record of the last batch the checkpoint
        committed, as that function writes it (commit_progress)."""
        m = re.search(r"record_checkpoint_commit: commit_progress\(q(\d), batch (\d+)\)", label)
        if m is None:
            return ""
        from dedup.catalog import RedisCatalog

        q, batch = int(m[1]), self.real_batch(int(m[1]), int(m[2]))
        RedisCatalog(self.setup.dedup).commit_progress(self.setup.query_ids[q], batch)
        return f", record_checkpoint_commit: commit_progress(batch {batch})"

    def real_batch(self, q: int, b: int) -> int:
        """Spark's batch id of the model's batch ``b`` in query ``q``: a new checkpoint
        location numbers its batches from 0 (query 1 starts at query 0's position)."""
        offset = self._offset[q]
        assert offset is not None
        return b - offset

    def _check_decisions(self, label: str, task: RealTask) -> None:
        """The claim's and the checkpoint's outcome in the real code are the model's."""
        notes = dict(task.notes)
        claim = re.search(r"claim shard \d+ .*-> (REPLAY, )?kept \[(.*?)\]", label)
        if claim:
            kept = sorted(self.setup.real_id(x.strip(" '")) for x in claim[2].split(",")
                          if x.strip())
            if notes.get("claim") != (bool(claim[1]), kept):
                raise DisagreementError(f"{label}: the real claim gave (replay, kept) = "
                                   f"{notes.get('claim')}, the model {(bool(claim[1]), kept)}")
        if "put_if_absent" in label:
            won = "put_if_absent won" in label
            if notes.get("checkpoint") != won:
                raise DisagreementError(f"{label}: the real put_if_absent won = "
                                   f"{notes.get('checkpoint')}")

    def _launch(self, key: tuple[int, int, int, int]) -> None:
        q, b, p, w = key
        inst = self.walk.inst
        attempt = self.attempts[(q, b, p)]
        self.attempts[(q, b, p)] += 1
        task = RealTask(key, attempt)
        received = self.setup.input_batch(inst.rows(b, p), inst.shard, b)
        query = self.setup.query_ids[q]
        real = self.real_batch(q, b)

        def run() -> None:
            _local.worker, _local.task = f"w{w}", task
            try:
                if pause("start") == "raise":
                    raise RuntimeError("not started")
                result = self.setup.task_body(real, p, attempt, query, received)
                task.events.put(("done", result))
            except BaseException as exc:  # reported to the scheduler
                task.events.put(("error", exc))

        task.thread = threading.Thread(target=run, name=f"replay-q{q}b{b}p{p}w{w}",
                                       daemon=True)
        task.thread.start()
        self.tasks[key] = task
        event = task.events.get(timeout=STEP_TIMEOUT_S)
        if event != ("pause", "start"):
            raise DisagreementError(f"task {key} did not start: {event!r}")
        task.at = "start"

    def _advance(self, task: RealTask, want: str, word: str = "go",
                 passing: frozenset[str] | set[str] = frozenset()) -> None:
        task.go.put(word)
        while True:
            try:
                kind, value = task.events.get(timeout=STEP_TIMEOUT_S)
            except queue.Empty:
                raise DisagreementError(f"task {task.key}: no pause point within "
                                   f"{STEP_TIMEOUT_S} s after {task.at!r} (want {want!r})"
                                   ) from None
            if kind == "pause" and value != want and value in passing:
                task.go.put("go")
                continue
            break
        if kind == "pause":
            reached = value
        else:
            reached, task.outcome = kind, value
        self._did = reached if kind == "pause" else f"{reached}: {value!r}"[:120]
        if reached != want:
            raise DisagreementError(
                f"task {task.key}: the model's step leads to {want!r}, the real code reached "
                f"{reached!r}" + (f" ({value!r})" if kind == "error" else "")
                + f"; the last steps: {self.log[-6:]}")
        task.at = reached


# --------------------------------------------------------------------------- comparison


@dataclass
class Comparison:
    lost: list[tuple[str, int]]
    duplicated: list[tuple[str, int]]
    phantoms: list[tuple[str, int]]
    markers_model: list[tuple[str | None, int]]
    markers_real: list[tuple[str | None, int]]

    @property
    def equal(self) -> bool:
        return not (self.lost or self.duplicated or self.phantoms) and \
            self.markers_model == self.markers_real

    def __str__(self) -> str:
        return (f"lost {self.lost}, duplicated {self.duplicated}, phantoms {self.phantoms}, "
                f"markers model {self.markers_model} real {self.markers_real}")


def compare(replay: Replay) -> Comparison:
    """The real ``read_committed`` output and batch markers against the model's final state."""
    from dedup.constants import RECORD_ID_HEADER
    from sinks.kafka_io import consume_all
    from sinks.transactions import read_marker

    setup, final = replay.setup, replay.walk.final
    ids = {setup.real_id(i).encode(): i for i in {r[0] for b in replay.walk.inst.batches
                                                  for r in b}}
    real: Counter[tuple[str, Any]] = Counter()
    for record in consume_all(setup.bootstrap, setup.topic, "read_committed"):
        rid = record.header(RECORD_ID_HEADER) or b""
        value = (record.value or b"").decode()
        real[(ids.get(rid, rid.decode()), int(value[1:]) if value[1:].isdigit() else value)] += 1
    model: Counter = Counter((r[0], r[1]) for r in final.visible)
    extra = real - model
    lost = sorted((model - real).elements())
    duplicated = sorted(r for r in extra.elements() if r in model)
    phantoms = sorted(r for r in extra.elements() if r not in model)
    markers_model: list[tuple[str | None, int]] = [
        (None, -1) if mk is None else (setup.query_ids[mk[0]], replay.real_batch(*mk))
        for mk in final.markers]
    markers_real = [read_marker(setup.sink, p) for p in range(replay.walk.inst.partitions)]
    return Comparison(lost, duplicated, phantoms, markers_model, markers_real)
