"""Operational fault kinds: what operators do to a running pipeline.

Each kind runs in the chaos runner's long-lived SparkSession (the second
pipeline's first one is a child ``dedup run``) and follows one of two
expected outcomes (:data:`benchmarks.chaos.faults.FAULT_KINDS`):

* **exact**: the change is absorbed (the operator reuses its recorded
  partition count, a reset checkpoint re-reads the input and dedup drops what
  was claimed, a full Redis fails the batch until it has room again);
* **refused**: the change is refused at start (or at the first batch) with a
  message naming it; the output committed before it must be an exact prefix
  (no duplicates, no phantoms, every record of a batch in Spark's commit log
  present), and the run is finished by a restart with the original settings.

Most kinds begin with a *partial batch*: one sink partition of batch ``k`` is
held by a ``sleep`` fail-point after its output checkpoint while the other
partitions commit (their batch markers advance), and the query is stopped.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.chaos.faults import NON_EMPTY, wait_fired
from benchmarks.chaos.model import (
    ROWS,
    ROWS_PER_BATCH,
    Run,
    _first_line,
    _stop_quietly,
    pipeline_text,
    run_to_end,
)
from dedup.failpoints import arm, resume
from dedup.local.services import RedisServer

SHUFFLE = "spark.sql.shuffle.partitions"
PARTITIONS = 4  # the runner's shuffle partitions (= dedup shards = sink partitions)
HOLD_S = 12.0  # how long the held sink partition sleeps (the query is stopped meanwhile)
BUCKET_SECONDS = 24 * 3600
CHANGED_BUCKET_SECONDS = 3600
CHANGED_SHARDS = 8
RUN_MAX_SECONDS = 300
SECOND_WAIT_S = 120  # the second pipeline's time to be refused (the first is held meanwhile)
# redis_failover_lagging_replica: the most the cut-off replica's batch is given to commit
# or fail a task attempt before the primary is killed (an attempt fails after ~7 s:
# replica_timeout, then the kind's failover_wait, model.LAGGING_FAILOVER_WAIT_S).
FAILOVER_DEADLINE_S = 60


# -- small helpers -----------------------------------------------------------

def _pipeline(run: Run, **changes: Any) -> Any:
    from dedup.cli import parse_pipeline

    text = pipeline_text(run.app_id, run.topic, run.spec, **changes)
    if run.spec.variant:
        from benchmarks.chaos.variants import apply_variant

        text, transform = apply_variant(run, text)
        if transform is not None:
            raise ValueError(f"variant {run.spec.variant!r} needs code between the steps, "
                             f"which operational kind {run.spec.kind} does not take")
    return parse_pipeline(text)


def _start(run: Run, pipeline: Any, redis_url: str, checkpoint: str) -> Any:
    from dedup.cli import Addresses, start_query

    bootstrap = run.env.kafka.bootstrap_servers
    return start_query(run.env.spark, pipeline, Addresses(redis_url, bootstrap, bootstrap),
                       checkpoint, str(run.fp_dir))


def _sink_config(run: Run) -> Any:
    from sinks.config import SinkConfig

    return SinkConfig.from_options({
        "app.id": run.app_id, "kafka.bootstrap.servers": run.env.kafka.bootstrap_servers,
        "topic": run.topic, "strong.productions": "false",
    })


def markers(run: Run, partitions: int) -> list[int]:
    """The committed batch marker (next batch) of each sink partition; -1 when none."""
    from confluent_kafka import Consumer, TopicPartition

    config = _sink_config(run)
    out = []
    for partition in range(partitions):
        consumer = Consumer({"bootstrap.servers": config.bootstrap_servers,
                             "group.id": config.marker_group(partition),
                             "isolation.level": "read_committed", "log_level": 0})
        try:
            [tp] = consumer.committed([TopicPartition(config.marker_topic, 0)], timeout=10)
            out.append(tp.offset if tp.error is None and tp.offset >= 0 else -1)
        except Exception:  # no group yet, coordinator loading: no marker
            out.append(-1)
        finally:
            consumer.close()
    return out


def _redis(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_timeout=5, decode_responses=True)


def _recorded_layout(run: Run, url: str) -> dict[str, str]:
    from dedup.catalog import meta_key

    return dict(_redis(url).hgetall(meta_key(run.app_id)))


def committed_batches(checkpoint: str) -> int:
    """Batches in Spark's commit log of ``checkpoint`` (they are 0 .. n-1)."""
    folder = Path(checkpoint) / "commits"
    if not folder.is_dir():
        return 0
    ids = [int(p.name) for p in folder.iterdir() if p.name.isdigit()]
    return max(ids) + 1 if ids else 0


