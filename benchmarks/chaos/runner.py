"""Run the pipeline many times under a seeded schedule of faults and verify each run.

One run: a fresh app id, output topic and checkpoint; the synthetic source
(finite, replayable) -> record IDs -> dedup -> exactly-once Kafka sink, built by
the pipeline composer; one fault of the scheduled kind injected at a
random batch; the query restarted from its checkpoint whenever it dies; then
the ``read_committed`` output compared with the failure-free output computed
from the input (:mod:`dedup.verify`). Most kinds run in one long-lived
``local[2,4]`` SparkSession; the driver and executor kills run the pipeline in
a child ``dedup run`` process so that a whole driver can be killed.

The run itself (its spec, state and in-process faults) is :mod:`benchmarks.chaos.model`;
here the dispatch to the kinds, the judging of a run and the resumable schedule.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.chaos import cluster_kafka, cluster_spark
from benchmarks.chaos.faults import (
    KAFKA_CLUSTER_KINDS,
    OPERATIONAL_KINDS,
    SPARK_CLUSTER_KINDS,
    SUBPROCESS_KINDS,
    classify_error,
    held_alive,
    hold_evidence,
    wait_fired,
)
from benchmarks.chaos.model import (
    FROZEN_CLIENT_TIMEOUT_S,
    REDIS_PY_TRIES,
    ROWS,
    ROWS_PER_BATCH,
    ChaosEnv,
    Run,
    RunResult,
    RunSpec,
    _commit,
    _first_line,
    child_error,
    pipeline_text,
    recovery_target,
    run_to_end,
)
from dedup.constants import RECORD_ID_HEADER
from sinks.kafka_io import consume_all, ensure_topic
from sinks.verify import verify_topic


def prepare(run: Run) -> Callable[[], None] | None:
    """Arm the fail-points of ``run``; return the injector to run in a thread: the
    cluster kinds' own modules, else :meth:`Run.prepare`."""
    if run.spec.kind in KAFKA_CLUSTER_KINDS:
        return cluster_kafka.prepare(run)
    if run.spec.kind in SPARK_CLUSTER_KINDS:
        return cluster_spark.prepare(run)
    return run.prepare()


def run_inprocess(run: Run) -> int:
    """Run the pipeline in this process's SparkSession; return the query restarts."""
    from dedup.cli import Addresses, parse_pipeline, start_query

    text, transform = pipeline_text(run.app_id, run.topic, run.spec), None
    if run.spec.variant:
        from benchmarks.chaos.variants import apply_variant

        text, transform = apply_variant(run, text)
    pipeline = parse_pipeline(text)
    bootstrap = run.env.kafka.bootstrap_servers
    url = run.redis.url
    if run.spec.kind == "redis_unreachable":
        url += f"?socket_timeout={FROZEN_CLIENT_TIMEOUT_S}"
    addresses = Addresses(url, bootstrap, bootstrap)
    return run_to_end(run, lambda: start_query(run.env.spark, pipeline, addresses,
                                               run.checkpoint, str(run.fp_dir), transform),
                      run.component_back)


def run_subprocess(run: Run) -> int:
    """Run ``dedup run`` in a child process (killable driver); return the restarts."""
    master = "local-cluster[2,1,1024]" if run.spec.kind == "executor_kill" else "local[2,4]"
    if run.spec.kind in SPARK_CLUSTER_KINDS:
        master = cluster_spark.master_url(run)
    config = run.dir / "pipeline.toml"
    text = pipeline_text(run.app_id, run.topic, run.spec, master=master)
    if run.spec.variant:
        from benchmarks.chaos.variants import apply_variant

        text, transform = apply_variant(run, text)
        if transform is not None:
            raise ValueError(f"variant {run.spec.variant!r} needs code between the steps, "
                             "which a `dedup run` child cannot take")
    config.write_text(text)
    bootstrap = run.env.kafka.bootstrap_servers
    argv = [str(Path(sys.executable).parent / "dedup"), "run", str(config), "--quiet",
            "--redis-url", run.redis.url, "--bootstrap", bootstrap,
            "--checkpoint", run.checkpoint, "--max-seconds", "300"]
    env = {**os.environ, "DEDUP_FAIL_POINT_DIR": str(run.fp_dir)}
    log = open(run.dir / "driver.log", "ab")  # noqa: SIM115 - closed below
    restarts = 0
    try:
        driver = subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)
        if run.spec.kind == "driver_kill":
            hit = wait_fired(run.fp_dir, "sink.after_checkpoint", 300,
                             stop=lambda: driver.poll() is not None)
            if hit is not None:
                run.fault.injected_at = time.monotonic()
                alive, started = held_alive(hit), time.time()
                os.killpg(driver.pid, signal.SIGKILL)
                code = driver.wait(60)
                hold = hold_evidence(hit, started, time.time(), alive)
                run.fault.evidence.update(hold, fired=hit.get("context", {}), driver_exit=code)
                run.fault.confirmed = code == -signal.SIGKILL and hold["in_hold"]
                run.fault.detail = f"SIGKILL of the driver process group (pid {driver.pid})"
                restarts += 1
                run.clock.target = recovery_target("sink.after_checkpoint",
                                                   hit.get("context", {}))
                threading.Thread(target=run._start_clock, daemon=True).start()
                driver = subprocess.Popen(argv, env=env, stdout=log, stderr=log,
                                          start_new_session=True)
        code = driver.wait(420)
        if code != 0:
            log.flush()
            said = child_error(run.dir / "driver.log")
            raise RuntimeError(f"dedup run exited with {code}{': ' + said if said else ''}; "
                               f"see {run.dir / 'driver.log'}")
        return restarts
    finally:
        log.close()


