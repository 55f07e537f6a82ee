"""Progress lines for long runs, and the quiet mode for CI."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from dedup.metrics import DedupMetrics


class Progress:
    """Prints ``[name seconds] ...`` lines unless quiet; the summary is printed either way.

    The commands print as ``[dedup ...]``, the benchmarks under their own name;
    calling the object is :meth:`say`.
    """

    def __init__(self, quiet: bool = False, stream: TextIO | None = None,
                 name: str = "dedup") -> None:
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self.name = name
        self.started = time.monotonic()

    def say(self, message: str) -> None:
        if not self.quiet:
            print(f"[{self.name} {time.monotonic() - self.started:6.1f}s] {message}",
                  file=self.stream, flush=True)

    def __call__(self, message: str) -> None:
        self.say(message)

    def always(self, message: str) -> None:
        print(message, file=self.stream, flush=True)


class QueryWatcher:
    """Reports each finished micro-batch of a streaming query once.

    ``rows`` counts the input rows of the batches seen, ``last_progress`` is
    the newest progress report; :meth:`idle_seconds` is the time since the
    last batch with input ended (from its report's start and duration).
    """

    def __init__(self, progress: Progress, label: str = "", metric: str | None = None) -> None:
        self.progress = progress
        self.label = label
        self.metric = metric
        self.dropped = 0
        self.kept = 0
        self.have_metrics = False
        # counts of a dedup step that reports none in observedMetrics (one pass)
        self.batch_metrics: Callable[[int], DedupMetrics | None] | None = None
        self.seen: set[tuple[str, int, str]] = set()
        self.rows = 0
        self.batches = 0
        self.last_progress: dict[str, Any] | None = None
        self.started = False
        self.idle_since = time.monotonic()

    def poll(self, query: Any) -> None:
        try:
            # A batch with input still running (the first one can take long) is
            # not idleness. A trigger that only looks for new input is: with a
            # short trigger interval Spark looks all the time, and counting that
            # as activity kept idle runs going for minutes (45 s idle took 152 s).
            if _processing_input(query.status or {}):
                self.idle_since = time.monotonic()
        except Exception:
            pass  # the query just stopped; its progress below still counts
        for item in query.recentProgress:
            raw = item if isinstance(item, dict) else getattr(item, "jsonValue", lambda: {})()
            if not isinstance(raw, dict):
                continue
            # A trigger without input reports the id of the batch that runs next,
            # so the batch id alone would hide that batch's own report.
            key = (str(raw.get("runId")), int(raw.get("batchId", -1)), str(raw.get("timestamp")))
            if key in self.seen:
                continue
            self.seen.add(key)
            self.last_progress = raw
            self.started = True
            rows = int(raw.get("numInputRows") or 0)
            if rows == 0:
                continue
            self.idle_since = max(self.idle_since, _batch_end(raw))
            self.rows += rows
            self.batches += 1
            duration_ms = (raw.get("durationMs") or {}).get("triggerExecution") or 0
            rate = rows / (duration_ms / 1000.0) if duration_ms else 0.0
            self.progress.say(
                f"{self.label}batch {raw.get('batchId')}: {rows} records in"
                f"{self._dedup_part(raw)} in {duration_ms / 1000.0:.1f} s "
                f"({rate:,.0f} records/s), {self.rows} so far"
            )

        if not self.started:
            # Until its first trigger reports, the query is starting up (planning,
            # fetching the first offsets): not idle, however long that takes.
            self.idle_since = time.monotonic()

    def idle_seconds(self) -> float:
        """Seconds since the last batch with input ended (or the first report came)."""
        return time.monotonic() - self.idle_since

    def _dedup_part(self, raw: dict[str, Any]) -> str:
        from dedup.metrics import DedupMetrics

        row = (raw.get("observedMetrics") or {}).get(self.metric) if self.metric else None
        metrics = DedupMetrics.from_observed(row) if row is not None else None
        if metrics is None and self.batch_metrics is not None:
            metrics = self.batch_metrics(int(raw.get("batchId", -1)))
        if metrics is None:
            return ""
        self.have_metrics = True
        self.dropped += metrics.duplicates_dropped
        self.kept += metrics.kept
        return f", {metrics.duplicates_dropped} duplicates dropped, {metrics.kept} kept"


def _processing_input(status: dict[str, Any]) -> bool:
    """Whether the query's current trigger runs a batch with new input.

    ``isDataAvailable`` is set once the trigger has found its offsets and keeps
    the previous trigger's answer until then, so a trigger still "Getting
    offsets" after a batch with input is not counted.
    """
    return bool(status.get("isTriggerActive") and status.get("isDataAvailable")
                and not str(status.get("message", "")).startswith("Getting offsets"))


def _batch_end(progress: dict[str, Any]) -> float:
    """The monotonic time at which a reported batch ended (now, if the report is unclear)."""
    now = time.monotonic()
    try:
        start = datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
        duration = float((progress.get("durationMs") or {}).get("triggerExecution") or 0)
    except (KeyError, TypeError, ValueError):
        return now
    ended_ago = time.time() - (start.timestamp() + duration / 1000.0)
    return now - max(ended_ago, 0.0)


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