def _options(run: Run) -> Any:
    from sources.synthetic_rows import SyntheticOptions

    return SyntheticOptions(seed=run.spec.seed, rows_per_batch=ROWS_PER_BATCH, total_rows=ROWS,
                            duplicate_rate=0.2, duplicate_distance="later_batches",
                            duplicate_gap_batches=3, num_partitions=2)


def prefix_check(run: Run, batches_done: int) -> dict[str, Any]:
    """Is the output so far an exact prefix? No duplicate, no phantom, no changed
    payload, and every record of the ``batches_done`` committed batches present."""
    from collections import Counter

    from sinks.verify import read_observed
    from sources.synthetic_rows import expected_output

    options = _options(run)
    expected = expected_output(options)
    must = expected_output(options, batches_done * ROWS_PER_BATCH) if batches_done else {}
    observed = read_observed(run.env.kafka.bootstrap_servers, run.topic)
    counts = Counter(rid for rid, _ in observed)
    duplicated = sum(n - 1 for n in counts.values() if n > 1)
    phantoms = sum(n for rid, n in counts.items() if rid not in expected)
    mismatched = sum(1 for rid, value in observed
                     if rid in expected and value != expected[rid].encode())
    missing = sum(1 for rid in must if rid not in counts)
    return {"ok": duplicated == phantoms == mismatched == missing == 0,
            "observed": len(observed), "committed_batches": batches_done,
            "committed_batches_records": len(must), "missing_of_committed": missing,
            "duplicated": duplicated, "phantoms": phantoms, "mismatched": mismatched}


def _finish(run: Run, pipeline: Any, redis_url: str, checkpoint: str,
            back: threading.Event | None = None, start: Any = None) -> int:
    """Run the query from ``checkpoint`` to the end of the input; return the restarts.

    ``start`` (no arguments, returns a started query) replaces the pipeline's own.
    """
    return run_to_end(run, start or (lambda: _start(run, pipeline, redis_url, checkpoint)), back)


def _partial_batch(run: Run, pipeline: Any, redis_url: str, partition: int) -> dict[str, Any]:
    """Run until sink partition ``partition`` of batch k is held after its checkpoint
    and the other partitions committed batch k, then stop the query.

    Returns the evidence: the fired fail-point's context and the markers.
    """
    k = run.spec.batch
    arm(run.fp_dir, "sink.after_checkpoint", "sleep",
        match={"batch": k, "partition": partition, **NON_EMPTY}, seconds=HOLD_S)
    query = _start(run, pipeline, redis_url, run.checkpoint)
    evidence: dict[str, Any] = {"query_id": str(query.id), "held_partition": partition}
    try:
        hit = wait_fired(run.fp_dir, "sink.after_checkpoint", timeout=180,
                         stop=lambda: not query.isActive)
        if hit is None:
            raise RuntimeError(f"the partial batch did not happen: sink partition {partition} "
                               f"of batch {k} never reached the fail-point "
                               f"({_first_line(query.exception()) if query.exception() else ''})")
        run.fault.injected_at = time.monotonic()
        evidence["fired"] = hit.get("context", {})
        others = [p for p in range(PARTITIONS) if p != partition]
        deadline = time.monotonic() + HOLD_S - 4
        seen = markers(run, PARTITIONS)
        while time.monotonic() < deadline and any(seen[p] < k + 1 for p in others):
            time.sleep(0.5)
            seen = markers(run, PARTITIONS)
        evidence["markers_at_stop"] = seen
    finally:
        stopping = time.monotonic()
        _stop_quietly(query)
        evidence["stop_seconds"] = round(time.monotonic() - stopping, 1)
    evidence["committed_batches_at_stop"] = committed_batches(run.checkpoint)
    evidence["partial"] = (any(m >= k + 1 for p, m in enumerate(seen) if p != partition)
                           and seen[partition] < k + 1)
    return evidence


