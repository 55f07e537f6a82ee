"""Throughput of the exactly-once Kafka sink against Spark's own Kafka sink, side by side.

Same process tree, same Spark session, same pre-filled Kafka input, same
micro-batching (``maxOffsetsPerTrigger``, ``availableNow``): only the sink
differs. Variants, run alternately so drift hits all of them alike:

* ``spark_kafka_sink``: ``format("kafka")`` (at-least-once);
* ``eos_strong``: ``format("exactly_once_kafka")`` with strong productions
  (rows checkpointed in Redis before the transaction) -- the default;
* ``eos_weak``: the same with ``strong.productions=false``;
* ``eos_foreach_batch``: the same sink through its ``foreachBatch`` front end
  (:class:`sinks.ExactlyOnceKafkaForeachBatch`, strong productions), whose
  partition writes run in a ``mapInArrow`` job instead of a Python data source;
* ``python_alo``: ``format("python_alo_kafka")`` (``benchmarks/python_alo_sink.py``):
  the same Python data-source path and record conversion with a plain,
  idempotent, non-transactional producer -- at-least-once written our way, so
  that "Python" and "exactly-once" are separate lines.

The exactly-once variants also record their phase timings (option
``timings.path``); the JSON gives p50 / p99 per phase of a partition write.

Writes ``benchmarks/results/sink.json`` and merges
``eos_sink_over_spark_kafka_sink`` (strong / Spark, throughput ratio; > 1
means faster), ``eos_sink_over_python_alo_sink`` (strong / python_alo: the
exactly-once part alone) and ``python_alo_sink_over_spark_kafka_sink`` (the
Python path alone) into ``summary.json``. Not part of pytest::

    .venv/bin/python -m benchmarks.bench_sink [--records 100000] [--rounds 3]
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks import python_alo_sink
from benchmarks.common import (
    bench_args,
    merge_summary,
    percentile,
    run_metadata,
    write_json,
)
from dedup.local.services import KafkaBroker, RedisServer
from dedup.local.spark import local_spark_session
from sinks import read_phase_timings
from sinks.kafka_io import ensure_topic
from sinks.verify import read_observed

VARIANTS = ("spark_kafka_sink", "eos_strong", "eos_weak", "eos_foreach_batch", "python_alo")
INPUT_PARTITIONS = 4


def fill(bootstrap: str, topic: str, records: int, value_bytes: int) -> None:
    ensure_topic(bootstrap, topic, INPUT_PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "queue.buffering.max.messages": 1_000_000})
    pad = "x" * max(0, value_bytes - 20)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=f"id-{i:09d}".encode(),
                                 value=f"{i:09d}-{pad}".encode(), partition=i % INPUT_PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


def run_variant(spark: Any, variant: str, bootstrap: str, redis_url: str, source: str,
                per_trigger: int, workdir: Path) -> dict[str, Any]:
    from pyspark.sql import functions as sf

    tag = uuid.uuid4().hex[:8]
    out = f"bench-out-{variant}-{tag}"
    ensure_topic(bootstrap, out, INPUT_PARTITIONS)
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(per_trigger)).load()
          .select(sf.col("key"), sf.col("value"),
                  sf.col("key").cast("string").alias("_record_id")))
    checkpoint = str(workdir / f"chk-{variant}-{tag}")
    timings = workdir / f"timings-{variant}-{tag}.jsonl"
    if variant == "spark_kafka_sink":
        writer = (df.drop("_record_id").writeStream.format("kafka")
                  .option("kafka.bootstrap.servers", bootstrap).option("topic", out))
    elif variant == "python_alo":
        writer = (df.writeStream.format(python_alo_sink.NAME)
                  .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
                  .option("app.id", f"bench-{variant}-{tag}"))
    elif variant == "eos_foreach_batch":
        from sinks import ExactlyOnceKafkaForeachBatch

        writer = df.writeStream.foreachBatch(ExactlyOnceKafkaForeachBatch({
            "kafka.bootstrap.servers": bootstrap, "topic": out,
            "app.id": f"bench-{variant}-{tag}", "redis.url": redis_url,
            "timings.path": str(timings)}))
    else:
        writer = (df.writeStream.format("exactly_once_kafka")
                  .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
                  .option("app.id", f"bench-{variant}-{tag}").option("redis.url", redis_url)
                  .option("strong.productions", str(variant == "eos_strong").lower())
                  .option("timings.path", str(timings)))
    writer = writer.option("checkpointLocation", checkpoint)
    start = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"{variant} failed: {query.exception()}")
    batches = len(query.recentProgress)
    written = len(read_observed(bootstrap, out))
    return {"variant": variant, "seconds": round(seconds, 3), "records_out": written,
            "batches": batches, "phases": read_phase_timings(timings)}


def phase_percentiles(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per variant and phase, p50 / p99 milliseconds of one partition write (measured
    rounds; writes of empty partitions, which skip the transaction, left out)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for variant in {r["variant"] for r in runs if r.get("phases")}:
        writes = [w for r in runs if r["variant"] == variant for w in r["phases"]
                  if "produce" in w]
        names = sorted({k for w in writes for k in w} - {"batch", "partition"})
        out[variant] = {name: {"p50_ms": percentile([w[name] * 1000 for w in writes
                                                     if name in w], 50),
                               "p99_ms": percentile([w[name] * 1000 for w in writes
                                                     if name in w], 99)}
                        for name in names}
    return out


def main() -> None:
    args = bench_args(__doc__, None,
                      full={"records": 100_000, "per_trigger": 20_000, "value_bytes": 100,
                            "rounds": 3},
                      quick={"records": 20_000, "per_trigger": 10_000, "rounds": 1})

    workdir = Path(tempfile.mkdtemp(prefix="bench-sink-"))
    redis_server = RedisServer(workdir / "redis", appendonly=True, appendfsync="everysec")
    broker = KafkaBroker(workdir / "kafka", heap_mb=512)
    try:
        redis_server.start()
        broker.start()
        bootstrap = broker.bootstrap_servers
        source = "bench-sink-input"
        fill(bootstrap, source, args.records, args.value_bytes)
        spark = local_spark_session("bench-sink", master="local[2]", shuffle_partitions=4)
        import sinks

        sinks.register(spark)
        spark.dataSource.register(python_alo_sink.PythonAloKafkaSink)
        # Warm-up: JVM, Python workers, Kafka producers; not measured.
        for variant in VARIANTS:
            run_variant(spark, variant, bootstrap, redis_server.url, source,
                        args.per_trigger, workdir)
        runs: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            for variant in VARIANTS:
                run = run_variant(spark, variant, bootstrap, redis_server.url, source,
                                  args.per_trigger, workdir)
                run["records_per_s"] = round(args.records / run["seconds"], 1)
                print(run, flush=True)
                runs.append(run)
        spark.stop()
    finally:
        broker.stop()
        redis_server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    median = {v: statistics.median(r["records_per_s"] for r in runs if r["variant"] == v)
              for v in VARIANTS}
    ratio_strong = round(median["eos_strong"] / median["spark_kafka_sink"], 3)
    ratio_weak = round(median["eos_weak"] / median["spark_kafka_sink"], 3)
    ratio_eos_alone = round(median["eos_strong"] / median["python_alo"], 3)
    ratio_python = round(median["python_alo"] / median["spark_kafka_sink"], 3)
    ratio_foreach = round(median["eos_foreach_batch"] / median["spark_kafka_sink"], 3)
    result = {
        "metadata": run_metadata(),
        "setup": {"records": args.records, "per_trigger": args.per_trigger,
                  "value_bytes": args.value_bytes, "rounds": args.rounds,
                  "input_partitions": INPUT_PARTITIONS, "master": "local[2]",
                  "measured": "wall time from start() to the end of availableNow, "
                              "median over rounds, after one warm-up round"},
        "median_records_per_s": median,
        "eos_sink_over_spark_kafka_sink": ratio_strong,
        "eos_weak_sink_over_spark_kafka_sink": ratio_weak,
        "eos_sink_over_python_alo_sink": ratio_eos_alone,
        "python_alo_sink_over_spark_kafka_sink": ratio_python,
        "eos_foreach_batch_sink_over_spark_kafka_sink": ratio_foreach,
        "phase_ms_per_partition_write": phase_percentiles(runs),
        "runs": [{k: v for k, v in r.items() if k != "phases"} for r in runs],
    }
    write_json("sink.json", result)
    merge_summary({"eos_sink_over_spark_kafka_sink": ratio_strong,
                   "eos_weak_sink_over_spark_kafka_sink": ratio_weak,
                   "eos_sink_over_python_alo_sink": ratio_eos_alone,
                   "python_alo_sink_over_spark_kafka_sink": ratio_python,
                   "eos_foreach_batch_sink_over_spark_kafka_sink": ratio_foreach})
    print(f"exactly-once sink / Spark Kafka sink throughput: strong {ratio_strong}, "
          f"weak {ratio_weak}; exactly-once / Python at-least-once {ratio_eos_alone}; "
          f"Python at-least-once / Spark {ratio_python}; foreachBatch front end / Spark "
          f"{ratio_foreach}")


if __name__ == "__main__":
    main()
