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
* ``spark_dedup_hdfs`` / ``spark_dedup_rocksdb``: Spark's own dedup pipeline, what a
  user picks instead of ours: Spark's Kafka source -> ``withWatermark`` on the Kafka
  timestamp with the catalog's default horizon (7 days) -> ``dropDuplicatesWithinWatermark``
  on the key -> Spark's Kafka sink, at least once; on the default HDFS-backed state store
  and on RocksDB tuned as its users tune it (changelog checkpointing, no row count:
  :data:`benchmarks.bench_operators.ROCKSDB_TUNED`). ``e2e_eos_fused_over_spark_dedup_alo``
  divides one pass by the faster of the two in each round;
* ``python_alo_one_pass``: ``eos_fused``'s job shape (shuffle by shard, one
  ``mapInArrow`` task per partition, our record conversion and record-ID
  header) producing at least once, with no dedup and no transaction
  (:func:`benchmarks.python_alo_sink.python_alo_one_pass`): ``eos_fused``
  against it is the cost of the dedup decision and exactly-once alone, and it
  against ``spark_alo`` is the most that shape can reach.

Small micro-batches: ``spark_alo``, ``eos_strong``, ``eos_foreach_batch``,
``eos_fused`` and ``python_alo_one_pass`` again on a topic of
``small_records`` records read ``small_per_trigger`` (5,000) at a time, in
rounds as below: their throughput ratio (``e2e_eos_over_alo_kafka_small``)
and the ratios of their p50 / p99 micro-batch durations (``triggerExecution``
of every batch of a run: ``batch_latency_p50_eos_over_alo``,
``batch_latency_p99_eos_over_alo``).

Every variant first runs once on the measured input, not measured (a warm-up
round: with a small warm-up topic, Spark's pipeline ran its first measured run at
61.8-72.8k records/s and the later ones at 109-117k, in three sittings); then the variants
run in ``--repeats`` rounds (default 3), each round every variant once, in an
order rotated by one per round (``--order rotate``; ``fixed`` keeps it: see
:func:`benchmarks.common.round_order`). Each ratio is computed per round
(numerator and baseline from the same round) and reported as the median over
the rounds, with ``<ratio>_spread`` (max - min over the rounds) and
``<ratio>_rounds`` (the per-round values) beside it; ``records_per_s`` per
variant is its median run. Our sinks record each partition write's phases
(sink option ``timings.path``, :mod:`sinks.timing`): ``phase_ms`` and
``small_batch_phase_ms`` give p50 / p99 per phase and variant. ``--partitions``
sets the shuffle by shard's partitions (and ``spark.sql.shuffle.partitions``).
During each run's measured window a
:class:`benchmarks.common.CpuSampler` records CPU seconds of the Spark JVM,
the Python workers, the Kafka broker, Redis and this driver process:
``cpu_s_per_record_{jvm,python,broker,redis,driver}`` per run and, median over
rounds, per variant (``per_variant``). The outputs are read back
(``read_committed``) and counted against the input. Writes
``results/e2e.json`` (``BENCH_RESULTS_DIR`` moves it); ratios are throughput
ratios to ``spark_alo``. The double-batch sensitivity check runs once per
variant after the rounds (no spread).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks.bench_sink import INPUT_PARTITIONS, phase_percentiles
from benchmarks.common import (
    CPU_CLASSES,
    CpuSampler,
    Services,
    bench_args,
    bench_services,
    cpu_per_record,
    empty_redis,
    output_correct,
    percentile,
    phase_durations,
    progress,
    ratio,
    refuse_wrong_outputs,
    round_order,
    round_ratio,
    run_metadata,
    run_to_end,
    spark_jvm_pid,
    streaming_batches,
    variant_medians,
    write_json,
)
from sinks import read_phase_timings
from sinks.kafka_io import ensure_topic
from sinks.verify import read_observed

VARIANTS = ("spark_alo", "eos_strong", "eos_weak", "eos_foreach_batch", "eos_fused",
            "dedup_spark_sink", "python_alo_one_pass", "spark_dedup_hdfs", "spark_dedup_rocksdb")
