"""What a replica and a Redis Cluster cost the dedup operator, against one Redis.

Three catalogs, the same parquet input and query as ``bench_dedup``'s ``dedup``
variant (``local[2]``, ``noop`` sink, ``availableNow``), AOF ``everysec`` on
every node:

* ``single``: one ``redis-server``, no replica (claims wait for none);
* ``replica_wait``: one primary with one replica; every claim waits (``WAIT``)
  for the replica before its rows go on, so a failover cannot forget it;
* ``cluster``: a Redis Cluster of 3 primaries with 1 replica each; shards spread
  over the primaries, each claim waits for its primary's replica.

Variants interleaved and repeated, best run kept. Each run is checked for
exactness (kept == distinct IDs) before its number counts.

Run: ``.venv/bin/python -m benchmarks.bench_redis_cluster [--quick]``. Writes
``benchmarks/results/redis_cluster.json`` and merges
``dedup_redis_replica_wait_over_single`` and ``dedup_redis_cluster_over_single``
into ``summary.json``. Not part of pytest.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.bench_dedup import make_input, run_query
from benchmarks.common import bench_args, best_runs, progress, publish, ratio
from dedup.local.redis_cluster import LocalRedisCluster
from dedup.local.services import RedisServer
from dedup.local.spark import local_spark_session


def start_catalogs(stack: ExitStack, work: Path) -> dict[str, str]:
    """Variant -> Redis URL, every service stopped when ``stack`` closes."""
    single = stack.enter_context(RedisServer(work / "single", appendfsync="everysec"))
    primary = stack.enter_context(RedisServer(work / "primary", appendfsync="everysec"))
    stack.enter_context(RedisServer(work / "replica", appendfsync="everysec",
                                    extra_args=("--replicaof", "127.0.0.1", str(primary.port))))
    cluster = stack.enter_context(LocalRedisCluster(work / "cluster", appendfsync="everysec"))
    return {"single": single.url, "replica_wait": primary.url, "cluster": cluster.url}


def main() -> None:
    args = bench_args(
        __doc__, None,
        full={"records": 3_000_000, "files": 12, "files_per_trigger": 2, "dup_rate": 0.05,
              "shuffle_partitions": 4, "num_shards": 16, "repeats": 3},
        quick={"records": 100_000, "files": 4, "repeats": 1})
    say = progress("bench_redis_cluster")
    work = Path(tempfile.mkdtemp(prefix="bench-redis-cluster-"))
    spark = local_spark_session("bench-redis-cluster", master="local[2]", with_kafka=False,
                                shuffle_partitions=args.shuffle_partitions)
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        with ExitStack() as stack:
            urls = start_catalogs(stack, work)
            distinct = make_input(spark, work / "input", args.records, args.files,
                                  args.dup_rate)
            # a discarded first query: Spark's and the Python workers' warm-up would
            # otherwise be charged to whichever variant runs first
            run_query(spark, "dedup", work / "input", work / "warmup", urls["single"],
                      args.files_per_trigger, args.num_shards)
            for rep in range(args.repeats):
                for variant, url in urls.items():
                    run = run_query(spark, "dedup", work / "input", work / f"{variant}{rep}",
                                    url, args.files_per_trigger, args.num_shards)
                    if run["metrics"].get("kept") != distinct:
                        raise SystemExit(f"{variant}: kept {run['metrics'].get('kept')} "
                                         f"records, expected {distinct}: not exact")
                    runs.setdefault(variant, []).append(run)
                    say(f"{variant} run {rep}: {run['records_per_s']:,} records/s")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    results = best_runs(runs)
    single = results["single"]["records_per_s"]
    figures = {
        "dedup_redis_replica_wait_over_single": ratio(results["replica_wait"]["records_per_s"],
                                                      single),
        "dedup_redis_cluster_over_single": ratio(results["cluster"]["records_per_s"], single),
    }
    publish("redis_cluster.json",
            {**vars(args), "distinct_ids": distinct, "master": "local[2]", "sink": "noop",
             "redis": "AOF everysec on every node", "cluster": "3 primaries, 1 replica each"},
            results, figures)


if __name__ == "__main__":
    main()
