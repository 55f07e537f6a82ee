"""``run.stop_after_idle_seconds`` stops a run that long after its last batch with input."""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from dedup.cli import run
from dedup.cli.config_file import parse_pipeline
from dedup.cli.pipeline import Addresses
from dedup.cli.progress import Progress

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

IDLE = 4.0
SLACK = 3.0  # polling, query.stop() and a loaded machine


def _batch_end(progress: dict[str, Any]) -> float:
    """Wall time at which a reported micro-batch ended (start + its duration)."""
    start = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return start + progress["durationMs"]["triggerExecution"] / 1000.0


@pytest.mark.parametrize("trigger_seconds", [0.0, 2.0])
def test_idle_stop_is_measured_from_the_last_batch_with_input(
        spark: Any, app_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        trigger_seconds: float) -> None:
    # A file source and the console sink: no service, only Spark's trigger
    # loop, which with trigger 0 polls the folder back to back (the run used
    # to see a trigger "active" at almost every poll and never felt idle).
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.json").write_text("".join(json.dumps({"event_id": f"e{i}", "v": i}) + "\n"
                                          for i in range(20)))
    pipeline = parse_pipeline(
        f'app_id = "{app_id}"\n'
        f'[source]\ntype = "files"\npath = "{inbox}"\nschema = "event_id STRING, v INT"\n'
        '[ids]\nstrategy = "column"\ncolumn = "event_id"\n'
        '[dedup]\nenabled = false\n[sink]\ntype = "console"\n'
        f"[run]\ntrigger_seconds = {trigger_seconds}\nstop_after_idle_seconds = {IDLE}\n"
    )
    queries: list[Any] = []
    real_start_query = run.start_query

    def start_query(*args: Any, **kwargs: Any) -> Any:
        queries.append(real_start_query(*args, **kwargs))
        return queries[-1]

    monkeypatch.setattr(run, "start_query", start_query)
    args = argparse.Namespace(max_seconds=IDLE + trigger_seconds + 60, quiet=True)
    _, watcher, stopped_by = run._stream(spark, pipeline, Addresses("", "", ""),
                                         str(tmp_path / "chk"), args, Progress(quiet=True))
    stopped = time.time()
    assert watcher.rows == 20 and stopped_by == "done"
    with_input = [p for p in (json.loads(q.json) for q in queries[0].recentProgress)
                  if p["numInputRows"] > 0]
    idle = stopped - _batch_end(with_input[-1])
    print(f"trigger {trigger_seconds} s: stopped {idle:.1f} s after the last batch with input")
    assert IDLE - 0.5 <= idle <= IDLE + trigger_seconds + SLACK, (
        f"stopped {idle:.1f} s after the last batch with input; configured {IDLE} s, "
        f"trigger {trigger_seconds} s")
