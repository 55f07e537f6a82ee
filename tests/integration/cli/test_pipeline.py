"""``dedup run``'s frames (dedup.cli.pipeline) on a real SparkSession."""

from __future__ import annotations

from typing import Any

import pytest

from dedup.cli.config_file import parse_pipeline
from dedup.cli.pipeline import sink_frame

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_the_one_pass_sink_frame_carries_the_event_time(spark: Any) -> None:
    """One pass reads the event time beside the sink's columns (retention by event
    time). Found by the mutant matrix on the one-pass pipeline: every run with
    dedup.retention.event_time_column set failed at start ("retention event_time_column
    'event_time' is missing")."""
    pipeline = parse_pipeline('app_id = "frames"\n[dedup]\n'
                              'retention.event_time_column = "event_time"\n'
                              '[sink]\ntopic = "out"\none_pass = true\n')
    frame = spark.createDataFrame(
        [("k", "v", "id-1", "2026-11-26 08:00:00")],
        "key string, value string, _record_id string, event_time string")
    out = sink_frame(frame, pipeline, carry=["event_time"])
    assert out.columns == ["key", "value", "_record_id", "event_time"]
    assert out.first()["event_time"] == "2026-11-26 08:00:00"
    # without carry, only the sink's columns
    assert sink_frame(frame, pipeline).columns == ["key", "value", "_record_id"]


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.redis
def test_a_kept_checkpoint_on_another_redis_is_refused(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_checkpoint: str,
        tmp_path: Any) -> None:
    """``dedup run`` restarted from its checkpoint with redis.url pointing at another
    Redis (moved, replaced, flushed): the catalog there is empty, and the duplicates of
    every record emitted so far would pass."""
    from dedup.cli.pipeline import Addresses, start_query
    from tests.integration.sinks.pipeline import (
        check_exact,
        fill_input,
        refusal_on_another_redis,
        resend_copies,
    )

    topics, expected = fill_input(kafka_bootstrap, app_id, records=120, duplicates=0)
    pipeline = parse_pipeline(
        f'app_id = "{app_id}"\n'
        f'[source]\ntype = "kafka"\ntopics = ["{topics.source}"]\n'
        'max_offsets_per_trigger = 60\n'
        '[ids]\nstrategy = "key"\n[dedup]\nnum_shards = 2\n'
        f'[sink]\ntopic = "{topics.out}"\nvalue_column = "value"\n')

    def run(url: str) -> None:
        query = start_query(spark, pipeline, Addresses(url, kafka_bootstrap, kafka_bootstrap),
                            tmp_checkpoint)
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    run(redis_url)
    assert check_exact(kafka_bootstrap, topics.out, expected).ok
    resend_copies(kafka_bootstrap, topics.source)  # the first 30 records again
    refusal = refusal_on_another_redis(run, tmp_path / "other-redis")
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.duplicated == 0, f"not refused ({refusal!r}): {report.summary()}"
    assert "has no record of" in refusal and tmp_checkpoint in refusal, refusal
    # The advice, literally: "Point redis.url at the Redis the query used".
    assert "Point redis.url at the Redis the query used" in refusal, refusal
    run(redis_url)
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.redis
@pytest.mark.parametrize("first_one_pass", [False, True], ids=["two-step-then-one-pass",
                                                               "one-pass-then-two-step"])
