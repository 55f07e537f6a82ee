"""The data source's start checks run once per process and options, not per micro-batch."""

from __future__ import annotations

from typing import Any

import pytest

from sinks import datasource
from sinks.config import SinkConfig


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(datasource, "prepare", lambda config: seen.append(config.app_id))
    monkeypatch.setattr(datasource, "_CHECKED", {})
    return seen


def _options(app_id: str) -> dict[str, Any]:
    return {"kafka.bootstrap.servers": "127.0.0.1:9", "app.id": app_id,
            "strong.productions": "false"}


def test_checks_run_once_per_options_within_the_ttl(calls: list[str]) -> None:
    options = _options("start-checks-a")
    config = SinkConfig.from_options(options)
    for _ in range(3):  # Spark asks for the writer before and after every batch
        datasource._start_checks(config, options)
    assert calls == ["start-checks-a"]
    other = _options("start-checks-b")
    datasource._start_checks(SinkConfig.from_options(other), other)
    assert calls == ["start-checks-a", "start-checks-b"]


def test_checks_run_again_after_the_ttl(calls: list[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    options = _options("start-checks-c")
    config = SinkConfig.from_options(options)
    datasource._start_checks(config, options)
    clock = datasource.time.monotonic() + datasource.START_CHECK_TTL_S + 1
    monkeypatch.setattr(datasource.time, "monotonic", lambda: clock)
    datasource._start_checks(config, options)
    assert calls == ["start-checks-c", "start-checks-c"]


def test_a_failed_check_is_not_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasource, "_CHECKED", {})
    attempts: list[int] = []

    def refuse(config: SinkConfig) -> None:
        attempts.append(1)
        raise RuntimeError("broker limit")

    monkeypatch.setattr(datasource, "prepare", refuse)
    options = _options("start-checks-d")
    config = SinkConfig.from_options(options)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            datasource._start_checks(config, options)
    assert len(attempts) == 2