SPARK_DEDUP = ("spark_dedup_hdfs", "spark_dedup_rocksdb")
"""Spark's own dedup pipeline on its two state stores (the ratio's baseline is the faster)."""
SPARK_DEDUP_DELAY = "7 days"
"""The watermark delay of Spark's dedup pipeline: the catalog's default horizon
(:class:`dedup.config.RetentionConfig`), so both keep the same IDs."""
SMALL_VARIANTS = ("spark_alo", "eos_strong", "eos_foreach_batch", "eos_fused",
                  "python_alo_one_pass")
SHUFFLE_PARTITIONS = 2
"""One per core of ``local[2]``, as ``dedup run`` defaults to
(:func:`dedup.cli.run.shuffle_partitions`): at 5,000 records per trigger one pass ran
0.547x Spark's pipeline against 0.425x with 4 (bench_e2e, 2026-11-28)."""
AT_LEAST_ONCE = ("spark_alo", "python_alo_one_pass")
"""Variants that pass the input's duplicates through (their output is checked for that)."""


def fill_with_duplicates(bootstrap: str, topic: str, records: int, dup_rate: float,
                         value_bytes: int, seed: int, first: int = 0) -> int:
    """Produce ``records`` messages (duplicates re-send an earlier key and value).

    New IDs are numbered from ``first`` on; a re-send picks one of the last 50,000 IDs
    (which may lie before ``first``). Returns the next unused ID: from ``first`` 0, the
    number of distinct keys. Keys and values follow :func:`benchmarks.bench_sink.fill`.
    """
    ensure_topic(bootstrap, topic, INPUT_PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "queue.buffering.max.messages": 1_000_000})
    rng = random.Random(seed)
    pad = "x" * max(0, value_bytes - 20)
    originals = first
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


def filled_input(bootstrap: str, topic: str, args: Any, log: Any) -> int:
    """:func:`fill_with_duplicates` with a benchmark's sizes (``args``: ``records``,
    ``dup_rate``, ``value_bytes``), logged; the number of distinct IDs."""
    distinct = fill_with_duplicates(bootstrap, topic, args.records, args.dup_rate,
                                    args.value_bytes, seed=3)
    log(f"input topic filled: {args.records:,} records, {distinct:,} distinct")
    return distinct


def measured_session(name: str, services: Services, partitions: int,
                     conf: dict[str, str] | None = None) -> tuple[Any, dict[str, int | None]]:
    """A ``local[2]`` session with ``partitions`` shuffle partitions (and Spark settings
    ``conf``) and our sinks registered, and the pids whose CPU the rounds sample (JVM,
    Redis, broker)."""
    from dedup.local.spark import local_spark_session

    spark = local_spark_session(name, master="local[2]", shuffle_partitions=partitions,
                                conf=conf)
    import sinks

    sinks.register(spark)
    broker = services.broker
    return spark, {"jvm": spark_jvm_pid(spark), "redis": services.redis.pid,
                   "broker": broker.pid if broker is not None else None}


def run_variant(spark: Any, variant: str, bootstrap: str, redis_url: str, source: str,
                per_trigger: int, workdir: Path, cpu_pids: Mapping[str, int | None] | None = None,
                cpu_interval: float = 0.5, partitions: int = SHUFFLE_PARTITIONS
                ) -> dict[str, Any]:
    """Run ``variant`` from ``source`` to a fresh output topic to the end; its figures
    (with ``cpu_s`` per process class of ``cpu_pids`` over the run, when given).
    Empties the benchmark's Redis first."""
    empty_redis(redis_url)
    tag = uuid.uuid4().hex[:8]
    out = f"bench-e2e-{variant}-{tag}"
    ensure_topic(bootstrap, out, INPUT_PARTITIONS)
    timings = workdir / f"timings-{variant}-{tag}.jsonl"
    writer = pipeline_writer(spark, variant, bootstrap, redis_url, source, per_trigger, out,
                             app_id=f"bench-e2e-{variant}-{tag}", partitions=partitions,
                             timings=str(timings))
    writer = writer.option("checkpointLocation", str(workdir / f"chk-{variant}-{tag}"))
    run = _measure(variant, writer, bootstrap, out, cpu_pids, cpu_interval)
    run["phases"] = read_phase_timings(timings)
    return run


