"""Several exactly-once outputs of one micro-batch (one app id, one ``output.name`` each)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from sinks import ExactlyOnceKafkaForeachBatch
from sinks.kafka_io import ensure_topic
from tests.integration.sinks.pipeline import (
    OUT_PARTITIONS,
    build_stream,
    check_exact,
    fill_input,
    read_output,
    sink_options,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]


def _run(df: Any, function: Any, checkpoint: str) -> Any:
    query = (df.writeStream.foreachBatch(function).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    try:
        with contextlib.suppress(StreamingQueryException):  # inspected by the caller
            query.awaitTermination(150)
    finally:
        if query.isActive:
            query.stop()
    return query


def _two_sinks(bootstrap: str, app_id: str, redis_url: str, topics: Any, second_topic: str,
               first_name: str, second_name: str) -> tuple[Any, Any]:
    first = sink_options(bootstrap, topics, app_id, redis_url)
    second = {**first, "topic": second_topic}
    first["output.name"], second["output.name"] = first_name, second_name
    return ExactlyOnceKafkaForeachBatch(first), ExactlyOnceKafkaForeachBatch(second)


def test_two_outputs_of_one_app_id_are_both_exact(spark: Any, kafka_bootstrap: str,
                                                  redis_url: str, app_id: str,
                                                  tmp_checkpoint: str) -> None:
    topics, expected = fill_input(kafka_bootstrap, app_id)
    second_topic = f"{app_id}-out2"
    ensure_topic(kafka_bootstrap, second_topic, OUT_PARTITIONS)
    main, audit = _two_sinks(kafka_bootstrap, app_id, redis_url, topics, second_topic,
                             "main", "audit")

    def both(df: Any, batch_id: int) -> None:
        main(df, batch_id)
        audit(df, batch_id)

    query = _run(build_stream(spark, kafka_bootstrap, topics, app_id, redis_url), both,
                 tmp_checkpoint)
    assert query.exception() is None, query.exception()
    for topic in (topics.out, second_topic):
        report = check_exact(kafka_bootstrap, topic, expected)
        assert report.ok, f"{topic}: {report.summary()}"


def test_two_outputs_with_one_output_name_are_refused(spark: Any, kafka_bootstrap: str,
                                                      redis_url: str, app_id: str,
                                                      tmp_checkpoint: str) -> None:
    topics, _ = fill_input(kafka_bootstrap, app_id)
    second_topic = f"{app_id}-out2"
    ensure_topic(kafka_bootstrap, second_topic, OUT_PARTITIONS)
    main, again = _two_sinks(kafka_bootstrap, app_id, redis_url, topics, second_topic,
                             "main", "main")

    def both(df: Any, batch_id: int) -> None:
        main(df, batch_id)
        again(df, batch_id)

    query = _run(build_stream(spark, kafka_bootstrap, topics, app_id, redis_url), both,
                 tmp_checkpoint)
    assert query.exception() is not None, "two sinks with one (app_id, output.name) ran"
    assert "output.name" in str(query.exception())
    assert read_output(kafka_bootstrap, second_topic, "read_uncommitted") == []
