"""Strict chaos runs: a fault counts only on evidence that it hit, and a query that
died of an error its kind does not expect fails the run."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.chaos.faults import (
    EXPECTED_ERRORS,
    FAULT_KINDS,
    FaultOutcome,
    classify_error,
    hold_evidence,
)
from benchmarks.chaos.model import (
    NEEDS_NEXT_BATCH,
    ROWS,
    ROWS_PER_BATCH,
    RunResult,
    RunSpec,
    schedule,
)
from benchmarks.chaos.runner import _classify_errors, _confirm_extra, _outcome

LAST = ROWS // ROWS_PER_BATCH - 1


def test_every_kind_has_its_expected_errors() -> None:
    assert set(EXPECTED_ERRORS) == set(FAULT_KINDS)


def test_schedule_faults_the_first_and_the_last_batch() -> None:
    kinds = ["worker_kill", "two_outputs_foreach_batch"]
    specs = schedule(400, seed=3, kinds=kinds)
    worker = {s.batch for s in specs if s.kind == "worker_kill"}
    assert worker == set(range(LAST + 1))
    # its fault fails the batch after the faulted one: never the last
    two = {s.batch for s in specs if s.kind in NEEDS_NEXT_BATCH}
    assert two == set(range(LAST))


@pytest.mark.parametrize(("kind", "error", "expected"), [
    ("worker_kill", "org.apache.spark.SparkException: Python worker exited unexpectedly "
                    "(crashed)", "python worker crash"),
    ("worker_kill", "java.lang.NullPointerException: boom", None),
    ("worker_kill", "dedup.exceptions.CatalogUnavailableError: Redis at redis://x", None),
    ("redis_kill_always", "dedup.exceptions.CatalogUnavailableError: Redis at redis://x is "
                          "unreachable", "redis unavailable"),
    ("redis_unreachable", "sinks.exceptions.TransactionFailedError: commit failed", None),
    ("kafka_kill", "sinks.exceptions.TransactionFailedError: commit failed",
     "kafka transaction failure"),
    ("checkpoint_reset", "dedup.exceptions.AppIdInUseError: app id x", "refusal: app id in use"),
    ("clock_skew", "RuntimeError: anything", None),
    ("two_outputs_foreach_batch", "RuntimeError: injected: the driver failed batch 3 between "
                                  "its two outputs", "injected driver failure"),
])
def test_query_errors_are_classified_per_kind(kind: str, error: str,
                                              expected: str | None) -> None:
    assert classify_error(kind, error) == expected


# Spark 4.2 gives a fresh Python process (a Python data source's runner, started
# with every query) a fixed 10 s to connect back; on a loaded machine one missed it
# in CI (redis_unreachable and redis_failover_lagging_replica, one pass). The query
# dies before our code runs in that process: any kind's restart must absorb it.
LAUNCH_TIMEOUT = ("org.apache.spark.SparkException: [STREAM_FAILED] Query [id = x] terminated "
                  "with exception: Python worker failed to connect back. SQLSTATE: XXKST")


@pytest.mark.parametrize("kind", sorted(FAULT_KINDS))
def test_a_python_process_that_spark_could_not_start_is_expected_of_every_kind(
        kind: str) -> None:
    assert classify_error(kind, LAUNCH_TIMEOUT) == "spark python launch timeout"
    # only Spark's own words: a worker that connects and then fails is no launch timeout
    assert classify_error("clock_skew", "RuntimeError: failed to connect to Redis") is None


def _hit(rows: int = 7, start: float = 1000.0, seconds: float = 3.0) -> dict[str, Any]:
    return {"pid": 42, "time": start, "seconds": seconds,
            "context": {"batch": "0", "rows": str(rows)}}


def test_a_kill_counts_only_inside_the_hold_of_a_partition_with_rows() -> None:
    assert hold_evidence(_hit(), 1001.0, 1001.5, True)["in_hold"]
    assert not hold_evidence(_hit(), 1002.5, 1003.1, True)["in_hold"]  # ended after the hold
    assert not hold_evidence(_hit(), 999.0, 999.5, True)["in_hold"]  # before it began
    assert not hold_evidence(_hit(), 1001.0, 1001.5, False)["in_hold"]  # held task gone
    assert not hold_evidence(_hit(rows=0), 1001.0, 1001.5, True)["in_hold"]  # empty
    bare = {"time": 1000.0, "seconds": 3.0}  # the firing process died before its record
    assert not hold_evidence(bare, 1001.0, 1001.5, True)["in_hold"]


def _run(kind: str, confirmed: bool = True, **evidence: Any) -> Any:
    return SimpleNamespace(spec=SimpleNamespace(kind=kind), refused=None,
                           fault=FaultOutcome(kind=kind, detail="d", confirmed=confirmed,
                                              evidence=dict(evidence)))


def _result(kind: str) -> RunResult:
    spec = RunSpec(index=0, kind=kind, seed=1, batch=0, point="sink.mid_produce")
    return RunResult(spec=spec, fault=FaultOutcome(kind=kind), report={"ok": True})


def test_an_unconfirmed_fault_fails_the_run_even_with_exact_output() -> None:
    run, result = _run("worker_kill", confirmed=False), _result("worker_kill")
    assert _outcome(run, result) == "failed"
    assert result.error.startswith("not hit: worker_kill")


def test_an_unexpected_query_error_fails_the_run() -> None:
    run = _run("worker_kill", query_errors=[
        "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)",
        "java.lang.IllegalStateException: a real bug"])
    result = _result("worker_kill")
    _classify_errors(run, result)
    assert result.error_classes == {"python worker crash": 1}
    assert result.unexpected_errors == ["java.lang.IllegalStateException: a real bug"]
    assert _outcome(run, result) == "failed"
    assert "a real bug" in result.error


def test_a_confirmed_fault_with_expected_errors_and_exact_output_is_exact() -> None:
    run = _run("redis_kill_always", query_errors=[
        "dedup.exceptions.CatalogUnavailableError: Redis at redis://h:1/0 is unreachable"])
    result = _result("redis_kill_always")
    _classify_errors(run, result)
    assert _outcome(run, result) == "exact"
    assert result.error_classes == {"redis unavailable": 1}


def test_redis_unreachable_counts_only_the_frozen_redis_failing_closed_in_time() -> None:
    url = "redis://127.0.0.1:7000/0"
    error = f"dedup.exceptions.CatalogUnavailableError: Redis at {url} is unreachable"
    frozen: dict[str, Any] = {"frozen_url": url, "frozen_from": 100.0, "frozen_until": 160.0,
                              "in_hold": True}
    assert _confirm_extra(_run("redis_unreachable", query_errors=[error],
                               query_error_times=[140.0], **frozen))
    other = error.replace("7000", "7001")
    assert not _confirm_extra(_run("redis_unreachable", query_errors=[other],
                                   query_error_times=[140.0], **frozen))
    assert not _confirm_extra(_run("redis_unreachable", query_errors=[error],
                                   query_error_times=[99.0], **frozen))
    assert not _confirm_extra(_run("redis_unreachable", **frozen))  # absorbed: no query error
    sink = "sinks.exceptions.TransactionFailedError: commit failed"
    assert not _confirm_extra(_run("redis_unreachable", query_errors=[sink],
                                   query_error_times=[140.0], **frozen))
    # the sink failing closed on the frozen Redis (its checkpoints live there too)
    checkpoint = (f"CheckpointUnavailableError: the sink's checkpoint Redis at {url} is "
                  "unreachable while recording the marker retention (TimeoutError: ...)")
    assert _confirm_extra(_run("redis_unreachable", query_errors=[checkpoint],
                               query_error_times=[140.0], **frozen))
    assert not _confirm_extra(_run("redis_unreachable",
                                   query_errors=[checkpoint.replace("7000", "7001")],
                                   query_error_times=[140.0], **frozen))


def test_older_progress_lines_are_read_with_defaults() -> None:
    line = {"spec": {"index": 0, "kind": "worker_kill", "seed": 1, "batch": 2,
                     "point": "sink.mid_produce"},
            "fault": {"kind": "worker_kill", "detail": "", "confirmed": True,
                      "injected_at": None, "evidence": {}},
            "report": {"ok": True}, "restarts": 0, "recovery_s": None, "duration_s": 1.0,
            "error": ""}
    result = RunResult.from_dict(json.loads(json.dumps(line)))
    assert result.error_classes == {} and result.unexpected_errors == []
    assert result.outcome == ""
    again = RunResult.from_dict(json.loads(json.dumps(result.as_dict())))
    assert again == result


def test_a_query_error_is_recorded_by_the_toolkit_error_it_wraps() -> None:
    """Spark wraps a sink task's failure as "Writing job failed" (the toolkit's error
    is further down the chain): the recorded line must name the toolkit's error, or
    the run's check calls an expected failure unexpected (chaos_full runs 128, 152)."""
    from benchmarks.chaos.model import _first_line
    from sinks.exceptions import CheckpointUnavailableError

    outer = RuntimeError("[STREAM_FAILED] Query [id = q, runId = r] terminated with "
                         "exception: Writing job failed. SQLSTATE: XXKST")
    outer.__cause__ = CheckpointUnavailableError(
        "Redis at redis://127.0.0.1:1/0 is unreachable during a checkpoint write")
    line = _first_line(outer)
    assert line.startswith("CheckpointUnavailableError: Redis at redis://127.0.0.1:1/0"), line
    assert classify_error("redis_unreachable", line) == "redis unavailable"
    # as a Python worker's traceback carried in the text of Spark's error
    carried = RuntimeError(
        "Writing job failed.\nCaused by: org.apache.spark.api.python.PythonException: "
        "Traceback (most recent call last):\n  File \"w.py\", line 1, in write\n"
        "sinks.exceptions.CheckpointUnavailableError: Redis at redis://127.0.0.1:2/0 is "
        "unreachable during a checkpoint write\n\tat org.apache.spark.X(X.java:1)")
    line = _first_line(carried)
    assert line.startswith("CheckpointUnavailableError: Redis at redis://127.0.0.1:2/0"), line
    plain = RuntimeError("java.lang.IllegalStateException: a real bug")
    assert _first_line(plain) == "RuntimeError: java.lang.IllegalStateException: a real bug"