def pipeline_writer(spark: Any, variant: str, bootstrap: str, redis_url: str, source: str,
                    per_trigger: int, out: str, app_id: str,
                    partitions: int = SHUFFLE_PARTITIONS, timings: str | None = None) -> Any:
    """The ``DataStreamWriter`` of ``variant`` (see the module docstring), reading
    ``source`` from its start and writing ``out`` with ``partitions`` shuffle partitions
    after the shuffle by shard; our sinks append their partition writes' phase timings
    to ``timings`` when given (sink option ``timings.path``); no checkpoint location yet."""
    from pyspark.sql import functions as sf

    from benchmarks.bench_operators import HDFS, ROCKSDB, ROCKSDB_TUNED
    from dedup import deduplicate
    from dedup.config import DedupConfig, RedisConfig
    from dedup.constants import RECORD_ID_HEADER
    from sources.kafka import read_kafka

    # The state store is a session setting read when a query starts (and kept in its
    # checkpoint): set for every variant, so one run's choice never leaks into the next.
    rocksdb = variant == "spark_dedup_rocksdb"
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB if rocksdb else HDFS)
    for key, setting in ROCKSDB_TUNED.items():
        if rocksdb:
            spark.conf.set(key, setting)
        else:
            spark.conf.unset(key)
    if variant == "spark_alo" or variant in SPARK_DEDUP:
        df = read_kafka(spark, bootstrap, source, id_strategy="none",
                        max_offsets_per_trigger=per_trigger)
        if variant in SPARK_DEDUP:
            df = (df.withWatermark("timestamp", SPARK_DEDUP_DELAY)
                  .dropDuplicatesWithinWatermark(["key"]))
        return (df.select("key", "value").writeStream.format("kafka")
                .option("kafka.bootstrap.servers", bootstrap).option("topic", out))
    df = read_kafka(spark, bootstrap, source, id_strategy="key",
                    max_offsets_per_trigger=per_trigger)
    cfg = DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url))
    if variant == "dedup_spark_sink":
        df = deduplicate(df, cfg, num_partitions=partitions).select(
            "key", "value", sf.col("_record_id").cast("binary").alias("rid"))
        # carry the record ID as a header, as our sink does, so outputs can be audited
        df = df.select("key", "value", sf.array(sf.struct(
            sf.lit(RECORD_ID_HEADER).alias("key"), sf.col("rid").alias("value"))
        ).alias("headers"))
        return (df.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("topic", out).option("includeHeaders", "true"))
    sink_options = {"kafka.bootstrap.servers": bootstrap, "topic": out, "app.id": app_id,
                    "redis.url": redis_url, **({"timings.path": timings} if timings else {})}
    if variant == "python_alo_one_pass":
        from benchmarks.python_alo_sink import python_alo_one_pass

        return python_alo_one_pass(df.select("key", "value", "_record_id"), sink_options,
                                   cfg.num_shards, partitions)
    if variant == "eos_fused":
        from sinks import deduplicate_to_kafka

        return deduplicate_to_kafka(df.select("key", "value", "_record_id"), cfg, sink_options,
                                    num_partitions=partitions)
    df = deduplicate(df, cfg, num_partitions=partitions)
    if variant == "eos_foreach_batch":
        from sinks import ExactlyOnceKafkaForeachBatch

        return df.select("key", "value", "_record_id").writeStream.foreachBatch(
            ExactlyOnceKafkaForeachBatch(sink_options))
    return (df.select("key", "value", "_record_id").writeStream.format("exactly_once_kafka")
            .options(**sink_options)
            .option("strong.productions", str(variant == "eos_strong").lower()))


