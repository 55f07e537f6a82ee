"""Soak: thousands of micro-batches of ``dedup run``, memory of every process, throughput.

Runs the default one-pass pipeline as a user does: a child ``dedup run`` on the
synthetic source (``rows_per_batch`` rows a batch, 20% duplicates of rows two
batches earlier, 4 shards, 2 output partitions, ``local[2]``) against a
``redis-server`` (AOF on, fsync everysec) and a Kafka broker this script starts,
for ``batches`` micro-batches in one process lifetime. Every ``sample_seconds``
it reads, from ``/proc/<pid>/status`` (VmRSS), the resident memory of every
process of the run: the ``dedup run`` driver (Python), its Spark JVM, the
``pyspark.daemon`` and each Python worker the daemon forked, Redis and the
Kafka broker; with it the batches committed (the Spark checkpoint's ``commits``
files, whose modification times also give each batch's end), Redis
``used_memory`` and the 1-minute load average. At the end it reads the output
topic ``read_committed`` and compares it with the failure-free output
(:func:`sinks.verify.verify_topic`: lost, duplicated, phantoms).

Figures: per 100 batches, records/s, the RSS of each process class and the load
average; the worker growth (least-squares slope of the summed RSS of the
forked Python workers over the batch number, after ``warmup`` batches), in MB
per 1,000 batches, and the same slope per long-lived worker; throughput of the
last 100 batches over the first 100; Redis ``used_memory`` per live ID (every
ID is live: the retention horizon, 7 days by default, is longer than the run).

``--baseline`` runs the same job shape with no dedup and no transaction
(:func:`benchmarks.python_alo_sink.python_alo_one_pass`, at least once, in a
child Spark process of this script) on the same source, to tell the toolkit's
share of any growth from PySpark's and Arrow's; it is not verified (at least
once keeps the input's duplicates) and writes ``soak_baseline.json``.

Other work on the machine changes throughput: the load average is stored per
100 batches beside it. Writes ``results/soak.json`` (``soak_baseline.json``)
and ``soak.png`` (report.py). No resume: a soak is one process lifetime; size
``batches`` to the time there is (``--quick`` first gives batches/s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import (
    RESULTS_DIR,
    bench_args,
    bench_services,
    children_map,
    process_table,
    progress,
    redis_used_memory,
    run_metadata,
    write_json,
)
from dedup.worker_daemon import DAEMON_MODULE

REPO = Path(__file__).resolve().parent.parent
APP_ID = "bench-soak"
TOPIC = "soak-out"
SHARDS = 4
PARTITIONS = 2
DUPLICATE_RATE = 0.2
WINDOW = 100
"""Batches per throughput and memory window."""

PIPELINE = """\
app_id = "{app_id}"

[source]
type = "synthetic"
seed = 38
rows_per_batch = {rows}
total_rows = {total}
duplicate_rate = {dup}
duplicate_distance = "later_batches"
duplicate_gap_batches = 2

[ids]
strategy = "column"
column = "event_id"

[dedup]
num_shards = {shards}

[sink]
type = "kafka"
topic = "{topic}"
partitions = {partitions}
key_column = "key"
value_column = "payload"
one_pass = true