def test_a_failed_child_run_is_recorded_with_the_error_it_printed(tmp_path: Path) -> None:
    """A child ``dedup run`` (driver and executor kinds) that fails records the one-line
    error it printed, not only its exit code, so the check can tell why."""
    from benchmarks.chaos.model import child_error

    log = tmp_path / "driver.log"
    log.write_text("26/11/25 WARN spark noise\ndedup: error: first attempt\n"
                   "more noise\ndedup: error: Redis at redis://127.0.0.1:9/0 is unreachable"
                   " (claim): start it\n")
    assert child_error(log) == "Redis at redis://127.0.0.1:9/0 is unreachable (claim): start it"
    log.write_text("killed before it could say anything\n")
    assert child_error(log) == ""
    assert child_error(tmp_path / "missing.log") == ""


def test_a_freeze_ends_when_its_condition_holds_and_the_process_goes_on() -> None:
    """redis_unreachable thaws Redis once the query died of it: the freeze ends on the
    condition, not its full length, and the process runs again after it."""
    import subprocess
    import sys
    import time

    from benchmarks.chaos.faults import freeze

    # a process that runs until its stdin closes (in the finally)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        calls = []
        started = time.monotonic()
        freeze(child.pid, 20.0, until=lambda: calls.append(1) or len(calls) > 3)
        took = time.monotonic() - started
        assert took < 5.0, took
        state = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state != "T", state  # continued
        started = time.monotonic()
        freeze(child.pid, 0.5)  # no condition: its whole length
        assert time.monotonic() - started >= 0.5
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.kill()
        child.wait(10)