def _measure(variant: str, writer: Any, bootstrap: str, out: str,
             cpu_pids: Mapping[str, int | None] | None = None,
             cpu_interval: float = 0.5) -> dict[str, Any]:
    """Run ``writer`` to the end; its timings, CPU seconds per process class over that
    window (when ``cpu_pids`` is given) and its output read back (after the window)."""
    sampler = CpuSampler(cpu_pids, cpu_interval).start() if cpu_pids else None
    try:
        seconds, query = run_to_end(writer)
    finally:
        cpu_s = sampler.stop() if sampler is not None else None
    batches = streaming_batches(query)
    work = spark_jobs(query)
    written = read_observed(bootstrap, out)
    keys = len({value for _, value in written})
    per_batch = {f"{name}_per_batch": round(count / len(batches), 2)
                 for name, count in work.items()} if batches else {}
    return {"variant": variant, "seconds": round(seconds, 3), "batches": len(batches),
            **work, **per_batch,
            "batch_ms": [int((p.get("durationMs") or {}).get("triggerExecution", 0))
                         for p in batches],
            "input_rows": sum(int(p["numInputRows"]) for p in batches),
            "records_out": len(written), "distinct_out": keys,
            "duration_ms_by_phase": phase_durations(batches),
            **({"cpu_s": cpu_s} if cpu_s is not None else {})}


