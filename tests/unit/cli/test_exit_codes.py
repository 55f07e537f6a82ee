"""One exit code per kind of failure, whatever wraps the error, and ``--help`` lists them."""

from __future__ import annotations

import pytest
from pyspark.errors.exceptions.captured import AnalysisException, StreamingQueryException

from dedup.cli.main import EXIT_CONFIG, EXIT_RUNTIME, main
from dedup.exceptions import (
    AppIdInUseError,
    CatalogUnavailableError,
    ConfigError,
    ShardCountMismatchError,
    UnsafeSettingError,
)
from sinks.exceptions import (
    SinkConfigError,
    SinkSchemaError,
    TransactionFailedError,
    UnsafeSinkSettingError,
)
from sources.exceptions import SourceConfigError
from tests.unit.cli.test_spark_errors import (  # _no_jvm: the same autouse fixture here
    DATA,
    _captured,
    _no_jvm,  # noqa: F401
    _run_raising,
)

REFUSALS = [ConfigError, UnsafeSettingError, ShardCountMismatchError, AppIdInUseError,
            SinkConfigError, SinkSchemaError, UnsafeSinkSettingError, SourceConfigError]


def _worker_text(cls: type[Exception], message: str) -> str:
    return ("\n  An exception was thrown from the Python worker. Please see the stack trace "
            "below.\nTraceback (most recent call last):\n  File \"/opt/app/x.py\", line 1, in f\n"
            f"    raise {cls.__name__}(\n{cls.__module__}.{cls.__name__}: {message}\n")


def test_the_transaction_timeout_refusal_wrapped_by_spark_exits_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # The real text: the sink's driver-side check runs in Spark's Python data
    # source planner, so the refusal arrives as a StreamingQueryException.
    cause = _captured(AnalysisException, (DATA / "analysis_txn_timeout.txt").read_text())
    error = _captured(StreamingQueryException,
                      (DATA / "query_failed_txn_timeout.txt").read_text(), cause)
    assert _run_raising(monkeypatch, error) == EXIT_CONFIG
    assert "UnsafeSinkSettingError: kafka.transaction.timeout.ms=1000000" in capsys.readouterr().err


@pytest.mark.parametrize("cls", REFUSALS, ids=lambda cls: cls.__name__)
def test_every_refusal_exits_2_raised_or_wrapped(cls: type[Exception],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run_raising(monkeypatch, cls("refused: set x")) == EXIT_CONFIG
    wrapped = _captured(StreamingQueryException, "Writing job failed.",
                        _captured(AnalysisException, _worker_text(cls, "refused: set x")))
    assert _run_raising(monkeypatch, wrapped) == EXIT_CONFIG


@pytest.mark.parametrize("cls", [CatalogUnavailableError, TransactionFailedError],
                         ids=lambda cls: cls.__name__)
def test_runtime_failures_exit_1_raised_or_wrapped(cls: type[Exception],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run_raising(monkeypatch, cls("down")) == EXIT_RUNTIME
    wrapped = _captured(StreamingQueryException, "Writing job failed.",
                        _captured(AnalysisException, _worker_text(cls, "down")))
    assert _run_raising(monkeypatch, wrapped) == EXIT_RUNTIME


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["run", "--help"]):
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        assert stopped.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "exit codes:" in text, text
        assert "0 success" in text and "1 runtime failure" in text, text
        assert "2 bad usage or a refused configuration" in text, text
    assert "3 stopped by --max-seconds with input left" in text, text
