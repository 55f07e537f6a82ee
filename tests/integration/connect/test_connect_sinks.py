"""Every sink form under Spark Connect: exact output on a Kafka input with duplicates,
also across a failure after a Kafka commit and a restart (issue 34, items 1 and 5).

The forms: ``dedup.deduplicate`` followed by ``format("exactly_once_kafka")``
(after ``sinks.register``), followed by :class:`sinks.ExactlyOnceKafkaForeachBatch`,
and :func:`sinks.deduplicate_to_kafka` (one pass). Under Connect a
``foreachBatch`` function runs in a Python process of the server, on a pickled
copy: what a test wants to learn from it travels through Kafka, Redis or the
query's progress, not through the test's objects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

import sinks
from dedup.config import DedupConfig, RedisConfig
from dedup.failpoints import arm, fired
from dedup.ids import with_record_id
from tests.integration.sinks.pipeline import (
    build_stream,
    check_exact,
    dies_after_commit,
    fill_input,
    kafka_stream,
    resend_copies,
    run_foreach_batch,
    run_to_end,
    run_writer,
    sink_options,
)

pytestmark = [pytest.mark.integration, pytest.mark.connect, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]


def _batches(query: Any) -> list[int]:
    return [int(p["batchId"]) for p in query.recentProgress]


def _start(writer: Any, checkpoint: str, timeout: float = 240.0) -> Any:
    return run_writer(writer, checkpoint, timeout)


def test_deduplicate_then_the_data_source_is_exact_under_connect(
        connect_spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    sinks.register(connect_spark)
    topics, expected = fill_input(kafka_bootstrap, app_id)
    resend_copies(kafka_bootstrap, topics.source)
    df = build_stream(connect_spark, kafka_bootstrap, topics, app_id, redis_url)
    run_to_end(df, sink_options(kafka_bootstrap, topics, app_id, redis_url), tmp_checkpoint,
               timeout=240)
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


def test_the_data_source_is_exact_after_a_failure_after_its_commit_under_connect(
        connect_spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Path) -> None:
    """A task fails right after its Kafka commit (local[2] does not retry it): the
    query fails, and its restart from the checkpoint writes the rest exactly."""
    sinks.register(connect_spark)
    faults = str(tmp_path / "faults")
    arm(faults, "sink.after_commit", "raise", match={"batch": 1, "partition": 0})
    topics, expected = fill_input(kafka_bootstrap, app_id)
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url, faults)
    df = build_stream(connect_spark, kafka_bootstrap, topics, app_id, redis_url)
    with pytest.raises(StreamingQueryException, match="injected fault"):
        run_to_end(df, options, tmp_checkpoint, timeout=240)
    assert len(fired(faults, "sink.after_commit")) == 1
    df = build_stream(connect_spark, kafka_bootstrap, topics, app_id, redis_url)
    run_to_end(df, options, tmp_checkpoint, timeout=240)
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


def test_deduplicate_then_the_foreach_batch_sink_is_exact_under_connect(
        connect_spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    topics, expected = fill_input(kafka_bootstrap, app_id)
    resend_copies(kafka_bootstrap, topics.source)
    df = build_stream(connect_spark, kafka_bootstrap, topics, app_id, redis_url)
    sink = sinks.ExactlyOnceKafkaForeachBatch(
        sink_options(kafka_bootstrap, topics, app_id, redis_url))
    query = run_foreach_batch(df, sink, tmp_checkpoint, timeout=240)
    assert query.exception() is None, query.exception()
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


def test_the_foreach_batch_sink_is_exact_after_a_driver_failure_after_its_commit(
        connect_spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    """The function fails after the sink committed batch 2, before Spark's commit log
    has it: the restart runs batch 2 again (every partition skipped) and the rest."""
    topics, expected = fill_input(kafka_bootstrap, app_id)
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url)
    df = build_stream(connect_spark, kafka_bootstrap, topics, app_id, redis_url)
    failed = run_foreach_batch(
        df, dies_after_commit(sinks.ExactlyOnceKafkaForeachBatch(options), 2), tmp_checkpoint,
        timeout=240)
    assert failed.exception() is not None and "injected" in str(failed.exception())
    partial = check_exact(kafka_bootstrap, topics.out, expected)
    assert partial.lost > 0 and (partial.duplicated, partial.phantoms) == (0, 0), \
        partial.summary()
    df = build_stream(connect_spark, kafka_bootstrap, topics, app_id, redis_url)
    done = run_foreach_batch(df, sinks.ExactlyOnceKafkaForeachBatch(options), tmp_checkpoint,
                             timeout=240)
    assert done.exception() is None, done.exception()
    assert _batches(done)[0] == 2, f"batch 2 was not run again: {_batches(done)}"
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


def _one_pass_stream(spark: Any, bootstrap: str, topic: str) -> Any:
    return with_record_id(kafka_stream(spark, bootstrap, topic), strategy="column",
                          column="key")


def test_one_pass_is_exact_under_connect(connect_spark: Any, kafka_bootstrap: str,
                                         redis_url: str, app_id: str,
                                         tmp_checkpoint: str) -> None:
    topics, expected = fill_input(kafka_bootstrap, app_id)
    resend_copies(kafka_bootstrap, topics.source)
    config = DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url), num_shards=4)
    writer = sinks.deduplicate_to_kafka(
        _one_pass_stream(connect_spark, kafka_bootstrap, topics.source), config,
        sink_options(kafka_bootstrap, topics, app_id, redis_url), num_partitions=3)
    query = _start(writer, tmp_checkpoint)
    assert query.exception() is None, query.exception()
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


def test_one_pass_counts_are_refused_on_the_client_under_connect(
        connect_spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str) -> None:
    """The counts stay in the server's copy of the function: asking the client's
    instance is refused in one line rather than answered with None."""
    topics, _ = fill_input(kafka_bootstrap, app_id, records=10, duplicates=1)
    front = sinks.DedupKafkaForeachBatch(
        DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url), num_shards=2),
        sink_options(kafka_bootstrap, topics, app_id, redis_url), num_partitions=2)
    front.write_stream(_one_pass_stream(connect_spark, kafka_bootstrap, topics.source))
    with pytest.raises(sinks.SinkConfigError, match="not available under Spark Connect"):
        front.batch_metrics(0)


def test_one_pass_rerun_of_a_written_batch_after_a_driver_failure_is_exact_under_connect(
        connect_spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    """As tests/integration/sinks/test_dedup_foreach_batch.py's
    test_fused_rerun_of_a_written_batch_after_a_driver_failure_is_exact, under Connect."""
    topics, expected = fill_input(kafka_bootstrap, app_id)
    config = DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url), num_shards=4)
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url)
    first = sinks.DedupKafkaForeachBatch(config, options, num_partitions=3)
    writer = first.write_stream(_one_pass_stream(connect_spark, kafka_bootstrap, topics.source))
    failed = _start(writer.foreachBatch(dies_after_commit(first, 2)), tmp_checkpoint)
    assert failed.exception() is not None and "injected" in str(failed.exception())
    partial = check_exact(kafka_bootstrap, topics.out, expected)
    assert partial.lost > 0 and (partial.duplicated, partial.phantoms) == (0, 0), \
        partial.summary()
    second = sinks.DedupKafkaForeachBatch(config, options, num_partitions=3)
    done = _start(second.write_stream(
        _one_pass_stream(connect_spark, kafka_bootstrap, topics.source)), tmp_checkpoint)
    assert done.exception() is None, done.exception()
    assert _batches(done)[0] == 2, f"batch 2 was not run again: {_batches(done)}"
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


def test_workers_that_cannot_import_a_module_are_refused_in_one_line(
        connect_spark: Any) -> None:
    """Item 5: the check runs a real task; a module no worker has is named, with the fix."""
    from dedup.spark_session import WorkerImportError, check_worker_imports

    check_worker_imports(connect_spark, ["sinks", "confluent_kafka"])  # these are there
    with pytest.raises(WorkerImportError) as caught:
        check_worker_imports(connect_spark, ["sinks", "no_such_module_for_the_check"])
    message = str(caught.value)
    assert "\n" not in message and "PYSPARK_PYTHON" in message
    assert "no_such_module_for_the_check" in message and "'sinks'" not in message


def test_deduplicate_before_a_plain_foreach_batch_is_refused_in_one_line_under_connect(
        connect_spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    """A user's own foreachBatch function after dedup.deduplicate: its jobs cannot tell
    the tasks the micro-batch under Connect, so the dedup step refuses, naming the way
    out (batch_scope, or the toolkit's foreachBatch sinks), before it claims anything."""
    topics, _ = fill_input(kafka_bootstrap, app_id, records=20, duplicates=2)
    df = build_stream(connect_spark, kafka_bootstrap, topics, app_id, redis_url)

    def count(batch: Any, batch_id: int) -> None:
        batch.count()

    query = run_foreach_batch(df, count, tmp_checkpoint, timeout=240)
    assert query.exception() is not None
    assert "dedup.spark_session.batch_scope(df, batch_id)" in str(query.exception())


def test_deduplicate_before_a_foreach_batch_in_batch_scope_keeps_each_id_once_under_connect(
        connect_spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, tmp_path: Path) -> None:
    """The refusal's advice followed: the function's body in ``batch_scope`` gets each
    record ID once, with the first copy's value, across batches and the resent copies."""
    import json

    topics, expected = fill_input(kafka_bootstrap, app_id)
    resend_copies(kafka_bootstrap, topics.source)
    df = build_stream(connect_spark, kafka_bootstrap, topics, app_id, redis_url)
    out = str(tmp_path / "kept.jsonl")

    def keep(batch: Any, batch_id: int) -> None:
        from dedup.spark_session import batch_scope

        with batch_scope(batch, batch_id):
            rows = batch.select("key", "value").collect()
        with open(out, "a") as sink:
            sink.write(json.dumps([[r["key"], r["value"]] for r in rows]) + "\n")

    query = run_foreach_batch(df, keep, tmp_checkpoint, timeout=240)
    assert query.exception() is None, query.exception()
    kept = [pair for line in Path(out).read_text().splitlines() for pair in json.loads(line)]
    assert len(kept) == len(expected) and len({key for key, _ in kept}) == len(expected)
    assert {key: value.encode() for key, value in kept} == expected
