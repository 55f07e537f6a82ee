"""A failed transaction attempt leaves nothing of itself in the Python worker (issue 38).

confluent-kafka (2.16) keeps a reference to the exception being handled whenever
one of its calls raises inside an ``except`` block, for the life of the process:
that exception's traceback holds the attempt's frames, and with them the
partition's records and the fenced producer. Spark moves sink partitions between
workers at every batch, so a cached producer is fenced and dropped at about every
batch, and a worker grew by the whole batch it wrote, batch after batch.

The client is real (no broker is needed: ``begin_transaction`` on a producer that
never called ``init_transactions`` raises from its C code), the attempts are fakes.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from sinks import transactions
from sinks.config import SinkConfig
from sinks.exceptions import TransactionFailedError
from sinks.records import OutRecord

APP = "unit-failed-attempt-memory"


class _FencedClient:
    """A cached producer as a fenced one behaves: ``flush`` and ``abort_transaction``
    raise a KafkaException from confluent-kafka's C code."""

    def __init__(self) -> None:
        self._client = Producer({"bootstrap.servers": "127.0.0.1:9", "transactional.id": APP,
                                 "log_level": 0})

    def purge(self) -> None:
        pass

    def flush(self, timeout: float | None = None) -> int:
        self._client.begin_transaction()  # raises: init_transactions was never called
        return 0

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._client.begin_transaction()


@pytest.fixture()
def config() -> Iterator[SinkConfig]:
    sink = SinkConfig.from_options({"kafka.bootstrap.servers": "127.0.0.1:9",
                                    "topic": f"{APP}-out", "app.id": APP,
                                    "strong.productions": "false"})
    yield sink
    transactions.drop_producer(sink.transactional_id(0))


def _records() -> list[OutRecord]:
    return [OutRecord(f"{APP}-out", None, b"k", b"v" * 1000, (), b"id-%d" % n)
            for n in range(100)]


def _alive(kind: type[BaseException]) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, kind))


def _attempts(monkeypatch: pytest.MonkeyPatch, config: SinkConfig,
              first: Callable[[], BaseException]) -> None:
    """``_attempt`` fails the first time with ``first()`` (the partition's cached producer
    then a fenced one), and succeeds the next."""
    def attempt(config: SinkConfig, records: list[OutRecord], query_id: str, batch: int,
                partition: int, attempt: int, clock: Any) -> tuple[bool, int]:
        if attempt == 1:
            transactions._PRODUCERS[config.transactional_id(partition)] = \
                _FencedClient()  # type: ignore[assignment]
            raise first()
        return False, len(records)

    monkeypatch.setattr(transactions, "_attempt", attempt)


def test_a_fenced_attempt_is_not_kept(monkeypatch: pytest.MonkeyPatch,
                                      config: SinkConfig) -> None:
    _attempts(monkeypatch, config, transactions._Fenced)
    for batch in range(5):
        result = transactions.write_partition(config, _records(), "q-fenced", batch, 0)
        assert result.attempts == 2 and result.produced == 100
    assert _alive(transactions._Fenced) == 0


def test_an_attempt_that_fails_otherwise_is_not_kept(monkeypatch: pytest.MonkeyPatch,
                                                     config: SinkConfig) -> None:
    class InjectedError(Exception):
        pass

    _attempts(monkeypatch, config, lambda: InjectedError("an injected fault"))
    for batch in range(5):
        with pytest.raises(InjectedError):
            transactions.write_partition(config, _records(), "q-injected", batch, 0)
    assert _alive(InjectedError) == 0


def test_an_aborted_attempt_whose_abort_fails_is_not_kept(monkeypatch: pytest.MonkeyPatch,
                                                          config: SinkConfig) -> None:
    _attempts(monkeypatch, config, lambda: transactions._Abortable("abortable"))
    for batch in range(5):
        with pytest.raises(TransactionFailedError, match="abort of") as caught:
            transactions.write_partition(config, _records(), "q-abort", batch, 0)
        assert isinstance(caught.value.__cause__, KafkaException)
        del caught
    assert _alive(transactions._Abortable) == 0
