"""Garbage collection of recorded decisions, after Spark's commit (invariant 7).

A decision of batch ``b`` must survive until Spark can no longer re-run
``b``: Spark reports a batch's progress only after writing it to the commit
log, so on the progress event of batch ``b`` every decision of that query
with a batch id ``< b`` is deleted (one pipeline over the shards). The
listener also releases the app-id lease when the query terminates.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from dedup.catalog import RedisCatalog
from dedup.exceptions import DedupError

log = logging.getLogger(__name__)


class DecisionGcListener(StreamingQueryListener):
    """Deletes committed decisions of queries that run the operator named ``metric_name``.

    A failure is logged, never raised: a missed collection only leaves
    garbage that the next progress event removes.
    """

    def __init__(self, catalog: RedisCatalog, metric_name: str) -> None:
        self.catalog = catalog
        self.metric_name = metric_name
        self.queries: set[str] = set()
        self.collected = 0

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if self.metric_name not in (progress.observedMetrics or {}):
            return
        query_id = str(progress.id)
        self.queries.add(query_id)
        try:
            self.collected += self.catalog.collect_garbage(query_id, int(progress.batchId))
        except DedupError as exc:
            log.warning("dedup decision GC for query %s failed: %s", query_id, exc)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        query_id = str(event.id)
        try:  # harmless for other queries: only shards owned by query_id change
            self.catalog.release(query_id)
        except DedupError as exc:
            log.warning("releasing the dedup app id lease of query %s failed: %s",
                        query_id, exc)