def _expect_refusal(run: Run, pipeline: Any, redis_url: str, setting: str) -> None:
    """Start with a changed ``pipeline``: record a refusal, or run it if it starts."""
    from dedup.exceptions import ConfigError

    try:
        query = _start(run, pipeline, redis_url, run.checkpoint)
    except ConfigError as exc:
        message = str(exc).splitlines()[0]
        run.refused = message
        run.fault.evidence["refusal"] = {"error": type(exc).__name__, "message": message,
                                         "names_setting": f"{setting} changed" in message}
        return
    run.fault.evidence["refusal"] = None  # not refused: it must be exact then
    try:
        query.processAllAvailable()
    finally:
        _stop_quietly(query)


# -- the kinds -------------------------------------------------------------------

def run_operational(run: Run) -> int:
    """Run the operational kind of ``run``; return the query restarts."""
    kind = run.spec.kind
    if kind == "restart_shuffle_partitions":
        return _restart_shuffle_partitions(run)
    if kind in {"restart_shard_count", "restart_bucket_seconds"}:
        return _restart_setting(run)
    if kind == "checkpoint_reset":
        return _checkpoint_reset(run)
    if kind == "second_pipeline":
        return _second_pipeline(run)
    if kind == "redis_maxmemory":
        return _redis_maxmemory(run)
    if kind == "redis_failover_lagging_replica":
        return _redis_failover(run)
    if kind == "two_outputs_foreach_batch":
        return _two_outputs(run)
    if kind == "clock_skew":
        return _clock_skew(run)
    if kind == "marker_retention":
        return _marker_retention(run)
    raise ValueError(f"unknown operational kind {kind!r}")


def _held_partition(run: Run) -> int:
    return run.spec.seed % PARTITIONS


def _restart_shuffle_partitions(run: Run) -> int:
    spark = run.env.spark
    before = spark.conf.get(SHUFFLE)
    new = 2 if run.spec.seed % 2 else 6
    pipeline = _pipeline(run)
    url = run.redis.url
    try:
        spark.conf.set(SHUFFLE, str(PARTITIONS))
        partial = _partial_batch(run, pipeline, url, _held_partition(run))
        run.fault.evidence.update(partial)
        spark.conf.set(SHUFFLE, str(new))
        ev = run.fault.evidence
        ev["session_conf_first"] = str(PARTITIONS)
        ev["session_conf_restart"] = spark.conf.get(SHUFFLE)
        run.fault.detail = (f"sink partition {_held_partition(run)} of batch {run.spec.batch} "
                            f"held, query stopped, restarted with {SHUFFLE}={new}")
        restarts = _finish(run, pipeline, url, run.checkpoint)
        ev["recorded_layout"] = _recorded_layout(run, url)
        ev["markers_at_end"] = markers(run, max(PARTITIONS, new))
        run.fault.confirmed = (partial["partial"] and ev["session_conf_restart"] != str(PARTITIONS)
                               and ev["recorded_layout"].get("num_partitions") == str(PARTITIONS))
        return restarts
    finally:
        spark.conf.set(SHUFFLE, before)


def _restart_setting(run: Run) -> int:
    if run.spec.kind == "restart_shard_count":
        setting, changes = "num_shards", {"num_shards": CHANGED_SHARDS}
    else:
        setting, changes = "bucket_seconds", {"bucket_seconds": CHANGED_BUCKET_SECONDS}
    pipeline = _pipeline(run)
    url = run.redis.url
    partial = _partial_batch(run, pipeline, url, _held_partition(run))
    ev = run.fault.evidence
    ev.update(partial)
    run.fault.detail = (f"sink partition {_held_partition(run)} of batch {run.spec.batch} held, "
                        f"query stopped, restarted with {setting}={next(iter(changes.values()))}")
    _expect_refusal(run, _pipeline(run, **changes), url, setting)
    if run.refused is not None:
        ev["prefix_check"] = prefix_check(run, committed_batches(run.checkpoint))
    restarts = _finish(run, pipeline, url, run.checkpoint)
    refusal = ev.get("refusal")
    run.fault.confirmed = partial["partial"] and (refusal is None or refusal["names_setting"])
    return restarts


