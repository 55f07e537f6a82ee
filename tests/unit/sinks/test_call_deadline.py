"""The outside deadline on Kafka client calls that can ignore their own timeout."""

from __future__ import annotations

import threading
import time

import pytest

from sinks.exceptions import ProducerStuckError, TransactionFailedError
from sinks.transactions import call_with_deadline


def test_a_call_that_never_returns_fails_by_the_deadline() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(ProducerStuckError, match="librdkafka #5456") as caught:
        call_with_deadline(lambda: release.wait(), 0.3, "send_offsets_to_transaction of test")
    took = time.monotonic() - started
    release.set()
    assert 0.3 <= took < 2.0
    assert isinstance(caught.value, TransactionFailedError)  # the task fails and is retried
    assert caught.value.retriable() and caught.value.fatal()  # ...with a new producer


def test_results_and_errors_pass_through() -> None:
    calls: list[int] = []
    call_with_deadline(lambda: calls.append(1), 1.0, "ok")
    assert calls == [1]

    def boom() -> None:
        raise ValueError("from the client")

    with pytest.raises(ValueError, match="from the client"):
        call_with_deadline(boom, 1.0, "failing")
