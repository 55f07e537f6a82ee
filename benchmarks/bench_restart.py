"""Driver restart: SIGKILL of a driver to its next committed output, ours against Spark's.

A dead driver is recovered by starting it again from its checkpoint: a new
JVM, a new Spark session, the query restarted, the interrupted micro-batch
replayed. The chaos matrix times that for our pipeline (kind
``driver_kill``); this benchmark puts it beside the same restart of Spark's
own at-least-once pipeline, in the same run, so that the part that is ours
shows.

One Kafka input topic of ``records`` records (``dup_rate`` re-sends) is
read ``per_trigger`` at a time by each variant of :mod:`benchmarks.bench_e2e`
that is named in ``--variants`` (default ``spark_alo``, ``eos_strong``: dedup then the
``exactly_once_kafka`` sink; ``eos_fused``: both in one pass). Each driver is
a child process (``python -m benchmarks.bench_restart --child ...``,
``local[2]``, ``availableNow``). Per variant and repeat:

1. a child starts cold; **cold start** is its launch to the first committed
   output (``read_committed`` end offsets above 0);
2. ``kill_after`` seconds after that first output (mid-stream), SIGKILL of
   the child's process group;
3. a second child starts at once on the same checkpoint; **restart** is the
   kill to the first committed output beyond what was committed at the kill
   (read when the killed driver is gone); the child then runs to the end.

Each output is read back: ours must hold every distinct input record once,
Spark's every distinct record at least once (its duplicates are counted).
Variants run interleaved ``repeats`` times; the median counts. Writes
``results/restart.json``: ``driver_restart_eos_over_alo`` and
``driver_restart_eos_fused_over_alo`` (ratios of median restart times,
lower is better) and the same for cold starts.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from benchmarks.bench_e2e import SHUFFLE_PARTITIONS, fill_with_duplicates, pipeline_writer
from benchmarks.bench_sink import INPUT_PARTITIONS
from benchmarks.common import (
    bench_args,
    bench_services,
    percentile,
    progress,
    ratio,
    refuse_wrong_outputs,
    run_metadata,
    write_json,
)
from sinks.kafka_io import ensure_topic
from sinks.verify import high_watermark, read_observed

VARIANTS = ("spark_alo", "eos_strong", "eos_fused")
POLL_S = 0.1


class CommittedEnd:
    """Sum of a topic's ``read_committed`` end offsets, read through one consumer."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-restart",
                                  "isolation.level": "read_committed", "log_level": 0})
        self.topic, self.partitions = topic, partitions

    def __call__(self) -> int:
        # retriable answers (a new topic's leader not known yet, a stale one) are repeated
        return sum(high_watermark(self.consumer, self.topic, p) for p in range(self.partitions))

    def close(self) -> None:
        self.consumer.close()