def _checkpoint_reset(run: Run) -> int:
    """Partial batch k, then a new query with a fresh checkpoint on the same app id: it
    must be refused at its first claim (the old query left batch k unfinished). The
    operator follows the message: restarts the old query from its checkpoint until
    batch k is committed, stops it, and then resets. The reset query re-reads the
    input from the start; the catalog drops what the old one emitted."""
    import json

    pipeline = _pipeline(run)
    url = run.redis.url
    partial = _partial_batch(run, pipeline, url, _held_partition(run))
    ev = run.fault.evidence
    ev.update(partial)
    k = run.spec.batch
    reset = str(run.dir / "checkpoint-reset")
    run.fault.detail = (f"sink partition {_held_partition(run)} of batch {k} held, query "
                        "stopped, restarted under a fresh checkpoint with the same app id; "
                        "after the refusal the old query finished its batch, then the reset")
    # 1. The reset while batch k is unfinished: refused at the first claim.
    query = _start(run, pipeline, url, reset)
    ev["reset_query_id"] = str(query.id)
    try:
        query.awaitTermination(120)
        error = _first_line(query.exception()) if query.exception() else ""
    except Exception as exc:  # the expected outcome: the query died refused
        error = _first_line(exc)
    finally:
        _stop_quietly(query)
    ev["reset_error"] = error
    refused = "AppIdInUseError" in error and f"left batch {k} unfinished" in error
    ev["reset_refused"] = refused
    if refused:
        run.refused = error
        ev["prefix_check"] = prefix_check(run, committed_batches(run.checkpoint))
    # 2. The old query finishes batch k (and the rest of the input) from its checkpoint.
    restarts = _finish(run, pipeline, url, run.checkpoint)
    ev["old_query_committed_batches"] = committed_batches(run.checkpoint)
    ev["old_query_finished_batch"] = ev["old_query_committed_batches"] >= k + 1
    # 3. The reset, now accepted: a new query id reads the input from the start.
    shutil.rmtree(reset, ignore_errors=True)
    restarts += _finish(run, pipeline, url, reset)
    metadata = Path(reset) / "metadata"
    ev["new_query_id"] = json.loads(metadata.read_text())["id"] if metadata.exists() else None
    run.fault.confirmed = (partial["partial"] and refused and ev["old_query_finished_batch"]
                           and ev["new_query_id"] not in (None, partial["query_id"]))
    return restarts


def _second_pipeline(run: Run) -> int:
    """The first pipeline is a child ``dedup run`` held mid-batch; the second (same app
    id, its own checkpoint, same output topic) starts here meanwhile and must be refused
    with AppIdInUseError before it claims anything.

    The held task is stopped (SIGSTOP) until the second pipeline's outcome is known,
    not slept for a fixed time: a second query slow to reach its first batch (seen
    in the strict subset, over 40 s on a loaded machine) would otherwise meet a
    first pipeline that had finished, and prove nothing."""
    import json

    k = run.spec.batch
    arm(run.fp_dir, "dedup.after_claim", "stop", match={"batch": k, **NON_EMPTY})
    config = run.dir / "pipeline.toml"
    config.write_text(pipeline_text(run.app_id, run.topic, run.spec))
    bootstrap = run.env.kafka.bootstrap_servers
    argv = [str(Path(sys.executable).parent / "dedup"), "run", str(config), "--quiet",
            "--redis-url", run.redis.url, "--bootstrap", bootstrap,
            "--checkpoint", run.checkpoint, "--max-seconds", str(RUN_MAX_SECONDS)]
    env = {**os.environ, "DEDUP_FAIL_POINT_DIR": str(run.fp_dir)}
    ev = run.fault.evidence
    with open(run.dir / "driver.log", "ab") as log:
        first = subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)
        try:
            hit = wait_fired(run.fp_dir, "dedup.after_claim", 300,
                             stop=lambda: first.poll() is not None)
            if hit is None:
                raise RuntimeError(f"the first pipeline never reached batch {k} (exit "
                                   f"{first.poll()}); see {run.dir / 'driver.log'}")
            run.fault.injected_at = time.monotonic()
            ev["fired"] = hit.get("context", {})
            try:
                first_id = json.loads((Path(run.checkpoint) / "metadata").read_text())["id"]
                ev["first_query_id"] = first_id
                _second(run, first_id)
            finally:
                ev["first_held_until_second_done"] = resume(hit, timeout=5)
            # hit: refused while the first pipeline was still inside its held batch
            run.fault.confirmed = run.fault.confirmed and ev["first_held_until_second_done"]
            code = first.wait(RUN_MAX_SECONDS + 60)
            ev["first_exit"] = code
            if code != 0:
                raise RuntimeError(f"the first pipeline exited with {code}; see "
                                   f"{run.dir / 'driver.log'}")
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
                first.wait(30)
    return 0


