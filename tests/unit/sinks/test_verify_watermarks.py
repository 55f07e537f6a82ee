"""The verifier's count of open transactions outlives a partition leader moving.

Run 359 of the full chaos matrix (kafka_coordinator_kill, three brokers): the
pipeline's output was complete, but the verifier's first watermark read after the
killed broker came back failed with NOT_LEADER_FOR_PARTITION (its metadata named
the old leader) and the run counted as failed.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

import sinks.verify as verify


class _Metadata:
    def __init__(self, topic: str) -> None:
        self.topics = {topic: type("T", (), {"partitions": {0: None, 1: None}})()}


class _StaleLeaderConsumer:
    """Answers the first watermark read of each instance with NOT_LEADER_FOR_PARTITION."""

    failures = 0

    def __init__(self, config: dict[str, Any]) -> None:
        self.isolation = config["isolation.level"]
        self.failed = False

    def list_topics(self, topic: str, timeout: float) -> _Metadata:
        return _Metadata(topic)

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        if not self.failed:
            self.failed = True
            type(self).failures += 1
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        # partition 1 ends in an open transaction: its stable end is behind
        if self.isolation == "read_committed" and tp.partition == 1:
            return 0, 5
        return 0, 7

    def close(self) -> None:
        pass


def test_a_stale_leader_is_retried_not_a_failed_verification(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "Consumer", _StaleLeaderConsumer)
    monkeypatch.setattr(verify, "RETRY_PAUSE_S", 0.01)
    assert verify.open_transaction_partitions("127.0.0.1:1", "out") == [1]
    assert _StaleLeaderConsumer.failures >= 2  # each isolation level met it once


class _DownConsumer(_StaleLeaderConsumer):
    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))


def test_a_leader_that_never_comes_back_still_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "Consumer", _DownConsumer)
    monkeypatch.setattr(verify, "RETRY_PAUSE_S", 0.01)
    monkeypatch.setattr(verify, "RETRY_SECONDS", 0.2)
    with pytest.raises(KafkaException):
        verify.open_transaction_partitions("127.0.0.1:1", "out")
