"""The mutants: deliberately broken variants of the toolkit, patched in from the test tree.

The chaos matrix must show that its checks fail when the exactly-once guarantee is
broken (``python -m benchmarks.chaos --mutants``, :mod:`benchmarks.chaos.mutants`).
Each mutant of :data:`KNOWN_MUTANTS` is a small wrapper around one function of the
toolkit, at the place the mistake would be made; the toolkit itself holds none of
them (only its documented fail-points, :mod:`dedup.failpoints`).

Switching one on (per run, as before the move): a file ``mutant-<name>`` in the
run's fail-point folder (:func:`arm_mutant`), read once per process and folder
(:func:`mutant_on`). The wrappers find the folder in the configuration the toolkit
already carries (``fail_points.directory`` of ``DedupConfig`` and of the sink's
``SinkConfig``) or in ``DEDUP_FAIL_POINT_DIR``; without the file a wrapper only
calls the original.

Getting the wrappers into every process of a run: :func:`install` patches the
toolkit's modules in this process, those already imported at once and the others
right after their import (a ``sys.meta_path`` hook). Spark's Python workers are
other processes: :func:`enable_in_workers` puts :data:`WORKER_SITE` on
``PYTHONPATH``, whose ``sitecustomize.py`` runs :func:`install` at the start of
every Python process that inherits it (a ``dedup run`` child, its JVM and the
Python workers that JVM starts; a standalone cluster's executors get the driver's
``PYTHONPATH`` through ``spark.executorEnv``, see :func:`dedup.local.spark.executor_env`).
Only the chaos runner and ``tests/chaos`` call it. A wrapper whose broken branch is
taken leaves ``mutant-<name>.hit-<pid>`` in the folder (:func:`mutant_hits`): the
proof that the mutant ran where the guarantee is made, not only in the driver.

Self-contained on purpose (standard library only at import): the workers load this
file by its path, without the ``benchmarks`` package on their ``sys.path``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

KNOWN_MUTANTS: dict[str, str] = {
    "marker_ignored": "the sink ignores its batch marker and re-commits a committed batch",
    "claim_not_idempotent": "a retried claim of a (batch, shard) treats the batch's own "
                            "IDs as already seen",
    "no_fencing": "a fresh transactional id per task attempt: older writers are never fenced",
    "strong_productions_off": "a sink retry emits its recomputed rows, not the checkpoint",
    "stale_bloom_trusted": "a Bloom filter's 'maybe seen' is trusted without the catalog",
    "decisions_gc_early": "a batch's decisions are collected right after its claim, before "
                          "Spark committed it",
    "late_policy_wall_clock": "late records are judged by the wall clock, not the batch clock",
    "checkpoint_per_attempt": "sink checkpoints keyed by task attempt, not (batch, partition)",
}
"""Deliberately broken variants, each a wrapper at the place the mistake would be made."""

WORKER_SITE = Path(__file__).resolve().parent / "worker_site"
"""The ``PYTHONPATH`` entry whose ``sitecustomize.py`` installs the wrappers."""

FAIL_POINT_ENV_VAR = "DEDUP_FAIL_POINT_DIR"  # dedup.failpoints.ENV_VAR (not imported: see above)

_MARK = "__dedup_chaos_mutants__"  # set on patched modules and on the import hook
_LOCK = threading.RLock()
_ON: dict[tuple[str, str], bool] = {}  # (folder, name) -> on, cached per process
_HIT: set[tuple[str, str]] = set()  # (folder, name) whose hit this process recorded


# -- switching a mutant on ------------------------------------------------------

def mutant_on(name: str, directory: str | None = None) -> bool:
    """Whether the mutant ``name`` is switched on: the fail-point folder ``directory``
    (else ``DEDUP_FAIL_POINT_DIR``) holds the file ``mutant-<name>``.

    Read once per process and folder (a chaos run arms its mutant before it starts
    and uses a fresh folder per run). False without a folder.
    """
    folder = directory or os.environ.get(FAIL_POINT_ENV_VAR)
    if not folder:
        return False
    key = (folder, name)
    found = _ON.get(key)
    if found is None:
        found = _ON[key] = (Path(folder) / f"mutant-{name}").is_file()
    return found


def arm_mutant(directory: str | Path, name: str) -> Path:
    """Switch the mutant ``name`` on in ``directory``; returns its file."""
    if name not in KNOWN_MUTANTS:
        raise ValueError(f"unknown mutant {name!r}; known: {', '.join(KNOWN_MUTANTS)}")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"mutant-{name}"
    path.write_text(KNOWN_MUTANTS[name] + "\n")
    return path


def _taken(name: str, directory: str | None) -> None:
    """Record (once per process) that the broken branch of ``name`` was taken."""
    folder = directory or os.environ.get(FAIL_POINT_ENV_VAR)
    if not folder or (folder, name) in _HIT:
        return
    _HIT.add((folder, name))
    with contextlib.suppress(OSError):  # evidence only: the mutant does not depend on it
        (Path(folder) / f"mutant-{name}.hit-{os.getpid()}").write_text(f"{time.time()}\n")


def mutant_hits(directory: str | Path) -> dict[str, list[int]]:
    """The processes in which each mutant's broken branch was taken (name -> pids)."""
    out: dict[str, list[int]] = {}
    for path in sorted(Path(directory).glob("mutant-*.hit-*")):
        name, _, pid = path.name.removeprefix("mutant-").rpartition(".hit-")
        out.setdefault(name, []).append(int(pid))
    return out


