"""Shard placement against the real Spark: shard s lands in shuffle partition s mod P."""

from __future__ import annotations

import pytest

from dedup.placement import placement_column, spark_hash_int

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_python_copy_of_sparks_int_hash_matches_spark(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as sf

    values = [*range(-300, 300), 2**31 - 1, -(2**31), 123456789]
    rows = (spark.createDataFrame([(v,) for v in values], "v int")
            .select("v", sf.hash("v").alias("h")).collect())
    assert {r.v: r.h for r in rows} == {v: spark_hash_int(v) for v in values}


@pytest.mark.parametrize("shards, partitions", [(8, 4), (16, 4), (64, 4), (7, 3), (3, 8)])
def test_each_shard_lands_in_its_partition(spark, shards: int, partitions: int) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as sf

    df = spark.range(shards * 50).select((sf.col("id") % shards).cast("int").alias("s"))
    placed = (df.repartition(partitions, placement_column(sf.col("s"), shards, partitions))
              .select("s", sf.spark_partition_id().alias("p")).distinct().collect())
    assert sorted((r.s, r.p) for r in placed) == [(s, s % partitions) for s in range(shards)]
