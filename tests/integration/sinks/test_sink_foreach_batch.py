"""The foreachBatch form of the sink: same core, exact output across a worker kill."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dedup.failpoints import arm, fired
from sinks import ExactlyOnceKafkaForeachBatch, read_phase_timings
from tests.integration.sinks.pipeline import (
    Topics,
    build_stream,
    check_exact,
    fill_input,
    read_output,
    run_foreach_batch,
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
        {**sink_options(kafka_bootstrap, topics, app_id, redis_url, faults),
         "timings.path": str(tmp_path / "timings.jsonl")})
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
    # The partition writes' phases reach the driver through the collected result.
    timings = read_phase_timings(tmp_path / "timings.jsonl")
    assert any("produce" in t and t["batch"] == 1 for t in timings)


def test_a_fixed_query_id_reused_after_a_checkpoint_reset_is_refused(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_path: Path) -> None:
    topics, expected = fill_input(kafka_bootstrap, app_id)
    options = {**sink_options(kafka_bootstrap, topics, app_id, redis_url),
               "query.id": "orders"}
    sink = ExactlyOnceKafkaForeachBatch(options)
    first = run_foreach_batch(build_stream(spark, kafka_bootstrap, topics, app_id, redis_url),
                         sink, str(tmp_path / "checkpoint-1"))
    assert first.exception() is None, first.exception()
    assert check_exact(kafka_bootstrap, topics.out, expected).ok
    # The checkpoint is reset (a new folder) and new input arrives, but the
    # query.id option stays: the old markers say batches 0..3 are done.
    later, more = fill_input(kafka_bootstrap, f"{app_id}-2", records=60, duplicates=0,
                              id_prefix="new")
    later = Topics(later.source, topics.out)
    second = run_foreach_batch(
        build_stream(spark, kafka_bootstrap, later, f"{app_id}-2", redis_url),
        sink, str(tmp_path / "checkpoint-2"))
    report = check_exact(kafka_bootstrap, topics.out, {**expected, **more})
    assert second.exception() is not None, (
        f"the reused query_id was not refused; output: {report.summary()}")
    assert "Give this query a new option query.id" in str(second.exception())
    assert check_exact(kafka_bootstrap, topics.out, expected).ok  # nothing of the new input
    # The advice, literally: a new option query.id (the reset checkpoint kept).
    sink.release()
    renamed = ExactlyOnceKafkaForeachBatch({**options, "query.id": "orders-renamed"})
    third = run_foreach_batch(
        build_stream(spark, kafka_bootstrap, later, f"{app_id}-2", redis_url),
        renamed, str(tmp_path / "checkpoint-2"))
    renamed.release()
    assert third.exception() is None, third.exception()
    report = check_exact(kafka_bootstrap, topics.out, {**expected, **more})
    assert report.ok and report.open_transactions == 0, report.summary()


def test_a_failed_query_restarted_in_the_same_process_with_a_new_sink_is_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    """A supervisor restarts a failed query from its checkpoint with a fresh sink while
    the old one is still referenced (Spark's callback server keeps it): the same
    streaming query, so not a second writer of the output, and not refused. Found by
    the one-pass chaos run 8 (redis_unreachable): every restart was refused."""
    topics, expected = fill_input(kafka_bootstrap, app_id)
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url)
    first = ExactlyOnceKafkaForeachBatch(options)

    def failing(df: Any, batch_id: int) -> None:
        first(df, batch_id)
        if batch_id == 1:
            raise RuntimeError("injected: the driver failed after writing batch 1")

    stream = build_stream(spark, kafka_bootstrap, topics, app_id, redis_url)
    failed = run_foreach_batch(stream, failing, tmp_checkpoint)
    assert failed.exception() is not None and "injected" in str(failed.exception())
    second = ExactlyOnceKafkaForeachBatch(options)  # `first` is still alive: no release()
    done = run_foreach_batch(build_stream(spark, kafka_bootstrap, topics, app_id, redis_url),
                             second, tmp_checkpoint)
    assert done.exception() is None, done.exception()
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
    assert first is not None
