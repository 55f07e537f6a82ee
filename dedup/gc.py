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
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from dedup.catalog import RedisCatalog
from dedup.exceptions import DedupError
from dedup.failpoints import fail_point

log = logging.getLogger(__name__)


class DecisionGcListener(StreamingQueryListener):
    """Deletes committed decisions of every dedup app id of one SparkSession.

    One listener per session, whatever the number of app ids: Spark calls a
    Python listener through py4j for every progress event of every query, so
    one listener per app id made each event cost one round trip per app id
    ever started in the session (150 in the chaos matrix, enough to leave the
    listener bus minutes behind and make ``SparkSession.stop()`` wait for it).
    A failure is logged, never raised: a missed collection only leaves garbage
    that the next progress event removes.
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
        self.collected = 0

    def on_stop(self, query_id: str, name: str, release: Callable[[], None]) -> None:
        """Call ``release`` once when streaming query ``query_id`` terminates.

        Safe to repeat (one callback per ``name``; the newest wins). A failing
        callback is logged: a lease it should have released lapses by itself.
        """
        with self._lock:
            self._on_stop.setdefault(query_id, {})[name] = release

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
        pass

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
        for _, catalog in mine:
            try:
                fail_point("dedup.before_progress_record", catalog.config.fail_points.directory,
                           batch=progress.batchId, query=query_id)
            except DedupError as exc:  # a raise action: this event's writes are lost
                log.warning("dedup progress of query %s not recorded: %s", query_id, exc)
                continue
            self._renew(catalog, query_id)
            try:
                self.collected += catalog.commit_progress(query_id, int(progress.batchId))
            except DedupError as exc:
                log.warning("dedup decision GC for query %s failed: %s", query_id, exc)

    @staticmethod
    def _renew(catalog: RedisCatalog, query_id: str) -> None:
        if catalog.config.allow_shared_app_id:
            return
        try:
            catalog.take_lease(query_id)
        except DedupError as exc:
            # The query's own next claim fails closed if the lease is really lost.
            log.warning("renewing the app id lease of query %s failed: %s", query_id, exc)

    def onQueryIdle(self, event: Any) -> None:
        query_id = str(event.id)
        with self._lock:
            names = self._owners.get(query_id, set())
            mine = [c for n, c in self._catalogs.items() if n in names]
        for catalog in mine:
            self._renew(catalog, query_id)

    def onQueryTerminated(self, event: Any) -> None:
        query_id = str(event.id)
        with self._lock:
            names = self._owners.pop(query_id, None)
            last = self._last.pop(query_id, None)
            # A query that died before its first progress event may still hold
            # a lease: release it in every catalog (harmless elsewhere: only a
            # lease held by query_id changes).
            targets = [c for n, c in self._catalogs.items() if names is None or n in names]
            releases = self._on_stop.pop(query_id, {})
        for name, release in releases.items():
            try:
                release()
            except Exception as exc:  # any failure: the lease lapses by itself
                log.warning("releasing %s of query %s failed: %s", name, query_id, exc)
        for catalog in targets:
            try:
                if last is not None:
                    # Every batch up to ``last`` is committed: its decisions can go.
                    # Those of a batch the query stopped in stay, so that a new query
                    # on this app id is refused until this one finishes it.
                    self.collected += catalog.collect_garbage(query_id, last + 1)
                catalog.release(query_id)
            except DedupError as exc:
                log.warning("releasing the dedup app id lease of query %s failed: %s",
                            query_id, exc)


# SparkSession -> its one listener (weak: keeps no session alive)
_LISTENERS: weakref.WeakKeyDictionary[Any, DecisionGcListener] = weakref.WeakKeyDictionary()
_LISTENERS_LOCK = threading.Lock()


def session_listener(spark: Any) -> DecisionGcListener:
    """The one :class:`DecisionGcListener` of ``spark``, added on first use. Safe to repeat."""
    with _LISTENERS_LOCK:
        listener = _LISTENERS.get(spark)
        if listener is None:
            listener = DecisionGcListener()
            spark.streams.addListener(listener)
            _LISTENERS[spark] = listener
        return listener