def test_switching_forms_mid_batch_with_an_event_time_column_is_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_checkpoint: str,
        tmp_path: Any, first_one_pass: bool) -> None:
    """``dedup run`` with dedup.retention.event_time_column set: batch 1 checkpointed and partly
    committed by one form (sink.one_pass), finished by the other from the same
    checkpoint. One pass hands the sink the event-time column beside key, value and ID,
    two steps do not; the replay of the stalled partition's checkpoint must not be
    refused for a column the sink does not read (issue 33, finding 3)."""
    from dedup.cli.pipeline import Addresses, start_query
    from dedup.failpoints import arm, fired
    from tests.integration.cli.runs import run_to_end
    from tests.integration.sinks.pipeline import (
        check_exact,
        fill_input,
        wait_for,
        wait_for_the_stalled_task_alone,
    )

    faults = str(tmp_path / "faults")
    topics, expected = fill_input(kafka_bootstrap, app_id, records=400, duplicates=40)
    addresses = Addresses(redis_url, kafka_bootstrap, kafka_bootstrap)

    def pipeline(one_pass: bool) -> Any:
        return parse_pipeline(
            f'app_id = "{app_id}"\n'
            f'[source]\ntype = "kafka"\ntopics = ["{topics.source}"]\n'
            'max_offsets_per_trigger = 150\n'
            '[ids]\nstrategy = "key"\n'
            '[dedup]\nnum_shards = 8\nretention.event_time_column = "timestamp"\n'
            f'[sink]\ntopic = "{topics.out}"\nvalue_column = "value"\n'
            f'one_pass = {str(one_pass).lower()}\n'
            '[run]\ntrigger_seconds = 1\n')

    # Partition 3 of batch 1 stalls after its sink checkpoint, before its Kafka commit;
    # the other partitions commit.
    arm(faults, "sink.after_checkpoint", "sleep", match={"batch": 1, "partition": 3},
        seconds=30)
    first = start_query(spark, pipeline(first_one_pass), addresses, tmp_checkpoint,
                        fail_point_dir=faults)
    try:
        assert wait_for(lambda: bool(fired(faults, "sink.after_checkpoint")), timeout=120), \
            "the stalled fail-point never fired"
        # the other partitions of batch 1 finish their commits (fail-point: 30 s)
        wait_for_the_stalled_task_alone(spark, timeout=25)
    finally:
        first.stop()
    partial = check_exact(kafka_bootstrap, topics.out, expected)
    assert partial.lost > 0 and (partial.duplicated, partial.phantoms) == (0, 0), \
        partial.summary()
    # run_to_end: the query to the end of its input (once more on Spark 4.1's SPARK-55271)
    error = run_to_end(spark, pipeline(not first_one_pass), addresses, tmp_checkpoint)
    assert error == "", error
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert (report.lost, report.duplicated, report.phantoms) == (0, 0, 0), report.summary()
    assert report.ok and report.open_transactions == 0, report.summary()


@pytest.mark.kafka
@pytest.mark.redis
def test_one_pass_with_a_fixed_query_id_resumes_from_its_checkpoint(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_checkpoint: str,
        tmp_path: Any) -> None:
    """``dedup run`` in one pass with ``query.id`` in ``[sink.options]``: the catalog
    records the fixed id, so the resume check must look for that id, not Spark's query
    id from the checkpoint (it refused every resume as "another Redis", whose advice, a
    new checkpoint, then led into the reused-query-id refusal; issue 33, finding 2)."""
    from dedup.cli.pipeline import Addresses, start_query
    from tests.integration.sinks.pipeline import check_exact, fill_input, resend_copies

    topics, expected = fill_input(kafka_bootstrap, app_id, records=120, duplicates=0)
    pipeline = parse_pipeline(
        f'app_id = "{app_id}"\n'
        f'[source]\ntype = "kafka"\ntopics = ["{topics.source}"]\n'
        'max_offsets_per_trigger = 60\n'
        '[ids]\nstrategy = "key"\n[dedup]\nnum_shards = 2\n'
        f'[sink]\ntopic = "{topics.out}"\nvalue_column = "value"\none_pass = true\n'
        f'[sink.options]\n"query.id" = "{app_id}-fixed"\n')
    addresses = Addresses(redis_url, kafka_bootstrap, kafka_bootstrap)

    def run() -> None:
        query = start_query(spark, pipeline, addresses, tmp_checkpoint)
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None, query.exception()

    run()
    assert check_exact(kafka_bootstrap, topics.out, expected).ok
    resend_copies(kafka_bootstrap, topics.source)  # the first 30 records again
    run()  # the resume from the same checkpoint and the same Redis
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
