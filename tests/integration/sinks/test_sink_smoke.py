"""Failure-free run of the exactly-once sink: exact output, markers, checkpoint GC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

import sinks
from tests.integration.sinks.pipeline import (
    build_stream,
    check_exact,
    fill_input,
    run_to_end,
    sink_options,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka, pytest.mark.redis]


def test_failure_free_run_is_exact(spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
                                   tmp_checkpoint: str, tmp_path: Path) -> None:
    sinks.register(spark)
    timings = tmp_path / "timings.jsonl"
    topics, expected = fill_input(kafka_bootstrap, app_id)
    df = build_stream(spark, kafka_bootstrap, topics, app_id, redis_url)
    options = {**sink_options(kafka_bootstrap, topics, app_id, redis_url),
               "timings.path": str(timings)}
    run_to_end(df, options, tmp_checkpoint)
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok, report.summary()
    assert report.observed == len(expected)
    # Markers exist for the sink partitions; GC left at most the last batch's checkpoints.
    found = sinks.list_transactions(kafka_bootstrap, app_id)
    assert {t.partition for t in found} == {0, 1, 2}
    assert all(t.next_batch >= 1 for t in found)
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(f"dedup:{{{app_id}:p*}}:sink:ckpt:*"))
    batches = {k.decode().rsplit(":", 1)[1] for k in keys}
    assert len(batches) <= 1, f"checkpoints of committed batches were not collected: {batches}"
    # The data source's tasks record the output as a writer of the query, with its
    # last batch, the query's run, topic and Kafka cluster (what refuses a rename, a
    # new topic or another cluster in the middle of a batch).
    began = [client.hget(key, app_id) for key in client.scan_iter("dedup:{~default:*}:outputs")]
    last = [value.decode().split(":") for value in began if value is not None]
    assert len(last) == 1, last
    batch, run, topic, cluster = last[0]
    assert int(batch) >= 2 and len(run) == 36 and topic == topics.out and cluster, last
    # Every partition write that produced reached the driver with its phases.
    timed = [t for t in sinks.read_phase_timings(timings) if "produce" in t]
    assert timed, "no phase timings reached the driver"
    for phases in timed:
        assert {"checkpoint", "producer", "send_offsets", "commit"} <= set(phases)
        assert phases["total"] >= phases["produce"] + phases["commit"]
    # A new producer reads the marker; a live cached one knows it.
    assert any("marker" in phases for phases in timed)
