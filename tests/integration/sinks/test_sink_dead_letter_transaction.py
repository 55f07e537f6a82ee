"""Dead letters are committed in the same Kafka transaction as the batch's output.

README, ``invalid_ids = dead_letter``: a record with a bad ID passes the dedup
operator unclaimed with a null ID, and the sink writes it "to its
``dead.letter.topic`` in the batch's transaction". Here a sink partition
holding both outputs and dead letters of batch 1 is stopped after producing
both and before ``commit_transaction``, and its Python worker is killed:
while it is held, a ``read_committed`` reader sees neither (a
``read_uncommitted`` one sees both, proof that they were produced); after
Spark's retry both are visible, each record once.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

import sinks
from dedup import DedupConfig, Deduplicator, RedisConfig, with_record_id
from dedup.config import FailPointConfig
from dedup.constants import DEFAULT_ID_COLUMN
from dedup.failpoints import arm, fired
from sinks.kafka_io import ensure_topic
from tests.integration.sinks.pipeline import check_exact, read_output, wait_for
from tests.integration.spark_tasks import kill_if_still_stopped

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.chaos]

SINK_PARTITIONS = 3
HELD_BATCH = 1


def _fill(bootstrap: str, topic: str) -> tuple[dict[str, bytes], list[bytes]]:
    """240 records, every 8th with an empty key (an invalid ID), and 24 duplicates;
    returns the expected output ``{id: first value}`` and the expected dead letters."""
    ensure_topic(bootstrap, topic, 2)
    rows = [("" if i % 8 == 0 else f"id-{i:05d}", f"value-{i}") for i in range(240)]
    rows += [(key, f"{value}-copy") for key, value in rows[1:25] if key]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-fill"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for index, (key, value) in enumerate(rows):
        producer.produce(topic, key=key.encode(), value=value.encode(), partition=index % 2)
    producer.commit_transaction(30)
    expected: dict[str, bytes] = {}
    for key, value in rows:
        if key:
            expected.setdefault(key, value.encode())
    return expected, [value.encode() for key, value in rows if not key]


def _null_id_partition(spark: Any) -> int:
    """The sink partition ``repartition(SINK_PARTITIONS, id)`` sends null IDs to."""
    from pyspark.sql import functions as sf

    row = spark.createDataFrame([(None,)], "id string").select(
        sf.pmod(sf.hash("id"), sf.lit(SINK_PARTITIONS)).alias("p")).first()
    return int(row["p"])


def test_dead_letters_and_outputs_become_visible_together_once(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_checkpoint: str,
        tmp_path: Path) -> None:
    from pyspark.sql import functions as sf

    sinks.register(spark)
    faults = str(tmp_path / "faults")
    source, out, dead = f"{app_id}-in", f"{app_id}-out", f"{app_id}-dead"
    expected, expected_dead = _fill(kafka_bootstrap, source)
    ensure_topic(kafka_bootstrap, out, 2)
    ensure_topic(kafka_bootstrap, dead, 1)
    held = _null_id_partition(spark)
    arm(faults, "sink.before_commit", "stop", match={"batch": HELD_BATCH, "partition": held})

    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("kafka.isolation.level", "read_committed")
          .option("maxOffsetsPerTrigger", "70").load()
          .select(sf.col("key").cast("string").alias("key"),
                  sf.col("value").cast("string").alias("value")))
    df = with_record_id(df, strategy="column", column="key")
    df = Deduplicator(DedupConfig(app_id=app_id, redis=RedisConfig(redis_url), num_shards=2,
                                  invalid_ids="dead_letter",
                                  fail_points=FailPointConfig(faults))).apply(df)
    df = df.repartition(SINK_PARTITIONS, DEFAULT_ID_COLUMN)
    query = (df.writeStream.format("exactly_once_kafka")
             .option("kafka.bootstrap.servers", kafka_bootstrap).option("topic", out)
             .option("app.id", app_id).option("redis.url", redis_url)
             .option("dead.letter.topic", dead).option("fail.points.directory", faults)
             .option("checkpointLocation", tmp_checkpoint)
             .trigger(availableNow=True).start())
    try:
        assert wait_for(lambda: any("pid" in f for f in fired(faults, "sink.before_commit")),
                        timeout=120), "the held partition never reached commit_transaction"
        [record] = fired(faults, "sink.before_commit")
        # Held after producing both, before the commit: produced, not visible.
        in_flight_out = _values(read_output(kafka_bootstrap, out, "read_uncommitted")) \
            - _values(read_output(kafka_bootstrap, out))
        in_flight_dead = _values(read_output(kafka_bootstrap, dead, "read_uncommitted")) \
            - _values(read_output(kafka_bootstrap, dead))
        assert in_flight_out, "the held transaction produced no output record"
        assert in_flight_dead, "the held transaction produced no dead letter"
        os.kill(int(record["pid"]), signal.SIGKILL)  # the task fails; Spark retries it
        assert query.awaitTermination(150), "the query did not finish after the kill"
    finally:
        kill_if_still_stopped(fired(faults))
        if query.isActive:
            query.stop()
    assert query.exception() is None, str(query.exception())

    report = check_exact(kafka_bootstrap, out, expected)
    assert report.ok and report.open_transactions == 0, report.summary()
    dead_letters = Counter(r.value for r in read_output(kafka_bootstrap, dead))
    assert dead_letters == Counter(expected_dead), dead_letters
    assert in_flight_dead <= set(dead_letters)  # the held ones, written by the retry
    assert in_flight_out <= {v for v in expected.values()}


def _values(records: list[Any]) -> set[bytes]:
    return {r.value for r in records}
