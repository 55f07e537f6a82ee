"""End to end, Kafka to Kafka: Spark's at-least-once pipeline against ours.

One Kafka input topic is filled once (``records`` rows, ``dup_rate`` of them
re-sends of an earlier record with the same key and value, as a retrying
producer would make). Then, in the same Spark session (``local[2]``, same
shuffle partitions, same ``maxOffsetsPerTrigger``), each variant reads it
from the start with :func:`sources.read_kafka` and writes its own output
topic, run with ``availableNow``:

* ``spark_alo``: Spark's Kafka source -> Spark's Kafka sink, pass-through
  (at-least-once: the duplicates go through, and a retry can add more);
* ``eos_strong``: source -> record ID (the key) -> :func:`dedup.deduplicate`
  -> our ``exactly_once_kafka`` sink with strong productions;
* ``eos_weak``: the same with ``strong.productions=false``;
* ``eos_foreach_batch``: ``eos_strong`` with the sink's ``foreachBatch`` front end
  (:class:`sinks.ExactlyOnceKafkaForeachBatch`) instead of the Python data source;
* ``eos_fused``: the same dedup and sink in one pass per micro-batch
  (:func:`sinks.deduplicate_to_kafka`: each row crosses into Python once);
* ``dedup_spark_sink``: dedup, then Spark's Kafka sink -- splits the cost of
  the exactly-once path between the operator and our sink;
* ``python_alo_one_pass``: ``eos_fused``'s job shape (shuffle by shard, one
  ``mapInArrow`` task per partition, our record conversion and record-ID
  header) producing at least once, with no dedup and no transaction
  (:func:`benchmarks.python_alo_sink.python_alo_one_pass`): ``eos_fused``
  against it is the cost of the dedup decision and exactly-once alone, and it
  against ``spark_alo`` is the most that shape can reach.

Small micro-batches: ``spark_alo``, ``eos_strong``, ``eos_foreach_batch``,
``eos_fused`` and ``python_alo_one_pass`` again on a topic of
``small_records`` records read ``small_per_trigger`` (5,000) at a time,
interleaved ``--repeats`` times: their throughput ratio
(``e2e_eos_over_alo_kafka_small``) and the ratios of their p50 / p99
micro-batch durations (``triggerExecution`` of every batch of the fastest
run: ``batch_latency_p50_eos_over_alo``, ``batch_latency_p99_eos_over_alo``).

Every variant first runs once on a small warm-up topic; then the variants
run interleaved, ``--repeats`` times each, and the fastest run of each
counts (the machine is shared, and one slow run would otherwise decide a
ratio); every run is kept in the JSON. The outputs are read back
(``read_committed``) and counted against the input. Writes
``results/e2e.json``; ratios are throughput ratios to ``spark_alo``.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks.bench_sink import INPUT_PARTITIONS
from benchmarks.common import (
    bench_args,
    bench_services,
    percentile,
    phase_durations,
    progress,
    ratio,
    run_metadata,
    run_to_end,
    streaming_batches,
    write_json,
)
from sinks.kafka_io import ensure_topic
from sinks.verify import read_observed

VARIANTS = ("spark_alo", "eos_strong", "eos_weak", "eos_foreach_batch", "eos_fused",
            "dedup_spark_sink", "python_alo_one_pass")
SMALL_VARIANTS = ("spark_alo", "eos_strong", "eos_foreach_batch", "eos_fused",
                  "python_alo_one_pass")
SHUFFLE_PARTITIONS = 4
AT_LEAST_ONCE = ("spark_alo", "python_alo_one_pass")
"""Variants that pass the input's duplicates through (their output is checked for that)."""