def _second(run: Run, first_id: str) -> None:
    from dedup.catalog import decisions_key

    ev = run.fault.evidence
    checkpoint = str(run.dir / "checkpoint-second")
    pipeline = _pipeline(run)
    started = time.monotonic()
    query = _start(run, pipeline, run.redis.url, checkpoint)
    second_id = str(query.id)
    ev["second_query_id"] = second_id
    error = ""
    try:
        query.awaitTermination(SECOND_WAIT_S)
    except Exception as exc:  # the expected outcome: the query died refused
        error = _first_line(exc)
    finally:
        still_running = query.isActive
        _stop_quietly(query)
    ev["second_seconds"] = round(time.monotonic() - started, 1)
    ev["second_error"] = error
    ev["second_stopped_by_runner"] = still_running
    client = _redis(run.redis.url)
    claims = 0
    for shard in range(PARTITIONS):
        claims += sum(1 for field in client.hkeys(decisions_key(run.app_id, shard))
                      if field.startswith(second_id))
    ev["second_claims"] = claims
    names_first = "AppIdInUseError" in error and first_id in error
    if names_first and claims == 0:
        run.refused = error
    run.fault.detail = ("a second pipeline (own checkpoint, same app id and topic) started "
                        f"while the first was held at dedup.after_claim of batch "
                        f"{run.spec.batch}")
    run.fault.confirmed = (names_first and claims == 0
                           and int(ev.get("fired", {}).get("rows", 0)) > 0)
    # the refusal is the second pipeline's; the first's output is checked whole
    ev["prefix_check"] = {"ok": True, "why": "the second pipeline committed nothing: the "
                                             "whole output is the first's, verified exact"}


def _oom_refusals(client: Any) -> int:
    """Commands Redis refused with OOM since it started (INFO errorstats)."""
    stat = client.info("errorstats").get("errorstat_OOM") or {}
    return int(stat.get("count", 0)) if isinstance(stat, dict) else 0


def _redis_maxmemory(run: Run) -> int:
    """maxmemory just above the usage with noeviction while batch k claims: the batch
    must fail (fail closed); once the runner raised maxmemory, the restart is exact."""
    client = _redis(run.redis.url)
    back = threading.Event()
    back.set()
    ev = run.fault.evidence
    k = run.spec.batch
    arm(run.fp_dir, "dedup.after_claim", "sleep", match={"batch": k, **NON_EMPTY}, seconds=2)
    policy = client.config_get("maxmemory-policy")["maxmemory-policy"]

    def squeeze() -> None:
        hit = wait_fired(run.fp_dir, "dedup.after_claim", 300, stop=run.finished.is_set)
        if hit is None:
            return
        back.clear()
        refusals = _oom_refusals(client)
        try:
            used = int(client.info("memory")["used_memory"])
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", used + 1024)
            run.fault.injected_at = time.monotonic()
            ev["fired"] = hit.get("context", {})
            ev["maxmemory"] = used + 1024
            # Spark's task retries may absorb the failures (the usage also drops when
            # decisions are collected): Redis's own count of OOM refusals is the proof
            deadline = time.monotonic() + 90
            while (not ev.get("query_errors") and _oom_refusals(client) == refusals
                   and time.monotonic() < deadline and not run.finished.is_set()):
                time.sleep(0.2)
            time.sleep(1.0)
            ev["oom_refusals"] = _oom_refusals(client) - refusals
            ev["used_memory_at_release"] = int(client.info("memory")["used_memory"])
        finally:
            client.config_set("maxmemory", 0)
            client.config_set("maxmemory-policy", policy)
            back.set()
        run._start_clock()

    injector = threading.Thread(target=squeeze, daemon=True)
    injector.start()
    try:
        restarts = _finish(run, _pipeline(run), run.redis.url, run.checkpoint, back=back)
    finally:
        run.finished.set()
        injector.join(60)
        client.config_set("maxmemory", 0)
        client.config_set("maxmemory-policy", policy)
    errors = ev.get("query_errors", [])
    # fail closed: Redis refused writes (claims, leases, sink checkpoints) and every
    # refusal failed its task or batch; the exact output shows none decided without them
    ev["failed_closed"] = ev.get("oom_refusals", 0) > 0 or any(
        "OOM" in e or "maxmemory" in e for e in errors)
    run.fault.detail = f"maxmemory set 1 KiB above the usage at batch {k}, raised after " \
                       "Redis refused writes"
    run.fault.confirmed = ev["failed_closed"]
    return restarts


