"""Failure-free run of the exactly-once sink: exact output, markers, checkpoint GC."""

from __future__ import annotations

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
                                   tmp_checkpoint: str) -> None:
    sinks.register(spark)
    topics, expected = fill_input(kafka_bootstrap, app_id)
    df = build_stream(spark, kafka_bootstrap, topics, app_id, redis_url)
    run_to_end(df, sink_options(kafka_bootstrap, topics, app_id, redis_url), tmp_checkpoint)
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
