"""``dedup demo``: the whole pipeline on local services, with a real crash and a restart.

Starts its own Redis (AOF, fsync always), Kafka broker and local Spark;
streams synthetic records with duplicates through record IDs -> dedup and
the exactly-once Kafka sink in one pass (``dedup run``'s default); crashes
the query once mid-run with an armed fail-point (the query really fails:
``spark.task.maxFailures`` is 1 in ``local[2]``); restarts it from the same
checkpoint; reads the output with a ``read_committed`` consumer; compares it
with the failure-free output computed from the input; prints a summary; stops
everything it started.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dedup.cli.checks import QUIET_KAFKA
from dedup.cli.config_file import PipelineFile, parse_pipeline
from dedup.cli.exceptions import DemoFailedError
from dedup.cli.pipeline import Addresses, source_done, start_query
from dedup.cli.progress import Progress, QueryWatcher, stderr_to_file, wait_for
from dedup.local.paths import cache_dir
from dedup.spark_session import make_active

CRASH_POINT = "sink.before_commit"
interrupted = [False]

_PIPELINE = """
app_id = "{app_id}"
[source]
type = "synthetic"
seed = {seed}
rows_per_batch = {batch}
total_rows = {records}
duplicate_rate = {dup_rate}
duplicate_distance = "later_batches"
duplicate_gap_batches = 2
key_skew = 1.0
payload_bytes = 48
[ids]
strategy = "column"
column = "event_id"
[dedup]
num_shards = 4
[sink]
topic = "{topic}"
partitions = 2
key_column = "key"
value_column = "payload"
[run]
master = "local[2]"
shuffle_partitions = 4
"""


@dataclass
class DemoResult:
    records_in: int
    expected: int
    records_out: int
    lost: int
    duplicated: int
    phantoms: int
    mismatched: int
    open_transactions: int
    crashed: bool
    seconds: float
    dropped: int | None = None

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.phantoms or self.mismatched
                    or self.open_transactions)


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "demo", parents=[parent], help="run the exactly-once pipeline end to end on local "
        "services, with a crash and a restart",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=30_000, help="input records (30000)")
    parser.add_argument("--batch-size", type=int, default=5_000,
                        help="records per micro-batch (5000)")
    parser.add_argument("--duplicate-rate", type=float, default=0.2,
                        help="share of input records that repeat an earlier one (0.2)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the synthetic input (7)")
    parser.add_argument("--crash-batch", type=int, default=2,
                        help="micro-batch in which the query is crashed (2)")
    parser.add_argument("--no-crash", action="store_true", help="skip the crash and restart")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work folder (service data, checkpoint, logs)")
    parser.set_defaults(handler=demo_command)


def demo_pipeline(records: int, batch: int, dup_rate: float, seed: int, app_id: str,
                  topic: str) -> PipelineFile:
    return parse_pipeline(_PIPELINE.format(app_id=app_id, seed=seed, batch=batch,
                                           records=records, dup_rate=dup_rate, topic=topic),
                          "<demo>")


def demo_command(args: argparse.Namespace) -> int:
    from dedup.config import ConfigError
    from dedup.local.spark import no_artifacts_folder_left

    if args.records < 1 or args.batch_size < 1:
        raise ConfigError("--records and --batch-size must be >= 1")
    progress = Progress(quiet=args.quiet)
    # In the cache folder (dedup --cache-dir), like every state dedup writes:
    # a failed run's folder is kept there for its logs.
    demos = cache_dir() / "demo"
    demos.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="dedup-demo-", dir=demos))
    ok = False
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        # A SIGTERM (CI timeout, `kill`) unwinds like Ctrl-C, so the services,
        # Spark and the work folder are still cleaned up.
        signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with stderr_to_file(workdir / "logs" / "stderr.log", enabled=not args.debug), \
                no_artifacts_folder_left():
            result = _run_demo(args, progress, workdir)
        _print_summary(progress, args, result)
        ok = result.ok
        if not ok:
            raise DemoFailedError(f"verification failed: lost {result.lost}, duplicated "
                                  f"{result.duplicated}, phantoms {result.phantoms}, "
                                  f"mismatched {result.mismatched}")
        return 0
    except KeyboardInterrupt:
        interrupted[0] = True
        raise
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)
        if args.keep or (not ok and not interrupted[0]):
            progress.always(f"work folder kept (service data, checkpoint, logs): {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _raise_interrupt(signum: int, frame: Any) -> None:
    interrupted[0] = True
    raise KeyboardInterrupt


def _run_demo(args: argparse.Namespace, progress: Progress, workdir: Path) -> DemoResult:
    from dedup.failpoints import arm, fired
    from dedup.local.services import KafkaBroker, RedisServer
    from dedup.local.spark import cli_spark_session
    from sinks.kafka_io import ensure_topic
    from sinks.verify import verify_topic
    from sources.synthetic_rows import SyntheticOptions, expected_output

    app_id = f"dedup-demo-{int(time.time())}"
    topic = "dedup-demo-out"
    pipeline = demo_pipeline(args.records, args.batch_size, args.duplicate_rate, args.seed,
                             app_id, topic)
    redis = RedisServer(workdir / "redis", appendonly=True, appendfsync="always")
    kafka = KafkaBroker(workdir / "kafka", heap_mb=384)
    spark: Any = None
    try:
        progress.say("starting Redis (AOF, fsync always), Kafka (KRaft, single node) and "
                     "Spark (local[2])...")
        spark_box: list[Any] = []

        def start_spark() -> None:
            try:
                spark_box.append(cli_spark_session(
                    workdir / "logs", app_name="dedup-demo", master="local[2]",
                    shuffle_partitions=4, debug=args.debug))
            except BaseException as exc:
                spark_box.append(exc)

        # Spark and Kafka take ~10-20 s each to start: overlap them. The services
        # stay on this thread: they die with the thread that started them.
        spark_thread = threading.Thread(target=start_spark, daemon=True)
        spark_thread.start()
        try:
            redis.start()
            kafka.start()
        finally:
            spark_thread.join()
            if spark_box and not isinstance(spark_box[0], BaseException):
                spark = spark_box[0]
        if not spark_box:
            raise DemoFailedError("Spark did not start")
        if isinstance(spark_box[0], BaseException):
            raise spark_box[0]
        # The JVM keeps the active session per thread, and Python data sources
        # are looked up in it: make it active on this thread too.
        spark = spark_box[0]
        make_active(spark)
        progress.say(f"redis {redis.url}, kafka {kafka.bootstrap_servers}; logs in "
                     f"{workdir / 'logs'}")
        addresses = Addresses(redis.url, kafka.bootstrap_servers, kafka.bootstrap_servers)
        ensure_topic(kafka.bootstrap_servers, topic, 2, client_config=QUIET_KAFKA)
        options = SyntheticOptions(seed=args.seed, rows_per_batch=args.batch_size,
                                   total_rows=args.records, duplicate_rate=args.duplicate_rate,
                                   duplicate_gap_batches=2, key_skew=1.0, payload_bytes=48)
        expected = {rid: payload.encode() for rid, payload in expected_output(options).items()}
        progress.say(f"input: {args.records} synthetic records in batches of "
                     f"{args.batch_size}, {args.records - len(expected)} of them duplicates")
        failpoints = workdir / "failpoints"
        checkpoint = str(workdir / "checkpoint")
        crash = not args.no_crash and args.records > args.batch_size * args.crash_batch
        if crash:
            arm(failpoints, CRASH_POINT, action="raise", match={"batch": args.crash_batch})
            progress.say(f"armed fail-point {CRASH_POINT} for batch {args.crash_batch}: the "
                         "query will crash there, after producing, before the Kafka commit")
        started = time.monotonic()
        from dedup.operator import metric_name

        watcher = QueryWatcher(progress, metric=metric_name(app_id))
        crashed = False
        query = start_query(spark, pipeline, addresses, checkpoint, str(failpoints),
                            watcher=watcher)
        try:
            wait_for(query, watcher, lambda: source_done(pipeline, watcher))
        except Exception as exc:
            hits = fired(failpoints, CRASH_POINT)
            if not (crash and hits):
                raise
            crashed = True
            context = hits[0].get("context", {})
            progress.say(f"CRASH: the query failed at {CRASH_POINT} (batch "
                         f"{context.get('batch')}, partition {context.get('partition')}): "
                         f"{type(exc).__name__}")
            progress.say("restarting the query from the same checkpoint...")
            query = start_query(spark, pipeline, addresses, checkpoint, str(failpoints),
                                watcher=watcher)
            wait_for(query, watcher, lambda: source_done(pipeline, watcher))
        finally:
            if query.isActive:
                query.stop()
        seconds = time.monotonic() - started
        if crash and not crashed:
            raise DemoFailedError(f"the fail-point {CRASH_POINT} for batch {args.crash_batch} "
                                  "never fired: the crash did not happen")
        progress.say("verifying the output topic with a read_committed consumer...")
        report = verify_topic(kafka.bootstrap_servers, topic, expected, compare_payloads=True,
                              client_config=QUIET_KAFKA)
        return DemoResult(
            records_in=args.records, expected=report.expected, records_out=report.observed,
            lost=report.lost, duplicated=report.duplicated, phantoms=report.phantoms,
            mismatched=report.mismatched, open_transactions=report.open_transactions,
            crashed=crashed, seconds=seconds,
            dropped=watcher.dropped if watcher.have_metrics else None,
        )
    finally:
        progress.say("stopping Spark, Kafka and Redis...")
        if spark is not None:
            spark.stop()
        kafka.stop()
        redis.stop()


def _print_summary(progress: Progress, args: argparse.Namespace, r: DemoResult) -> None:
    rate = r.records_in / r.seconds if r.seconds > 0 else 0.0
    crash = (f"yes, at {CRASH_POINT} in batch {args.crash_batch}; restarted from the checkpoint"
             if r.crashed else "no")
    dropped = r.dropped if r.dropped is not None else r.records_in - r.records_out
    source = "the dedup step's metrics" if r.dropped is not None else "records in - records out"
    lines = [
        "dedup demo summary",
        f"  records in          {r.records_in:>8}",
        f"  duplicates dropped  {dropped:>8}   ({source})",
        f"  records out         {r.records_out:>8}   (expected {r.expected} distinct IDs)",
        f"  lost                {r.lost:>8}",
        f"  duplicated          {r.duplicated:>8}",
        f"  phantoms            {r.phantoms:>8}   mismatched payloads {r.mismatched}, "
        f"open transactions {r.open_transactions}",
        f"  crash               {crash}",
        f"  records/s           {rate:>8,.0f}   ({r.seconds:.1f} s of streaming, crash and "
        "restart included)",
        f"  result              {'OK: exactly once' if r.ok else 'FAILED'}",
    ]
    for line in lines:
        progress.always(line)