def fill_with_duplicates(bootstrap: str, topic: str, records: int, dup_rate: float,
                         value_bytes: int, seed: int) -> int:
    """Produce ``records`` messages (duplicates re-send an earlier key and value).

    Returns the number of distinct keys. Keys and values follow
    :func:`benchmarks.bench_sink.fill`.
    """
    ensure_topic(bootstrap, topic, INPUT_PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "queue.buffering.max.messages": 1_000_000})
    rng = random.Random(seed)
    pad = "x" * max(0, value_bytes - 20)
    originals = 0
    for _ in range(records):
        if originals and rng.random() < dup_rate:
            n = max(0, originals - 1 - rng.randrange(min(originals, 50_000)))
        else:
            n = originals
            originals += 1
        while True:
            try:
                producer.produce(topic, key=f"id-{n:09d}".encode(),
                                 value=f"{n:09d}-{pad}".encode(),
                                 partition=n % INPUT_PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return originals


def run_variant(spark: Any, variant: str, bootstrap: str, redis_url: str, source: str,
                per_trigger: int, workdir: Path) -> dict[str, Any]:
    """Run ``variant`` from ``source`` to a fresh output topic to the end; its figures."""
    tag = uuid.uuid4().hex[:8]
    out = f"bench-e2e-{variant}-{tag}"
    ensure_topic(bootstrap, out, INPUT_PARTITIONS)
    writer = pipeline_writer(spark, variant, bootstrap, redis_url, source, per_trigger, out,
                             app_id=f"bench-e2e-{variant}-{tag}")
    writer = writer.option("checkpointLocation", str(workdir / f"chk-{variant}-{tag}"))
    return _measure(variant, writer, bootstrap, out)


def pipeline_writer(spark: Any, variant: str, bootstrap: str, redis_url: str, source: str,
                    per_trigger: int, out: str, app_id: str) -> Any:
    """The ``DataStreamWriter`` of ``variant`` (see the module docstring), reading
    ``source`` from its start and writing ``out``; no checkpoint location yet."""
    from pyspark.sql import functions as sf

    from dedup import deduplicate
    from dedup.config import DedupConfig, RedisConfig
    from dedup.constants import RECORD_ID_HEADER
    from sources.kafka import read_kafka

    if variant == "spark_alo":
        df = read_kafka(spark, bootstrap, source, id_strategy="none",
                        max_offsets_per_trigger=per_trigger).select("key", "value")
        return (df.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("topic", out))
    df = read_kafka(spark, bootstrap, source, id_strategy="key",
                    max_offsets_per_trigger=per_trigger)
    cfg = DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url))
    if variant == "dedup_spark_sink":
        df = deduplicate(df, cfg, num_partitions=SHUFFLE_PARTITIONS).select(
            "key", "value", sf.col("_record_id").cast("binary").alias("rid"))
        # carry the record ID as a header, as our sink does, so outputs can be audited
        df = df.select("key", "value", sf.array(sf.struct(
            sf.lit(RECORD_ID_HEADER).alias("key"), sf.col("rid").alias("value"))
        ).alias("headers"))
        return (df.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("topic", out).option("includeHeaders", "true"))
    sink_options = {"kafka.bootstrap.servers": bootstrap, "topic": out, "app.id": app_id,
                    "redis.url": redis_url}
    if variant == "python_alo_one_pass":
        from benchmarks.python_alo_sink import python_alo_one_pass

        return python_alo_one_pass(df.select("key", "value", "_record_id"), sink_options,
                                   cfg.num_shards, SHUFFLE_PARTITIONS)
    if variant == "eos_fused":
        from sinks import deduplicate_to_kafka

        return deduplicate_to_kafka(df.select("key", "value", "_record_id"), cfg, sink_options,
                                    num_partitions=SHUFFLE_PARTITIONS)
    df = deduplicate(df, cfg, num_partitions=SHUFFLE_PARTITIONS)
    if variant == "eos_foreach_batch":
        from sinks import ExactlyOnceKafkaForeachBatch

        return df.select("key", "value", "_record_id").writeStream.foreachBatch(
            ExactlyOnceKafkaForeachBatch(sink_options))
    return (df.select("key", "value", "_record_id").writeStream.format("exactly_once_kafka")
            .options(**sink_options)
            .option("strong.productions", str(variant == "eos_strong").lower()))


