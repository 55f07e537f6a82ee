"""Garbage collection of recorded decisions, after Spark's commit, and the app id's lease.

A decision of batch ``b`` must survive until Spark can no longer re-run
``b``: Spark reports a batch's progress only after writing it to the commit
log, so on the progress event of batch ``b`` every decision of that query
with a batch id ``< b`` is deleted (one pipeline over the shards). The
listener also renews the app id's lease on every progress and idle event of
the query that holds it (so an idle query keeps its app id), and releases it
when the query terminates; other leases (the sink's) register their release
with :meth:`DecisionGcListener.on_stop`. One listener per SparkSession
(:func:`session_listener`).

A registered listener keeps a script from ending cleanly: under Spark Connect
its event thread is not a daemon (the process never exits), and in classic mode
the JVM calls it after the Python process has gone (Py4J traces on stderr, and
the stopped query's lease release lost). So the listener is closed, after the
events of every stopped query have been handled, when the session stops
(``spark.stop()``) and when the interpreter shuts down (before it joins its
threads): :func:`close_session_listener`.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (
    JStreamingQueryListener,
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
)

from dedup.catalog import RedisCatalog
from dedup.constants import STOP_HANDLING_WAIT_S
from dedup.exceptions import DedupError
from dedup.failpoints import fail_point
from dedup.spark_session import before_stop, classic_listener_handle, session_stopped

log = logging.getLogger(__name__)


class DecisionGcListener(StreamingQueryListener):
    """Deletes committed decisions of every dedup app id of one SparkSession.

    One listener per session, whatever the number of app ids: Spark calls a
    Python listener through py4j for every progress event of every query, so
    one listener per app id made each event cost one round trip per app id
    ever started in the session (150 in the chaos matrix, enough to leave the
    listener bus minutes behind and make ``SparkSession.stop()`` wait for it).
    A failure is logged, never raised: a missed collection only leaves garbage
    that the next progress event removes. In a classic session it hears each
    event decoded from the event's JSON (:class:`_JsonEvents`).
    """

    def __init__(self) -> None:
        self._catalogs: dict[str, RedisCatalog] = {}
        self._lock = threading.Lock()
        # query id -> metric names seen in its progress, to know whose lease
        # a terminated query held, and the last batch it committed.
        self._owners: dict[str, set[str]] = {}
        self._last: dict[str, int] = {}
        # query id -> {name: release callback}, called once when it terminates
        self._on_stop: dict[str, dict[str, Callable[[], None]]] = {}
        # query ids this listener heard start or act for (a listener added while
        # the query ran hears no start), and those whose termination it handled;
        # the condition wakes close() when a termination is done
        self._started: set[str] = set()
        self._ended: set[str] = set()
        self._done = threading.Condition(self._lock)
        # (Spark query id, metric name) -> the name the app id knows the query by
        self._names: dict[tuple[str, str], str] = {}
        self.collected = 0

    @property
    def _jlistener(self) -> Any:
        """What a classic session's ``streams.addListener`` (and ``removeListener``)
        hands to Spark for this listener: PySpark's own wrapper around
        :class:`_JsonEvents` instead of PySpark's field-by-field converter. Spark
        Connect never asks for it (its server sends events as JSON already)."""
        if not hasattr(self, "_jlistenerobj"):
            self._jlistenerobj = classic_listener_handle(_JsonEvents(self))
        return self._jlistenerobj

    def on_stop(self, query_id: str, name: str, release: Callable[[], None]) -> None:
        """Call ``release`` once when streaming query ``query_id`` terminates.

        Safe to repeat (one callback per ``name``; the newest wins). A failing
        callback is logged: a lease it should have released lapses by itself.
        """
        with self._lock:
            self._on_stop.setdefault(query_id, {})[name] = release
            self._started.add(query_id)

    def hold(self, query_id: str, metric_name: str, catalog: RedisCatalog) -> None:
        """Keep the app id lease of ``query_id`` as for a watched query whose progress
        never carries ``metric_name`` (the one-pass writer decides inside
        ``foreachBatch``, where nothing is observed): renewed on its idle events,
        released when it terminates. Safe to repeat."""
        with self._lock:
            # the newest config wins, as in watch: a query restarted against another
            # Redis (a failover) releases its lease where it runs now
            self._catalogs[metric_name] = catalog
            self._owners.setdefault(query_id, set()).add(metric_name)
            self._started.add(query_id)

    def watch(self, metric_name: str, catalog: RedisCatalog) -> None:
        """Collect for queries whose progress carries ``metric_name``. Safe to repeat."""
        with self._lock:
            self._catalogs[metric_name] = catalog  # the newest config of an app id wins

    @property
    def watched(self) -> list[str]:
        """Metric names (one per app id) this listener collects for."""
        with self._lock:
            return sorted(self._catalogs)

    def onQueryStarted(self, event: Any) -> None:
        with self._lock:
            self._started.add(str(event.id))

    def wait_for_terminations(self, active: set[str], timeout: float) -> set[str]:
        """Wait up to ``timeout`` seconds until every query it heard start that is not
        in ``active`` has had its termination handled; return those still waited for."""
        deadline = time.monotonic() + timeout
        with self._done:
            while True:
                left = self._started - self._ended - active
                remaining = deadline - time.monotonic()
                if not left or remaining <= 0:
                    return left
                self._done.wait(remaining)

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        observed = progress.observedMetrics or {}
        query_id = str(progress.id)
        with self._lock:
            mine = [(name, catalog) for name, catalog in self._catalogs.items()
                    if name in observed]
            if mine:
                self._owners.setdefault(query_id, set()).update(name for name, _ in mine)
                self._last[query_id] = int(progress.batchId)
                self._started.add(query_id)
        for name, catalog in mine:
            try:
                fail_point("dedup.before_progress_record", catalog.config.fail_points.directory,
                           batch=progress.batchId, query=query_id)
            except DedupError as exc:  # a raise action: this event's writes are lost
                log.warning("dedup progress of query %s not recorded: %s", query_id, exc)
                continue
            owner = self._owner_name(name, catalog, query_id)
            self._renew(catalog, owner, query_id)
            try:
                self.collected += catalog.commit_progress(owner, int(progress.batchId))
            except DedupError as exc:
                log.warning("dedup decision GC for query %s failed: %s", query_id, exc)

    def _owner_name(self, metric_name: str, catalog: RedisCatalog, query_id: str) -> str:
        """The name the app id of ``metric_name`` knows Spark query ``query_id`` by: its
        decisions and lease are under the foreachBatch sink's ``query.id`` under Spark
        Connect (the lease records the Spark id beside it), else under the Spark id.
        One read per event until a name other than the Spark id is found."""
        key = (query_id, metric_name)
        with self._lock:
            known = self._names.get(key)
        if known is not None:
            return known
        try:
            name = catalog.lease_name(query_id)
        except DedupError as exc:
            log.warning("reading the dedup app id lease for query %s failed: %s", query_id, exc)
            return query_id  # not kept: read again at the next event
        if name != query_id:  # kept once found: before its first claim the lease cannot say
            with self._lock:
                self._names[key] = name
        return name

    @staticmethod
    def _renew(catalog: RedisCatalog, owner: str, query_id: str) -> None:
        if catalog.config.allow_shared_app_id:
            return
        try:
            if owner == query_id:
                catalog.take_lease(owner)
            else:
                catalog.take_lease(owner, spark_query_id=query_id)
        except DedupError as exc:
            # The query's own next claim fails closed if the lease is really lost.
            log.warning("renewing the app id lease of query %s failed: %s", query_id, exc)

    def onQueryIdle(self, event: Any) -> None:
        query_id = str(event.id)
        with self._lock:
            names = self._owners.get(query_id, set())
            mine = [(n, c) for n, c in self._catalogs.items() if n in names]
        for name, catalog in mine:
            self._renew(catalog, self._owner_name(name, catalog, query_id), query_id)

    def onQueryTerminated(self, event: Any) -> None:
        query_id = str(event.id)
        with self._lock:
            names = self._owners.pop(query_id, None)
            last = self._last.pop(query_id, None)
            # A query that died before its first progress event may still hold
            # a lease: release it in every catalog (harmless elsewhere: only a
            # lease held by query_id changes).
            targets = [(n, c) for n, c in self._catalogs.items() if names is None or n in names]
            releases = self._on_stop.pop(query_id, {})
        for name, release in releases.items():
            try:
                release()
            except Exception as exc:  # any failure: the lease lapses by itself
                log.warning("releasing %s of query %s failed: %s", name, query_id, exc)
        for name, catalog in targets:
            try:
                owner = self._owner_name(name, catalog, query_id)
                if last is not None:
                    # Every batch up to ``last`` is committed: its decisions can go.
                    # Those of a batch the query stopped in stay, so that a new query
                    # on this app id is refused until this one finishes it.
                    self.collected += catalog.collect_garbage(owner, last + 1)
                catalog.release(owner)
            except DedupError as exc:
                log.warning("releasing the dedup app id lease of query %s failed: %s",
                            query_id, exc)
        with self._done:
            for key in [k for k in self._names if k[0] == query_id]:
                del self._names[key]
            self._ended.add(query_id)
            self._done.notify_all()


def _decoded(kind: Any, jevent: Any) -> Any:
    """``jevent`` (a JVM listener event) as PySpark's ``kind``, from its JSON: one Py4J
    round trip. An event whose JSON PySpark cannot read is converted the way PySpark
    does it (field by field)."""
    try:
        return kind.fromJson(json.loads(jevent.json()))
    except (KeyError, TypeError, ValueError):
        return kind.fromJObject(jevent)


class _JsonEvents(JStreamingQueryListener):
    """PySpark's Py4J callback for one :class:`DecisionGcListener` of a classic
    session (Spark's ``PythonStreamingQueryListener``), handing it each event
    decoded from the event's JSON instead of converted field by field.

    Why: Spark calls a Python listener on the listener bus's one thread for every
    event of every query of the session, and PySpark's own wrapper converts a
    progress event field by field, a Py4J round trip each: about 470 round trips
    (500 with the releases of its Java objects), 107 ms of wall time, 30 ms of the driver's
    Python CPU and 96 ms of its JVM's per event on the 2-core machine
    (2026-12-04; ``tests/integration/dedup/test_gc_listener_events.py``). The JSON
    is what Spark Connect delivers and what PySpark 4.2 reads ``lastProgress`` from.
    """

    def onQueryStarted(self, jevent: Any) -> None:
        self.pylistener.onQueryStarted(_decoded(QueryStartedEvent, jevent))

    def onQueryProgress(self, jevent: Any) -> None:
        self.pylistener.onQueryProgress(_decoded(QueryProgressEvent, jevent))

    def onQueryIdle(self, jevent: Any) -> None:
        self.pylistener.onQueryIdle(_decoded(QueryIdleEvent, jevent))

    def onQueryTerminated(self, jevent: Any) -> None:
        self.pylistener.onQueryTerminated(_decoded(QueryTerminatedEvent, jevent))


# SparkSession -> its one listener (weak: keeps no session alive)
_LISTENERS: weakref.WeakKeyDictionary[Any, DecisionGcListener] = weakref.WeakKeyDictionary()
_LISTENERS_LOCK = threading.Lock()
_EXIT_HOOKED = False


def session_listener(spark: Any) -> DecisionGcListener:
    """The one :class:`DecisionGcListener` of ``spark``, added on first use. Safe to repeat.

    It is closed (:func:`close_session_listener`) when ``spark.stop()`` is called
    and when the interpreter shuts down.
    """
    global _EXIT_HOOKED
    with _LISTENERS_LOCK:
        listener = _LISTENERS.get(spark)
        if listener is None:
            listener = DecisionGcListener()
            spark.streams.addListener(listener)
            _LISTENERS[spark] = listener
            # spark.stop() closes it first (under Spark Connect a session released
            # with the listener's event stream open logs server errors, and its client
            # then fails to remove the listener: a warning at exit)
            before_stop(spark, close_session_listener)
            if not _EXIT_HOOKED:
                _register_exit_hook(_close_all)
                _EXIT_HOOKED = True
        return listener


def _wait_for_stopped(listener: DecisionGcListener, spark: Any, timeout: float) -> set[str]:
    """Wait until ``listener`` has handled the end of every query of ``spark`` that is
    not running; return those still waited for (at once when there are none)."""
    return listener.wait_for_terminations({str(query.id) for query in spark.streams.active},
                                          timeout)


def await_stopped_queries(spark: Any, timeout: float = STOP_HANDLING_WAIT_S) -> set[str]:
    """Wait (up to ``timeout`` seconds) until the toolkit's listener of ``spark`` has
    handled the end of every query of the session that stopped; return those it still
    waits for. Safe to repeat; returns at once when none is pending or no listener runs.

    Spark tells listeners of a query's end asynchronously, and the listener releases
    the query's app id lease then: a new query of the same app id started right after
    a stop (a new checkpoint, a restart) would otherwise be refused by that lease at its
    first claim (``AppIdInUseError``, naming a query that has stopped).
    """
    with _LISTENERS_LOCK:
        listener = _LISTENERS.get(spark)
    if listener is None:
        return set()
    left = _wait_for_stopped(listener, spark, timeout)
    if left:
        log.info("the end of streaming queries %s is not handled yet (%.0f s): a lease "
                 "they hold lapses by itself", ", ".join(sorted(left)), timeout)
    return left


def close_session_listener(spark: Any, timeout: float = STOP_HANDLING_WAIT_S) -> None:
    """Close the toolkit's listener of ``spark``: wait (up to ``timeout`` seconds) until
    every stopped query's termination is handled (leases released, decisions
    collected), then remove the listener from the session. A query still running
    keeps running, without it. Safe to repeat; never raises (a session already
    stopped has nothing left to remove). The next toolkit call on ``spark`` adds a
    new listener.
    """
    with _LISTENERS_LOCK:
        listener = _LISTENERS.pop(spark, None)
    if listener is None:
        return
    try:
        if session_stopped(spark):
            return
        left = _wait_for_stopped(listener, spark, timeout)
        if left:
            log.warning("closing the dedup listener before the end of streaming queries %s "
                        "was handled (%.0f s): their app id leases lapse by themselves",
                        ", ".join(sorted(left)), timeout)
        spark.streams.removeListener(listener)
    except Exception as exc:  # a session going down: nothing to keep it for
        log.debug("closing the dedup listener: %s", exc)


def _close_all() -> None:
    with _LISTENERS_LOCK:
        sessions = list(_LISTENERS.keys())
    for spark in sessions:
        close_session_listener(spark)


def _register_exit_hook(hook: Callable[[], None]) -> None:
    """Run ``hook`` when the interpreter shuts down, before it joins non-daemon threads.

    Spark Connect's listener thread is not a daemon: an ``atexit`` hook would run only
    after joining it, that is never. ``threading._register_atexit`` (CPython 3.9+,
    what ``concurrent.futures`` uses) runs first; ``atexit`` where it is missing.
    """
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is not None:
            register(hook)
            return
    except RuntimeError:  # the interpreter is already shutting down
        return
    atexit.register(hook)
