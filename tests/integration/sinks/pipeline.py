"""A small source -> (record IDs) -> (dedup) -> exactly-once sink pipeline for the sink tests.

The input is a transactional, pre-filled Kafka topic with a few duplicated
records (same key = same record ID); Spark's Kafka connector reads it in
several micro-batches. When the dedup core is installed the pipeline
deduplicates; otherwise the duplicates are removed before writing the input
so the expected output is still "one copy of each record ID".
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from dedup.constants import DEFAULT_ID_COLUMN
from dedup.verify import VerificationReport
from sinks.kafka_io import ConsumedRecord, consume_all, ensure_topic
from tests.integration.restarts import run_available_now

OUT_PARTITIONS = 2
SINK_PARTITIONS = 3


def dedup_available() -> bool:
    try:
        from dedup.operator import deduplicate  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Topics:
    source: str
    out: str


def fill_input(bootstrap: str, app_id: str, records: int = 240, duplicates: int = 24,
               partitions: int = 2, id_prefix: str = "id") -> tuple[Topics, dict[str, bytes]]:
    """Write the input; return the topics and the expected ``{record_id: value}``."""
    topics = Topics(f"{app_id}-in", f"{app_id}-out")
    ensure_topic(bootstrap, topics.source, partitions)
    ensure_topic(bootstrap, topics.out, OUT_PARTITIONS)
    rows = [(f"{id_prefix}-{i:05d}", f"value-{i}") for i in range(records)]
    if dedup_available():
        # the same key is the same record ID; each copy has its own value, so a
        # later copy kept in place of the first shows as a mismatch
        rows += [(key, f"{value}-copy") for key, value in rows[: duplicates]]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{app_id}-fill"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for index, (key, value) in enumerate(rows):
        producer.produce(topics.source, key=key.encode(), value=value.encode(),
                         partition=index % partitions)
    producer.commit_transaction(30)
    expected: dict[str, bytes] = {}
    for key, value in rows:
        expected.setdefault(key, value.encode())
    return topics, expected


def resend_copies(bootstrap: str, topic: str, count: int = 30, partitions: int = 2) -> None:
    """Write the first ``count`` records of :func:`fill_input` again (a producer's
    retries), each copy with its own value: the failure-free output keeps none of them."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, key=f"id-{i:05d}".encode(),
                         value=f"value-{i}-copy".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def refusal_on_another_redis(run: Any, folder: Any) -> str:
    """Call ``run(url)`` with the URL of a fresh, empty Redis started in ``folder`` (not
    the one the query used); return the error it raised as text, "" if none."""
    from dedup.local.services import RedisServer

    other = RedisServer(folder).start()
    try:
        run(other.url)
    except Exception as exc:  # the refusal, or the query's failure
        return f"{type(exc).__name__}: {exc}"
    finally:
        other.stop()
    return ""


def kafka_stream(spark: Any, bootstrap: str, topic: str, per_trigger: int = 70) -> Any:
    """``topic`` read ``read_committed`` from the start, ``per_trigger`` records per
    micro-batch: string ``key`` and ``value``."""
    from pyspark.sql import functions as sf

    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .option("maxOffsetsPerTrigger", str(per_trigger))
            .load()
            .select(sf.col("key").cast("string").alias("key"),
                    sf.col("value").cast("string").alias("value")))


def build_stream(spark: Any, bootstrap: str, topics: Topics, app_id: str, redis_url: str,
                 per_trigger: int = 70, transform: Any = None,
                 fail_point_dir: str | None = None) -> Any:
    """The streaming DataFrame in front of the sink: key, value, record ID."""
    from pyspark.sql import functions as sf

    df = kafka_stream(spark, bootstrap, topics.source, per_trigger)
    try:
        from dedup.ids import with_record_id

        df = with_record_id(df, strategy="column", column="key")
    except ImportError:
        df = df.withColumn(DEFAULT_ID_COLUMN, sf.col("key"))
    if dedup_available():
        from dedup.config import DedupConfig, FailPointConfig, RedisConfig
        from dedup.operator import deduplicate

        df = deduplicate(df, DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url),
                                         num_shards=2,
                                         fail_points=FailPointConfig(fail_point_dir)))
    # A deterministic shuffle by ID: three sink partitions, three transactional ids.
    df = df.repartition(SINK_PARTITIONS, DEFAULT_ID_COLUMN)
    # User code after the shuffle runs in the sink's own tasks, so a task retry
    # recomputes it (before the shuffle, Spark would reuse the shuffle files).
    return transform(df) if transform is not None else df


