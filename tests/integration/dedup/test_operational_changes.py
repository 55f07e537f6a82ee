"""What an operator changes between runs of one app id: reused exactly, or refused.

Every setting that decides where a row goes (shuffle partitions of the
operator, shard count, bucket width, the record ID strategy) is recorded
per app id on first use. A restart with another value either reuses the
recorded one (the session's ``spark.sql.shuffle.partitions``, as Spark does
for its own stateful operators) or is refused at start with a message
naming the setting, the recorded and the new value. Decisions are made with
the batch's own timestamp, so a retry decides what the first attempt did.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import sinks
from dedup import ConfigError, DedupConfig, Deduplicator, RedisConfig, RetentionConfig
from dedup.constants import DEFAULT_ID_COLUMN
from dedup.failpoints import arm, fired
from dedup.ids import with_record_id
from tests.integration.restarts import run_available_now
from tests.integration.sinks.pipeline import (
    check_exact,
    fill_input,
    refusal_on_another_redis,
    resend_copies,
    run_to_end,
    sink_options,
    wait_for,
    wait_for_the_stalled_task_alone,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.redis]


@contextmanager
def shuffle_partitions(spark: Any, count: int) -> Iterator[None]:
    """Run with ``spark.sql.shuffle.partitions`` set to ``count``, then restore it."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(count))
    try:
        yield
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)


def exchange_partitions(df: Any) -> list[int]:
    """Partition counts of every shuffle in ``df``'s physical plan."""
    import re

    plan = df._jdf.queryExecution().executedPlan().toString()
    return [int(n) for n in re.findall(r",\s*(\d+)\),\s*REPARTITION_BY_NUM", plan)]


def small_frame(spark: Any, strategy: str = "column") -> Any:
    df = spark.createDataFrame([(f"id-{i}", i) for i in range(40)], "k string, v int")
    if strategy == "column":
        return with_record_id(df, strategy="column", column="k")
    return with_record_id(df, strategy="hash", columns=["k"])


def config(app_id: str, redis_url: str, **changes: Any) -> DedupConfig:
    return DedupConfig(app_id=app_id, redis=RedisConfig(redis_url), num_shards=3, **changes)


def test_changed_session_shuffle_partitions_reuse_the_recorded_count(
        spark: Any, redis_url: str, app_id: str) -> None:
    first = Deduplicator(config(app_id, redis_url)).apply(small_frame(spark))
    assert exchange_partitions(first) == [4]
    with shuffle_partitions(spark, 2):
        again = Deduplicator(config(app_id, redis_url)).apply(small_frame(spark))
        assert exchange_partitions(again) == [4], \
            "a restart with other shuffle partitions must keep the operator's recorded count"


def test_explicit_other_partition_count_is_refused(spark: Any, redis_url: str,
                                                   app_id: str) -> None:
    Deduplicator(config(app_id, redis_url), num_partitions=4).apply(small_frame(spark))
    with pytest.raises(ConfigError, match=r"num_partitions.*recorded 4.*now 2") as refusal:
        Deduplicator(config(app_id, redis_url), num_partitions=2).apply(small_frame(spark))
    # The advice, literally: "pass num_partitions=4 (or leave it unset to reuse it)".
    assert "pass num_partitions=4 (or leave it unset to reuse it)" in str(refusal.value)
    for told, kept in ((4, 40), (None, 0)):  # the first run's plan never ran: 40 new IDs
        again = Deduplicator(config(app_id, redis_url), num_partitions=told)
        frame = again.apply(small_frame(spark))
        assert exchange_partitions(frame) == [4]
        assert frame.count() == kept


def test_changed_bucket_width_is_refused(spark: Any, redis_url: str, app_id: str) -> None:
    day = RetentionConfig(horizon_seconds=7 * 86400, bucket_seconds=86400)
    hour = RetentionConfig(horizon_seconds=7 * 86400, bucket_seconds=3600)
    Deduplicator(config(app_id, redis_url, retention=day)).apply(small_frame(spark))
    with pytest.raises(ConfigError, match=r"bucket_seconds.*recorded 86400.*now 3600") as no:
        Deduplicator(config(app_id, redis_url, retention=hour)).apply(small_frame(spark))
    # The advice, literally: "set RetentionConfig(bucket_seconds=86400)".
    assert "set RetentionConfig(bucket_seconds=86400)" in str(no.value)
    told = RetentionConfig(horizon_seconds=7 * 86400, bucket_seconds=86400)
    frame = Deduplicator(config(app_id, redis_url, retention=told)).apply(small_frame(spark))
    assert frame.count() == 40  # the first plan never ran: every ID is new, kept once
    again = Deduplicator(config(app_id, redis_url, retention=told)).apply(small_frame(spark))
    assert again.count() == 0


