"""The fused front end: dedup decision and exactly-once write in one pass per micro-batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dedup.config import DedupConfig, FailPointConfig, RedisConfig
from dedup.failpoints import arm, fired
from dedup.ids import with_record_id
from sinks import DedupKafkaForeachBatch
from tests.integration.sinks.pipeline import (
    check_exact,
    fill_input,
    kafka_stream,
    read_output,
    resend_copies,
    run_writer,
    sink_options,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.chaos]


def _stream(spark: Any, bootstrap: str, topic: str, per_trigger: int = 70) -> Any:
    return with_record_id(kafka_stream(spark, bootstrap, topic, per_trigger),
                          strategy="column", column="key")


def _run(writer: Any, checkpoint: str) -> Any:
    return run_writer(writer, checkpoint, timeout=150)


def test_fused_dedup_and_sink_are_exact_after_worker_kills(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Path) -> None:
    """Kills after the claim and in the middle of the transaction: the retries decide
    and emit what the first attempts did; every later copy (its own payload) dropped."""
    faults = str(tmp_path / "faults")
    arm(faults, "dedup.after_claim", "kill", match={"batch": "1", "rows_min": 1})
    arm(faults, "sink.mid_produce", "kill", match={"batch": 2, "rows_min": 1})
    topics, expected = fill_input(kafka_bootstrap, app_id)
    config = DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url), num_shards=4,
                         fail_points=FailPointConfig(faults))
    front = DedupKafkaForeachBatch(
        config, sink_options(kafka_bootstrap, topics, app_id, redis_url, faults),
        num_partitions=3)
    query = _run(front.write_stream(_stream(spark, kafka_bootstrap, topics.source)),
                 tmp_checkpoint)
    assert query.exception() is None, query.exception()
    assert len(fired(faults, "dedup.after_claim")) == 1
    assert len(fired(faults, "sink.mid_produce")) == 1
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
    # the killed transaction's records were written, and aborted
    assert len(read_output(kafka_bootstrap, topics.out, "read_uncommitted")) > report.observed
    metrics = front.last_metrics
    assert metrics is not None and metrics.records_in > 0


def test_fused_rerun_of_a_written_batch_after_a_driver_failure_is_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    """The query fails after batch 2 was written but before Spark's commit log has it:
    the restarted query runs batch 2 again (its decisions replayed, its partitions
    already committed) and then the rest: nothing lost, nothing twice."""
    topics, expected = fill_input(kafka_bootstrap, app_id)
    config = DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url), num_shards=4)
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url)
    first = DedupKafkaForeachBatch(config, options, num_partitions=3)
    writer = first.write_stream(_stream(spark, kafka_bootstrap, topics.source))
    batches: list[int] = []

    def failing(df: Any, batch_id: int) -> None:
        first(df, batch_id)
        batches.append(batch_id)
        if batch_id == 2:
            raise RuntimeError("injected: the driver failed after writing batch 2")

    failed = _run(writer.foreachBatch(failing), tmp_checkpoint)
    assert failed.exception() is not None and "injected" in str(failed.exception())
    first.release()
    partial = check_exact(kafka_bootstrap, topics.out, expected)
    assert partial.lost > 0 and (partial.duplicated, partial.phantoms) == (0, 0), \
        partial.summary()
    second = DedupKafkaForeachBatch(config, options, num_partitions=3)
    rerun: list[int] = []

    def counting(df: Any, batch_id: int) -> None:
        second(df, batch_id)
        rerun.append(batch_id)

    done = _run(second.write_stream(_stream(spark, kafka_bootstrap, topics.source))
                .foreachBatch(counting), tmp_checkpoint)
    assert done.exception() is None, done.exception()
    assert rerun[0] == 2, f"batch 2 was not run again: {rerun}"
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


def test_fused_invalid_ids_reach_the_dead_letter_topic(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_path: Path) -> None:
    """Null and malformed IDs leave with a null ID for the dead letter, in the same
    transaction; the later copy of "a" (its own payload) is dropped."""
    from pyspark.sql import functions as sf

    from dedup.constants import DEFAULT_ID_COLUMN
    from sinks.kafka_io import ensure_topic
    from tests.integration.dedup.helpers import (
        INVALID_ID_ROWS,
        assert_dead_letter_split,
        write_batches,
    )

    source = tmp_path / "in"
    rows = INVALID_ID_ROWS
    write_batches(source, [rows[:3], rows[3:]])  # type: ignore[list-item]
    out, dead = f"{app_id}-out", f"{app_id}-dead"
    ensure_topic(kafka_bootstrap, out, 1)
    ensure_topic(kafka_bootstrap, dead, 1)
    stream = (spark.readStream.schema(f"{DEFAULT_ID_COLUMN} string, v int")
              .option("maxFilesPerTrigger", 1).json(str(source))
              .select(sf.col("v").cast("string").alias("value"), DEFAULT_ID_COLUMN))
    front = DedupKafkaForeachBatch(
        DedupConfig(app_id, RedisConfig(redis_url), num_shards=2, invalid_ids="dead_letter"),
        {"kafka.bootstrap.servers": kafka_bootstrap, "topic": out, "app.id": app_id,
         "redis.url": redis_url, "dead.letter.topic": dead}, num_partitions=2)
    query = _run(front.write_stream(stream), str(tmp_path / "ck"))
    assert query.exception() is None, str(query.exception())
    assert_dead_letter_split(kafka_bootstrap, out, dead)
    metrics = front.last_metrics  # of the second file: "a" again, "", "d"
    assert metrics is not None
    assert (metrics.kept, metrics.invalid_ids, metrics.duplicates_catalog) == (1, 1, 1)


def test_a_fixed_query_id_reused_after_a_reset_is_refused_before_it_claims(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_path: Path) -> None:
    """Issue 33, finding 2. One pass under a fixed option ``query.id`` whose checkpoint
    is reset: the new life's batch 0 must be refused before it claims anything, so that
    following the refusal's advice literally (a new ``query.id``, the same new
    checkpoint) writes every record the old life did not: the refusal used to come from
    the sink's marker check after the claims were recorded, and the new query id then
    dropped the batch's new records as seen."""
    from confluent_kafka import Producer

    topics, expected = fill_input(kafka_bootstrap, app_id)
    config = DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url), num_shards=4,
                         lease_seconds=2)
    fixed = {**sink_options(kafka_bootstrap, topics, app_id, redis_url),
             "query.id": f"{app_id}-q"}
    first = DedupKafkaForeachBatch(config, fixed, num_partitions=3)
    done = _run(first.write_stream(_stream(spark, kafka_bootstrap, topics.source)),
                str(tmp_path / "checkpoint-1"))
    assert done.exception() is None, done.exception()
    first.release()
    assert check_exact(kafka_bootstrap, topics.out, expected).ok
    # New input (60 new IDs) and re-sent copies of earlier records, then a checkpoint
    # reset that keeps query.id: the new life reads everything in its batch 0.
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    more = {f"new-{i:05d}": f"new-value-{i}".encode() for i in range(60)}
    for i, (key, value) in enumerate(more.items()):
        producer.produce(topics.source, key=key.encode(), value=value, partition=i % 2)
    assert producer.flush(30) == 0
    resend_copies(kafka_bootstrap, topics.source)
    reset = str(tmp_path / "checkpoint-2")
    second = DedupKafkaForeachBatch(config, fixed, num_partitions=3)
    refused = _run(second.write_stream(_stream(spark, kafka_bootstrap, topics.source,
                                               per_trigger=100_000)), reset)
    second.release()
    assert refused.exception() is not None, "the reused query.id was not refused"
    assert "new option query.id" in str(refused.exception()), refused.exception()
    partial = check_exact(kafka_bootstrap, topics.out, {**expected, **more})
    assert (partial.lost, partial.duplicated, partial.phantoms) == (len(more), 0, 0), \
        partial.summary()
    # The advice, literally: a new option query.id (the reset checkpoint stays). The
    # first query id's app lease (2 s, never released by a fixed-id query) lapses first.
    import time

    time.sleep(2.5)
    renamed = DedupKafkaForeachBatch(config, {**fixed, "query.id": f"{app_id}-q2"},
                                     num_partitions=3)
    final = _run(renamed.write_stream(_stream(spark, kafka_bootstrap, topics.source,
                                              per_trigger=100_000)), reset)
    renamed.release()
    assert final.exception() is None, final.exception()
    report = check_exact(kafka_bootstrap, topics.out, {**expected, **more})
    assert report.ok and report.open_transactions == 0, report.summary()