def _redis_failover(run: Run) -> int:
    """A replica of the run's own Redis is cut off at batch k's first claim; the
    primary is killed once batch k committed (or the query died: claims no replica
    holds fail their batch), the replica promoted; a start on it alone must be refused
    (fewer replicas than recorded), and the pipeline runs on it once it has a replica
    of its own again, as a failover manager would arrange."""
    primary = RedisServer(run.dir / "redis-primary", appendfsync="always").start()
    replica = RedisServer(run.dir / "redis-replica", appendfsync="always").start()
    second: RedisServer | None = None
    ev = run.fault.evidence
    k = run.spec.batch
    try:
        rep = _redis(replica.url)
        _follow(rep, primary.port)
        arm(run.fp_dir, "dedup.after_claim", "sleep", match={"batch": k, **NON_EMPTY},
            seconds=2)
        pipeline = _pipeline(run)
        query = _start(run, pipeline, primary.url, run.checkpoint)
        try:
            hit = wait_fired(run.fp_dir, "dedup.after_claim", 180,
                             stop=lambda: not query.isActive)
            if hit is None:
                raise RuntimeError(f"batch {k} never claimed")
            # The replica's link breaks here (a SIGSTOPped replica does not lag: the
            # kernel buffers the stream and it catches up when continued): from now
            # on it holds what it had, like a replica cut off before a failover.
            rep.execute_command("REPLICAOF", "NO", "ONE")
            ev["replica_offset"] = rep.info("replication").get("master_repl_offset")
            run.fault.injected_at = time.monotonic()
            ev["fired"] = hit.get("context", {})
            # Batch k commits (a claim went on without its replica: the bug this kind
            # looks for) or a task attempt of it fails (its claims were refused for want
            # of the replica: replica_timeout, then failover_wait, ~7 s in this kind);
            # then the primary goes. The deadline only bounds a run that sees neither.
            deadline = time.monotonic() + FAILOVER_DEADLINE_S
            while committed_batches(run.checkpoint) < k + 1 and time.monotonic() < deadline \
                    and query.isActive and not _a_task_attempt_failed(run.env.spark):
                time.sleep(0.2)
            ev["task_attempt_failed_before_failover"] = _a_task_attempt_failed(run.env.spark)
            ev["committed_batches_at_failover"] = committed_batches(run.checkpoint)
            ev["query_error_before_failover"] = (_first_line(query.exception())
                                                 if query.exception() else "")
            p_client = _redis(primary.url)
            ev["primary_offset"] = p_client.info("replication").get("master_repl_offset")
            primary.kill()
        finally:
            _stop_quietly(query)
        ev["promoted"] = rep.info("replication").get("role") == "master"
        # The promoted replica alone: fewer replicas than the app id's claims wait for.
        try:
            _stop_quietly(_start(run, pipeline, replica.url, run.checkpoint))
            ev["alone_refusal"] = ""
        except Exception as exc:  # the expected outcome: refused at start
            ev["alone_refusal"] = _first_line(exc)
        second = RedisServer(run.dir / "redis-replica-2", appendfsync="always").start()
        _follow(_redis(second.url), replica.port)
        run.fault.detail = (f"replica cut off at batch {k}'s first claim, primary killed "
                            f"after {ev['committed_batches_at_failover']} batches committed, "
                            "replica promoted (refused alone), given a replica, pipeline "
                            "restarted against it")
        restarts = _finish(run, pipeline, replica.url, run.checkpoint)
        ev["lag_bytes"] = int(ev.get("primary_offset") or 0) - int(ev.get("replica_offset") or 0)
        ev["failed_closed"] = "ReplicaAckError" in ev["query_error_before_failover"] or any(
            "ReplicaAckError" in e for e in ev.get("query_errors", []))
        run.fault.confirmed = (bool(ev["promoted"]) and ev["lag_bytes"] > 0
                               and "ReplicaAckError" in ev["alone_refusal"])
        return restarts
    finally:
        if second is not None:
            second.stop()
        replica.stop()
        primary.stop()