def test_changed_record_id_strategy_is_refused(spark: Any, redis_url: str,
                                               app_id: str) -> None:
    Deduplicator(config(app_id, redis_url)).apply(small_frame(spark, "column"))
    with pytest.raises(ConfigError, match=r"record id strategy.*recorded.*column.*now.*hash"):
        Deduplicator(config(app_id, redis_url)).apply(small_frame(spark, "hash"))


def test_strategy_recorded_under_an_old_tag_is_the_same_under_its_new_name(
        spark: Any, redis_url: str, app_id: str) -> None:
    """An app id whose IDs an earlier release derived (its tags) keeps working when the
    same strategy is now spelled with today's name; another strategy is still refused."""
    from pyspark.sql import functions as sf

    from dedup.ids import tag_record_id

    df = spark.createDataFrame([(f"k{i}", f"v{i}", "t", 0, i) for i in range(20)],
                               "key string, value string, topic string, partition int, "
                               "offset long")
    # What the sources' own "key" strategy recorded before the vocabularies merged.
    old_key = tag_record_id(df, DEFAULT_ID_COLUMN, sf.col("key").cast("string"), "kafka-key")
    Deduplicator(config(app_id, redis_url)).apply(old_key)
    Deduplicator(config(app_id, redis_url)).apply(with_record_id(df, strategy="key"))
    with pytest.raises(ConfigError, match=r"record id strategy.*recorded kafka-key.*now kafka"):
        Deduplicator(config(app_id, redis_url)).apply(with_record_id(df, strategy="kafka"))
    # Coordinates, recorded as "kafka".
    other = app_id + "-c"
    Deduplicator(config(other, redis_url)).apply(with_record_id(df, strategy="kafka"))
    with pytest.raises(ConfigError, match=r"record id strategy.*recorded kafka.*now key"):
        Deduplicator(config(other, redis_url)).apply(with_record_id(df, strategy="key"))


def test_retry_after_the_horizon_passed_decides_as_the_first_attempt(
        spark: Any, redis_url: str, app_id: str) -> None:
    """``late_policy`` uses the batch's timestamp, not each attempt's wall clock."""
    from pyspark import TaskContext
    from pyspark.sql import functions as sf
    from pyspark.sql.types import IntegerType

    horizon, spare = 30, 2
    retention = RetentionConfig(horizon_seconds=horizon, bucket_seconds=1,
                                event_time_column="ts", late_policy="drop")
    cfg = DedupConfig(app_id=app_id, redis=RedisConfig(redis_url), num_shards=1,
                      retention=retention)
    # Event times `spare` seconds inside the horizon at the batch's timestamp (the query's
    # current_timestamp, one instant for the whole plan, which the decision uses too):
    # not late for the batch, however long its planning took; late for a wall clock
    # read once the first attempt has waited past them.
    df = spark.createDataFrame([(f"id-{i}",) for i in range(5)], "k string").withColumn(
        "ts", sf.current_timestamp().cast("double") - (horizon - spare))
    df = with_record_id(df, strategy="column", column="k")
    kept = Deduplicator(cfg, num_partitions=1).apply(df)

    def fail_first_attempt(value: int) -> int:
        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0:
            time.sleep(spare + 1)  # past the moment the rows turn late
            raise RuntimeError("injected: first attempt fails after the dedup decision")
        return value

    # useArrow given: PySpark then does not try the type hints for an Arrow UDF, which
    # warns "Cannot infer the eval type from type hints" in the run's summary
    probe = sf.udf(fail_first_attempt, IntegerType(), useArrow=False).asNondeterministic()
    # The probe is collected too: a column selected away would be pruned, and no
    # attempt would fail.
    out = kept.withColumn("probe", probe(sf.lit(1))).select(DEFAULT_ID_COLUMN, "probe",
                                                          "ts").collect()
    assert sorted(r[0] for r in out) == [f"id-{i}" for i in range(5)]
    assert time.time() > max(r["ts"] for r in out) + horizon, \
        "the retry did not run after the rows turned late"


