"""The batch marker read: an error on the returned partition fails the attempt."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError

import sinks.transactions as transactions
from sinks import SinkConfig, TransactionFailedError

CONFIG = SinkConfig(app_id="app-marker", bootstrap_servers="127.0.0.1:1",
                    strong_productions=False)


class _Consumer:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def committed(self, partitions: list[Any], timeout: float) -> list[Any]:
        return [self.answer]


def test_a_partition_error_is_not_read_as_no_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    failed = SimpleNamespace(error=KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE),
                             offset=-1001, metadata=None)
    monkeypatch.setattr(transactions, "_marker_consumer", lambda c, p: _Consumer(failed))
    with pytest.raises(TransactionFailedError, match=r"app-marker\.sink\.p0") as caught:
        transactions.read_marker(CONFIG, 0)
    assert caught.value.retriable()


def test_no_committed_offset_is_no_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    empty = SimpleNamespace(error=None, offset=-1001, metadata=None)
    monkeypatch.setattr(transactions, "_marker_consumer", lambda c, p: _Consumer(empty))
    assert transactions.read_marker(CONFIG, 0) == (None, -1)
    done = SimpleNamespace(error=None, offset=4, metadata="q")
    monkeypatch.setattr(transactions, "_marker_consumer", lambda c, p: _Consumer(done))
    assert transactions.read_marker(CONFIG, 0) == ("q", 4)


def test_a_refused_marker_read_names_the_acl_and_is_not_retried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sinks import KafkaDeniedError

    failed = SimpleNamespace(error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
                             offset=-1001, metadata=None)
    monkeypatch.setattr(transactions, "_marker_consumer", lambda c, p: _Consumer(failed))
    with pytest.raises(KafkaDeniedError, match=r"READ on topic '__dedup_markers'") as caught:
        transactions.read_marker(CONFIG, 0)
    assert not caught.value.retriable() and caught.value.fatal()
    assert "\n" not in str(caught.value)