# -- the mutants ----------------------------------------------------------------

def _patch_partition_step(module: ModuleType) -> None:
    late_mask = module.late_mask

    def late_mask_by_wall_clock(config: Any, event_seconds: Any, now: float) -> Any:
        # late_policy_wall_clock: lateness by the wall clock of this attempt
        if mutant_on("late_policy_wall_clock", config.fail_points.directory):
            _taken("late_policy_wall_clock", config.fail_points.directory)
            now = time.time()
        return late_mask(config, event_seconds, now)

    setattr(module, "late_mask", late_mask_by_wall_clock)  # noqa: B010 (a module)


def _patch_claim(module: ModuleType) -> None:
    claimer = module.ShardClaimer
    claim, split = claimer.claim, claimer._split

    def claim_then_collect(self: Any, query_id: str, batch_id: str | int, shard: int,
                           ids: Any, *args: Any, **kwargs: Any) -> Any:
        outcome = claim(self, query_id, batch_id, shard, ids, *args, **kwargs)
        directory = self.config.fail_points.directory
        if str(batch_id).isdigit() and mutant_on("decisions_gc_early", directory):
            # decisions_gc_early: the batch being claimed counted as committed, its
            # decisions collected before Spark committed it
            from dedup.catalog import RedisCatalog

            _taken("decisions_gc_early", directory)
            RedisCatalog(self.config).collect_garbage(query_id, int(batch_id) + 1)
        return outcome

    def split_trusting_the_filter(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = split(self, *args, **kwargs)
        directory = self.config.fail_points.directory
        if out.positives and mutant_on("stale_bloom_trusted", directory):
            # stale_bloom_trusted: "maybe seen" is taken as seen, so the catalog never
            # judges the filter's hits
            _taken("stale_bloom_trusted", directory)
            return dataclasses.replace(out, positives=[])
        return out

    claimer.claim = claim_then_collect
    claimer._split = split_trusting_the_filter


def _patch_catalog(module: ModuleType) -> None:
    catalog = module.RedisCatalog
    claim_once = catalog._claim_once

    def claim_once_forgetting_its_ids(self: Any, *args: Any, **kwargs: Any) -> Any:
        reply = claim_once(self, *args, **kwargs)
        directory = self.config.fail_points.directory
        if reply.replay and reply.keep is None and mutant_on("claim_not_idempotent", directory):
            # claim_not_idempotent: the retry finds its own IDs claimed and counts
            # them as seen
            _taken("claim_not_idempotent", directory)
            return module.ClaimReply.replayed([])
        return reply

    catalog._claim_once = claim_once_forgetting_its_ids


def _patch_config(module: ModuleType) -> None:
    config_class = module.SinkConfig
    producer_settings = config_class.producer_settings

    def settings_without_fencing(self: Any, partition: int) -> dict[str, Any]:
        settings: dict[str, Any] = producer_settings(self, partition)
        if mutant_on("no_fencing", self.fail_points.directory):
            # no_fencing: a fresh id per producer, so its init_transactions() fences
            # no earlier writer of the partition
            _taken("no_fencing", self.fail_points.directory)
            settings["transactional.id"] = (f"{self.transactional_id(partition)}."
                                            f"{uuid.uuid4().hex[:8]}")
        return settings

    config_class.producer_settings = settings_without_fencing


# (query id, batch) of the sink attempt that ignores its marker, None otherwise
_IGNORING: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
    "dedup_chaos_marker_ignored", default=None)