@pytest.mark.slow
@pytest.mark.kafka
def test_restart_with_fewer_shuffle_partitions_after_a_partial_batch_is_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_checkpoint: str,
        tmp_path: Path) -> None:
    """Batch 1 committed on some sink partitions, then a restart with 2 instead of 4."""
    from pyspark.sql import functions as sf

    sinks.register(spark)
    faults = str(tmp_path / "faults")
    topics, expected = fill_input(kafka_bootstrap, app_id, records=400, duplicates=40)

    def stream() -> Any:
        df = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", kafka_bootstrap)
              .option("subscribe", topics.source).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed")
              .option("maxOffsetsPerTrigger", "150").load()
              .select(sf.col("key").cast("string").alias("key"),
                      sf.col("value").cast("string").alias("value")))
        df = with_record_id(df, strategy="column", column="key")
        # No repartition after dedup: the sink's partitions are the operator's.
        return Deduplicator(DedupConfig(app_id=app_id, redis=RedisConfig(redis_url),
                                        num_shards=8)).apply(df)

    # Partition 3 of batch 1 stalls before its Kafka commit; the others commit.
    arm(faults, "sink.after_checkpoint", "sleep", match={"batch": 1, "partition": 3},
        seconds=30)
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url, faults)
    query = (stream().writeStream.format("exactly_once_kafka").options(**options)
             .option("checkpointLocation", tmp_checkpoint)
             .trigger(processingTime="1 second").start())
    try:
        assert wait_for(lambda: bool(fired(faults, "sink.after_checkpoint")), timeout=120), \
            "the stalled fail-point never fired"
        # the other partitions of batch 1 finish their commits (fail-point: 30 s)
        wait_for_the_stalled_task_alone(spark, timeout=25)
    finally:
        query.stop()
    with shuffle_partitions(spark, 2):
        run_to_end(stream(), sink_options(kafka_bootstrap, topics, app_id, redis_url),
                   tmp_checkpoint)
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert (report.lost, report.duplicated, report.phantoms) == (0, 0, 0), report.summary()
    assert report.ok, report.summary()


