"""Run every benchmark, then the report: ``python -m benchmarks.run_all [--quick]``.

Each benchmark runs in its own Python process (its own services and Spark
session, stopped on the way out), in this order: Bloom FP cost matrix,
catalog growth, operator profile, the quick dedup throughput check, dedup
throughput against Spark's operators, the sink alone against Spark's Kafka
sink, end to end Kafka to Kafka, the operator on a Redis replica and a Redis
Cluster against one Redis, both sinks on three Kafka brokers against one, the
operator on a Spark standalone cluster against ``local[2]``, a driver's
restart against Spark's own pipeline's. Then :mod:`benchmarks.report` writes
the plots, ``results/README.md`` and the ``summary.json`` keys. A failing
benchmark is reported and the others still run; the exit status is 1 then.

``--repeats N`` is passed to the benchmarks that run in rounds (``bench_operators``,
``bench_e2e``: default 3, 1 with ``--quick``); ``--results-dir DIR`` writes every
result, the report and ``summary.json`` to DIR instead of ``benchmarks/results``
(through ``BENCH_RESULTS_DIR``; smoke runs use it to keep the committed results).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROUNDED = ("bench_operators", "bench_e2e")
"""Benchmarks that take ``--repeats`` (rounds)."""
STEPS = ("bench_bloom", "bench_growth", "profile_operator", "bench_dedup", "bench_operators",
         "bench_sink", "bench_e2e", "bench_redis_cluster", "bench_kafka_cluster",
         "bench_spark_cluster", "bench_restart")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke sizes (minutes)")
    parser.add_argument("--only", default=",".join(STEPS),
                        help=f"comma-separated subset of {', '.join(STEPS)}")
    parser.add_argument("--repeats", type=int, default=None,
                        help=f"rounds for {', '.join(ROUNDED)} (their default: 3, 1 with --quick)")
    parser.add_argument("--results-dir", default=None,
                        help="write results here instead of benchmarks/results")
    args = parser.parse_args(argv)
    if args.results_dir:
        if "benchmarks.common" in sys.modules:
            parser.error("--results-dir must be read before benchmarks.common is imported: "
                         "run `python -m benchmarks.run_all` in a fresh process")
        # before benchmarks.common is imported: its RESULTS_DIR follows the variable
        os.environ["BENCH_RESULTS_DIR"] = str(Path(args.results_dir).resolve())
    from benchmarks.common import run_metadata, write_json

    chosen = [s for s in args.only.split(",") if s]
    unknown = set(chosen) - set(STEPS)
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; choose from {', '.join(STEPS)}")
    steps: list[dict[str, Any]] = []
    started = time.perf_counter()
    for step in chosen:
        command = [sys.executable, "-m", f"benchmarks.{step}", *(["--quick"] if args.quick
                                                                 else [])]
        if args.repeats is not None and step in ROUNDED:
            command += ["--repeats", str(args.repeats)]
        print(f"== {step}: {' '.join(command[1:])}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.call(command)
        seconds = round(time.perf_counter() - t0, 1)
        steps.append({"step": step, "seconds": seconds, "exit_code": code})
        print(f"== {step}: exit {code} after {seconds} s", flush=True)
    from benchmarks import report

    figures = report.main()
    total = round(time.perf_counter() - started, 1)
    write_json("run_all.json", {"metadata": run_metadata(), "quick": args.quick,
                                "command": "python -m benchmarks.run_all"
                                           + (" --quick" if args.quick else ""),
                                "steps": steps, "total_seconds": total})
    for key, value in sorted(figures.items()):
        print(f"{key}: {value}")
    print(f"total {total} s", flush=True)
    return 1 if any(s["exit_code"] for s in steps) else 0


if __name__ == "__main__":
    sys.exit(main())