def _patch_transactions(module: ModuleType) -> None:
    attempt, read_marker = module._attempt, module.read_marker
    committed_per_redis = module._committed_per_redis

    def attempt_ignoring_the_marker(config: Any, records: Any, query_id: str, batch: int,
                                    partition: int, *args: Any, **kwargs: Any) -> Any:
        if not mutant_on("marker_ignored", config.fail_points.directory):
            return attempt(config, records, query_id, batch, partition, *args, **kwargs)
        # marker_ignored: the marker (Kafka's, cached or read) and its Redis copy are
        # ignored. A marker that says "this batch is in" reads as "the one before it
        # is in"; every other marker is left as it is (a reused query id is still
        # refused, as before the move).
        _taken("marker_ignored", config.fail_points.directory)
        txn_id = config.transactional_id(partition)
        if module._MARKERS.get(txn_id) == (query_id, batch + 1):
            module._MARKERS[txn_id] = (query_id, batch)
        token = _IGNORING.set((query_id, batch))
        try:
            return attempt(config, records, query_id, batch, partition, *args, **kwargs)
        finally:
            _IGNORING.reset(token)

    def marker_read_as_not_done(*args: Any, **kwargs: Any) -> Any:
        marker = read_marker(*args, **kwargs)
        ignoring = _IGNORING.get()
        if ignoring is not None and tuple(marker) == (ignoring[0], ignoring[1] + 1):
            return ignoring
        return marker

    def redis_copy_ignored(*args: Any, **kwargs: Any) -> bool:
        if _IGNORING.get() is not None:
            return False
        return bool(committed_per_redis(*args, **kwargs))

    for name, wrapper in (("_attempt", attempt_ignoring_the_marker),
                          ("read_marker", marker_read_as_not_done),
                          ("_committed_per_redis", redis_copy_ignored)):
        setattr(module, name, wrapper)


_STORE_FOLDER = "_dedup_chaos_fail_point_dir"  # the fail-point folder of a sink's store


def _task_attempt() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0