def test_two_dedup_steps_with_one_app_id_in_one_batch_are_refused(
        spark: Any, redis_url: str, app_id: str, tmp_path: Path) -> None:
    """Inside ``foreachBatch`` both steps run as batch ``b`` of the same query."""
    import json

    source = tmp_path / "in"
    source.mkdir()
    (source / "0.json").write_text("\n".join(
        json.dumps({"k": f"{side}{i}"}) for side in "ab" for i in range(10)) + "\n")
    cfg = DedupConfig(app_id=app_id, redis=RedisConfig(redis_url), num_shards=1)
    seen: dict[str, int] = {}

    def both(batch_df: Any, batch_id: int) -> None:
        ids = with_record_id(batch_df, strategy="column", column="k")
        first = Deduplicator(cfg, num_partitions=1).apply(ids.filter("k like 'a%'"))
        second = Deduplicator(cfg, num_partitions=1).apply(ids.filter("k like 'b%'"))
        seen["first"] = first.count()
        seen["second"] = second.count()

    stream = spark.readStream.schema("k string").json(str(source))
    query = (stream.writeStream.foreachBatch(both)
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    with contextlib.suppress(Exception):  # a failed query raises here; inspected below
        query.awaitTermination(120)
    assert not query.isActive, "the query did not end"
    error = query.exception()
    # Silently dropping the second step's 10 new IDs is the failure; a refusal is fine.
    assert error is not None, f"not refused; rows kept per step: {seen}"
    assert "recorded for other IDs" in str(error), str(error)[-2000:]


def test_app_ids_with_one_metric_name_are_refused(spark: Any, redis_url: str,
                                                  app_id: str) -> None:
    dotted, underscored = f"{app_id}.x", f"{app_id}_x"
    Deduplicator(DedupConfig(dotted, RedisConfig(redis_url))).apply(small_frame(spark))
    with pytest.raises(ConfigError, match=r"metric name"):
        Deduplicator(DedupConfig(underscored, RedisConfig(redis_url))).apply(small_frame(spark))


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.parametrize("stall", ["dedup.after_claim", "sink.after_checkpoint"])
@pytest.mark.parametrize("first_one_pass", [False, True], ids=["two-step-then-one-pass",
                                                               "one-pass-then-two-step"])
def test_switching_between_two_step_and_one_pass_after_a_partial_batch_is_exact(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_checkpoint: str,
        tmp_path: Path, first_one_pass: bool, stall: str) -> None:
    """Batch 1 committed on some sink partitions by one form, finished by the other; the
    stalled partition had claimed (its decision is replayed) or also checkpointed."""
    from dedup.config import FailPointConfig
    from sinks import DedupKafkaForeachBatch
    from tests.integration.sinks.pipeline import kafka_stream

    sinks.register(spark)
    faults = str(tmp_path / "faults")
    topics, expected = fill_input(kafka_bootstrap, app_id, records=400, duplicates=40)
    dedup_config = DedupConfig(app_id=app_id, redis=RedisConfig(redis_url), num_shards=8,
                               fail_points=FailPointConfig(faults))

    def writer(one_pass: bool, options: dict[str, str]) -> Any:
        df = with_record_id(kafka_stream(spark, kafka_bootstrap, topics.source, 150),
                            strategy="column", column="key")
        if one_pass:
            return DedupKafkaForeachBatch(dedup_config, options).write_stream(df)
        return (Deduplicator(dedup_config).apply(df).writeStream
                .format("exactly_once_kafka").options(**options))

    # Partition 3 of batch 1 stalls before its Kafka commit; the others commit.
    arm(faults, stall, "sleep", match={"batch": 1, "partition": 3}, seconds=30)
    query = (writer(first_one_pass,
                    sink_options(kafka_bootstrap, topics, app_id, redis_url, faults))
             .option("checkpointLocation", tmp_checkpoint)
             .trigger(processingTime="1 second").start())
    try:
        assert wait_for(lambda: bool(fired(faults, stall)), timeout=120), \
            "the stalled fail-point never fired"
        # the other partitions of batch 1 finish their commits (fail-point: 30 s)
        wait_for_the_stalled_task_alone(spark, timeout=25)
    finally:
        query.stop()
    partial = check_exact(kafka_bootstrap, topics.out, expected)
    assert partial.lost > 0 and (partial.duplicated, partial.phantoms) == (0, 0)
    second, finished = run_available_now(
        lambda: (writer(not first_one_pass, sink_options(kafka_bootstrap, topics, app_id,
                                                         redis_url))
                 .option("checkpointLocation", tmp_checkpoint)
                 .trigger(availableNow=True).start()), 150)
    assert finished, "the second form did not finish"
    assert second.exception() is None, second.exception()
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


@pytest.mark.slow
@pytest.mark.kafka
def test_a_renamed_app_id_on_the_same_checkpoint_is_refused(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str) -> None:
    """The dedup app id changed, the checkpoint kept: the query would go on from an
    empty catalog, and every record emitted under the old app id could pass again."""
    from tests.integration.sinks.pipeline import build_stream

    sinks.register(spark)
    topics, expected = fill_input(kafka_bootstrap, app_id, records=120, duplicates=0)
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url)
    run_to_end(build_stream(spark, kafka_bootstrap, topics, app_id, redis_url), options,
               tmp_checkpoint)
    resend_copies(kafka_bootstrap, topics.source)  # the first 30 records again
    renamed = f"{app_id}-renamed"
    refusal = ""
    try:
        run_to_end(build_stream(spark, kafka_bootstrap, topics, renamed, redis_url), options,
                   tmp_checkpoint)
    except Exception as exc:  # the query fails (awaitTermination raises)
        refusal = str(exc)
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert (report.lost, report.duplicated, report.phantoms) == (0, 0, 0), report.summary()
    assert f"app id '{renamed}' joins streaming query" in refusal, refusal[:2000]
    assert f"deduplicated with app id '{app_id}' since batch 0" in refusal, refusal[:2000]
    # The advice, literally: "Restore app_id '<old>'" (the checkpoint kept).
    assert f"Restore app_id '{app_id}'" in refusal, refusal[:2000]
    run_to_end(build_stream(spark, kafka_bootstrap, topics, app_id, redis_url), options,
               tmp_checkpoint)
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.parametrize("one_pass", [False, True], ids=["two-step", "one-pass"])
def test_a_kept_checkpoint_on_another_redis_is_refused(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_checkpoint: str,
        tmp_path: Path, one_pass: bool) -> None:
    """The library forms restarted from their checkpoint against another (empty) Redis
    (moved, replaced, flushed): the catalog there holds none of the IDs claimed so far,
    and the duplicates of every record emitted before would pass."""
    from sinks import deduplicate_to_kafka
    from tests.integration.sinks.pipeline import kafka_stream

    topics, expected = fill_input(kafka_bootstrap, app_id, records=120, duplicates=0)

    def run(url: str) -> None:
        sinks.register(spark)  # the calling thread's active session (see make_active)
        options = sink_options(kafka_bootstrap, topics, app_id, url)
        cfg = DedupConfig(app_id=app_id, redis=RedisConfig(url), num_shards=2)
        df = with_record_id(kafka_stream(spark, kafka_bootstrap, topics.source, 60),
                            strategy="column", column="key")
        writer = (deduplicate_to_kafka(df, cfg, options) if one_pass else
                  Deduplicator(cfg).apply(df).writeStream.format("exactly_once_kafka")
                  .options(**options))
        query, _ = run_available_now(
            lambda: writer.option("checkpointLocation", tmp_checkpoint)
            .trigger(availableNow=True).start(), 150)
        if query.exception() is not None:
            raise AssertionError(str(query.exception()))

    run(redis_url)
    assert check_exact(kafka_bootstrap, topics.out, expected).ok
    resend_copies(kafka_bootstrap, topics.source)  # the first 30 records again
    refusal = refusal_on_another_redis(run, tmp_path / "other-redis")
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert (report.lost, report.duplicated, report.phantoms) == (0, 0, 0), \
        f"not refused ({refusal[:300]!r}): {report.summary()}"
    assert "has no record of streaming query" in refusal, refusal[-2000:]
    # The advice, literally: "Point the dedup config's Redis URL at the Redis the query
    # used" (the checkpoint kept); the re-sent copies are then caught.
    assert "Point the dedup config's Redis URL at the Redis the query used" in refusal, \
        refusal[-2000:]
    run(redis_url)
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()


