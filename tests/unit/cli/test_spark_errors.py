"""A toolkit error that Spark wraps reaches the person running ``dedup`` as one line.

The texts in ``data/`` are ``str()`` of real exceptions, captured from a query
whose dedup claim lost its Redis (``query.exception()`` and its cause) and
from the sink's transaction-timeout refusal (only the logical plan trimmed,
paths shortened). The exceptions are PySpark's own classes, built without a
JVM the way PySpark builds them from one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors.exceptions.captured import (
    CapturedException,
    PythonException,
    StreamingQueryException,
)

from dedup.cli.main import main

DATA = Path(__file__).with_name("data")
JVM_FRAMES = ("org.apache.spark.sql.execution.streaming.StreamExecution."
              "org$apache$spark$sql$execution$streaming$StreamExecution$$runStream"
              "(StreamExecution.scala:351)\n\t at org.apache.spark.sql.execution.streaming."
              "StreamExecution$$anon$1.run(StreamExecution.scala:211)")
REDIS_LINE = ("CatalogUnavailableError: Redis at redis://127.0.0.1:44483/0 is unreachable during "
              "the Bloom snapshot of shard 0 (ConnectionError: Error 111 connecting to "
              "127.0.0.1:44483. Connection refused.); the batch fails and Spark retries it. "
              "Check that Redis runs and the URL, password and TLS settings are right")


def _captured(cls: type[CapturedException], desc: str,
              cause: CapturedException | None = None) -> CapturedException:
    exc = cls.__new__(cls)
    exc._desc, exc._stackTrace, exc._cause, exc._origin = desc, JVM_FRAMES, cause, None
    return exc


@pytest.fixture(autouse=True)
def _no_jvm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pyspark import SparkContext

    # CapturedException.__str__ asks the JVM whether to append the JVM stack
    # trace; with none it appends it (its default), as a real failure may.
    monkeypatch.setattr(SparkContext, "_jvm", object())
    monkeypatch.setenv("DEDUP_CACHE_DIR", str(tmp_path / "cache"))


def _run_raising(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> int:
    def handler(args: Any) -> int:
        raise error

    monkeypatch.setattr("dedup.cli.run.run_command", handler)
    return main(["run", "pipeline.toml"])


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "\tat " not in err and "org.apache" not in err, err
    return lines[0]


def test_worker_error_only_in_the_cause(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # "Writing job failed." says nothing; the worker's traceback is the cause.
    worker = _captured(PythonException, (DATA / "python_worker_redis_claim.txt").read_text())
    error = _captured(StreamingQueryException, "Writing job failed. SQLSTATE: 40000", worker)
    assert _run_raising(monkeypatch, error) == 1
    assert _one_line(capsys) == f"dedup: error: {REDIS_LINE}"


def test_worker_error_in_the_query_message(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    worker = _captured(PythonException, (DATA / "python_worker_redis_claim.txt").read_text())
    error = _captured(StreamingQueryException,
                      (DATA / "query_failed_redis_claim.txt").read_text(), worker)
    assert _run_raising(monkeypatch, error) == 1
    assert _one_line(capsys) == f"dedup: error: {REDIS_LINE}"


def test_an_unknown_spark_error_keeps_its_root_cause(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    error = _captured(StreamingQueryException,
                      "Job aborted.\norg.apache.spark.SparkException: boom\n"
                      "java.lang.IllegalStateException: the real reason")
    assert _run_raising(monkeypatch, error) == 1
    line = _one_line(capsys)
    assert line.startswith("dedup: error: the Spark query failed: IllegalStateException: "
                           "the real reason"), line


def test_find_toolkit_error_in_texts() -> None:
    from dedup.cli.errors import find_toolkit_error
    from sinks.exceptions import UnsafeSinkSettingError

    found = find_toolkit_error(["nothing here", (DATA / "analysis_txn_timeout.txt").read_text()])
    assert found is not None and found.cls is UnsafeSinkSettingError
    assert found.message.startswith("kafka.transaction.timeout.ms=1000000 is above the broker's")
    assert found.message.endswith("raise transaction.max.timeout.ms on the brokers")
    # A traceback's source line ("raise X(") and foreign errors are not ours;
    # of a chained traceback, the error raised last is the one reported.
    chained = ("Traceback (most recent call last):\n    raise CatalogUnavailableError(\n"
               "redis.exceptions.ConnectionError: Error 111\n\nThe above exception was the "
               "direct cause of the following exception:\n\n"
               "dedup.exceptions.CatalogUnavailableError: Redis at r is unreachable\n"
               "\nDuring handling of the above exception, another exception occurred:\n\n"
               "sinks.exceptions.CheckpointUnavailableError: checkpoint Redis unreachable\n")
    found = find_toolkit_error([chained])
    assert found is not None
    assert found.line == "CheckpointUnavailableError: checkpoint Redis unreachable"
    assert find_toolkit_error(["ValueError: x", "FooDedupError: y", "raise ConfigError(\n"]) is None


def test_every_error_class_is_known() -> None:
    from dedup.cli.errors import toolkit_error_classes
    from sinks.exceptions import KafkaUnavailableError, ProducerStuckError
    from sources.exceptions import SourceConfigError

    known = toolkit_error_classes()
    for cls in (KafkaUnavailableError, ProducerStuckError, SourceConfigError):
        assert known[cls.__name__] is cls


def test_a_captured_error_whose_text_needs_a_gone_jvm_still_counts() -> None:
    # PySpark 4.2's PythonException.__str__ asks the JVM for the error's message
    # parameters (an AssertionError without a gateway, a Py4J error once the JVM
    # is gone); PySpark 4.0's did not. Its own description and its cause remain.
    from dedup.cli.errors import exception_texts

    class NeedsJvm(PythonException):
        def __str__(self) -> str:
            raise AssertionError("no gateway")

    worker = _captured(NeedsJvm, (DATA / "python_worker_redis_claim.txt").read_text())
    inner = _captured(NeedsJvm, "Writing job failed. SQLSTATE: 40000", worker)
    outer = _captured(StreamingQueryException, "Query terminated with exception", inner)
    texts = exception_texts(outer)
    assert texts[1] == "Writing job failed. SQLSTATE: 40000"
    assert REDIS_LINE in texts[2]
