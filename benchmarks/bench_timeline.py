"""Where a micro-batch's wall time goes: the reading stage, the later stages, between jobs.

``python -m benchmarks.bench_timeline [--quick]``. The input of :mod:`benchmarks.bench_e2e`
(Kafka, 400,000 records, 5% re-sent, 50,000 per trigger, ``local[2]``, 2 shuffle
partitions) and four of its variants, in interleaved rounds after an unmeasured warm-up
round: Spark's pipeline (``spark_alo``), Spark's dedup pipeline on the HDFS store
(``spark_dedup_hdfs``), one pass's shape (``python_alo_one_pass``) and one pass
(``eos_fused``). Spark's UI is on in this benchmark's session only: its REST API gives
each job's and stage's submission and completion times and each stage's task run and
CPU time. Per micro-batch (one Spark job each in these variants):

* ``first_stage_ms``: the job's first stage (the Kafka read, the shuffle write);
* ``later_stages_ms``: its later stages (the shuffle read and the write: Spark's Kafka
  sink, or the Python task that decides and writes);
* ``between_jobs_ms``: from a job's end to the next job's start: the driver (the end of
  ``foreachBatch``, Spark's commit log, the next trigger's offsets, its offset log, its
  planning, the start of ``foreachBatch``);
* ``first_stage_cpu_ms`` / ``later_stages_cpu_ms``: the tasks' CPU time (JVM threads of
  the tasks only: not the Python workers, the broker or Redis, nor the JVM's garbage
  collection);
* ``first_stage_gc_ms`` / ``later_stages_gc_ms``: the JVM's garbage-collection time
  while the stage's tasks ran, summed over its tasks.

Medians over a run's batches, then per variant the median over the rounds with the
spread (max - min) of each figure. The batch that reads to the end of the input topic
(its fetches wait for more data that never comes, about 1 s in every variant) is one
of nine and moves no median. Writes ``results/timeline.json``; figures, not bars.
Not a step of :mod:`benchmarks.run_all` (a diagnosis, about 4 minutes).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from benchmarks.bench_e2e import (
    AT_LEAST_ONCE,
    filled_input,
    finish_run,
    measured_session,
    run_variant,
)
from benchmarks.bench_shape import FULL, HELPS, QUICK
from benchmarks.bench_sink import INPUT_PARTITIONS
from benchmarks.common import (
    bench_args,
    bench_services,
    kafka_rounds_setup,
    median,
    output_correct,
    progress,
    refuse_wrong_outputs,
    round_order,
    run_metadata,
    spread,
    write_json,
)
from dedup.local.services import free_port

VARIANTS = ("spark_alo", "spark_dedup_hdfs", "python_alo_one_pass", "eos_fused")
PARTS = ("first_stage_ms", "later_stages_ms", "between_jobs_ms", "job_ms",
         "first_stage_cpu_ms", "later_stages_cpu_ms", "first_stage_gc_ms", "later_stages_gc_ms")
"""The per-batch figures of :func:`job_timeline`, in milliseconds."""


def rest_time(text: str) -> float:
    """Epoch seconds of a time in Spark's REST API (``2026-12-04T23:01:02.123GMT``)."""
    return datetime.strptime(text.removesuffix("GMT"), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=UTC).timestamp()


def job_timeline(jobs: Sequence[Mapping[str, Any]], stages: Sequence[Mapping[str, Any]],
                 since: float, until: float) -> list[dict[str, float | None]]:
    """Per job submitted in ``[since, until]`` (epoch seconds), in submission order, the
    figures of :data:`PARTS` (``between_jobs_ms`` is None for the first job). Stages
    skipped or not complete are left out. Pure."""
    by_id = {int(s["stageId"]): s for s in stages if s.get("status") == "COMPLETE"}
    runs = sorted((j for j in jobs if j.get("completionTime")
                   and since <= rest_time(j["submissionTime"]) <= until),
                  key=lambda j: rest_time(j["submissionTime"]))
    out: list[dict[str, float | None]] = []
    previous_end: float | None = None
    for job in runs:
        start, end = rest_time(job["submissionTime"]), rest_time(job["completionTime"])
        done = sorted((by_id[i] for i in job["stageIds"] if i in by_id),
                      key=lambda s: rest_time(s["submissionTime"]))

        def wall(stage: Mapping[str, Any]) -> float:
            return 1000 * (rest_time(stage["completionTime"]) - rest_time(stage["submissionTime"]))

        def cpu(part: Sequence[Mapping[str, Any]]) -> float:
            return sum(int(s.get("executorCpuTime", 0)) for s in part) / 1e6  # ns -> ms

        def gc(part: Sequence[Mapping[str, Any]]) -> float:
            return float(sum(int(s.get("jvmGcTime", 0)) for s in part))  # ms
        out.append({
            "job_ms": round(1000 * (end - start), 1),
            "first_stage_ms": round(wall(done[0]), 1) if done else None,
            "later_stages_ms": round(sum(wall(s) for s in done[1:]), 1),
            "between_jobs_ms": (round(1000 * (start - previous_end), 1)
                                if previous_end is not None else None),
            "first_stage_cpu_ms": round(cpu(done[:1]), 1),
            "later_stages_cpu_ms": round(cpu(done[1:]), 1),
            "first_stage_gc_ms": gc(done[:1]),
            "later_stages_gc_ms": gc(done[1:]),
        })
        previous_end = end
    return out