@pytest.mark.kafka
@pytest.mark.parametrize("front", ["data-source", "foreachBatch"])
def test_a_query_whose_first_batch_is_empty_is_not_taken_for_a_moved_one(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str,
        tmp_checkpoint: str, front: str) -> None:
    """Batch 0 of a query on an empty topic has no rows, so no claim records the query
    before batch 1: its first claim must not be refused as one on another Redis (the
    listener records batch 0 from its progress, whichever sink front end runs it)."""
    from confluent_kafka import Producer

    from sinks import ExactlyOnceKafkaForeachBatch
    from sinks.kafka_io import ensure_topic
    from tests.integration.sinks.pipeline import Topics, kafka_stream

    sinks.register(spark)
    topics = Topics(f"{app_id}-in", f"{app_id}-out")
    ensure_topic(kafka_bootstrap, topics.source, 2)
    ensure_topic(kafka_bootstrap, topics.out, 2)
    cfg = DedupConfig(app_id=app_id, redis=RedisConfig(redis_url), num_shards=2)
    df = with_record_id(kafka_stream(spark, kafka_bootstrap, topics.source, 60),
                        strategy="column", column="key")
    options = sink_options(kafka_bootstrap, topics, app_id, redis_url)
    writer = (Deduplicator(cfg).apply(df).writeStream.format("exactly_once_kafka")
              .options(**options) if front == "data-source" else
              Deduplicator(cfg).apply(df).writeStream.foreachBatch(
                  ExactlyOnceKafkaForeachBatch(options)))
    query = (writer
             .option("checkpointLocation", tmp_checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    try:
        assert wait_for(lambda: (query.lastProgress or {}).get("batchId") == 0, 60), \
            "no empty batch 0"
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for i in range(40):
            producer.produce(topics.source, key=f"id-{i:05d}".encode(),
                             value=f"value-{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    expected = {f"id-{i:05d}": f"value-{i}".encode() for i in range(40)}
    report = check_exact(kafka_bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
