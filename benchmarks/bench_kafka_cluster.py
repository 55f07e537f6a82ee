"""What three Kafka brokers cost the sinks, against one broker.

The same pre-filled input and query as ``bench_sink`` (``local[2]``,
``maxOffsetsPerTrigger``, ``availableNow``), on two Kafka set-ups started side by side:

* ``kafka1``: one broker, replication factor 1 (the demo's and the quick tests' set-up);
* ``kafka3``: three KRaft nodes, replication factor 3, ``min.insync.replicas=2``, the
  transaction state log and ``__consumer_offsets`` replicated alike
  (:class:`dedup.local.kafka_cluster.KafkaCluster`): what a production cluster runs.

On each, Spark's at-least-once Kafka sink (``spark_kafka_sink``) and the exactly-once
sink with strong productions (``eos_strong``). Variants interleaved, repeated, the best
run kept; each run's output is counted (every input record out once, checked) before
its number counts.

Run: ``.venv/bin/python -m benchmarks.bench_kafka_cluster [--quick]``. Writes
``benchmarks/results/kafka_cluster.json`` and merges ``eos_sink_kafka3_over_kafka1``,
``spark_sink_kafka3_over_kafka1`` and ``eos_sink_over_spark_kafka_sink_kafka3`` into
``summary.json``. Not part of pytest.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.bench_sink import fill, run_variant
from benchmarks.common import bench_args, merge_summary, progress, ratio, run_metadata, write_json
from dedup.local.kafka_cluster import KafkaCluster
from dedup.local.services import KafkaBroker, RedisServer
from dedup.local.spark import local_spark_session

SINKS = ("spark_kafka_sink", "eos_strong")


def main() -> None:
    args = bench_args(__doc__, None,
                      full={"records": 100_000, "per_trigger": 20_000, "value_bytes": 100,
                            "repeats": 3},
                      quick={"records": 20_000, "per_trigger": 10_000, "repeats": 1})
    say = progress("bench_kafka_cluster")
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-cluster-"))
    runs: dict[str, list[dict[str, Any]]] = {}
    spark: Any = None
    try:
        with ExitStack() as stack:
            redis_server = stack.enter_context(
                RedisServer(work / "redis", appendfsync="everysec"))
            single = KafkaBroker(work / "kafka1", heap_mb=512)
            single.start()
            stack.callback(single.stop)
            cluster = KafkaCluster(work / "kafka3")
            cluster.start()
            stack.callback(cluster.stop)
            brokers = {"kafka1": single.bootstrap_servers, "kafka3": cluster.bootstrap_servers}
            source = "bench-kafka-cluster-input"
            for bootstrap in brokers.values():
                fill(bootstrap, source, args.records, args.value_bytes)
            spark = local_spark_session("bench-kafka-cluster", master="local[2]",
                                        shuffle_partitions=4)
            import sinks

            sinks.register(spark)
            for bootstrap in brokers.values():  # warm-up, not measured
                for sink in SINKS:
                    run_variant(spark, sink, bootstrap, redis_server.url, source,
                                args.per_trigger, work)
            for rep in range(args.repeats):
                for setup, bootstrap in brokers.items():
                    for sink in SINKS:
                        run = run_variant(spark, sink, bootstrap, redis_server.url, source,
                                          args.per_trigger, work)
                        if run["records_out"] != args.records:
                            raise SystemExit(f"{sink} on {setup}: {run['records_out']} records "
                                             f"out, expected {args.records}")
                        run["records_per_s"] = round(args.records / run["seconds"], 1)
                        runs.setdefault(f"{sink}@{setup}", []).append(
                            {k: v for k, v in run.items() if k != "phases"})
                        say(f"{sink} on {setup} run {rep}: {run['records_per_s']:,} records/s")
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    best = {name: max(r["records_per_s"] for r in rs) for name, rs in runs.items()}
    figures = {
        "eos_sink_kafka3_over_kafka1": ratio(best["eos_strong@kafka3"],
                                             best["eos_strong@kafka1"]),
        "spark_sink_kafka3_over_kafka1": ratio(best["spark_kafka_sink@kafka3"],
                                               best["spark_kafka_sink@kafka1"]),
        "eos_sink_over_spark_kafka_sink_kafka3": ratio(best["eos_strong@kafka3"],
                                                       best["spark_kafka_sink@kafka3"]),
    }
    report = {"metadata": run_metadata(),
              "setup": {**vars(args), "master": "local[2]", "redis": "AOF everysec",
                        "kafka3": "3 KRaft nodes, RF 3, min.insync.replicas 2",
                        "measured": "wall time from start() to the end of availableNow, "
                                    "best of the repeats, after one warm-up round"},
              "best_records_per_s": best, "runs": runs, **figures}
    path = write_json("kafka_cluster.json", report)
    merge_summary({k: v for k, v in figures.items() if v is not None})
    print(f"wrote {path}: {figures}")


if __name__ == "__main__":
    main()
