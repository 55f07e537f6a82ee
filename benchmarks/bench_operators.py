"""Dedup throughput on one input: our operator against Spark's own operators.

Same Spark session (``local[2]``, the same ``spark.sql.shuffle.partitions``
for every variant, AQE off), same parquet input (generated once: ``records``
rows, ``dup_rate`` of them re-sends of an earlier row within the last
``window`` rows, so duplicates fall within and across micro-batches), same
micro-batches (``maxFilesPerTrigger``, 2 files of 100k rows by default, as in
:mod:`benchmarks.bench_dedup`), each variant with its own
checkpoint, written to Spark's ``noop`` sink, run with ``availableNow``:

* ``passthrough``: no dedup;
* ``dedup_operator``: :func:`dedup.deduplicate` (Bloom + Redis catalog);
* ``dropduplicates_hdfs`` / ``dropduplicates_rocksdb``: ``dropDuplicates``
  with the HDFS-backed / RocksDB state store (state kept forever);
* ``dropduplicates_rocksdb_tuned``: the RocksDB variant as its users tune
  it: ``stateStore.rocksdb.trackTotalNumberOfRows=false`` (no row count read
  per update) and changelog checkpointing on;
* ``dropduplicates_within_watermark``: ``withWatermark`` (10 minutes of event
  time) + ``dropDuplicatesWithinWatermark`` (HDFS-backed store);
* ``operator_skeleton``: the operator's Spark shape deciding nothing
  (:func:`benchmarks.common.operator_skeleton`), the ceiling of any decision
  made in that shape: ``skeleton_over_*`` is how far each bar of
  ``dedup_over_*`` could be reached with a decision that costs nothing.

Each variant first runs once on the measured input (a warm-up round, not
measured: after a small warm-up input the pass-through ran its three rounds at
584k, 897k and 1,225k records/s on 2026-11-28, still warming up); then
the variants run in ``--repeats`` rounds (default 3), each round every
variant once, in an order rotated by one per round (``--order rotate``;
``fixed`` keeps it: see :func:`benchmarks.common.round_order`). Each ratio is
computed per round (numerator and baseline from the same round) and reported
as the median over the rounds, with ``<ratio>_spread`` (max - min over the
rounds) and ``<ratio>_rounds`` (the per-round values) beside it; every run is
kept in the JSON. Measured: wall time from ``start()`` to the end of
``availableNow``; records/s (per variant: its median run); CPU seconds per
record of the Spark JVM, the Python workers, Redis and this driver process
over that window (:class:`benchmarks.common.CpuSampler`:
``cpu_s_per_record_{jvm,python,redis,driver}`` per run and, median over
rounds, per variant in ``per_variant``). Writes ``results/operators.json``
(``BENCH_RESULTS_DIR`` moves it); ratios to pass-through and dropDuplicates.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    CPU_CLASSES,
    CpuSampler,
    bench_args,
    bench_services,
    cpu_per_record,
    empty_redis,
    operator_skeleton,
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

VARIANTS = ("passthrough", "dedup_operator", "dropduplicates_hdfs", "dropduplicates_rocksdb",
            "dropduplicates_rocksdb_tuned", "dropduplicates_within_watermark",
            "operator_skeleton")
SCHEMA = "event_id string, payload string, event_time timestamp"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
ROCKSDB_TUNED = {
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
SHUFFLE_PARTITIONS = 2
"""One per core of ``local[2]``, as ``dedup run`` defaults to
(:func:`dedup.cli.run.shuffle_partitions`): at 5,000 records per trigger one pass ran
0.547x Spark's pipeline against 0.425x with 4 (bench_e2e, 2026-11-28)."""
NUM_SHARDS = 8


