"""Several exactly-once outputs of one micro-batch (one app id, one ``output.name`` each)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer

from sinks import ExactlyOnceKafkaForeachBatch
from sinks.kafka_io import ensure_topic
from tests.integration.sinks.pipeline import (
    OUT_PARTITIONS,
    build_stream,
    check_exact,
    dies_after_commit,
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_an_output_renamed_or_moved_to_another_topic_mid_batch_is_refused(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    """The driver dies after the sink committed batch 1 but before Spark recorded it; the
    query restarts from its checkpoint with the output renamed. The new name has no batch
    marker, so without a guard it writes batch 1 a second time. Or it restarts with
    another topic: the partitions already committed are skipped, and the new topic
    never gets them."""
    topics, expected = fill_input(kafka_bootstrap, app_id)
    options = {**sink_options(kafka_bootstrap, topics, app_id, redis_url),
               "output.name": "main"}
    first = ExactlyOnceKafkaForeachBatch(options)

    def stream() -> Any:
        return build_stream(spark, kafka_bootstrap, topics, app_id, redis_url)

    failed = run_foreach_batch(stream(), dies_after_commit(first, 1), tmp_checkpoint)
    assert failed.exception() is not None and "injected" in str(failed.exception())
    first.release()
    renamed = ExactlyOnceKafkaForeachBatch({**options, "output.name": "renamed"})
    refused = run_foreach_batch(stream(), renamed, tmp_checkpoint)
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert refused.exception() is not None, (
        f"the renamed output was not refused; output: {report.summary()}")
    message = str(refused.exception())
    for part in (f"'{app_id}/renamed'", f"'{app_id}/main'", "batch 1", "OutputChangedError"):
        assert part in message, message
    assert report.duplicated == 0 and report.phantoms == 0, report.summary()
    renamed.release()
    # The same name, another topic: the partitions committed to the old topic would
    # be skipped (their markers say done), so the new topic would lack them.
    moved_topic = f"{app_id}-moved"
    ensure_topic(kafka_bootstrap, moved_topic, OUT_PARTITIONS)
    moved = ExactlyOnceKafkaForeachBatch({**options, "topic": moved_topic})
    refused = run_foreach_batch(stream(), moved, tmp_checkpoint)
    assert refused.exception() is not None, (
        f"the new topic was not refused: it holds {len(read_output(kafka_bootstrap, moved_topic))}"
        f" records of {len(expected)}")
    message = str(refused.exception())
    for part in (f"'{topics.out}'", f"'{moved_topic}'", "batch 1"):
        assert part in message, message
    assert read_output(kafka_bootstrap, moved_topic, "read_uncommitted") == []
    moved.release()
    # The way out the refusals name: the old names once, until the batch is committed.
    restored = ExactlyOnceKafkaForeachBatch(options)
    done = run_foreach_batch(stream(), restored, tmp_checkpoint)
    assert done.exception() is None, done.exception()
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
    restored.release()
    # After that clean stop the rename is safe: the next batch was never written.
    more = {f"more-{i:03d}": f"more-value-{i}".encode() for i in range(30)}
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for key, value in more.items():
        producer.produce(topics.source, key=key.encode(), value=value)
    assert producer.flush(30) == 0
    later = run_foreach_batch(stream(), ExactlyOnceKafkaForeachBatch(
        {**options, "output.name": "renamed"}), tmp_checkpoint)
    assert later.exception() is None, later.exception()
    report = check_exact(kafka_bootstrap, topics.out, {**expected, **more})
    assert report.ok and report.open_transactions == 0, report.summary()


@pytest.mark.parametrize("case", ["together", "added_later", "replay_of_a_known_output",
                                  "renamed_mid_batch", "renamed_after_a_clean_stop",
                                  "moved_mid_batch", "moved_after_a_clean_stop",
                                  "other_cluster_mid_batch"])
def test_the_query_record_of_outputs_refuses_only_a_changed_output_on_a_replayed_batch(
        redis_url: str, app_id: str, case: str) -> None:
    """The record's rules against real Redis, no Spark: which (output, run, batch,
    topic, Kafka cluster) sequences are refused. Runs r1 then r2 are two starts of one
    query."""
    from dedup.config import RedisConfig
    from sinks import OutputChangedError
    from sinks.checkpoint import CheckpointStore

    query = f"q-{app_id}"
    main, other = (CheckpointStore(RedisConfig(url=redis_url), app_id, name)
                   for name in ("main", "other"))
    steps = {
        # two outputs of one batch from the start, in either order
        "together": [(main, "r1", 0), (other, "r1", 0), (other, "r1", 1), (main, "r1", 1)],
        # an output added to a running query, or at a restart after a clean stop
        "added_later": [(main, "r1", 0), (main, "r1", 1), (other, "r1", 1), (main, "r2", 2),
                        (other, "r2", 2)],
        # both outputs replay the batch the driver's crash cut short
        "replay_of_a_known_output": [(main, "r1", 0), (other, "r1", 0), (main, "r1", 1),
                                     (other, "r2", 1), (main, "r2", 1)],
        "renamed_mid_batch": [(main, "r1", 0), (main, "r1", 1), (other, "r2", 1)],
        "renamed_after_a_clean_stop": [(main, "r1", 0), (main, "r1", 1), (other, "r2", 2)],
        "moved_mid_batch": [(main, "r1", 0), (main, "r1", 1), (main, "r2", 1, "t2")],
        "moved_after_a_clean_stop": [(main, "r1", 0), (main, "r1", 1), (main, "r2", 2, "t2")],
        "other_cluster_mid_batch": [(main, "r1", 0), (main, "r1", 1),
                                    (main, "r2", 1, "t1", "c2")],
    }[case]
    *before, last = [(*step, "t1", "c1")[:5] for step in steps]
    for store, run, batch, topic, cluster in before:
        store.join_query(query, run, batch, topic, cluster)
    store, run, batch, topic, cluster = last
    refusal = {"renamed_mid_batch": f"'{app_id}/main' began batch 1",
               "moved_mid_batch": "began writing to topic 't1'.* is now 't2'",
               "other_cluster_mid_batch": "Kafka cluster 'c1'.* cluster 'c2'"}.get(case)
    if refusal:
        with pytest.raises(OutputChangedError, match=refusal):
            store.join_query(query, run, batch, topic, cluster)
        # refused every time, not only the first (nothing was recorded)
        with pytest.raises(OutputChangedError):
            store.join_query(query, run, batch, topic, cluster)
    else:
        store.join_query(query, run, batch, topic, cluster)


@pytest.mark.slow
@pytest.mark.parametrize("front", ["foreachBatch", "one-pass"])
def test_a_new_writer_of_a_stopped_querys_output_is_not_refused(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_path: Any,
        front: str) -> None:
    """A checkpoint reset in the same process, with a new writer (``deduplicate_to_kafka``
    makes one per call, and its user never holds it to ``release()``): the writer of
    the stopped query must not keep the output's name, and the output stays exact."""
    from dedup.config import DedupConfig, RedisConfig
    from dedup.ids import with_record_id
    from sinks import deduplicate_to_kafka
    from tests.integration.sinks.pipeline import kafka_stream

    topics, expected = fill_input(kafka_bootstrap, app_id, records=40, duplicates=0)
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url)
    for run in ("first", "reset"):
        if run == "reset":  # new input, so that the new query has rows to write
            _, more = fill_input(kafka_bootstrap, app_id, records=40, duplicates=0,
                                 id_prefix="more")
            expected.update(more)
        checkpoint = str(tmp_path / run)
        if front == "one-pass":
            df = with_record_id(kafka_stream(spark, kafka_bootstrap, topics.source),
                                strategy="column", column="key")
            writer = deduplicate_to_kafka(
                df, DedupConfig(app_id=app_id, redis=RedisConfig(redis_url), num_shards=2),
                options)
            query = (writer.option("checkpointLocation", checkpoint)
                     .trigger(availableNow=True).start())
            try:
                query.awaitTermination(150)
            except Exception:  # inspected below
                pass
            finally:
                if query.isActive:
                    query.stop()
        else:
            query = run_foreach_batch(
                build_stream(spark, kafka_bootstrap, topics, app_id, redis_url),
                ExactlyOnceKafkaForeachBatch(options), checkpoint)
        assert query.exception() is None, f"{run} query: {query.exception()}"
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok, report.summary()
