"""The foreachBatch form of the sink: same core, exact output across a worker kill."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dedup.failpoints import arm, fired
from sinks import ExactlyOnceKafkaForeachBatch
from tests.integration.sinks.pipeline import (
    build_stream,
    check_exact,
    fill_input,
    read_output,
    sink_options,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.chaos]


def test_foreach_batch_sink_is_exact_after_a_kill(spark: Any, kafka_bootstrap: str,
                                                  redis_url: str, app_id: str,
                                                  tmp_checkpoint: str, tmp_path: Path) -> None:
    faults = str(tmp_path / "faults")
    arm(faults, "sink.mid_produce", "kill", match={"batch": 1, "partition": 1})
    topics, expected = fill_input(kafka_bootstrap, app_id)
    sink = ExactlyOnceKafkaForeachBatch(
        sink_options(kafka_bootstrap, topics, app_id, redis_url, faults))
    df = build_stream(spark, kafka_bootstrap, topics, app_id, redis_url)
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", tmp_checkpoint)
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(150), "query did not finish"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, query.exception()
    assert len(fired(faults, "sink.mid_produce")) == 1
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert (report.lost, report.duplicated) == (0, 0), report.summary()
    assert report.ok, report.summary()
    assert len(read_output(kafka_bootstrap, topics.out, "read_uncommitted")) > report.observed