def spark_jobs(query: Any) -> dict[str, int]:
    """Spark jobs, stages and tasks of ``query``'s run (its job group is its run id), from
    the session's status tracker: what each micro-batch costs the JVM beyond its rows.
    Stages skipped because their shuffle output was reused are not counted."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        return {}
    tracker = session.sparkContext.statusTracker()
    jobs = [info for info in map(tracker.getJobInfo, tracker.getJobIdsForGroup(str(query.runId)))
            if info is not None]
    stages = [stage for stage in (tracker.getStageInfo(sid) for job in jobs
                                  for sid in job.stageIds) if stage is not None]
    return {"jobs": len(jobs), "stages": len(stages),
            "tasks": sum(stage.numTasks for stage in stages)}


def finish_run(run: dict[str, Any], round_index: int, records: int) -> dict[str, Any]:
    """Add the round, the throughput and CPU seconds per record to a measured run."""
    run["round"] = round_index
    run["records_per_s"] = round(records / run["seconds"], 1)
    run["duplicates_out"] = run["records_out"] - run["distinct_out"]
    run.update(cpu_per_record(run.get("cpu_s") or {}, records))
    if run["batch_ms"]:
        run["p50_ms"] = percentile(run["batch_ms"], 50)
        run["p99_ms"] = percentile(run["batch_ms"], 99)
    return run


THROUGHPUT_RATIOS: tuple[tuple[str, str, str | tuple[str, ...]], ...] = (
    ("e2e_eos_over_alo_kafka", "eos_strong", "spark_alo"),
    ("e2e_eos_weak_over_alo_kafka", "eos_weak", "spark_alo"),
    ("e2e_dedup_spark_sink_over_alo_kafka", "dedup_spark_sink", "spark_alo"),
    ("e2e_eos_foreach_batch_over_alo_kafka", "eos_foreach_batch", "spark_alo"),
    ("e2e_eos_fused_over_alo_kafka", "eos_fused", "spark_alo"),
    # the one-pass shape's floor: at least once, no dedup, no transaction
    ("e2e_python_alo_one_pass_over_alo_kafka", "python_alo_one_pass", "spark_alo"),
    ("e2e_eos_fused_over_python_alo_one_pass", "eos_fused", "python_alo_one_pass"),
    # what a user picks instead: Spark's own dedup pipeline, the faster of its two stores
    ("e2e_eos_fused_over_spark_dedup_alo", "eos_fused", SPARK_DEDUP),
    ("e2e_eos_fused_over_spark_dedup_hdfs", "eos_fused", "spark_dedup_hdfs"),
    ("e2e_eos_fused_over_spark_dedup_rocksdb", "eos_fused", "spark_dedup_rocksdb"),
    ("e2e_spark_dedup_hdfs_over_alo_kafka", "spark_dedup_hdfs", "spark_alo"),
    ("e2e_spark_dedup_rocksdb_over_alo_kafka", "spark_dedup_rocksdb", "spark_alo"),
)
"""(name, numerator, baseline) of the throughput ratios of the main rounds."""
SMALL_RATIOS = (
    ("e2e_eos_over_alo_kafka_small", "eos_strong", "spark_alo", "records_per_s"),
    ("batch_latency_p50_eos_over_alo", "eos_strong", "spark_alo", "p50_ms"),
    ("batch_latency_p99_eos_over_alo", "eos_strong", "spark_alo", "p99_ms"),
    ("e2e_eos_foreach_batch_over_alo_kafka_small", "eos_foreach_batch", "spark_alo",
     "records_per_s"),
    ("batch_latency_p50_eos_foreach_batch_over_alo", "eos_foreach_batch", "spark_alo", "p50_ms"),
    ("e2e_eos_fused_over_alo_kafka_small", "eos_fused", "spark_alo", "records_per_s"),
    ("batch_latency_p50_eos_fused_over_alo", "eos_fused", "spark_alo", "p50_ms"),
    ("batch_latency_p99_eos_fused_over_alo", "eos_fused", "spark_alo", "p99_ms"),
    ("e2e_python_alo_one_pass_over_alo_kafka_small", "python_alo_one_pass", "spark_alo",
     "records_per_s"),
    ("batch_latency_p50_python_alo_one_pass_over_alo", "python_alo_one_pass", "spark_alo",
     "p50_ms"),
)
"""(name, numerator, baseline, the run's figure) of the small-batch rounds' ratios."""
PER_VARIANT_KEYS = ("records_per_s", "seconds", *(f"cpu_s_per_record_{c}" for c in CPU_CLASSES),
                    "jobs_per_batch", "stages_per_batch", "tasks_per_batch")


def summarize(runs: list[dict[str, Any]], small: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per variant and every ratio (median, ``_spread``, ``_rounds``) of the runs
    of the main rounds and of the small-batch rounds."""
    per_variant = variant_medians(runs, PER_VARIANT_KEYS)
    small_per_variant = variant_medians(small, (*PER_VARIANT_KEYS, "p50_ms", "p99_ms"))
    out: dict[str, Any] = {
        "records_per_s": {v: m["records_per_s"] for v, m in per_variant.items()},
        "per_variant": per_variant,
        "small_batch_per_variant": small_per_variant,
        "small_batch_latency_ms": {v: {"p50_ms": m["p50_ms"], "p99_ms": m["p99_ms"]}
                                   for v, m in small_per_variant.items()},
        # p50 / p99 of one partition write per phase (sinks.timing), our sinks only
        "phase_ms": phase_percentiles(runs),
        "small_batch_phase_ms": phase_percentiles(small),
    }
    for name, numerator, baseline in THROUGHPUT_RATIOS:
        out.update(round_ratio(runs, name, numerator, baseline))
    for name, numerator, baseline, figure in SMALL_RATIOS:
        out.update(round_ratio(small, name, numerator, baseline, figure))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = bench_args(
        __doc__, argv,
        full={"records": 400_000, "dup_rate": 0.05, "per_trigger": 50_000, "value_bytes": 100,
              "repeats": 3, "small_records": 100_000, "small_per_trigger": 5_000,
              "order": "rotate", "cpu_interval": 0.5,
              "partitions": SHUFFLE_PARTITIONS},
        quick={"records": 60_000, "per_trigger": 20_000, "repeats": 1,
               "small_records": 20_000},
        helps={"repeats": "rounds: each round runs every variant once; ratios are per round, "
                          "reported as the median with the spread (max - min); default 3",
               "order": "rotate (round k starts at variant k) or fixed",
               "cpu_interval": "seconds between samples of the Python workers' CPU",
               "partitions": "partitions of the shuffle by shard (and of the session's "
                             f"spark.sql.shuffle.partitions); default {SHUFFLE_PARTITIONS}"})
    log = progress("e2e")
    runs: list[dict[str, Any]] = []
    sweep: list[dict[str, Any]] = []
    small: list[dict[str, Any]] = []
    with bench_services("e2e", kafka=True) as services:
        bootstrap = services.bootstrap
        distinct = fill_with_duplicates(bootstrap, "bench-e2e-input", args.records,
                                        args.dup_rate, args.value_bytes, seed=3)
        small_distinct = fill_with_duplicates(bootstrap, "bench-e2e-small", args.small_records,
                                              args.dup_rate, args.value_bytes, seed=5)
        log(f"input topic filled: {args.records:,} records, {distinct:,} distinct")
        spark, cpu_pids = measured_session("bench-e2e", services, args.partitions)
        log(f"CPU sampled for pids {cpu_pids}")
        try:
            for variant in VARIANTS:
                run_variant(spark, variant, bootstrap, services.redis_url, "bench-e2e-input",
                            args.per_trigger, services.workdir, partitions=args.partitions)
            log("warm-up round done (not measured)")
            for index in range(args.repeats):
                for variant in round_order(VARIANTS, index, args.order):
                    run = finish_run(run_variant(
                        spark, variant, bootstrap, services.redis_url, "bench-e2e-input",
                        args.per_trigger, services.workdir, cpu_pids, args.cpu_interval,
                        args.partitions), index, args.records)
                    run["output_correct"] = output_correct(run, variant in AT_LEAST_ONCE,
                                                           args.records, distinct)
                    runs.append(run)
                    log(f"{variant} (round {index + 1}): {run['seconds']:.1f} s, "
                        f"{run['records_per_s']:.0f} rec/s, out {run['records_out']:,} "
                        f"({run['duplicates_out']:,} duplicates), CPU s {run.get('cpu_s')}")
            # Sensitivity: the same two pipelines with micro-batches twice as large,
            # to separate the per-batch fixed cost of the exactly-once path.
            for variant in ("spark_alo", "eos_strong"):
                run = finish_run(run_variant(
                    spark, variant, bootstrap, services.redis_url, "bench-e2e-input",
                    2 * args.per_trigger, services.workdir, cpu_pids, args.cpu_interval,
                    args.partitions), 0, args.records)
                run["per_trigger"] = 2 * args.per_trigger
                sweep.append(run)
                log(f"{variant} at {2 * args.per_trigger:,} per trigger: "
                    f"{run['records_per_s']:.0f} rec/s")
            for index in range(args.repeats):
                for variant in round_order(SMALL_VARIANTS, index, args.order):
                    run = finish_run(run_variant(
                        spark, variant, bootstrap, services.redis_url, "bench-e2e-small",
                        args.small_per_trigger, services.workdir, cpu_pids, args.cpu_interval,
                        args.partitions), index, args.small_records)
                    run["per_trigger"] = args.small_per_trigger
                    run["output_correct"] = run["distinct_out"] == small_distinct and (
                        variant in AT_LEAST_ONCE or run["duplicates_out"] == 0)
                    small.append(run)
                    log(f"{variant} at {args.small_per_trigger:,} per trigger (round "
                        f"{index + 1}): {run['records_per_s']:.0f} rec/s, batch p50 "
                        f"{run.get('p50_ms', 0):.0f} ms, p99 {run.get('p99_ms', 0):.0f} ms")
        finally:
            spark.stop()
    refuse_wrong_outputs(runs + small)
    summary = summarize(runs, small)
    for run in (*runs, *small, *sweep):
        run.pop("phases", None)  # summarized in phase_ms / small_batch_phase_ms
    result = {
        "metadata": run_metadata(),
        "level": "Spark streaming query, local[2], Kafka topic -> Kafka topic",
        "setup": {"records": args.records, "distinct": distinct, "dup_rate": args.dup_rate,
                  "per_trigger": args.per_trigger, "value_bytes": args.value_bytes,
                  "input_partitions": INPUT_PARTITIONS,
                  "shuffle_partitions": args.partitions,
                  "redis": "redis-server, appendonly yes, appendfsync everysec",
                  "repeats": args.repeats, "rounds": args.repeats, "order": args.order,
                  "cpu_interval_s": args.cpu_interval,
                  "measured": "wall time start() -> end of availableNow, after a warm-up round "
                              "on the same input; variants in rounds (each once per round, "
                              f"order {args.order}); each ratio per round, median over the "
                              "rounds, _spread = max - min over the rounds; CPU seconds per "
                              "process class over the same window (/proc stat)"},
        "runs": runs,
        "double_batch_runs": sweep,
        "e2e_eos_over_alo_kafka_double_batch": ratio(
            *(next(r["records_per_s"] for r in sweep if r["variant"] == v)
              for v in ("eos_strong", "spark_alo"))) if len(sweep) == 2 else None,
        "small_batch_setup": {"records": args.small_records, "distinct": small_distinct,
                              "per_trigger": args.small_per_trigger},
        "small_batch_runs": small,
        **summary,
    }
    write_json("e2e.json", result)
    return result


if __name__ == "__main__":
    main()
