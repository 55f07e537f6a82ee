"""Progress lines for long runs, and the quiet mode for CI."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO


class Progress:
    """Prints ``[dedup] ...`` lines unless quiet; the summary is printed either way."""

    def __init__(self, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self.started = time.monotonic()

    def say(self, message: str) -> None:
        if not self.quiet:
            print(f"[dedup {time.monotonic() - self.started:6.1f}s] {message}",
                  file=self.stream, flush=True)

    def always(self, message: str) -> None:
        print(message, file=self.stream, flush=True)


class QueryWatcher:
    """Reports each finished micro-batch of a streaming query once.

    ``rows`` counts the input rows of the batches seen, ``last_end`` is the
    source's end offset of the newest batch (as Spark reports it).
    """

    def __init__(self, progress: Progress, label: str = "", metric: str | None = None) -> None:
        self.progress = progress
        self.label = label
        self.metric = metric
        self.dropped = 0
        self.kept = 0
        self.have_metrics = False
        self.seen: set[tuple[str, int]] = set()
        self.rows = 0
        self.batches = 0
        self.last_progress: dict[str, Any] | None = None
        self.idle_since = time.monotonic()

    def poll(self, query: Any) -> None:
        try:
            # A batch still running (the first one can take long) is not idleness.
            if (query.status or {}).get("isTriggerActive"):
                self.idle_since = time.monotonic()
        except Exception:
            pass  # the query just stopped; its progress below still counts
        for item in query.recentProgress:
            raw = item if isinstance(item, dict) else getattr(item, "jsonValue", lambda: {})()
            if not isinstance(raw, dict):
                continue
            key = (str(raw.get("runId")), int(raw.get("batchId", -1)))
            if key in self.seen:
                continue
            self.seen.add(key)
            self.last_progress = raw
            rows = int(raw.get("numInputRows") or 0)
            if rows == 0:
                continue
            self.idle_since = time.monotonic()
            self.rows += rows
            self.batches += 1
            duration_ms = (raw.get("durationMs") or {}).get("triggerExecution") or 0
            rate = rows / (duration_ms / 1000.0) if duration_ms else 0.0
            self.progress.say(
                f"{self.label}batch {raw.get('batchId')}: {rows} records in"
                f"{self._dedup_part(raw)} in {duration_ms / 1000.0:.1f} s "
                f"({rate:,.0f} records/s), {self.rows} so far"
            )

    def _dedup_part(self, raw: dict[str, Any]) -> str:
        row = (raw.get("observedMetrics") or {}).get(self.metric) if self.metric else None
        if row is None:
            return ""
        from dedup.metrics import DedupMetrics

        metrics = DedupMetrics.from_observed(row)
        self.have_metrics = True
        self.dropped += metrics.duplicates_dropped
        self.kept += metrics.kept
        return f", {metrics.duplicates_dropped} duplicates dropped, {metrics.kept} kept"


@contextlib.contextmanager
def stderr_to_file(path: Path, enabled: bool = True) -> Iterator[None]:
    """Send file descriptor 2 to ``path`` for the duration (no-op when not enabled).

    Spark's JVM, its Python workers and librdkafka write straight to fd 2;
    processes started inside keep the file as their stderr, so a run's
    console shows progress lines only. Errors are printed after it ends.
    """
    if not enabled:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def wait_for(query: Any, watcher: QueryWatcher, done: Callable[[], bool],
             max_seconds: float = 0.0, poll_seconds: float = 0.5) -> bool:
    """Poll ``query`` until ``done()`` or it stops; True when done.

    Raises whatever the query failed with (``StreamingQueryException``).
    ``max_seconds`` 0 waits forever.
    """
    deadline = time.monotonic() + max_seconds if max_seconds > 0 else None
    while True:
        watcher.poll(query)
        if done():
            return True
        if not query.isActive:
            watcher.poll(query)
            error = query.exception()
            if error is not None:
                raise error
            return done()
        if deadline is not None and time.monotonic() > deadline:
            return False
        query.awaitTermination(poll_seconds)
