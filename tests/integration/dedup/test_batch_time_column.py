"""The batch-time column of the streaming plans (both forms) against the real Spark.

Spark puts each micro-batch's time (from its offset log) into the plan as a literal.
Inlined into the generated code of the stage that reads the rows, it made every
micro-batch compile that stage anew and run it interpreted until the JIT caught up:
2-3 us of JVM CPU per record in ``bench_e2e`` (issue 53, 2026-12-05). The column must
keep the offset log's time and leave the generated code the same from batch to batch.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from dedup.partition_step import batch_time_column

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_the_batch_time_is_sparks_and_compiles_no_code_per_batch(spark: Any,
                                                                 tmp_path: Path) -> None:
    from pyspark.sql import functions as sf

    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    compiled = metrics.METRIC_COMPILATION_TIME()
    seen: list[tuple[float, float]] = []

    def each_batch(df: Any, _batch_id: int) -> None:
        # a shuffle and an action per batch, as the one-pass writer runs them
        times = [c for c in df.columns if c != "value"]
        rows = df.repartition(2, "value").groupBy(*times).count().collect()
        seen.extend(tuple(row[c] for c in times) for row in rows)

    def run(batches: int, *columns: Any) -> int:
        before = compiled.getCount()
        source = (spark.readStream.format("rate-micro-batch")
                  .option("rowsPerBatch", 200).option("numPartitions", 2).load())
        query = (source.select("value", batch_time_column().alias("bt"), *columns)
                 .writeStream.foreachBatch(each_batch).trigger(processingTime="10 milliseconds")
                 .option("checkpointLocation", str(tmp_path / uuid.uuid4().hex)).start())
        try:
            while len(query.recentProgress) < batches:
                query.awaitTermination(0.2)
        finally:
            query.stop()
        return int(compiled.getCount() - before)

    # Spark's own column beside it (which compiles per batch): the same time
    run(4, sf.current_timestamp().cast("double").alias("spark_bt"))
    assert seen and all(bt == spark_bt for bt, spark_bt in seen)
    assert len({bt for bt, _ in seen}) >= 3  # one time per batch, not one per query
    run(3)  # the first query of this shape compiles its stages once
    seen.clear()
    assert run(6) == 0, "the batch-time column makes Spark compile code per micro-batch"
    assert len({bt for (bt,) in seen}) >= 5