def _a_task_attempt_failed(spark: Any) -> bool:
    """Whether a running stage of the session has a failed task attempt (the runner's
    session runs one query at a time, so it is the run's)."""
    tracker = spark.sparkContext.statusTracker()
    stages = (tracker.getStageInfo(s) for s in tracker.getActiveStageIds())
    return any(s is not None and s.numFailedTasks > 0 for s in stages)


def _follow(client: Any, port: int) -> None:
    """Make ``client``'s Redis a replica of the one on ``port``; wait until in sync."""
    client.execute_command("REPLICAOF", "127.0.0.1", str(port))
    deadline = time.monotonic() + 30
    while client.info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise RuntimeError("the replica did not sync with the primary")
        time.sleep(0.2)


# -- several outputs, clocks, marker retention -------------------------------------

def _two_outputs(run: Run) -> int:
    """One query, two exactly-once outputs in ``foreachBatch`` (``output.name`` a and
    b, one topic each, no persist: the dedup plan runs twice and replays its
    decisions). A worker is killed after a Kafka commit of batch k, and the driver
    fails batch k + 1 between the two outputs (a driver crash there): the query is
    restarted from its checkpoint. Both topics are verified."""
    from dedup import deduplicate
    from dedup.cli import Addresses, dedup_config, sink_frame, source_frame
    from sinks import ExactlyOnceKafkaForeachBatch
    from sinks.kafka_io import ensure_topic

    k = run.spec.batch
    ev = run.fault.evidence
    bootstrap = run.env.kafka.bootstrap_servers
    second_topic = f"{run.topic}-b"
    ensure_topic(bootstrap, second_topic, partitions=2)
    run.extra_topics.append(second_topic)
    pipeline = _pipeline(run)
    url = run.redis.url

    def output(name: str, topic: str) -> Any:
        return ExactlyOnceKafkaForeachBatch({
            "app.id": run.app_id, "output.name": name, "kafka.bootstrap.servers": bootstrap,
            "topic": topic, "redis.url": url, "fail.points.directory": str(run.fp_dir)})

    first, second = output("a", run.topic), output("b", second_topic)
    crashed = threading.Event()

    def both(df: Any, batch_id: int) -> None:
        first(df, batch_id)
        if batch_id == k + 1 and not crashed.is_set():
            crashed.set()
            run.fault.injected_at = run.fault.injected_at or time.monotonic()
            raise RuntimeError(f"injected: the driver failed batch {batch_id} between its "
                               "two outputs")
        second(df, batch_id)

    def start() -> Any:
        frame = source_frame(run.env.spark, pipeline, Addresses(url, bootstrap, bootstrap))
        frame = sink_frame(deduplicate(frame, dedup_config(pipeline, url, str(run.fp_dir))),
                           pipeline)
        return (frame.writeStream.foreachBatch(both)
                .option("checkpointLocation", run.checkpoint).queryName(run.app_id)
                .trigger(processingTime="0 seconds").start())

    arm(run.fp_dir, "sink.after_commit", "kill", match={"batch": k, **NON_EMPTY})
    try:
        restarts = _finish(run, pipeline, url, run.checkpoint, start=start)
    finally:
        first.release()
        second.release()
    kills = [h for h in _fired(run, "sink.after_commit") if "pid" in h]
    ev["worker_kill"] = kills[0].get("context", {}) if kills else None
    ev["driver_failure_between_outputs"] = crashed.is_set() and any(
        "between its two outputs" in e for e in ev.get("query_errors", []))
    run.fault.detail = (f"two outputs in foreachBatch; SIGKILL after a Kafka commit of batch "
                        f"{k}, batch {k + 1} failed between the outputs, query restarted")
    run.fault.confirmed = bool(kills) and ev["driver_failure_between_outputs"]
    return restarts


def _fired(run: Run, name: str) -> list[dict[str, Any]]:
    from dedup.failpoints import fired

    return fired(run.fp_dir, name)


CLOCK_BUCKET_SECONDS = 60
CLOCK_HORIZON_SECONDS = 900