def sink_options(bootstrap: str, topics: Topics, app_id: str, redis_url: str,
                 fail_point_dir: str | None = None, strong: bool = True) -> dict[str, str]:
    options = {
        "kafka.bootstrap.servers": bootstrap, "topic": topics.out, "app.id": app_id,
        "redis.url": redis_url, "strong.productions": str(strong).lower(),
        "kafka.transaction.timeout.ms": "60000",
    }
    if fail_point_dir:
        options["fail.points.directory"] = fail_point_dir
    return options


def run_to_end(df: Any, options: dict[str, str], checkpoint: str,
               timeout: float = 150.0) -> None:
    """Run the query with ``availableNow`` (several batches) until the input is consumed;
    a failed query raises its own ``StreamingQueryException``, as ``awaitTermination``
    does."""
    query, finished = run_available_now(
        lambda: (df.writeStream.format("exactly_once_kafka").options(**options)
                 .option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start()), timeout)
    error = query.exception()
    if error is not None:
        raise error
    assert finished, f"query did not finish within {timeout}s"


def run_foreach_batch(df: Any, function: Any, checkpoint: str, timeout: float = 150.0) -> Any:
    """Run ``foreachBatch(function)`` with ``availableNow``; the query, whose error the
    caller inspects (a refusal is an expected outcome in some tests)."""
    return run_available_now(
        lambda: (df.writeStream.foreachBatch(function).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start()), timeout)[0]


def run_writer(writer: Any, checkpoint: str, timeout: float = 150.0) -> Any:
    """Start ``writer`` (a ``DataStreamWriter``) from ``checkpoint`` with ``availableNow``
    and wait up to ``timeout``; the query, whose error the caller inspects (a refusal is
    an expected outcome in some tests)."""
    return run_available_now(
        lambda: writer.option("checkpointLocation", checkpoint).trigger(availableNow=True)
        .start(), timeout)[0]


def dies_after_commit(sink: Any, batch: int) -> Any:
    """A ``foreachBatch`` function that writes with ``sink`` and then fails at ``batch``,
    as a driver that died after the sink's commit and before Spark's."""

    def function(df: Any, batch_id: int) -> None:
        sink(df, batch_id)
        if batch_id == batch:
            raise RuntimeError(f"injected: the driver died after the sink committed batch "
                               f"{batch}")

    return function


def read_output(bootstrap: str, topic: str, isolation: str = "read_committed"
                ) -> list[ConsumedRecord]:
    return consume_all(bootstrap, topic, isolation)


def check_exact(bootstrap: str, topic: str, expected: dict[str, bytes]) -> VerificationReport:
    """read_committed output vs the expected one: losses, duplicates, phantoms, payloads
    of other copies and transactions left open, each counted apart (``ok`` needs all 0)."""
    from sinks.verify import verify_topic

    return verify_topic(bootstrap, topic, expected)


def wait_for(predicate: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def wait_for_the_stalled_task_alone(spark: Any, timeout: float = 60.0) -> bool:
    """Wait until the one task held at a fail-point is all that still runs of the active
    stages: every other task of the batch, its commit included, has finished. Reads
    Spark's status tracker (the classic session of the tests), instead of sleeping a
    guess."""
    tracker = spark.sparkContext.statusTracker()

    def alone() -> bool:
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        stages = [s for s in stages if s is not None]
        return (sum(s.numActiveTasks for s in stages) == 1
                and all(s.numCompletedTasks + s.numActiveTasks >= s.numTasks for s in stages))

    if wait_for(alone, timeout):
        return True
    logging.getLogger(__name__).warning("the stalled task was not alone within %s s", timeout)
    return False


def assert_pipeline_exact(spark: Any, bootstrap: str, app_id: str, redis_url: str,
                          checkpoint: str) -> None:
    """Fill the input, run source -> dedup -> sink with ``redis_url`` to the end, and
    assert the output exact (nothing lost, repeated, foreign or left open)."""
    import sinks

    sinks.register(spark)
    topics, expected = fill_input(bootstrap, app_id)
    df = build_stream(spark, bootstrap, topics, app_id, redis_url)
    run_to_end(df, sink_options(bootstrap, topics, app_id, redis_url), checkpoint)
    report = check_exact(bootstrap, topics.out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
