"""Throughput of the dedup operator vs pass-through and Spark's dropDuplicates (RocksDB).

All three run as streaming queries over the SAME parquet input (>= 2M records,
5% duplicates spread over the last ~2 batches), read with maxFilesPerTrigger,
``local[2]``, the same shuffle partition count, a ``noop`` sink and
``trigger(availableNow=True)``. Records/s = input records / wall time of the
query. The dedup run is checked for exactness (kept == distinct IDs) before
its number counts.

Variant ``skeleton`` is the operator's Spark shape doing no dedup work
(:func:`benchmarks.common.operator_skeleton`): the floor of the design.

Run: ``.venv/bin/python -m benchmarks.bench_dedup [--records 2000000]``. Writes
``benchmarks/results/dedup_quick.json`` and merges ``dedup_over_dropduplicates_rocksdb``
and ``dedup_over_passthrough`` into ``summary.json``. Not part of pytest.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import (
    bench_args,
    merge_summary,
    operator_skeleton,
    run_metadata,
    write_json,
)
from dedup import BloomConfig, DedupConfig, Deduplicator, RedisConfig
from dedup.local.services import RedisServer
from dedup.local.spark import local_spark_session

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def make_input(spark: Any, path: Path, records: int, files: int, dup_rate: float) -> int:
    """Write the parquet input; returns the number of distinct record IDs."""
    from pyspark.sql import functions as sf

    n = sf.col("id")
    is_dup = (sf.pmod(sf.xxhash64(n, sf.lit(1)), sf.lit(10_000)) < int(dup_rate * 10_000)) & (n > 0)
    back = sf.pmod(sf.xxhash64(n, sf.lit(2)), sf.least(n, sf.lit(records // 5)))
    source = sf.when(is_dup, n - 1 - back).otherwise(n)
    df = (spark.range(records)
          .withColumn("_record_id", sf.concat(sf.lit("rec-"), source.cast("string")))
          .withColumn("v", n)
          .withColumn("payload", sf.sha2(n.cast("string"), 256)))
    df.repartitionByRange(files, "v").sortWithinPartitions("v").write.parquet(str(path))
    return int(spark.read.parquet(str(path)).select("_record_id").distinct().count())


def run_query(spark: Any, variant: str, input_dir: Path, work: Path, redis_url: str,
              files_per_trigger: int, num_shards: int) -> dict[str, Any]:
    source = (spark.readStream.schema(spark.read.parquet(str(input_dir)).schema)
              .option("maxFilesPerTrigger", files_per_trigger).parquet(str(input_dir)))
    dedup: Deduplicator | None = None
    if variant == "passthrough":
        out = source
    elif variant == "skeleton":
        out = operator_skeleton(source, "_record_id", num_shards,
                                int(spark.conf.get("spark.sql.shuffle.partitions") or 4))
    elif variant == "dedup":
        config = DedupConfig(f"bench-{uuid.uuid4().hex[:8]}", RedisConfig(redis_url),
                             num_shards=num_shards,
                             bloom=BloomConfig(capacity=400_000, error_rate=0.01))
        dedup = Deduplicator(config)
        out = dedup.apply(source)
    else:
        provider = ROCKSDB if variant == "dropduplicates_rocksdb" else HDFS
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
        out = source.dropDuplicates(["_record_id"])
    start = time.perf_counter()
    query = (out.writeStream.format("noop").option("checkpointLocation", str(work / variant))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.perf_counter() - start
    progress = query.recentProgress
    records_in = sum(int(p["numInputRows"]) for p in progress)
    result: dict[str, Any] = {"seconds": round(seconds, 2), "records_in": records_in,
                              "batches": len(progress),
                              "records_per_s": round(records_in / seconds)}
    if dedup is not None:
        totals: dict[str, int] = {}
        for p in progress:
            row = p["observedMetrics"].get(dedup.metric_name)
            for key, value in (row.asDict() if row is not None else {}).items():
                totals[key] = totals.get(key, 0) + int(value)
        result["metrics"] = totals
        result["catalog_size"] = dedup.catalog_size()
    return result


def main() -> None:
    args = bench_args(
        __doc__, None,
        full={"records": 2_000_000, "files": 20, "files_per_trigger": 2, "dup_rate": 0.05,
              "shuffle_partitions": 4, "num_shards": 16,
              "variants": "passthrough,skeleton,dedup,dropduplicates_rocksdb", "repeats": 2},
        quick={"records": 200_000, "files": 4, "repeats": 1})

    work = Path(tempfile.mkdtemp(prefix="bench-dedup-"))
    spark = local_spark_session("bench-dedup", master="local[2]", with_kafka=False,
                                shuffle_partitions=args.shuffle_partitions)
    results: dict[str, Any] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        with RedisServer(work / "redis", appendonly=True, appendfsync="everysec") as redis:
            distinct = make_input(spark, work / "input", args.records, args.files,
                                  args.dup_rate)
            # Variants interleaved and repeated, best run kept: the machine is
            # shared, and load swings would otherwise decide the ratios.
            runs.clear()
            for rep in range(args.repeats):
                for variant in args.variants.split(","):
                    run = run_query(spark, variant, work / "input", work / str(rep),
                                    redis.url, args.files_per_trigger, args.num_shards)
                    runs.setdefault(variant, []).append(run)
                    print(variant, rep, run, flush=True)
            for variant, variant_runs in runs.items():
                best = max(variant_runs, key=lambda r: r["records_per_s"])
                results[variant] = {**best, "all_records_per_s": [
                    r["records_per_s"] for r in variant_runs]}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    dedup = results.get("dedup")
    for run in runs.get("dedup", []):
        if run["metrics"].get("kept") != distinct:
            raise SystemExit(f"dedup kept {run['metrics'].get('kept')} records, expected "
                             f"{distinct} distinct IDs: the benchmark run is not exact")
    figures: dict[str, Any] = {}
    if dedup and "dropduplicates_rocksdb" in results:
        figures["dedup_over_dropduplicates_rocksdb"] = round(
            dedup["records_per_s"] / results["dropduplicates_rocksdb"]["records_per_s"], 3)
    if dedup and "passthrough" in results:
        figures["dedup_over_passthrough"] = round(
            dedup["records_per_s"] / results["passthrough"]["records_per_s"], 3)
    report = {
        "meta": run_metadata(),
        "setup": {**vars(args), "distinct_ids": distinct, "master": "local[2]",
                  "sink": "noop", "redis": "AOF on, appendfsync everysec"},
        "results": results,
        "ratios": figures,
    }
    path = write_json("dedup_quick.json", report)
    if figures:
        merge_summary(figures)
    print(f"wrote {path}: {figures}")


if __name__ == "__main__":
    main()