def wait_beyond(end: CommittedEnd, above: int, driver: subprocess.Popen[bytes],
                timeout: float) -> float | None:
    """Monotonic time when the committed end first exceeds ``above``; None if the
    driver exited first or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if end() > above:
            return time.monotonic()
        if driver.poll() is not None:
            return time.monotonic() if end() > above else None
        time.sleep(POLL_S)
    return None


def child_argv(args: argparse.Namespace, variant: str, out: str, checkpoint: Path,
               app_id: str, logs: Path) -> list[str]:
    return [sys.executable, "-m", "benchmarks.bench_restart", "--child", variant,
            "--bootstrap", args.bootstrap, "--redis-url", args.redis_url,
            "--input", args.input, "--output", out, "--checkpoint", str(checkpoint),
            "--app-id", app_id, "--logs", str(logs), "--per-trigger", str(args.per_trigger)]


def run_child(args: argparse.Namespace) -> int:
    """The driver of one variant: run it from its checkpoint to the end of the input."""
    from dedup.local.spark import cli_spark_session

    spark = cli_spark_session(Path(args.logs), "bench-restart", master="local[2]",
                              shuffle_partitions=SHUFFLE_PARTITIONS)
    import sinks

    sinks.register(spark)
    try:
        writer = pipeline_writer(spark, args.child, args.bootstrap, args.redis_url, args.input,
                                 args.per_trigger, args.output, app_id=args.app_id)
        query = (writer.option("checkpointLocation", args.checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        return 0 if query.exception() is None else 1
    finally:
        spark.stop()


def restart_once(args: argparse.Namespace, variant: str, workdir: Path,
                 distinct: int) -> dict[str, Any]:
    """Cold start, SIGKILL mid-stream, restart, run to the end; the timings and the output."""
    tag = uuid.uuid4().hex[:8]
    out, app_id = f"bench-restart-{variant}-{tag}", f"bench-restart-{variant}-{tag}"
    ensure_topic(args.bootstrap, out, INPUT_PARTITIONS)
    checkpoint, logs = workdir / f"chk-{tag}", workdir / f"logs-{tag}"
    argv = child_argv(args, variant, out, checkpoint, app_id, logs)
    end = CommittedEnd(args.bootstrap, out, INPUT_PARTITIONS)
    log = open(workdir / f"driver-{tag}.log", "ab")  # noqa: SIM115 - closed below
    try:
        launched = time.monotonic()
        first = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        seen = wait_beyond(end, 0, first, 300)
        if seen is None or first.poll() is not None:
            raise RuntimeError(f"{variant}: the first driver produced nothing before it ended "
                               f"(exit {first.poll()}); see {log.name}")
        time.sleep(args.kill_after)
        if first.poll() is not None:
            raise RuntimeError(f"{variant}: the input ran out before the kill; raise records")
        killed = time.monotonic()
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(60)
        second = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        # a commit the dead driver had sent completes at the broker within
        # moments: what it left is read once the driver is gone, not counted
        time.sleep(0.5)
        at_kill = end()
        recovered = wait_beyond(end, at_kill, second, 300)
        code = second.wait(600)
        if code != 0 or recovered is None:
            raise RuntimeError(f"{variant}: the restarted driver exited {code} "
                               f"(output {'grew' if recovered else 'did not grow'}); "
                               f"see {log.name}")
    finally:
        log.close()
        end.close()
    written = read_observed(args.bootstrap, out)
    keys = len({value for _, value in written})
    return {"variant": variant, "cold_start_s": round(seen - launched, 2),
            "restart_s": round(recovered - killed, 2), "committed_at_kill": at_kill,
            "records_out": len(written), "distinct_out": keys,
            "duplicates_out": len(written) - keys,
            "output_correct": keys == distinct and (variant == "spark_alo"
                                                    or len(written) == distinct)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    if argv is None:
        argv = sys.argv[1:]
    if "--child" in argv:
        parser = argparse.ArgumentParser()
        for name in ("child", "bootstrap", "redis-url", "input", "output", "checkpoint",
                     "app-id", "logs"):
            parser.add_argument(f"--{name}", required=True)
        parser.add_argument("--per-trigger", type=int, required=True)
        sys.exit(run_child(parser.parse_args(argv)))
    args = bench_args(
        __doc__, argv,
        full={"records": 60_000, "dup_rate": 0.05, "per_trigger": 5_000, "value_bytes": 100,
              "repeats": 3, "kill_after": 2.0, "variants": ",".join(VARIANTS)},
        quick={"records": 30_000, "repeats": 1},
        helps={"repeats": "interleaved restarts per variant; the median counts",
               "kill_after": "seconds after a driver's first output to kill it",
               "variants": f"comma-separated subset of {', '.join(VARIANTS)}"})
    variants = [v for v in str(args.variants).split(",") if v]
    if "spark_alo" not in variants or set(variants) - set(VARIANTS):
        raise SystemExit(f"--variants must include spark_alo (the baseline) and only "
                         f"{', '.join(VARIANTS)}")
    log = progress("restart")
    runs: list[dict[str, Any]] = []
    with bench_services("restart", kafka=True) as services:
        args.bootstrap, args.redis_url = services.bootstrap, services.redis_url
        args.input = "bench-restart-input"
        distinct = fill_with_duplicates(args.bootstrap, args.input, args.records, args.dup_rate,
                                        args.value_bytes, seed=7)
        log(f"input topic filled: {args.records:,} records, {distinct:,} distinct")
        for repeat in range(args.repeats):
            for variant in variants:
                run = restart_once(args, variant, services.workdir, distinct)
                run["repeat"] = repeat
                runs.append(run)
                log(f"{variant} (run {repeat + 1}): cold start {run['cold_start_s']} s, "
                    f"restart {run['restart_s']} s, out {run['records_out']:,} "
                    f"({run['duplicates_out']:,} duplicates)")
    refuse_wrong_outputs(runs)
    median = {v: {k: percentile([r[k] for r in runs if r["variant"] == v], 50)
                  for k in ("cold_start_s", "restart_s")} for v in variants}

    def over_alo(variant: str, key: str) -> float | None:
        if variant not in median:
            return None
        return ratio(median[variant][key], median["spark_alo"][key])

    result = {
        "metadata": run_metadata(),
        "level": "driver process killed and restarted, local[2], Kafka topic -> Kafka topic",
        "setup": {"records": args.records, "distinct": distinct, "dup_rate": args.dup_rate,
                  "per_trigger": args.per_trigger, "kill_after_s": args.kill_after,
                  "repeats": args.repeats, "input_partitions": INPUT_PARTITIONS,
                  "shuffle_partitions": SHUFFLE_PARTITIONS,
                  "measured": "cold start: launch -> first read_committed output; restart: "
                              "SIGKILL of the driver's process group -> first read_committed "
                              "output beyond the end at the kill; median of the runs"},
        "runs": runs,
        "median_s": median,
        "driver_restart_eos_over_alo": over_alo("eos_strong", "restart_s"),
        "driver_restart_eos_fused_over_alo": over_alo("eos_fused", "restart_s"),
        "cold_start_eos_over_alo": over_alo("eos_strong", "cold_start_s"),
        "cold_start_eos_fused_over_alo": over_alo("eos_fused", "cold_start_s"),
    }
    write_json("restart.json", result)
    return result


if __name__ == "__main__":
    main()