def batch_medians(timeline: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """The median over a run's jobs of each figure of :data:`PARTS` (None when no job
    has it). Pure."""
    out: dict[str, float | None] = {}
    for part in PARTS:
        values = [v for v in (job.get(part) for job in timeline) if v is not None]
        middle = median(values)
        out[part] = round(middle, 1) if middle is not None else None
    return out


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per variant and figure of :data:`PARTS`: the median over the rounds of the runs'
    batch medians, its spread (max - min) and the rounds' values. Pure."""
    out: dict[str, dict[str, Any]] = {}
    for variant in dict.fromkeys(str(run["variant"]) for run in runs):
        figures: dict[str, Any] = {}
        for part in PARTS:
            values = [run["batch_medians"][part] for run in runs if run["variant"] == variant
                      and run["batch_medians"].get(part) is not None]
            middle, wide = median(values), spread(values)
            if middle is not None and wide is not None:
                figures[part] = round(middle, 1)
                figures[f"{part}_spread"] = round(wide, 1)
                figures[f"{part}_rounds"] = values
        out[variant] = figures
    return out


def _rest(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=30) as reply:
        return json.load(reply)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = bench_args(__doc__, argv, full=FULL, quick=QUICK, helps=HELPS)
    log = progress("timeline")
    runs: list[dict[str, Any]] = []
    with bench_services("timeline", kafka=True) as services:
        bootstrap = services.bootstrap
        distinct = filled_input(bootstrap, "bench-timeline-input", args, log)
        port = free_port()
        spark, cpu_pids = measured_session("bench-timeline", services, args.partitions,
                                           {"spark.ui.enabled": "true",
                                            "spark.ui.port": str(port)})
        base = (f"http://127.0.0.1:{port}/api/v1/applications/"
                f"{spark.sparkContext.applicationId}")
        try:
            for variant in VARIANTS:
                run_variant(spark, variant, bootstrap, services.redis_url,
                            "bench-timeline-input", args.per_trigger, services.workdir,
                            partitions=args.partitions)
            log("warm-up round done (not measured)")
            for index in range(args.repeats):
                for variant in round_order(VARIANTS, index):
                    since = time.time()
                    run = finish_run(run_variant(
                        spark, variant, bootstrap, services.redis_url, "bench-timeline-input",
                        args.per_trigger, services.workdir, cpu_pids,
                        partitions=args.partitions), index, args.records)
                    timeline = job_timeline(_rest(base, "/jobs"), _rest(base, "/stages"),
                                            since, time.time())
                    run["jobs_timeline"] = timeline
                    run["batch_medians"] = batch_medians(timeline)
                    run["output_correct"] = output_correct(run, variant in AT_LEAST_ONCE,
                                                           args.records, distinct)
                    runs.append(run)
                    log(f"{variant} (round {index + 1}): {run['records_per_s']:.0f} rec/s, "
                        f"per batch {run['batch_medians']}")
        finally:
            spark.stop()
    refuse_wrong_outputs(runs)
    result = {
        "metadata": run_metadata(),
        "level": "Spark streaming query, local[2], Kafka topic -> Kafka topic, Spark's UI on",
        "setup": kafka_rounds_setup(
            args, distinct, INPUT_PARTITIONS,
            "per micro-batch job from Spark's REST API: the first stage, the later stages "
            "and the time since the job before; medians over a run's batches, then over "
            "the rounds with the spread"),
        "runs": runs,
        "per_variant": summarize(runs),
    }
    write_json("timeline.json", result)
    return result


if __name__ == "__main__":
    main()