def run_one(env: ChaosEnv, spec: RunSpec) -> RunResult:
    """Execute one scheduled run and verify its output. Never raises."""
    from sources.synthetic_rows import SyntheticOptions, expected_output

    if spec.kind in KAFKA_CLUSTER_KINDS:
        env.on_stop("kafka cluster", cluster_kafka.stop)
        env = cluster_kafka.env_for(env)
    if spec.kind in SPARK_CLUSTER_KINDS:
        env.on_stop("spark cluster", cluster_spark.stop_cluster)
    run = Run(env, spec)
    started = time.monotonic()
    result = RunResult(spec=spec, fault=run.fault)
    injector: threading.Thread | None = None
    try:
        ensure_topic(env.kafka.bootstrap_servers, run.topic, partitions=2,
                     replication_factor=3 if spec.kind in KAFKA_CLUSTER_KINDS else 1)
        inject = None if spec.kind in OPERATIONAL_KINDS else prepare(run)
        if inject is not None:
            injector = threading.Thread(target=inject, daemon=True)
            injector.start()
        if spec.kind in OPERATIONAL_KINDS:
            from benchmarks.chaos.operational import run_operational

            result.restarts = run_operational(run)
        elif spec.kind in SUBPROCESS_KINDS:
            result.restarts = run_subprocess(run)
        else:
            result.restarts = run_inprocess(run)
    except Exception as exc:  # recorded; the run counts as failed
        result.error = _first_line(exc)
    finally:
        run.finished.set()
        if injector is not None:
            injector.join(120)
    if spec.kind in {"txn_timeout", "redis_unreachable"}:
        run.fault.confirmed = _confirm_extra(run)
    _classify_errors(run, result)
    if spec.mutant:  # the processes in which its broken branch was taken
        from benchmarks.chaos.mutant_patches import mutant_hits

        run.fault.evidence["mutant_hits"] = mutant_hits(run.fp_dir).get(spec.mutant, [])
    options = SyntheticOptions(seed=spec.seed, rows_per_batch=ROWS_PER_BATCH, total_rows=ROWS,
                               duplicate_rate=0.9 if spec.kind == "dup90_tiny_bloom" else 0.2,
                               duplicate_distance="later_batches", duplicate_gap_batches=3,
                               num_partitions=2)
    expected = {rid: payload.encode() for rid, payload in expected_output(options).items()}
    try:
        result.report = verify_topic(env.kafka.bootstrap_servers, run.topic, expected).as_dict()
        for topic in run.extra_topics:
            _add_output(result.report, topic,
                        verify_topic(env.kafka.bootstrap_servers, topic, expected).as_dict())
    except Exception as exc:  # a verifier failure fails the run
        result.error = result.error or f"verify: {_first_line(exc)}"
    result.recovery_s = run.recovery_s
    if run.recovery_s is not None:
        result.recovery_of = "partition" if run.clock.target is not None else "topic"
    result.duration_s = time.monotonic() - started
    result.outcome = _outcome(run, result)
    return result


def _add_output(report: dict[str, Any], topic: str, other: dict[str, Any]) -> None:
    """Fold the report of a further output topic into the run's (counts add up)."""
    report.setdefault("outputs", {})[topic] = other
    for key in ("expected", "observed", "lost", "duplicated", "phantoms", "mismatched",
                "open_transactions"):
        if isinstance(other.get(key), int):
            report[key] = int(report.get(key, 0)) + other[key]
    report["ok"] = bool(report.get("ok", False)) and bool(other.get("ok", False))


