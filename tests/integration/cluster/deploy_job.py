"""The user's job of test_cluster_deploy.py, started with ``spark-submit``.

argv: one JSON file with ``redis_url``, ``bootstrap``, ``app_id``, ``input``
(a folder of JSON-lines files, one micro-batch each), ``topic``,
``checkpoint``, ``fail_points`` (a folder, or null) and ``out`` (where this
writes what the executors reported). Everything else (master, the toolkit's
code and Python for the executors, the Kafka connector) comes from
``spark-submit``'s options, as in docs/deploy.md: the job itself sets nothing
about where code lives.

It waits for both executors, asks every executor where it imported the
toolkit from, then runs README's wrap: a file source, ``dedup.deduplicate``,
the exactly-once Kafka sink (``exactly_once_kafka``), with ``availableNow``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def where(_: Any) -> list[dict[str, Any]]:
    """On an executor: which Python runs and where the toolkit comes from."""
    import confluent_kafka

    import dedup
    import sinks

    # absolute: a file of --py-files sits on sys.path relative to the executor's folder
    return [{"python": sys.executable, "prefix": sys.prefix, "cwd": os.getcwd(),
             "dedup": os.path.abspath(dedup.__file__ or ""),
             "sinks": os.path.abspath(sinks.__file__ or ""),
             "confluent_kafka": os.path.abspath(confluent_kafka.__file__ or ""),
             "path": [os.path.abspath(p) for p in sys.path if p],
             "pythonpath": os.environ.get("PYTHONPATH", ""), "pid": os.getpid()}]


def main() -> None:
    with open(sys.argv[1]) as handle:
        spec = json.load(handle)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as sf

    import dedup
    import sinks
    from dedup import DedupConfig, RedisConfig
    from dedup.config import FailPointConfig

    started = time.monotonic()
    timings: dict[str, float] = {}
    spark = SparkSession.builder.getOrCreate()
    timings["session"] = time.monotonic() - started
    # executors register asynchronously (slowly on a loaded machine): wait for both,
    # so that each holds partitions and the kill finds the other one alive
    deadline = time.monotonic() + 120
    while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3:
        if time.monotonic() > deadline:
            raise SystemExit("fewer than two executors registered within 120 s")
        time.sleep(0.5)
    timings["executors"] = time.monotonic() - started
    # Spark does not promise to spread eight small tasks over both executors (CI's run
    # of 26522f9 saw one Python worker take all eight: an executor registered but not
    # yet offering its core, or slow to start its worker), so ask again until both
    # executors' folders answered; the test fails if only one ever does.
    executors: list[dict[str, Any]] = []
    probes, probe_deadline = 0, time.monotonic() + 60
    while len({seen["cwd"] for seen in executors}) < 2 and time.monotonic() < probe_deadline:
        executors += spark.sparkContext.parallelize(range(8), 8).mapPartitions(where).collect()
        probes += 1
    timings["probe"] = time.monotonic() - started
    timings["probes"] = probes

    config = DedupConfig(spec["app_id"], RedisConfig(spec["redis_url"]), num_shards=4,
                         fail_points=FailPointConfig(spec["fail_points"]))
    source = (spark.readStream.schema("_record_id string, v long")
              .option("maxFilesPerTrigger", 1).json(spec["input"]))
    clean = dedup.deduplicate(source, config)
    sinks.register(spark)
    options = {"kafka.bootstrap.servers": spec["bootstrap"], "topic": spec["topic"],
               "app.id": spec["app_id"], "redis.url": spec["redis_url"],
               "kafka.transaction.timeout.ms": "60000"}
    if spec["fail_points"]:
        options["fail.points.directory"] = spec["fail_points"]
    query = (clean.select(sf.col("_record_id").alias("key"),
                          sf.col("v").cast("string").alias("value"), "_record_id")
             .writeStream.format("exactly_once_kafka").options(**options)
             .option("checkpointLocation", spec["checkpoint"])
             .trigger(availableNow=True).start())
    timings["start"] = time.monotonic() - started
    query.awaitTermination()
    timings["query"] = time.monotonic() - started
    progress = query.lastProgress
    batches = int(progress["batchId"]) + 1 if progress is not None else 0
    with open(spec["out"], "w") as handle:
        json.dump({"executors": executors, "batches": batches,
                   "timings": {k: round(v, 1) for k, v in timings.items()}}, handle)
    spark.stop()


if __name__ == "__main__":
    main()