[run]
master = "local[2]"
stop_after_idle_seconds = 60.0
"""


# --- pure parts (tests/unit/benchmarks/test_soak.py) ---

def rss_mb(pid: int, proc: Path = Path("/proc")) -> float | None:
    """Resident memory of ``pid`` in MB (VmRSS of ``/proc/<pid>/status``); None if gone."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def _cmdline(pid: int, proc: Path) -> list[str]:
    try:
        return [a.decode(errors="replace")
                for a in (proc / str(pid) / "cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def spark_processes(root: int, proc: Path = Path("/proc")) -> dict[str, Any]:
    """The processes of a Spark job under ``root`` (the driver's Python process):
    ``{"driver": pid, "jvm": pid | None, "workers": [pid, ...], "other_python": [pid, ...]}``.

    The JVM is ``root``'s ``java`` child. PySpark 4 starts one ``pyspark.daemon`` per
    worker module under it (``dedup.worker_daemon`` for the task workers of a local
    session); ``workers`` are the processes forked by the daemon of
    ``pyspark.worker``, the task workers that read the source, decide and write;
    ``other_python`` the rest of the JVM's Python: the daemons, the workers of the
    data-source planning modules (``lookup_data_sources``, ``create_data_source``,
    ``plan_data_source_read``) and the streaming source runner."""
    table = process_table(proc)
    kids = children_map(table)
    jvm = next((p for p in kids.get(root, []) if table[p].comm == "java"), None)
    workers: list[int] = []
    other: list[int] = []
    for pid in kids.get(jvm, []) if jvm is not None else []:
        argv = _cmdline(pid, proc)
        if not any("python" in os.path.basename(a) for a in argv[:1]):
            continue
        other.append(pid)
        forked = kids.get(pid, [])
        if argv[-1] == "pyspark.worker" and ("pyspark.daemon" in argv
                                             or DAEMON_MODULE in argv):
            workers.extend(forked)
        else:
            other.extend(forked)
    return {"driver": root, "jvm": jvm, "workers": sorted(workers), "other_python": sorted(other)}


def committed_batches(checkpoint: Path, seen: dict[int, float]) -> int:
    """Add the commit time of each batch in ``checkpoint/commits`` to ``seen`` (batch id
    -> mtime; Spark deletes old commit files, so poll more often than it does); return
    the number of batches committed (highest id + 1, 0 for none)."""
    folder = checkpoint / "commits"
    try:
        names = os.listdir(folder)
    except OSError:
        names = []
    for name in names:
        if name.isdigit() and int(name) not in seen:
            try:
                seen[int(name)] = (folder / name).stat().st_mtime
            except OSError:
                continue
    return max(seen) + 1 if seen else 0


def slope_per_1k(points: Sequence[tuple[float, float]], after: float = 0.0) -> float | None:
    """Least-squares slope of ``(batch, MB)`` points with ``batch >= after``, in MB per
    1,000 batches; None with fewer than 3 such points or one batch number only."""
    use = [(x, y) for x, y in points if x >= after]
    if len(use) < 3:
        return None
    n = len(use)
    mx = sum(x for x, _ in use) / n
    my = sum(y for _, y in use) / n
    sxx = sum((x - mx) ** 2 for x, _ in use)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in use)
    return round(sxy / sxx * 1000, 3)


def windows(batch_end: Mapping[int, float], samples: Sequence[Mapping[str, Any]],
            rows_per_batch: int, size: int = WINDOW) -> list[dict[str, Any]]:
    """Per ``size`` batches: records/s (from the commit times: the window's last batch's
    end minus the previous window's last batch's end; the first window starts at the
    end of batch 0, so Spark's start-up is not in it), and the mean of each numeric
    field of the samples taken while the window's batches ran (``batches`` in
    ``(start, end]``). Windows whose ends are not both known are left out."""
    if not batch_end:
        return []
    last = max(batch_end)
    out: list[dict[str, Any]] = []
    for start in range(0, last + 1, size):
        end = min(start + size - 1, last)
        before = start - 1 if start else 0
        if end not in batch_end or before not in batch_end or end == before:
            continue
        seconds = batch_end[end] - batch_end[before]
        count = end - before
        window: dict[str, Any] = {
            "first_batch": start, "last_batch": end,
            "records_per_s": round(count * rows_per_batch / seconds, 1) if seconds > 0 else None,
            "seconds": round(seconds, 2),
        }
        inside = [s for s in samples if start < s["batches"] <= end + 1]
        keys = sorted({k for s in inside for k, v in s.items()
                       if isinstance(v, int | float) and not isinstance(v, bool)
                       and k not in ("batches", "t")})
        for key in keys:
            values = [s[key] for s in inside if isinstance(s.get(key), int | float)]
            if values:
                window[key] = round(sum(values) / len(values), 3)
        window["samples"] = len(inside)
        out.append(window)
    return out


def per_worker_slopes(samples: Sequence[Mapping[str, Any]], after: float,
                      min_points: int = 10) -> dict[str, float]:
    """Slope (MB per 1,000 batches, after ``after``) of each worker pid sampled at least
    ``min_points`` times after it."""
    series: dict[str, list[tuple[float, float]]] = {}
    for sample in samples:
        for pid, mb in (sample.get("worker_rss_mb") or {}).items():
            series.setdefault(str(pid), []).append((sample["batches"], mb))
    out: dict[str, float] = {}
    for pid, points in series.items():
        if sum(1 for x, _ in points if x >= after) >= min_points:
            slope = slope_per_1k(points, after)
            if slope is not None:
                out[pid] = slope
    return out


def load_average() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


# --- the run ---

def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("BENCH_RESULTS_DIR", None)  # the child writes no results
    return env


def child_command(baseline: bool, pipeline: Path, checkpoint: Path, redis_url: str,
                  bootstrap: str, batches: int) -> list[str]:
    if baseline:
        return [sys.executable, "-m", "benchmarks.bench_soak", "--child-baseline",
                str(pipeline), str(checkpoint), bootstrap, str(batches)]
    return [sys.executable, "-m", "dedup.cli.main", "run", str(pipeline), "--quiet",
            "--redis-url", redis_url, "--bootstrap", bootstrap, "--checkpoint", str(checkpoint)]


def baseline_child(pipeline_path: str, checkpoint: str, bootstrap: str, batches: int) -> int:
    """The baseline's Spark job (run as a child of :func:`main`): the pipeline's source
    and columns, :func:`python_alo_one_pass` at least once, until ``batches`` committed."""
    from benchmarks.python_alo_sink import python_alo_one_pass
    from dedup.cli.config_file import load_pipeline
    from dedup.cli.pipeline import Addresses, sink_frame, source_frame
    from dedup.local.paths import cache_dir
    from dedup.local.spark import cli_spark_session

    pipeline = load_pipeline(pipeline_path)
    addresses = Addresses(redis_url="", source_bootstrap=bootstrap, sink_bootstrap=bootstrap)
    spark = cli_spark_session(cache_dir() / "runs" / f"{APP_ID}-baseline" / "logs",
                              app_name="soak-baseline", master="local[2]")
    try:
        frame = sink_frame(source_frame(spark, pipeline, addresses), pipeline)
        options = {"kafka.bootstrap.servers": bootstrap, "topic": TOPIC,
                   "app.id": f"{APP_ID}-baseline"}
        query = python_alo_one_pass(frame, options, SHARDS, PARTITIONS) \
            .option("checkpointLocation", checkpoint).start()
        seen: dict[int, float] = {}
        while query.isActive and committed_batches(Path(checkpoint), seen) < batches:
            time.sleep(1.0)
        if query.isActive:
            query.stop()
        if query.exception() is not None:
            print(f"baseline query failed: {query.exception()}", file=sys.stderr)
            return 1
    finally:
        spark.stop()
    return 0


def _sample(child: int, redis_pid: int | None, broker_pid: int | None,
            redis_client: Any, checkpoint: Path, seen: dict[int, float],
            started: float) -> dict[str, Any]:
    procs = spark_processes(child)
    workers = {str(p): rss for p in procs["workers"] if (rss := rss_mb(p)) is not None}
    sample: dict[str, Any] = {
        "t": round(time.monotonic() - started, 1),
        "batches": committed_batches(checkpoint, seen),
        "driver_python_mb": rss_mb(child),
        "driver_jvm_mb": rss_mb(procs["jvm"]) if procs["jvm"] else None,
        "other_python_mb": sum(rss for p in procs["other_python"]
                               if (rss := rss_mb(p)) is not None),
        "workers": len(workers),
        "workers_mb": round(sum(workers.values()), 1),
        "worker_rss_mb": {p: round(v, 1) for p, v in workers.items()},
        "redis_mb": rss_mb(redis_pid) if redis_pid else None,
        "kafka_mb": rss_mb(broker_pid) if broker_pid else None,
        "load_1m": load_average(),
    }
    try:
        sample["redis_used_memory_mb"] = round(redis_used_memory(redis_client) / 2**20, 2)
    except Exception:  # a sample without it rather than a failed soak
        sample["redis_used_memory_mb"] = None
    for key in ("driver_python_mb", "driver_jvm_mb", "other_python_mb", "redis_mb",
                "kafka_mb"):
        if sample[key] is not None:
            sample[key] = round(sample[key], 1)
    return sample


def distinct_ids_by_batch(rows_per_batch: int, batches: int) -> list[int]:
    """Distinct record IDs of the synthetic source after each batch (index = batch)."""
    from sources.synthetic_rows import SyntheticOptions, duplicate_of

    options = SyntheticOptions(seed=38, rows_per_batch=rows_per_batch,
                               total_rows=rows_per_batch * batches,
                               duplicate_rate=DUPLICATE_RATE,
                               duplicate_distance="later_batches", duplicate_gap_batches=2)
    out: list[int] = []
    distinct = 0
    for batch in range(batches):
        for n in range(batch * rows_per_batch, (batch + 1) * rows_per_batch):
            if duplicate_of(options, n) is None:
                distinct += 1
        out.append(distinct)
    return out


VERIFY_MAX_WAIT_S = 1800.0
"""How long the final read of the output may take. ``sinks.verify.verify_topic`` reads
for at most 60 s (``sinks.kafka_io.consume_all``'s default) and counts what it had no
time to read as lost: on a loaded machine that is not enough for 1.6M records."""


def verify(bootstrap: str, rows_per_batch: int, batches: int,
           max_wait: float = VERIFY_MAX_WAIT_S) -> dict[str, Any]:
    """The output read ``read_committed`` against the failure-free output of ``batches``
    batches (:func:`dedup.verify.compare`: lost, duplicated, phantoms, mismatched
    payloads) and the partitions left in an open transaction. ``read_complete`` is False
    when the read stopped at ``max_wait``: then the figures say nothing (``ok`` False)."""
    from dedup.constants import RECORD_ID_HEADER
    from dedup.verify import compare
    from sinks.kafka_io import consume_all
    from sinks.verify import open_transaction_partitions
    from sources.synthetic_rows import SyntheticOptions, expected_output

    options = SyntheticOptions(seed=38, rows_per_batch=rows_per_batch,
                               total_rows=rows_per_batch * batches,
                               duplicate_rate=DUPLICATE_RATE,
                               duplicate_distance="later_batches", duplicate_gap_batches=2)
    expected = {rid: payload.encode() for rid, payload in expected_output(options).items()}
    started = time.monotonic()
    records = consume_all(bootstrap, TOPIC, idle_timeout=30.0, max_wait=max_wait)
    seconds = time.monotonic() - started
    observed = []
    for record in records:
        raw = record.header(RECORD_ID_HEADER)
        observed.append((raw.decode() if raw is not None else None, record.value))
    report = compare(expected, observed, compare_payloads=True)
    open_parts = open_transaction_partitions(bootstrap, TOPIC)
    complete = seconds < max_wait
    result = report.as_dict()
    result.update({"open_transactions": len(open_parts), "read_seconds": round(seconds, 1),
                   "read_complete": complete,
                   "ok": report.ok and not open_parts and complete})
    result["summary"] = (f"{report.summary()[:report.summary().rindex(',')]}, open "
                         f"transactions {len(open_parts)}; read in {seconds:.0f} s"
                         + ("" if complete else f" (stopped at {max_wait:.0f} s: incomplete)"))
    return result


def summarize(samples: Sequence[Mapping[str, Any]], batch_end: Mapping[int, float],
              rows_per_batch: int, warmup: int) -> dict[str, Any]:
    """The figures of a finished soak from its samples and batch commit times."""
    per_window = windows(batch_end, samples, rows_per_batch)
    points = [(s["batches"], s["workers_mb"]) for s in samples if s.get("workers")]
    per_worker = per_worker_slopes(samples, warmup)
    slopes: dict[str, float | None] = {}
    for key in ("driver_python_mb", "driver_jvm_mb", "other_python_mb", "redis_mb",
                "kafka_mb", "redis_used_memory_mb"):
        slopes[key] = slope_per_1k([(s["batches"], s[key]) for s in samples
                                    if isinstance(s.get(key), int | float)], warmup)
    rates = [w["records_per_s"] for w in per_window if w["records_per_s"]]
    first, last = (per_window[0], per_window[-1]) if per_window else ({}, {})
    return {
        "batches": max(batch_end) + 1 if batch_end else 0,
        "warmup_batches": warmup,
        "worker_rss_growth_mb_per_1k_batches": slope_per_1k(points, warmup),
        "worker_rss_growth_mb_per_1k_batches_per_worker": per_worker,
        "worker_counts_seen": sorted({s["workers"] for s in samples if s["batches"] >= warmup}),
        "rss_growth_mb_per_1k_batches": slopes,
        "throughput_last_over_first": (round(rates[-1] / rates[0], 3)
                                       if len(rates) > 1 else None),
        "throughput_first_window": first.get("records_per_s"),
        "throughput_last_window": last.get("records_per_s"),
        "load_1m_first_window": first.get("load_1m"),
        "load_1m_last_window": last.get("load_1m"),
        "windows": per_window,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child-baseline"]:
        raise SystemExit(baseline_child(argv[1], argv[2], argv[3], int(argv[4])))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even started with '&'
    baseline = "--baseline" in argv
    if baseline:
        argv.remove("--baseline")
    args = bench_args(__doc__, argv,
                      full={"batches": 2000, "rows_per_batch": 1000, "warmup": 300,
                            "sample_seconds": 5.0, "max_minutes": 120.0},
                      quick={"batches": 120, "warmup": 30, "sample_seconds": 2.0},
                      helps={"warmup": "batches left out of the growth slopes",
                             "max_minutes": "stop the run (and report it incomplete) after "
                                            "this long"})
    name = "soak_baseline" if baseline else "soak"
    log = progress(name)
    samples: list[dict[str, Any]] = []
    batch_end: dict[int, float] = {}
    result: dict[str, Any] = {}
    progress_path = RESULTS_DIR / f"{name}.progress.jsonl"
    progress_path.parent.mkdir(parents=True, exist_ok=True)
    progress_path.write_text("")
    with bench_services(name, kafka=True) as services:
        import redis

        from sinks.kafka_io import ensure_topic

        ensure_topic(services.bootstrap, TOPIC, PARTITIONS)
        pipeline = services.workdir / "soak.toml"
        pipeline.write_text(PIPELINE.format(
            app_id=APP_ID, rows=args.rows_per_batch, total=args.rows_per_batch * args.batches,
            dup=DUPLICATE_RATE, shards=SHARDS, topic=TOPIC, partitions=PARTITIONS))
        checkpoint = services.workdir / "checkpoint"
        client = redis.Redis.from_url(services.redis_url)
        base_used = redis_used_memory(client)
        command = child_command(baseline, pipeline, checkpoint, services.redis_url,
                                services.bootstrap, args.batches)
        log(f"{'baseline (python_alo_one_pass)' if baseline else 'dedup run, one pass'}: "
            f"{args.batches} batches of {args.rows_per_batch} rows")
        child_log = services.workdir / "child.log"
        started = time.monotonic()
        with child_log.open("wb") as out:
            # a job started in the background of a shell ignores SIGINT, and its
            # children inherit that: the child gets the default back, so that
            # max_minutes can stop its query (dedup run stops it on SIGINT)
            child = subprocess.Popen(command, cwd=REPO, env=_child_env(), stdout=out,
                                     stderr=subprocess.STDOUT,
                                     preexec_fn=_default_sigint)
        deadline = started + args.max_minutes * 60
        stopped_early = False
        last_logged = -1
        try:
            while child.poll() is None:
                sample = _sample(child.pid, services.redis.pid,
                                 services.broker.pid if services.broker else None,
                                 client, checkpoint, batch_end, started)
                samples.append(sample)
                with progress_path.open("a") as handle:
                    handle.write(json.dumps(sample) + "\n")
                if sample["batches"] // WINDOW != last_logged:
                    last_logged = sample["batches"] // WINDOW
                    log(f"batch {sample['batches']}: workers {sample['workers']} "
                        f"{sample['workers_mb']} MB, JVM {sample['driver_jvm_mb']} MB, "
                        f"Redis {sample['redis_used_memory_mb']} MB used, "
                        f"load {sample['load_1m']}")
                if time.monotonic() > deadline:
                    log(f"max_minutes reached at batch {sample['batches']}: stopping")
                    stopped_early = True
                    child.send_signal(signal.SIGINT)
                    try:
                        child.wait(timeout=120)
                    except subprocess.TimeoutExpired:
                        child.kill()
                        child.wait()
                    break
                time.sleep(args.sample_seconds)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        elapsed = time.monotonic() - started
        committed_batches(checkpoint, batch_end)
        tail = child_log.read_text(errors="replace")[-3000:]
        log(f"child exited {child.returncode} after {elapsed:.0f} s: "
            f"{tail.strip().splitlines()[-1] if tail.strip() else ''}")
        used = redis_used_memory(client)
        done = max(batch_end) + 1 if batch_end else 0
        verification = None
        if not baseline and done:
            verification = verify(services.bootstrap, args.rows_per_batch, done)
            log(f"verify: {verification['summary']}")
    summary = summarize(samples, batch_end, args.rows_per_batch, args.warmup)
    distinct = distinct_ids_by_batch(args.rows_per_batch, summary["batches"])
    live = distinct[-1] if distinct else 0
    result = {
        "metadata": run_metadata(),
        "variant": ("python_alo_one_pass: same source and job shape, no dedup, no "
                    "transaction (at least once)") if baseline else
                   "dedup run: synthetic source, dedup and Kafka sink in one pass (default)",
        "setup": {"batches_asked": args.batches, "rows_per_batch": args.rows_per_batch,
                  "duplicate_rate": DUPLICATE_RATE,
                  "duplicates": "of rows 2 batches earlier (later_batches)",
                  "shards": SHARDS, "output_partitions": PARTITIONS, "master": "local[2]",
                  "sample_seconds": args.sample_seconds, "warmup_batches": args.warmup,
                  "redis": "redis-server, appendonly yes, appendfsync everysec",
                  "worker_growth": "least-squares slope of the summed RSS (VmRSS) of the "
                                   "processes pyspark.daemon forked, over the batch number, "
                                   "samples after the warm-up",
                  "command": " ".join(Path(c).name if i == 0 else c
                                      for i, c in enumerate(command[:5]))},
        "child_exit": child.returncode,
        # stopped at max_minutes: the batch in flight may be in the output in part
        # (phantoms against the batches committed); a rerun would finish it
        "stopped_early": stopped_early or summary["batches"] < args.batches,
        "elapsed_s": round(elapsed, 1),
        "records": summary["batches"] * args.rows_per_batch,
        "live_ids": live,
        "redis_used_memory_bytes": used,
        "redis_used_memory_start_bytes": base_used,
        "redis_bytes_per_live_id": round((used - base_used) / live, 1) if live else None,
        "verification": verification,
        # None: not established (baseline, or the read of the output did not finish)
        "exact": (verification["ok"] if verification and verification["read_complete"]
                  else None),
        **summary,
        "samples": samples,
    }
    write_json(f"{name}.json", result)
    log(f"{summary['batches']} batches; worker growth "
        f"{summary['worker_rss_growth_mb_per_1k_batches']} MB/1k batches after "
        f"{args.warmup}; throughput last/first {summary['throughput_last_over_first']}; "
        f"Redis {result['redis_bytes_per_live_id']} B per live ID; exact {result['exact']}")
    return result


if __name__ == "__main__":
    main()