def _patch_checkpoint(module: ModuleType) -> None:
    store_class = module.CheckpointStore
    for_config = store_class.for_config.__func__
    put_if_absent, delete = store_class.put_if_absent, store_class.delete

    def for_config_with_folder(cls: Any, config: Any) -> Any:
        store = for_config(cls, config)
        points = getattr(config, "fail_points", None)
        setattr(store, _STORE_FOLDER, getattr(points, "directory", None))
        return store

    def owner(store: Any, query_id: str) -> str:
        directory = getattr(store, _STORE_FOLDER, None)
        if mutant_on("checkpoint_per_attempt", directory):
            # checkpoint_per_attempt: keyed per task attempt, a retry never finds the
            # first attempt's checkpoint
            _taken("checkpoint_per_attempt", directory)
            return f"{query_id}:attempt{_task_attempt()}"
        return query_id

    def put_if_absent_per_mutant(self: Any, query_id: str, batch: int, partition: int,
                                 data: bytes) -> tuple[bytes, bool]:
        stored, won = put_if_absent(self, owner(self, query_id), batch, partition, data)
        directory = getattr(self, _STORE_FOLDER, None)
        if not won and mutant_on("strong_productions_off", directory):
            # strong_productions_off: the retry emits its recomputation (it acts as if
            # it had stored the checkpoint)
            _taken("strong_productions_off", directory)
            return stored, True
        return stored, won

    def delete_per_mutant(self: Any, query_id: str, batch: int, partition: int) -> None:
        delete(self, owner(self, query_id), batch, partition)

    store_class.for_config = classmethod(for_config_with_folder)
    store_class.put_if_absent = put_if_absent_per_mutant
    store_class.delete = delete_per_mutant


_PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "dedup.partition_step": _patch_partition_step,
    "dedup.claim": _patch_claim,
    "dedup.catalog": _patch_catalog,
    "sinks.config": _patch_config,
    "sinks.transactions": _patch_transactions,
    "sinks.checkpoint": _patch_checkpoint,
}
"""The toolkit's modules the mutants wrap, and how."""

PATCHED_MODULES = tuple(_PATCHES)


# -- patching every process of a run -------------------------------------------

def _apply(name: str, module: ModuleType) -> None:
    with _LOCK:
        if getattr(module, _MARK, False):  # once, also when two copies of this file ran
            return
        _PATCHES[name](module)
        setattr(module, _MARK, True)


def is_patched(module: ModuleType) -> bool:
    """Whether the mutants' wrappers are in ``module`` (one of :data:`PATCHED_MODULES`)."""
    return bool(getattr(module, _MARK, False))


class _Loader(importlib.abc.Loader):
    """A module's own loader, then the mutants' wrappers."""

    def __init__(self, loader: Any, name: str) -> None:
        self._loader, self._name = loader, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create: Callable[..., ModuleType | None] = self._loader.create_module
        return create(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _apply(self._name, module)

    def __getattr__(self, attr: str) -> Any:  # get_source, get_resource_reader, ...
        return getattr(self._loader, attr)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the patched modules with the finders after it and wraps their loaders."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _PATCHES:
            return None
        for finder in list(sys.meta_path):
            if getattr(finder, _MARK, False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


setattr(_Finder, _MARK, True)


def install() -> None:
    """Put the mutants' wrappers into this process: into the patched modules already
    imported now, into the others when they are imported. Safe to repeat; each
    wrapper only calls the original unless its mutant is switched on."""
    with _LOCK:
        for name in _PATCHES:
            module = sys.modules.get(name)
            if module is not None:
                _apply(name, module)
        if not any(getattr(finder, _MARK, False) for finder in sys.meta_path):
            sys.meta_path.insert(0, _Finder())


def worker_pythonpath(environ: dict[str, str] | None = None) -> str:
    """``PYTHONPATH`` with :data:`WORKER_SITE` first (the rest of ``environ``'s after it)."""
    env = os.environ if environ is None else environ
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(WORKER_SITE)]
    return os.pathsep.join([str(WORKER_SITE), *rest])


def enable_in_workers() -> None:
    """Install the wrappers here and in every Python process started from here on
    (``PYTHONPATH``): call before the SparkSession (its JVM) starts."""
    os.environ["PYTHONPATH"] = worker_pythonpath()
    install()


def workers_patched(spark: Any) -> bool:
    """Whether the Python workers of ``spark`` start with :data:`WORKER_SITE` on their
    path (the JVM's environment or the session's ``spark.executorEnv.PYTHONPATH``)."""
    context = spark.sparkContext
    paths = [context._jvm.java.lang.System.getenv("PYTHONPATH") or "",
             context.environment.get("PYTHONPATH", "")]
    return any(str(WORKER_SITE) in p.split(os.pathsep) for p in paths)