def write_input(folder: Path, records: int, files: int, dup_rate: float, window: int,
                seed: int) -> int:
    """Write ``files`` parquet files; returns the number of distinct IDs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    source = np.arange(records)
    dup_rows = np.flatnonzero(rng.random(records) < dup_rate)
    dup_rows = dup_rows[dup_rows > 0]
    back = rng.integers(1, window + 1, size=dup_rows.size)
    source[dup_rows] = np.maximum(dup_rows - back, 0)
    # chase chains so a duplicate always points at an original row
    while True:
        chained = source[source] != source
        if not chained.any():
            break
        source = np.where(chained, source[source], source)
    hi = rng.integers(0, 2**63, size=records, dtype=np.int64)
    lo = rng.integers(0, 2**63, size=records, dtype=np.int64)
    ids = np.array([f"{a:016x}{b:016x}" for a, b in zip(hi, lo, strict=True)], dtype=object)
    base = np.datetime64("2026-01-01T00:00:00", "ms")
    times = base + source.astype("timedelta64[ms]")
    event_ids = ids[source]
    payload = np.array([f"payload-{i:012d}-" + "x" * 40 for i in source], dtype=object)
    per_file = -(-records // files)
    for f in range(files):
        part = slice(f * per_file, min(records, (f + 1) * per_file))
        table = pa.table({"event_id": pa.array(event_ids[part], pa.string()),
                          "payload": pa.array(payload[part], pa.string()),
                          "event_time": pa.array(times[part], pa.timestamp("ms"))})
        pq.write_table(table, folder / f"part-{f:04d}.parquet")
    return int(np.unique(source).size)


def build(spark: Any, variant: str, folder: Path, redis_url: str, tag: str,
          files_per_trigger: int) -> Any:
    """The streaming DataFrame of one variant (``_record_id`` = ``event_id``)."""
    from dedup import deduplicate
    from dedup.config import DedupConfig, RedisConfig
    from sources.files import read_files

    df = read_files(spark, str(folder), format="parquet", schema=SCHEMA, id_strategy="column",
                    key_column="event_id", max_files_per_trigger=files_per_trigger)
    if variant == "passthrough":
        return df
    if variant == "dedup_operator":
        cfg = DedupConfig(app_id=f"bench-ops-{tag}", redis=RedisConfig(url=redis_url),
                          num_shards=NUM_SHARDS)
        return deduplicate(df, cfg, num_partitions=SHUFFLE_PARTITIONS)
    if variant == "operator_skeleton":
        # The operator's shape without its work -- isolates Spark's part.
        return operator_skeleton(df, "_record_id", NUM_SHARDS, SHUFFLE_PARTITIONS)
    if variant == "dropduplicates_within_watermark":
        return (df.withWatermark("event_time", "10 minutes")
                .dropDuplicatesWithinWatermark(["_record_id"]))
    return df.dropDuplicates(["_record_id"])


def run_variant(spark: Any, variant: str, folder: Path, redis_url: str, workdir: Path,
                files_per_trigger: int, cpu_pids: Mapping[str, int | None] | None = None,
                cpu_interval: float = 0.5) -> dict[str, Any]:
    """Run ``variant`` to the end; its figures (with ``cpu_s`` per process class of
    ``cpu_pids`` over the measured window, when given). Empties the benchmark's
    Redis first (:func:`benchmarks.common.empty_redis`)."""
    empty_redis(redis_url)
    tag = uuid.uuid4().hex[:8]
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   ROCKSDB if variant.startswith("dropduplicates_rocksdb") else HDFS)
    tuned = variant == "dropduplicates_rocksdb_tuned"
    for key, value in ROCKSDB_TUNED.items():
        if tuned:
            spark.conf.set(key, value)
        else:
            spark.conf.unset(key)
    df = build(spark, variant, folder, redis_url, tag, files_per_trigger)
    writer = (df.writeStream.format("noop").queryName(f"{variant}_{tag}")
              .option("checkpointLocation", str(workdir / f"chk-{variant}-{tag}")))
    sampler = CpuSampler(cpu_pids, cpu_interval).start() if cpu_pids else None
    try:
        seconds, query = run_to_end(writer)
    finally:
        cpu_s = sampler.stop() if sampler is not None else None
    batches = streaming_batches(query)
    run: dict[str, Any] = {"variant": variant, "seconds": round(seconds, 3),
                           "batches": len(batches),
                           "input_rows": sum(int(p["numInputRows"]) for p in batches)}
    if cpu_s is not None:
        run["cpu_s"] = cpu_s
    run["duration_ms_by_phase"] = phase_durations(batches)
    outputs = [int(p["sink"].get("numOutputRows", -1)) for p in batches]
    if outputs and min(outputs) >= 0:
        run["output_rows"] = sum(outputs)
    if variant == "dedup_operator":
        from dedup.operator import metric_name

        name = metric_name(f"bench-ops-{tag}")
        metrics = [p.get("observedMetrics", {}).get(name) for p in batches]
        metrics = [m for m in metrics if m]
        run["output_rows"] = sum(int(m["kept"]) for m in metrics)
        trips = sum(int(m["round_trips"]) for m in metrics)
        run["round_trips_per_shard_batch"] = ratio(trips, len(metrics) * NUM_SHARDS)
        run["catalog_lookups_per_1000"] = ratio(
            sum(int(m["catalog_lookups"]) for m in metrics) * 1000,
            sum(int(m["records_in"]) for m in metrics), 2)
        run["bloom_false_positives"] = sum(int(m["bloom_false_positives"]) for m in metrics)
    state = [p.get("stateOperators") or [] for p in batches]
    if state and state[-1]:
        run["state_rows_end"] = int(state[-1][0].get("numRowsTotal", 0))
        run["state_memory_bytes_end"] = int(state[-1][0].get("memoryUsedBytes", 0))
    return run


RATIOS = (
    ("dedup_over_passthrough", "dedup_operator", "passthrough"),
    ("dedup_over_dropduplicates_rocksdb", "dedup_operator", "dropduplicates_rocksdb"),
    ("dedup_over_dropduplicates_rocksdb_tuned", "dedup_operator",
     "dropduplicates_rocksdb_tuned"),
    ("dedup_over_dropduplicates_hdfs", "dedup_operator", "dropduplicates_hdfs"),
    ("dedup_over_dropduplicates_within_watermark", "dedup_operator",
     "dropduplicates_within_watermark"),
    # the ceilings: the shape's own cost, the same round and input
    ("skeleton_over_passthrough", "operator_skeleton", "passthrough"),
    ("skeleton_over_dropduplicates_rocksdb_tuned", "operator_skeleton",
     "dropduplicates_rocksdb_tuned"),
    ("skeleton_over_dropduplicates_hdfs", "operator_skeleton", "dropduplicates_hdfs"),
    ("dedup_over_skeleton", "dedup_operator", "operator_skeleton"),
)
"""(name, numerator, baseline) of the throughput ratios, each per round."""
PER_VARIANT_KEYS = ("records_per_s", "seconds", *(f"cpu_s_per_record_{c}" for c in CPU_CLASSES))


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per variant and every ratio of :data:`RATIOS` that both its variants ran
    for (median over the rounds, ``_spread``, ``_rounds``)."""
    per_variant = variant_medians(runs, PER_VARIANT_KEYS)
    out: dict[str, Any] = {"records_per_s": {v: m["records_per_s"]
                                             for v, m in per_variant.items()},
                           "per_variant": per_variant}
    ran = set(per_variant)
    for name, numerator, baseline in RATIOS:
        if {numerator, baseline} <= ran:
            out.update(round_ratio(runs, name, numerator, baseline))
    trips = [r["round_trips_per_shard_batch"] for r in runs
             if r.get("round_trips_per_shard_batch") is not None]
    if trips:
        out["redis_roundtrips_per_shard_batch"] = max(trips)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = bench_args(
        __doc__, argv,
        full={"records": 2_000_000, "files": 20, "files_per_trigger": 2, "dup_rate": 0.05,
              "window": 200_000, "variants": ",".join(VARIANTS), "output": "operators.json",
              "repeats": 3, "order": "rotate", "cpu_interval": 0.5},
        quick={"records": 200_000, "files": 4, "window": 20_000, "repeats": 1},
        helps={"variants": "comma-separated",
               "repeats": "rounds: each round runs every variant once; ratios are per round, "
                          "reported as the median with the spread (max - min); default 3",
               "order": "rotate (round k starts at variant k) or fixed",
               "cpu_interval": "seconds between samples of the Python workers' CPU"})
    variants = [v for v in args.variants.split(",") if v]
    log = progress("operators")
    runs: list[dict[str, Any]] = []
    with bench_services("operators") as services:
        data = services.workdir / "input"
        distinct = write_input(data, args.records, args.files, args.dup_rate, args.window, 1)
        log(f"input written: {args.records:,} rows, {distinct:,} distinct, {args.files} files")
        from dedup.local.spark import local_spark_session

        spark = local_spark_session("bench-operators", master="local[2]",
                                    shuffle_partitions=SHUFFLE_PARTITIONS, with_kafka=False)
        cpu_pids = {"jvm": spark_jvm_pid(spark), "redis": services.redis.pid}
        log(f"CPU sampled for pids {cpu_pids}")
        try:
            for variant in variants:
                run_variant(spark, variant, data, services.redis_url, services.workdir,
                            args.files_per_trigger)
            log("warm-up round done (not measured)")
            for index in range(args.repeats):
                for variant in round_order(variants, index, args.order):
                    run = run_variant(spark, variant, data, services.redis_url,
                                      services.workdir, args.files_per_trigger, cpu_pids,
                                      args.cpu_interval)
                    run["round"] = index
                    run["records_per_s"] = round(args.records / run["seconds"], 1)
                    run.update(cpu_per_record(run.get("cpu_s") or {}, args.records))
                    # the skeleton decides nothing: it keeps every record
                    expected = (args.records if variant in ("passthrough", "operator_skeleton")
                                else distinct)
                    if "output_rows" in run:
                        run["output_correct"] = run["output_rows"] == expected
                    runs.append(run)
                    log(f"{variant} (round {index + 1}): {run['seconds']:.1f} s, "
                        f"{run['records_per_s']:.0f} rec/s, CPU s {run.get('cpu_s')}")
                    time.sleep(1)
        finally:
            spark.stop()
    refuse_wrong_outputs(runs)
    summary = summarize(runs)
    if set(VARIANTS) - set(summary["records_per_s"]):
        diag = {"metadata": run_metadata(), "setup": vars(args), "runs": runs, **summary}
        write_json(args.output, diag)
        return diag
    result = {
        "metadata": run_metadata(),
        "level": "Spark streaming query, local[2], parquet file source -> noop sink",
        "setup": {"records": args.records, "distinct": distinct, "dup_rate": args.dup_rate,
                  "files": args.files, "max_files_per_trigger": args.files_per_trigger,
                  "shuffle_partitions": SHUFFLE_PARTITIONS, "num_shards": NUM_SHARDS,
                  "redis": "redis-server, appendonly yes, appendfsync everysec",
                  "bloom": "defaults (capacity 1M per shard, error rate 0.01)",
                  "repeats": args.repeats, "rounds": args.repeats, "order": args.order,
                  "cpu_interval_s": args.cpu_interval,
                  "measured": "wall time start() -> end of availableNow, after a warm-up round "
                              "on the same input; variants in rounds (each once per round, "
                              f"order {args.order}); each ratio per round, median over the "
                              "rounds, _spread = max - min over the rounds; CPU seconds per "
                              "process class over the same window (/proc stat)"},
        "runs": runs,
        **summary,
    }
    write_json(args.output, result)
    return result


if __name__ == "__main__":
    main()
