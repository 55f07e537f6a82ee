"""What the parts of the one-pass job shape cost: the shuffle by shard, the hidden columns.

``python -m benchmarks.bench_shape [--quick]``. The input of :mod:`benchmarks.bench_e2e`
(Kafka, 400,000 records, 5% re-sent, keys are the record IDs, 50,000 per trigger,
``local[2]``, 2 shuffle partitions), these variants in interleaved rounds after an
unmeasured warm-up round:

* ``spark_alo``: Spark's own Kafka source to Kafka sink, at least once;
* ``shape``: :func:`benchmarks.python_alo_sink.python_alo_one_pass`, the job shape of
  :func:`sinks.deduplicate_to_kafka` (``foreachBatch``, shuffle by shard, one
  ``mapInArrow`` task per partition producing at least once): no dedup, no transaction;
* ``shape_no_shuffle``: the same without the shuffle (each task reads its input
  partition): what item 4 of issue 37 (skip the shuffle when the input is already
  partitioned by ID) could buy at most;
* ``shape_hidden``: the shape with the one-pass writer's hidden columns (shard, batch
  time; an ID problem code too before 2026-12-05) computed in the streaming plan and
  carried through the shuffle and the Arrow hand-over, as the one pass carries them;
* ``eos_fused``: :func:`sinks.deduplicate_to_kafka`, dedup and the exactly-once write.

Every ratio is per round against ``shape`` (and ``shape`` against ``spark_alo``),
reported as the median with ``_spread`` (max - min); CPU seconds per record per
process class. Writes ``results/shape.json``; figures are not bars, so nothing goes
into ``summary.json``. Not a step of :mod:`benchmarks.run_all` (a diagnosis, about
5 minutes).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from benchmarks.bench_e2e import (
    PER_VARIANT_KEYS,
    SHUFFLE_PARTITIONS,
    _measure,
    filled_input,
    finish_run,
    measured_session,
    pipeline_writer,
)
from benchmarks.bench_sink import INPUT_PARTITIONS
from benchmarks.common import (
    bench_args,
    bench_services,
    kafka_rounds_setup,
    output_correct,
    progress,
    refuse_wrong_outputs,
    round_order,
    round_ratio,
    run_metadata,
    variant_medians,
    write_json,
)
from sinks.kafka_io import ensure_topic

VARIANTS = ("spark_alo", "shape", "shape_no_shuffle", "shape_hidden", "eos_fused")
AT_LEAST_ONCE = ("spark_alo", "shape", "shape_no_shuffle", "shape_hidden")
RATIOS = (
    ("shape_over_spark_alo", "shape", "spark_alo"),
    ("shape_no_shuffle_over_shape", "shape_no_shuffle", "shape"),
    ("shape_hidden_over_shape", "shape_hidden", "shape"),
    ("eos_fused_over_shape", "eos_fused", "shape"),
    ("eos_fused_over_shape_hidden", "eos_fused", "shape_hidden"),
    ("eos_fused_over_spark_alo", "eos_fused", "spark_alo"),
)
"""(name, numerator, baseline) of the ratios, each per round."""


def writer(spark: Any, variant: str, bootstrap: str, redis_url: str, source: str,
           per_trigger: int, out: str, app_id: str, partitions: int) -> Any:
    """The ``DataStreamWriter`` of ``variant`` (see the module docstring)."""
    if not variant.startswith("shape"):
        return pipeline_writer(spark, variant, bootstrap, redis_url, source, per_trigger, out,
                               app_id, partitions)
    from benchmarks.python_alo_sink import python_alo_one_pass
    from dedup.config import DedupConfig, RedisConfig
    from sources.kafka import read_kafka

    df = read_kafka(spark, bootstrap, source, id_strategy="key",
                    max_offsets_per_trigger=per_trigger)
    shards = DedupConfig(app_id=app_id, redis=RedisConfig(url=redis_url)).num_shards
    return python_alo_one_pass(df.select("key", "value", "_record_id"),
                               {"kafka.bootstrap.servers": bootstrap, "topic": out,
                                "app.id": app_id}, shards, partitions,
                               shuffle=variant != "shape_no_shuffle",
                               hidden=variant == "shape_hidden")


def run_variant(spark: Any, variant: str, bootstrap: str, redis_url: str, source: str,
                per_trigger: int, workdir: Path, partitions: int,
                cpu_pids: dict[str, int | None] | None = None) -> dict[str, Any]:
    """Run ``variant`` from ``source`` to a fresh output topic to the end; its figures."""
    tag = uuid.uuid4().hex[:8]
    out = f"bench-shape-{variant.replace('_', '-')}-{tag}"
    ensure_topic(bootstrap, out, INPUT_PARTITIONS)
    query = writer(spark, variant, bootstrap, redis_url, source, per_trigger, out,
                   f"bench-shape-{variant}-{tag}", partitions)
    query = query.option("checkpointLocation", str(workdir / f"chk-{variant}-{tag}"))
    return _measure(variant, query, bootstrap, out, cpu_pids)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per variant and every ratio of :data:`RATIOS` (median, ``_spread``,
    ``_rounds``). Pure."""
    per_variant = variant_medians(runs, PER_VARIANT_KEYS)
    out: dict[str, Any] = {"per_variant": per_variant}
    for name, numerator, baseline in RATIOS:
        out.update(round_ratio(runs, name, numerator, baseline))
    return out


FULL = {"records": 400_000, "dup_rate": 0.05, "per_trigger": 50_000, "value_bytes": 100,
        "repeats": 3, "partitions": SHUFFLE_PARTITIONS}
"""The input and rounds of this diagnosis (those of ``bench_e2e``), and its ``--quick`` sizes."""
QUICK = {"records": 40_000, "per_trigger": 20_000, "repeats": 1}
HELPS = {"repeats": "rounds (each variant once per round, rotated); default 3"}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = bench_args(__doc__, argv, full=FULL, quick=QUICK, helps=HELPS)
    log = progress("shape")
    runs: list[dict[str, Any]] = []
    with bench_services("shape", kafka=True) as services:
        bootstrap = services.bootstrap
        distinct = filled_input(bootstrap, "bench-shape-input", args, log)
        spark, cpu_pids = measured_session("bench-shape", services, args.partitions)
        try:
            for variant in VARIANTS:
                run_variant(spark, variant, bootstrap, services.redis_url, "bench-shape-input",
                            args.per_trigger, services.workdir, args.partitions)
            log("warm-up round done (not measured)")
            for index in range(args.repeats):
                for variant in round_order(VARIANTS, index):
                    run = finish_run(run_variant(
                        spark, variant, bootstrap, services.redis_url, "bench-shape-input",
                        args.per_trigger, services.workdir, args.partitions, cpu_pids),
                        index, args.records)
                    run.pop("batch_ms", None)
                    run["output_correct"] = output_correct(run, variant in AT_LEAST_ONCE,
                                                           args.records, distinct)
                    runs.append(run)
                    log(f"{variant} (round {index + 1}): {run['records_per_s']:.0f} rec/s, "
                        f"CPU s {run.get('cpu_s')}")
        finally:
            spark.stop()
    refuse_wrong_outputs(runs)
    result = {
        "metadata": run_metadata(),
        "level": "Spark streaming query, local[2], Kafka topic -> Kafka topic",
        "setup": kafka_rounds_setup(
            args, distinct, INPUT_PARTITIONS,
            "wall time start() -> end of availableNow after a warm-up round on the same "
            "input; each ratio per round, median and spread (max - min) over the rounds"),
        "runs": runs,
        **summarize(runs),
    }
    write_json("shape.json", result)
    return result


if __name__ == "__main__":
    main()