def _measure(variant: str, writer: Any, bootstrap: str, out: str) -> dict[str, Any]:
    """Run ``writer`` to the end; its timings and its output read back."""
    seconds, query = run_to_end(writer)
    batches = streaming_batches(query)
    written = read_observed(bootstrap, out)
    keys = len({value for _, value in written})
    return {"variant": variant, "seconds": round(seconds, 3), "batches": len(batches),
            "batch_ms": [int((p.get("durationMs") or {}).get("triggerExecution", 0))
                         for p in batches],
            "input_rows": sum(int(p["numInputRows"]) for p in batches),
            "records_out": len(written), "distinct_out": keys,
            "duration_ms_by_phase": phase_durations(batches)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = bench_args(
        __doc__, argv,
        full={"records": 400_000, "dup_rate": 0.05, "per_trigger": 50_000, "value_bytes": 100,
              "repeats": 2, "small_records": 100_000, "small_per_trigger": 5_000},
        quick={"records": 60_000, "per_trigger": 20_000, "repeats": 1,
               "small_records": 20_000},
        helps={"repeats": "interleaved runs per variant; the fastest counts"})
    log = progress("e2e")
    runs: list[dict[str, Any]] = []
    sweep: list[dict[str, Any]] = []
    small: list[dict[str, Any]] = []
    with bench_services("e2e", kafka=True) as services:
        bootstrap = services.bootstrap
        distinct = fill_with_duplicates(bootstrap, "bench-e2e-input", args.records,
                                        args.dup_rate, args.value_bytes, seed=3)
        fill_with_duplicates(bootstrap, "bench-e2e-warmup", 10_000, args.dup_rate,
                             args.value_bytes, seed=4)
        small_distinct = fill_with_duplicates(bootstrap, "bench-e2e-small", args.small_records,
                                              args.dup_rate, args.value_bytes, seed=5)
        log(f"input topic filled: {args.records:,} records, {distinct:,} distinct")
        from dedup.local.spark import local_spark_session

        spark = local_spark_session("bench-e2e", master="local[2]",
                                    shuffle_partitions=SHUFFLE_PARTITIONS)
        import sinks

        sinks.register(spark)
        try:
            for variant in VARIANTS:
                run_variant(spark, variant, bootstrap, services.redis_url, "bench-e2e-warmup",
                            args.per_trigger, services.workdir)
            log("warm-up done")
            for repeat in range(args.repeats):
                for variant in VARIANTS:
                    run = run_variant(spark, variant, bootstrap, services.redis_url,
                                      "bench-e2e-input", args.per_trigger, services.workdir)
                    run["repeat"] = repeat
                    run["records_per_s"] = round(args.records / run["seconds"], 1)
                    expected = args.records if variant in AT_LEAST_ONCE else distinct
                    run["output_correct"] = (run["records_out"] == expected
                                             and run["distinct_out"] == distinct)
                    run["duplicates_out"] = run["records_out"] - run["distinct_out"]
                    runs.append(run)
                    log(f"{variant} (run {repeat + 1}): {run['seconds']:.1f} s, "
                        f"{run['records_per_s']:.0f} rec/s, out {run['records_out']:,} "
                        f"({run['duplicates_out']:,} duplicates)")
            # Sensitivity: the same two pipelines with micro-batches twice as large,
            # to separate the per-batch fixed cost of the exactly-once path.
            for variant in ("spark_alo", "eos_strong"):
                run = run_variant(spark, variant, bootstrap, services.redis_url,
                                  "bench-e2e-input", 2 * args.per_trigger, services.workdir)
                run["records_per_s"] = round(args.records / run["seconds"], 1)
                run["per_trigger"] = 2 * args.per_trigger
                run["duplicates_out"] = run["records_out"] - run["distinct_out"]
                sweep.append(run)
                log(f"{variant} at {2 * args.per_trigger:,} per trigger: "
                    f"{run['records_per_s']:.0f} rec/s")
            for repeat in range(args.repeats):
                for variant in SMALL_VARIANTS:
                    run = run_variant(spark, variant, bootstrap, services.redis_url,
                                      "bench-e2e-small", args.small_per_trigger,
                                      services.workdir)
                    run["repeat"] = repeat
                    run["per_trigger"] = args.small_per_trigger
                    run["records_per_s"] = round(args.small_records / run["seconds"], 1)
                    run["duplicates_out"] = run["records_out"] - run["distinct_out"]
                    run["output_correct"] = run["distinct_out"] == small_distinct and (
                        variant in AT_LEAST_ONCE or run["duplicates_out"] == 0)
                    small.append(run)
                    log(f"{variant} at {args.small_per_trigger:,} per trigger (run "
                        f"{repeat + 1}): {run['records_per_s']:.0f} rec/s, batch p50 "
                        f"{percentile(run['batch_ms'], 50):.0f} ms, p99 "
                        f"{percentile(run['batch_ms'], 99):.0f} ms")
        finally:
            spark.stop()
    rate: dict[str, float] = {}
    for run in runs:
        rate[run["variant"]] = max(rate.get(run["variant"], 0.0), run["records_per_s"])
    wrong = [r["variant"] for r in runs + small if not r["output_correct"]]
    fastest_small = {v: max((r for r in small if r["variant"] == v),
                            key=lambda r: r["records_per_s"]) for v in SMALL_VARIANTS}
    latency = {v: {"p50_ms": percentile(r["batch_ms"], 50), "p99_ms": percentile(r["batch_ms"], 99)}
               for v, r in fastest_small.items()}
    if wrong:
        raise SystemExit(f"variants {wrong} produced wrong output: the benchmark is void")
    result = {
        "metadata": run_metadata(),
        "level": "Spark streaming query, local[2], Kafka topic -> Kafka topic",
        "setup": {"records": args.records, "distinct": distinct, "dup_rate": args.dup_rate,
                  "per_trigger": args.per_trigger, "value_bytes": args.value_bytes,
                  "input_partitions": INPUT_PARTITIONS,
                  "shuffle_partitions": SHUFFLE_PARTITIONS,
                  "redis": "redis-server, appendonly yes, appendfsync everysec",
                  "repeats": args.repeats,
                  "measured": "wall time start() -> end of availableNow; fastest of the "
                              "interleaved runs per variant, after a warm-up run on a small "
                              "topic"},
        "runs": runs,
        "records_per_s": rate,
        "e2e_eos_over_alo_kafka": ratio(rate["eos_strong"], rate["spark_alo"]),
        "e2e_eos_weak_over_alo_kafka": ratio(rate["eos_weak"], rate["spark_alo"]),
        "e2e_dedup_spark_sink_over_alo_kafka": ratio(rate["dedup_spark_sink"],
                                                     rate["spark_alo"]),
        "e2e_eos_foreach_batch_over_alo_kafka": ratio(rate["eos_foreach_batch"],
                                                      rate["spark_alo"]),
        "e2e_eos_fused_over_alo_kafka": ratio(rate["eos_fused"], rate["spark_alo"]),
        "double_batch_runs": sweep,
        "e2e_eos_over_alo_kafka_double_batch": ratio(
            *(next(r["records_per_s"] for r in sweep if r["variant"] == v)
              for v in ("eos_strong", "spark_alo"))) if len(sweep) == 2 else None,
        "small_batch_setup": {"records": args.small_records, "distinct": small_distinct,
                              "per_trigger": args.small_per_trigger},
        "small_batch_runs": small,
        "small_batch_latency_ms": latency,
        "e2e_eos_over_alo_kafka_small": ratio(fastest_small["eos_strong"]["records_per_s"],
                                              fastest_small["spark_alo"]["records_per_s"]),
        "batch_latency_p50_eos_over_alo": ratio(latency["eos_strong"]["p50_ms"],
                                                latency["spark_alo"]["p50_ms"]),
        "batch_latency_p99_eos_over_alo": ratio(latency["eos_strong"]["p99_ms"],
                                                latency["spark_alo"]["p99_ms"]),
        "e2e_eos_foreach_batch_over_alo_kafka_small": ratio(
            fastest_small["eos_foreach_batch"]["records_per_s"],
            fastest_small["spark_alo"]["records_per_s"]),
        "batch_latency_p50_eos_foreach_batch_over_alo": ratio(
            latency["eos_foreach_batch"]["p50_ms"], latency["spark_alo"]["p50_ms"]),
        "e2e_eos_fused_over_alo_kafka_small": ratio(
            fastest_small["eos_fused"]["records_per_s"],
            fastest_small["spark_alo"]["records_per_s"]),
        "batch_latency_p50_eos_fused_over_alo": ratio(
            latency["eos_fused"]["p50_ms"], latency["spark_alo"]["p50_ms"]),
        "batch_latency_p99_eos_fused_over_alo": ratio(
            latency["eos_fused"]["p99_ms"], latency["spark_alo"]["p99_ms"]),
        # The one-pass shape's floor: at least once, no dedup, no transaction.
        "e2e_python_alo_one_pass_over_alo_kafka": ratio(rate["python_alo_one_pass"],
                                                        rate["spark_alo"]),
        "e2e_eos_fused_over_python_alo_one_pass": ratio(rate["eos_fused"],
                                                        rate["python_alo_one_pass"]),
        "e2e_python_alo_one_pass_over_alo_kafka_small": ratio(
            fastest_small["python_alo_one_pass"]["records_per_s"],
            fastest_small["spark_alo"]["records_per_s"]),
        "batch_latency_p50_python_alo_one_pass_over_alo": ratio(
            latency["python_alo_one_pass"]["p50_ms"], latency["spark_alo"]["p50_ms"]),
    }
    write_json("e2e.json", result)
    return result


if __name__ == "__main__":
    main()
