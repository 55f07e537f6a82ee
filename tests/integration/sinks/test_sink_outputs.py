"""Several exactly-once outputs of one micro-batch (one app id, one ``output.name`` each)."""

from __future__ import annotations

from typing import Any

import pytest

from sinks import ExactlyOnceKafkaForeachBatch
from sinks.kafka_io import ensure_topic
from tests.integration.sinks.pipeline import (
    OUT_PARTITIONS,
    build_stream,
    check_exact,
    fill_input,
    read_output,
    run_foreach_batch,
    sink_options,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]


def _run_two_sinks(spark: Any, bootstrap: str, redis_url: str, app_id: str,
                   checkpoint: str, first_name: str, second_name: str
                   ) -> tuple[Any, Any, str, dict[str, bytes]]:
    """Both sinks (one ``output.name`` each) in one ``foreachBatch``: the query,
    the input's topics, the second output topic and the expected output."""
    topics, expected = fill_input(bootstrap, app_id)
    second_topic = f"{app_id}-out2"
    ensure_topic(bootstrap, second_topic, OUT_PARTITIONS)
    first = sink_options(bootstrap, topics, app_id, redis_url)
    second = {**first, "topic": second_topic}
    first["output.name"], second["output.name"] = first_name, second_name
    sinks = (ExactlyOnceKafkaForeachBatch(first), ExactlyOnceKafkaForeachBatch(second))

    def both(df: Any, batch_id: int) -> None:
        for sink in sinks:
            sink(df, batch_id)

    query = run_foreach_batch(build_stream(spark, bootstrap, topics, app_id, redis_url), both,
                              checkpoint)
    return query, topics, second_topic, expected


def test_two_outputs_of_one_app_id_are_both_exact(spark: Any, kafka_bootstrap: str,
                                                  redis_url: str, app_id: str,
                                                  tmp_checkpoint: str) -> None:
    query, topics, second_topic, expected = _run_two_sinks(
        spark, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, "main", "audit")
    assert query.exception() is None, query.exception()
    for topic in (topics.out, second_topic):
        report = check_exact(kafka_bootstrap, topic, expected)
        assert report.ok, f"{topic}: {report.summary()}"


def test_two_outputs_with_one_output_name_are_refused(spark: Any, kafka_bootstrap: str,
                                                      redis_url: str, app_id: str,
                                                      tmp_checkpoint: str) -> None:
    query, _, second_topic, _ = _run_two_sinks(
        spark, kafka_bootstrap, redis_url, app_id, tmp_checkpoint, "main", "main")
    assert query.exception() is not None, "two sinks with one (app_id, output.name) ran"
    assert "output.name" in str(query.exception())
    assert read_output(kafka_bootstrap, second_topic, "read_uncommitted") == []
