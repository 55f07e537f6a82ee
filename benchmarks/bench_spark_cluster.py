"""What a Spark standalone cluster costs the dedup operator, against ``local[2]``.

The same parquet input and query as ``bench_dedup``'s ``dedup`` variant (``noop``
sink, ``availableNow``, one Redis with AOF ``everysec``), under two masters on the
same 2 cores:

* ``local``: ``local[2]``, driver and executor threads in one JVM;
* ``standalone``: a master and two workers of one core each, started from PySpark's
  own ``spark-class`` (:class:`dedup.local.spark_cluster.SparkStandaloneCluster`):
  executors in their own JVMs, so every shuffle block and task result crosses a
  socket, as on a real cluster.

A session per master and run (the session start is not timed), masters alternated,
repeated, best run kept; each run must keep exactly the distinct IDs. On one machine
this measures what the cluster's process boundaries cost, not what more machines give.

Run: ``.venv/bin/python -m benchmarks.bench_spark_cluster [--quick]``. Writes
``benchmarks/results/spark_cluster.json`` and merges ``dedup_spark_standalone_over_local``
into ``summary.json``. Not part of pytest.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.bench_dedup import make_input, run_query
from benchmarks.common import bench_args, best_runs, progress, publish, ratio
from dedup.local.services import RedisServer
from dedup.local.spark import local_spark_session
from dedup.local.spark_cluster import SparkStandaloneCluster


def main() -> None:
    args = bench_args(
        __doc__, None,
        full={"records": 1_000_000, "files": 8, "files_per_trigger": 2, "dup_rate": 0.05,
              "shuffle_partitions": 4, "num_shards": 16, "repeats": 2},
        quick={"records": 100_000, "files": 4, "repeats": 1})
    say = progress("bench_spark_cluster")
    work = Path(tempfile.mkdtemp(prefix="bench-spark-cluster-"))
    runs: dict[str, list[dict[str, Any]]] = {}
    distinct = 0
    try:
        with RedisServer(work / "redis", appendfsync="everysec") as redis_server, \
                SparkStandaloneCluster(work / "spark") as cluster:
            masters = {"local": "local[2]", "standalone": cluster.master_url}
            spark = local_spark_session("bench-spark-cluster", master="local[2]",
                                        with_kafka=False,
                                        shuffle_partitions=args.shuffle_partitions)
            try:
                distinct = make_input(spark, work / "input", args.records, args.files,
                                      args.dup_rate)
            finally:
                spark.stop()
            for rep in range(args.repeats):
                for variant, master in masters.items():
                    spark = local_spark_session(f"bench-spark-cluster-{variant}", master=master,
                                                with_kafka=False,
                                                shuffle_partitions=args.shuffle_partitions)
                    try:
                        # warm-up query: Python workers and the executors' JIT, not timed
                        run_query(spark, "dedup", work / "input", work / f"warm-{variant}{rep}",
                                  redis_server.url, args.files_per_trigger, args.num_shards)
                        run = run_query(spark, "dedup", work / "input",
                                        work / f"{variant}{rep}", redis_server.url,
                                        args.files_per_trigger, args.num_shards)
                    finally:
                        spark.stop()
                    if run["metrics"].get("kept") != distinct:
                        raise SystemExit(f"{variant}: kept {run['metrics'].get('kept')} "
                                         f"records, expected {distinct}: not exact")
                    runs.setdefault(variant, []).append(run)
                    say(f"{variant} run {rep}: {run['records_per_s']:,} records/s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = best_runs(runs)
    figures = {"dedup_spark_standalone_over_local": ratio(
        results["standalone"]["records_per_s"], results["local"]["records_per_s"])}
    publish("spark_cluster.json",
            {**vars(args), "distinct_ids": distinct, "sink": "noop", "local": "local[2]",
             "standalone": "master + 2 workers x 1 core, 1 GB", "redis": "one, AOF everysec"},
            results, figures)


if __name__ == "__main__":
    main()