def _classify_errors(run: Run, result: RunResult) -> None:
    """Count the run's query errors by expected class; keep the unexpected ones."""
    for error in run.fault.evidence.get("query_errors", []):
        name = classify_error(run.spec.kind, error)
        if name is None:
            result.unexpected_errors.append(error)
        else:
            result.error_classes[name] = result.error_classes.get(name, 0) + 1


def _outcome(run: Run, result: RunResult) -> str:
    """``exact``, ``refused`` (see :data:`FAULT_KINDS`) or ``failed``.

    A run fails, besides on wrong output, when its fault was not confirmed (it
    did not hit, so the exact output proves nothing) or a query died of an error
    its kind does not expect (a restart must not hide a bug).
    """
    if not result.error and result.unexpected_errors:
        result.error = (f"unexpected query error ({len(result.unexpected_errors)}): "
                        f"{result.unexpected_errors[0]}")
    if not result.error and not run.fault.confirmed:
        result.error = f"not hit: {run.spec.kind} ({run.fault.detail or 'no evidence'})"
    exact = not result.error and bool(result.report.get("ok", False))
    if not exact:
        return "failed"
    if run.refused is None:
        return "exact"
    prefix = run.fault.evidence.get("prefix_check", {})
    if not prefix.get("ok", False):
        result.error = (f"refused, but the output before the restart was not an exact "
                        f"prefix: {prefix}")
        return "failed"
    return "refused"


def _confirm_extra(run: Run) -> bool:
    """Evidence read after the run: the stopped transaction aborted, Redis failed closed."""
    ev = run.fault.evidence
    if run.spec.kind == "txn_timeout":
        # THAT transaction was aborted by the coordinator: its first and last
        # records are in the log (read_uncommitted) once more than read_committed
        # readers see them (the retry's copy is the visible one)
        if not ev.get("stopped_until_continued") or not ev.get("first_id"):
            return False
        bootstrap = run.env.kafka.bootstrap_servers
        ids = {ev["first_id"].encode(), ev["last_id"].encode()}

        def copies(isolation: str) -> dict[bytes, int]:
            found = dict.fromkeys(ids, 0)
            for record in consume_all(bootstrap, run.topic, isolation):
                rid = record.header(RECORD_ID_HEADER)
                if rid in found:
                    found[rid] += 1
            return found

        everything, visible = copies("read_uncommitted"), copies("read_committed")
        aborted = {rid.decode(): everything[rid] - visible[rid] for rid in ids}
        ev["aborted_copies"] = aborted
        return all(n > 0 for n in aborted.values())
    if run.spec.kind == "redis_unreachable":
        # fail closed: the query died of the toolkit's catalog- or checkpoint-unavailable
        # error for the frozen Redis (the sink keeps its checkpoints there too), raised
        # while it was frozen (or within a client timeout)
        url, start = ev.get("frozen_url", ""), float(ev.get("frozen_from", 0.0))
        end = float(ev.get("frozen_until", start)) + REDIS_PY_TRIES * FROZEN_CLIENT_TIMEOUT_S
        closed = [error for error, at in zip(ev.get("query_errors", []),
                                             ev.get("query_error_times", []), strict=False)
                  if ("CatalogUnavailableError" in error or "CheckpointUnavailableError" in error)
                  and f"Redis at {url}" in error
                  and start <= at <= end]
        ev["failed_closed"] = bool(closed)
        return bool(closed) and bool(ev.get("in_hold"))
    return True


def run_schedule(specs: list[RunSpec], results: list[RunResult], progress: Path,
                 max_minutes: float, line: Callable[[RunResult], str],
                 wanted: range | None = None) -> list[RunResult]:
    """Run every spec not in ``results`` (and in ``wanted``) on shared services, each
    result appended to ``results`` and, as one JSON line, to ``progress`` the moment it
    is known (a matrix of hours survives the loss of its own process: ``--resume``
    reads the lines back); stops starting runs after ``max_minutes`` (0: no limit)."""
    import json
    import shutil
    import tempfile

    done = {r.spec.index for r in results}
    commit = _commit()
    workdir = Path(tempfile.mkdtemp(prefix="dedup-chaos-"))
    env = ChaosEnv(workdir).start()
    started = time.monotonic()
    try:
        for spec in specs:
            if spec.index in done or (wanted is not None and spec.index not in wanted):
                continue
            if max_minutes and time.monotonic() - started > max_minutes * 60:
                print(f"time limit reached after {len(results)} runs", flush=True)
                break
            result = run_one(env, spec)
            result.commit = commit
            results.append(result)
            with progress.open("a") as handle:
                handle.write(json.dumps(result.as_dict(), default=str) + "\n")
            print(line(result), flush=True)
    finally:
        env.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return results