def _clock_skew(run: Run) -> int:
    """One partition's clock (where the batch time is read) goes back one bucket width
    from batch k on: its shards' IDs are then claimed in the previous bucket, and the
    IDs of the current one must still be found (a claim also looks up the next
    bucket). Small buckets (60 s) so the skew crosses a boundary."""
    import json

    k = run.spec.batch
    partition = _held_partition(run)
    arm(run.fp_dir, "dedup.batch_clock", "skew", match={"partition": partition},
        seconds=-CLOCK_BUCKET_SECONDS, from_batch=k)
    pipeline = _pipeline(run, bucket_seconds=CLOCK_BUCKET_SECONDS,
                         horizon_seconds=CLOCK_HORIZON_SECONDS)
    run.fault.injected_at = time.monotonic()
    restarts = _finish(run, pipeline, run.redis.url, run.checkpoint)
    uses = [h for h in _fired(run, "dedup.batch_clock") if "context" in h]
    crossed = [h for h in uses
               if int(float(h["context"]["now"]) // CLOCK_BUCKET_SECONDS)
               != int((float(h["context"]["now"]) - CLOCK_BUCKET_SECONDS)
                      // CLOCK_BUCKET_SECONDS)]
    ev = run.fault.evidence
    ev["skewed_partition"] = partition
    ev["skewed_decisions"] = len(uses)
    ev["skewed_batches"] = sorted({int(h["context"]["batch"]) for h in uses})
    ev["crossed_a_bucket_boundary"] = len(crossed)
    ev["sample"] = json.dumps(uses[0]["context"]) if uses else ""
    run.fault.detail = (f"partition {partition}'s batch clock {CLOCK_BUCKET_SECONDS} s behind "
                        f"from batch {k} on (buckets of {CLOCK_BUCKET_SECONDS} s)")
    run.fault.confirmed = bool(crossed)
    return restarts


MARKER_RETENTION_MINUTES = 1


def _marker_retention(run: Run) -> int:
    """A crash between the Kafka commit of batch k and Spark's commit, then a stop
    longer than the broker's offsets.retention.minutes: the batch markers are gone
    from Kafka when the query comes back. The broker runs with a retention of one
    minute (checked every 5 s) for this run only."""
    from sinks.config import SinkConfig

    k = run.spec.batch
    ev = run.fault.evidence
    broker = run.env.kafka
    saved = dict(broker.overrides)
    partition = _held_partition(run)
    pipeline = _pipeline(run)
    url = run.redis.url
    try:
        _restart_broker(broker, {**saved,
                                 "offsets.retention.minutes": str(MARKER_RETENTION_MINUTES),
                                 "offsets.retention.check.interval.ms": "5000"})
        arm(run.fp_dir, "sink.after_commit", "sleep",
            match={"batch": k, "partition": partition, **NON_EMPTY}, seconds=HOLD_S)
        query = _start(run, pipeline, url, run.checkpoint)
        try:
            hit = wait_fired(run.fp_dir, "sink.after_commit", 180,
                             stop=lambda: not query.isActive)
            if hit is None:
                raise RuntimeError(f"sink partition {partition} of batch {k} never committed")
            ev["fired"] = hit.get("context", {})
        finally:
            _stop_quietly(query)
        ev["committed_batches_at_stop"] = committed_batches(run.checkpoint)
        ev["markers_at_stop"] = markers(run, PARTITIONS)
        run.fault.injected_at = time.monotonic()
        config = SinkConfig.from_options({"app.id": run.app_id,
                                          "kafka.bootstrap.servers": broker.bootstrap_servers,
                                          "topic": run.topic, "strong.productions": "false"})
        deadline = time.monotonic() + 4 * 60
        while time.monotonic() < deadline and markers(run, PARTITIONS)[partition] >= 0:
            time.sleep(5)
        ev["markers_after_retention"] = markers(run, PARTITIONS)
        ev["waited_s"] = round(time.monotonic() - run.fault.injected_at, 1)
        ev["marker_group"] = config.marker_group(partition)
        run.fault.detail = (f"sink partition {partition} held after its Kafka commit of batch "
                            f"{k}, query stopped; restarted after its markers expired "
                            f"(offsets.retention.minutes={MARKER_RETENTION_MINUTES})")
        restarts = _finish(run, pipeline, url, run.checkpoint)
    finally:
        _restart_broker(broker, saved)
    expired = ev["markers_after_retention"][partition] < 0
    run.fault.confirmed = (ev["markers_at_stop"][partition] == k + 1 and expired
                           and ev["committed_batches_at_stop"] <= k)
    return restarts


def _restart_broker(broker: Any, overrides: dict[str, str]) -> None:
    """Stop the shared broker and start it again (same data, ports) with ``overrides``."""
    broker.stop()
    broker.overrides = dict(overrides)
    broker.start()
