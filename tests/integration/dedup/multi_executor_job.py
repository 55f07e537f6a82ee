"""Run the operator on ``local-cluster[2,1,1024]`` (two executor processes).

Invoked as a subprocess by test_multi_executor.py because a test process can
hold only one SparkContext. argv: redis_url app_id input_dir checkpoint out_json
[master]; the optional master (default ``local-cluster[2,1,1024]``) is how
tests/integration/cluster runs the same job on a standalone cluster.
Several streaming batches whose shards land on different executors make the
Bloom filters of the two executors go stale in turn.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main() -> None:
    redis_url, app_id, input_dir, checkpoint, out_path = sys.argv[1:6]
    master = sys.argv[6] if len(sys.argv) > 6 else "local-cluster[2,1,1024]"
    import pyspark

    from dedup import BloomConfig, DedupConfig, Deduplicator, RedisConfig
    from dedup.local.spark import local_spark_session

    os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))
    spark = local_spark_session("dedup-multi-executor", master=master,
                                shuffle_partitions=4, with_kafka=False,
                                conf={"spark.executor.memory": "512m"})
    # executors register asynchronously (slowly on a loaded machine): wait for both
    deadline = time.monotonic() + 120
    while True:
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
        if executors >= 3 or time.monotonic() > deadline:
            break
        time.sleep(1)
    config = DedupConfig(app_id, RedisConfig(redis_url), num_shards=8,
                         bloom=BloomConfig(capacity=10_000, error_rate=0.01))
    dedup = Deduplicator(config, num_partitions=4)
    source = (spark.readStream.schema("_record_id string, v long")
              .option("maxFilesPerTrigger", 1).json(input_dir))
    rows: list[dict[str, object]] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        pids = batch_df.rdd.mapPartitions(lambda it: [os.getpid()]).collect()
        rows.extend({"id": r["_record_id"], "v": r["v"], "batch": batch_id}
                    for r in batch_df.collect())
        pids_seen.update(pids)

    pids_seen: set[int] = set()
    query = (dedup.apply(source).writeStream.foreachBatch(collect)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    with open(out_path, "w") as handle:
        json.dump({"rows": rows, "executors": executors, "pids": sorted(pids_seen)}, handle)
    spark.stop()


if __name__ == "__main__":
    main()
