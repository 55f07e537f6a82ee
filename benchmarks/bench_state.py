"""One pass against Spark's own dedup pipeline with millions of IDs already in their state.

``bench_e2e`` compares the pipelines from empty state (380,000 IDs at its end); a
pipeline with a 7-day horizon holds millions to billions. Here each pipeline first
reads ``state_ids`` distinct records (``fill_per_trigger`` per micro-batch, not
measured) from one Kafka topic into its state: Spark's state store for
``spark_dedup_hdfs`` / ``spark_dedup_rocksdb`` (the variants of
:mod:`benchmarks.bench_e2e`: ``withWatermark`` with the catalog's 7-day horizon and
``dropDuplicatesWithinWatermark``, Spark's Kafka sink; RocksDB tuned as its users tune
it), the Redis catalog for ``eos_fused`` (:func:`sinks.deduplicate_to_kafka`). Then,
in ``--repeats`` rounds (a warm-up round first, not measured), ``records`` more
records are appended to the topic (``dup_rate`` of them re-sends of recent records,
some of them from the state) and every variant, in a rotated order, restarts from
its checkpoint and reads them with ``per_trigger`` per micro-batch
(``availableNow``).

A restart's first micro-batch loads the state (Spark's stores read their snapshot and
deltas; one pass's workers their Bloom filters): ``first_batch_ms`` reports it, and the
throughput counts the batches after it (``steady_records_per_s``: what a running
query sustains). ``e2e_eos_fused_over_spark_dedup_alo_10m`` divides one pass by the
faster of Spark's two in each round (median, ``_spread``, ``_rounds``). Memory: the
state operator's ``memoryUsedBytes`` and ``numRowsTotal`` from Spark's progress, the
state folder's bytes on disk, Redis's ``used_memory`` before and after one pass's
fill, and the JVM's peak RSS. At the end every variant's output topic is read back
(``read_committed``) and counted: each distinct record exactly once for every
variant, or the benchmark is void. Writes ``results/state.json`` (not a step of
``run_all``: about 30 minutes at 10 million IDs on the 2-core machine).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from benchmarks.bench_e2e import SPARK_DEDUP, fill_with_duplicates, pipeline_writer
from benchmarks.bench_sink import INPUT_PARTITIONS
from benchmarks.common import (
    bench_args,
    bench_services,
    median,
    progress,
    ratio,
    round_order,
    round_ratio,
    run_metadata,
    run_to_end,
    spark_jvm_pid,
    spread,
    streaming_batches,
    write_json,
)
from sinks.kafka_io import ensure_topic

VARIANTS = ("eos_fused", *SPARK_DEDUP)
TOPIC = "bench-state-input"
PARTITIONS = 2
"""Shuffle partitions, one per core of ``local[2]`` (as ``bench_e2e`` and ``dedup run``)."""


def count_output(bootstrap: str, topic: str, ids: int) -> dict[str, int]:
    """Read ``topic`` (``read_committed``) to its end; records, distinct IDs (the value's
    number, below ``ids``) and records whose ID was seen before."""
    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": f"bench-state-{time.time_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    seen = bytearray(ids)
    records = duplicates = 0
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        open_partitions = set(partitions)
        idle_since = time.monotonic()
        while open_partitions and time.monotonic() - idle_since < 60:
            for message in consumer.consume(10_000, timeout=1.0):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_partitions.discard(message.partition())
                    continue
                idle_since = time.monotonic()
                n = int((message.value() or b"")[:9])
                records += 1
                duplicates += seen[n]
                seen[n] = 1
    finally:
        consumer.close()
    if open_partitions:
        raise RuntimeError(f"the read of {topic} did not reach the end of partitions "
                           f"{sorted(open_partitions)}")
    return {"records": records, "distinct": sum(seen), "duplicates": duplicates}


def state_figures(query: Any, checkpoint: Path) -> dict[str, Any]:
    """Spark's state operator figures from the last progress, and the state folder's bytes."""
    last = query.lastProgress or {}
    operators = last.get("stateOperators") or [{}]
    state_dir = checkpoint / "state"
    disk = sum(f.stat().st_size for f in state_dir.rglob("*") if f.is_file()) \
        if state_dir.exists() else 0
    return {"state_rows": operators[0].get("numRowsTotal"),
            "state_memory_bytes": operators[0].get("memoryUsedBytes"),
            "state_disk_bytes": disk}


def peak_rss_bytes(pid: int | None) -> int | None:
    """``VmHWM`` of a process (its peak resident set), in bytes."""
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def run(spark: Any, variant: str, bootstrap: str, redis_url: str, workdir: Path,
        per_trigger: int) -> dict[str, Any]:
    """Restart ``variant`` from its checkpoint and read what the topic holds beyond it."""
    checkpoint = workdir / f"chk-{variant}"
    writer = pipeline_writer(spark, variant, bootstrap, redis_url, TOPIC, per_trigger,
                             f"bench-state-out-{variant}", app_id=f"bench-state-{variant}",
                             partitions=PARTITIONS)
    seconds, query = run_to_end(writer.option("checkpointLocation", str(checkpoint)))
    batches = streaming_batches(query)
    batch_ms = [int((p.get("durationMs") or {}).get("triggerExecution", 0)) for p in batches]
    steady_rows = sum(int(p["numInputRows"]) for p in batches[1:])
    steady_s = sum(batch_ms[1:]) / 1000
    return {"variant": variant, "seconds": round(seconds, 3), "batches": len(batches),
            "input_rows": sum(int(p["numInputRows"]) for p in batches),
            "first_batch_ms": batch_ms[0] if batch_ms else None, "batch_ms": batch_ms,
            "steady_records_per_s": round(steady_rows / steady_s, 1) if steady_s else None,
            **state_figures(query, checkpoint)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = bench_args(
        __doc__, argv,
        full={"state_ids": 10_000_000, "records": 400_000, "dup_rate": 0.05,
              "per_trigger": 50_000, "fill_per_trigger": 500_000, "value_bytes": 100,
              "repeats": 3, "driver_memory": "12g"},
        quick={"state_ids": 200_000, "records": 40_000, "per_trigger": 10_000,
               "fill_per_trigger": 100_000, "repeats": 1},
        helps={"state_ids": "distinct IDs read into every pipeline's state before the rounds",
               "driver_memory": "spark.driver.memory of the local[2] session (Spark's "
                                "HDFS-backed store keeps the state on the JVM's heap)"})
    log = progress("state")
    fills: dict[str, dict[str, Any]] = {}
    runs: list[dict[str, Any]] = []
    with bench_services("state", kafka=True) as services:
        bootstrap = services.bootstrap
        for variant in VARIANTS:
            ensure_topic(bootstrap, f"bench-state-out-{variant}", INPUT_PARTITIONS)
        started = time.monotonic()
        next_id = fill_with_duplicates(bootstrap, TOPIC, args.state_ids, 0.0,
                                       args.value_bytes, seed=7)
        log(f"state topic filled: {args.state_ids:,} IDs in {time.monotonic() - started:.0f} s")
        import redis as redis_client

        import sinks
        from dedup.local.spark import local_spark_session

        spark = local_spark_session("bench-state", master="local[2]",
                                    shuffle_partitions=PARTITIONS,
                                    conf={"spark.driver.memory": args.driver_memory})
        sinks.register(spark)
        jvm = spark_jvm_pid(spark)
        client = redis_client.Redis.from_url(services.redis_url)
        try:
            for variant in VARIANTS:  # the fills, not measured as throughput
                used = int(client.info("memory")["used_memory"])
                fill = run(spark, variant, bootstrap, services.redis_url, services.workdir,
                           args.fill_per_trigger)
                fill["redis_used_memory_delta"] = int(client.info("memory")["used_memory"]) - used
                fills[variant] = fill
                log(f"{variant}: {args.state_ids:,} IDs into its state in "
                    f"{fill['seconds']:.0f} s (state rows {fill['state_rows']}, memory "
                    f"{fill['state_memory_bytes']}, disk {fill['state_disk_bytes']:,} B, "
                    f"Redis +{fill['redis_used_memory_delta']:,} B)")
            for index in range(-1, args.repeats):  # round -1: the warm-up, not kept
                next_id = fill_with_duplicates(bootstrap, TOPIC, args.records, args.dup_rate,
                                               args.value_bytes, seed=8 + index, first=next_id)
                for variant in round_order(VARIANTS, max(index, 0), "rotate"):
                    result = run(spark, variant, bootstrap, services.redis_url,
                                 services.workdir, args.per_trigger)
                    result["round"] = index
                    log(f"{variant} (round {index + 1}): {result['seconds']:.1f} s, steady "
                        f"{result['steady_records_per_s']} rec/s, first batch "
                        f"{result['first_batch_ms']} ms, state rows {result['state_rows']}")
                    if index >= 0:
                        runs.append(result)
        finally:
            jvm_peak = peak_rss_bytes(jvm)
            spark.stop()
        outputs = {v: count_output(bootstrap, f"bench-state-out-{v}", next_id) for v in VARIANTS}
    exact = {v: o["distinct"] == o["records"] == next_id and o["duplicates"] == 0
             for v, o in outputs.items()}
    log(f"outputs: {outputs}")
    if not all(exact.values()):
        raise SystemExit(f"outputs not exact {outputs} (IDs {next_id:,}): the benchmark is void")
    summary = round_ratio(runs, "e2e_eos_fused_over_spark_dedup_alo_10m", "eos_fused",
                          SPARK_DEDUP, "steady_records_per_s")
    for baseline in SPARK_DEDUP:
        summary.update(round_ratio(runs, f"e2e_eos_fused_over_{baseline}_10m", "eos_fused",
                                   baseline, "steady_records_per_s"))
    per_variant = {v: {key: median([float(r[key]) for r in runs
                                    if r["variant"] == v and r.get(key) is not None])
                       for key in ("steady_records_per_s", "first_batch_ms", "seconds")}
                   for v in VARIANTS}
    result = {
        "metadata": run_metadata(),
        "level": "Spark streaming query, local[2], Kafka topic -> Kafka topic, "
                 f"{args.state_ids:,} IDs in state",
        "setup": {key: getattr(args, key) for key in
                  ("state_ids", "records", "dup_rate", "per_trigger", "fill_per_trigger",
                   "value_bytes", "repeats", "driver_memory")}
        | {"shuffle_partitions": PARTITIONS, "input_partitions": INPUT_PARTITIONS,
           "ids_at_end": next_id},
        "fills": fills, "runs": runs, "per_variant": per_variant,
        "jvm_peak_rss_bytes": jvm_peak, "outputs": outputs, "exact": exact,
        "first_batch_ms_over_spark": {v: ratio(per_variant["eos_fused"]["first_batch_ms"] or 0.0,
                                               per_variant[v]["first_batch_ms"] or 0.0)
                                      for v in SPARK_DEDUP},
        **summary,
        "spread_rule": "ratios per round (numerator and baseline of the same round), "
                       f"median and max - min over {args.repeats} rounds",
        "spread_of_steady_throughput": {v: spread([float(r["steady_records_per_s"])
                                                   for r in runs if r["variant"] == v])
                                        for v in VARIANTS},
    }
    write_json("state.json", result)
    return result


if __name__ == "__main__":
    main()
