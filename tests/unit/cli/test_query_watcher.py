"""QueryWatcher reads Spark's progress reports as Spark writes them.

The reports are shaped as ``StreamingQuery.recentProgress`` returns them
(trimmed to the fields the watcher reads); the query stand-in has only the
two attributes the watcher uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dedup.cli.progress import Progress, QueryWatcher

RUN = "b473fc61-ad37-4572-ab62-41045603882e"


def _report(batch: int, timestamp: str, rows: int, ms: int = 40) -> dict[str, Any]:
    return {"runId": RUN, "batchId": batch, "timestamp": timestamp, "numInputRows": rows,
            "durationMs": {"triggerExecution": ms}, "sources": []}


@dataclass
class _Query:
    recentProgress: list[dict[str, Any]] = field(default_factory=list)  # noqa: N815
    status: dict[str, Any] = field(default_factory=lambda: {
        "message": "Getting offsets from KafkaV2[Subscribe[t]]", "isDataAvailable": False,
        "isTriggerActive": True})


def test_a_batch_after_a_trigger_without_input_is_counted() -> None:
    # A trigger that finds no input reports the id of the batch that runs next.
    query = _Query([_report(3, "2026-11-23T20:00:00.000Z", 100),
                    _report(4, "2026-11-23T20:00:10.000Z", 0),
                    _report(4, "2026-11-23T20:00:12.500Z", 250)])
    watcher = QueryWatcher(Progress(quiet=True))
    watcher.poll(query)
    assert (watcher.batches, watcher.rows) == (2, 350)


def test_starting_up_is_not_idleness() -> None:
    # Until the first trigger reports, Spark plans and fetches the first
    # offsets (seconds on a busy machine); that must not count as idle time.
    query = _Query()
    watcher = QueryWatcher(Progress(quiet=True))
    watcher.idle_since -= 100.0  # the watch began long ago
    watcher.poll(query)
    assert watcher.idle_seconds() < 1.0
    query.recentProgress.append(_report(0, "2026-11-23T20:00:00.000Z", 0))
    query.status = {"message": "Waiting for data to arrive", "isDataAvailable": False,
                    "isTriggerActive": False}
    watcher.poll(query)
    watcher.idle_since -= 100.0
    watcher.poll(query)
    assert watcher.idle_seconds() > 99.0  # from the first report on, idle time counts


def test_counts_of_a_one_pass_step_come_by_batch_id() -> None:
    # A one-pass query's reports carry no observedMetrics of the dedup step:
    # its counts are asked for by the batch id of each report with input.
    from dedup.metrics import DedupMetrics

    counts = {3: DedupMetrics.from_observed({"kept": 90, "duplicates_catalog": 10}),
              5: DedupMetrics.from_observed({"kept": 40, "duplicates_in_batch": 2})}
    asked: list[int] = []

    def batch_metrics(batch: int) -> DedupMetrics | None:
        asked.append(batch)
        return counts.get(batch)

    watcher = QueryWatcher(Progress(quiet=True), metric="dedup_app")
    watcher.batch_metrics = batch_metrics
    watcher.poll(_Query([_report(3, "2026-11-23T20:00:00.000Z", 100),
                         _report(4, "2026-11-23T20:00:05.000Z", 0),
                         _report(5, "2026-11-23T20:00:06.000Z", 42)]))
    assert asked == [3, 5]  # the trigger without input is not asked about
    assert (watcher.have_metrics, watcher.kept, watcher.dropped) == (True, 130, 12)
