"""Records whose ID is null or malformed: fail the batch (default) or go to a dead letter.

With ``DedupConfig(invalid_ids="dead_letter")`` such records are not claimed;
they leave the operator with a null ID (counted as ``invalid_ids``), which the
exactly-once sink writes to its ``dead_letter_topic`` in the same transaction
as the batch's other records, so one bad record no longer stops the pipeline
forever and nothing is dropped silently.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import sinks
from dedup import DedupConfig, Deduplicator, RedisConfig
from dedup.constants import DEFAULT_ID_COLUMN
from sinks.kafka_io import ensure_topic
from tests.integration.dedup.helpers import INVALID_ID_ROWS, assert_dead_letter_split

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.redis]

ROWS = INVALID_ID_ROWS


def test_invalid_ids_leave_the_operator_with_a_null_id_and_are_counted(
        spark: Any, redis_url: str, app_id: str) -> None:
    df = spark.createDataFrame(ROWS, f"{DEFAULT_ID_COLUMN} string, v int")
    dedup = Deduplicator(DedupConfig(app_id, RedisConfig(redis_url), num_shards=2,
                                     invalid_ids="dead_letter"))
    out = sorted((r[1], r[0]) for r in dedup.apply(df).collect())
    assert out == [(1, "a"), (2, None), (3, None), (5, None), (6, "d")]
    metrics = dedup.metrics()
    assert metrics is not None
    assert (metrics.kept, metrics.invalid_ids, metrics.duplicates_in_batch) == (2, 3, 1)


@pytest.mark.kafka
def test_invalid_ids_reach_the_dead_letter_topic_and_the_stream_goes_on(
        spark: Any, kafka_bootstrap: str, redis_url: str, app_id: str, tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    for batch, rows in enumerate([ROWS[:3], ROWS[3:]]):
        path = source / f"{batch}.json"
        path.write_text("\n".join(json.dumps({"id": rid, "v": v}) for rid, v in rows) + "\n")
        os.utime(path, (1_700_000_000 + batch, 1_700_000_000 + batch))  # read in this order
    out, dead = f"{app_id}-out", f"{app_id}-dead"
    ensure_topic(kafka_bootstrap, out, 1)
    ensure_topic(kafka_bootstrap, dead, 1)
    sinks.register(spark)
    from pyspark.sql import functions as sf

    stream = (spark.readStream.schema("id string, v int").option("maxFilesPerTrigger", 1)
              .json(str(source)).withColumn(DEFAULT_ID_COLUMN, sf.col("id")))
    kept = Deduplicator(DedupConfig(app_id, RedisConfig(redis_url), num_shards=2,
                                    invalid_ids="dead_letter"), num_partitions=2).apply(stream)
    query = (kept.select(sf.col("v").cast("string").alias("value"), DEFAULT_ID_COLUMN)
             .writeStream.format("exactly_once_kafka")
             .option("kafka.bootstrap.servers", kafka_bootstrap).option("topic", out)
             .option("app.id", app_id).option("redis.url", redis_url)
             .option("dead.letter.topic", dead)
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120), "the query did not finish"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, str(query.exception())
    assert_dead_letter_split(kafka_bootstrap, out, dead)


def test_a_record_without_the_id_header_gets_a_null_id(spark: Any) -> None:
    """``with_record_id(strategy="header")`` on a record without that header (none, or
    others only): a null ID, as documented, which ``invalid_ids`` then handles; not
    Spark's INVALID_ARRAY_INDEX_IN_ELEMENT_AT (ANSI mode, Spark 4's default), which
    failed the query on every restart (found by benchmarks.fuzz_spark)."""
    from dedup.ids import with_record_id

    df = spark.createDataFrame(
        [(1, [("dedup-record-id", bytearray(b"a"))]), (2, []), (3, None),
         (4, [("other", bytearray(b"x"))]), (5, [("other", None), ("dedup-record-id", None)])],
        "n int, headers array<struct<key:string,value:binary>>")
    ids = {row["n"]: row[DEFAULT_ID_COLUMN]
           for row in with_record_id(df, strategy="header").collect()}
    assert ids == {1: "a", 2: None, 3: None, 4: None, 5: None}
