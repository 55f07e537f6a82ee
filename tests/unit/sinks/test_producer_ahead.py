"""A partition's new producer made in a thread while the task decides (producer_ahead).

The producer itself is faked (``_new_producer``, the sink's own function): what is
checked here is the hand-over, that the thread never outlives the block, and whose
error reaches whom. ``tests/integration/sinks/test_sink_producer_ahead.py`` does the
same with real producers on a real broker.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import sinks.transactions as tx
from sinks import SinkConfig
from sinks.exceptions import TransactionFailedError


class _Made:
    """What the fake ``_new_producer`` made or raised, and when."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.error: BaseException | None = None
        self.done_in: list[str] = []


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Made]:
    made = _Made()

    def new_producer(config: SinkConfig, partition: int) -> Any:
        made.calls += 1
        made.started.set()
        made.release.wait(10)
        made.done_in.append(threading.current_thread().name)
        if made.error is not None:
            raise made.error
        return object()

    monkeypatch.setattr(tx, "_new_producer", new_producer)
    yield made
    tx._PRODUCERS.clear()
    tx._AHEAD.clear()


def _config() -> SinkConfig:
    return SinkConfig(app_id="unit-ahead", bootstrap_servers="127.0.0.1:1", topic="out",
                      strong_productions=False)


def _ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dedup-producer-")]


def test_the_write_gets_the_producer_made_ahead_and_no_second_one(made: _Made) -> None:
    config = _config()
    with tx.producer_ahead(config, 3, "q", 0):
        assert made.started.wait(5)
        producer, fresh = tx.get_producer(config, 3)
        assert fresh, "made in this task: the marker is read with no stale-producer patience"
        assert tx.get_producer(config, 3) == (producer, False)
    assert made.calls == 1
    assert made.done_in == ["dedup-producer-unit-ahead.p3"]
    assert tx._PRODUCERS[config.transactional_id(3)] is producer
    assert not _ahead_threads()


def test_get_producer_waits_for_a_producer_still_being_made(made: _Made) -> None:
    config = _config()
    made.release.clear()
    with tx.producer_ahead(config, 0, "q", 0):
        assert made.started.wait(5)
        threading.Timer(0.2, made.release.set).start()
        producer, fresh = tx.get_producer(config, 0)
    assert fresh and producer is not None and made.calls == 1


def test_what_making_it_raised_is_raised_by_the_write_in_the_tasks_thread(made: _Made) -> None:
    config = _config()
    made.error = TransactionFailedError("init_transactions of unit-ahead.p1: refused")
    with tx.producer_ahead(config, 1, "q", 0), \
            pytest.raises(TransactionFailedError, match="refused"):
        tx.get_producer(config, 1)
    assert config.transactional_id(1) not in tx._PRODUCERS
    # the next write makes a new one, in its own thread (no producer ahead any more)
    made.error = None
    _, fresh = tx.get_producer(config, 1)
    assert fresh and made.calls == 2 and made.done_in[-1] == threading.current_thread().name


def test_a_block_that_fails_first_joins_the_thread_before_the_error_leaves_it(
        made: _Made) -> None:
    """No init_transactions of a failed attempt after it ended: it would fence the retry."""
    config = _config()
    made.release.clear()
    threading.Timer(0.3, made.release.set).start()
    with pytest.raises(RuntimeError, match="the decision failed"), \
            tx.producer_ahead(config, 2, "q", 0):
        assert made.started.wait(5)
        raise RuntimeError("the decision failed")
    assert made.done_in, "the error left the block before the producer was made"
    assert not _ahead_threads()
    # kept as the worker's producer of the partition, as get_producer would have
    producer, fresh = tx.get_producer(config, 2)
    assert not fresh and made.calls == 1 and producer is not None


def test_an_unused_producers_error_is_left_to_the_next_write(made: _Made) -> None:
    config = _config()
    made.error = TransactionFailedError("init_transactions of unit-ahead.p4: timed out")
    with tx.producer_ahead(config, 4, "q", 0):
        assert made.started.wait(5)
    assert not _ahead_threads() and config.transactional_id(4) not in tx._PRODUCERS
    made.error = None
    _, fresh = tx.get_producer(config, 4)
    assert fresh and made.calls == 2


def test_no_thread_when_the_worker_committed_the_previous_batch(made: _Made) -> None:
    config = _config()
    txn_id = config.transactional_id(5)
    tx.get_producer(config, 5)
    tx._MARKERS[txn_id] = ("q", 7)  # this worker committed batch 6 of query q
    with tx.producer_ahead(config, 5, "q", 7):
        assert not _ahead_threads()
        assert tx.get_producer(config, 5)[1] is False
    assert made.calls == 1


@pytest.mark.parametrize("marker", [("q", 6), ("other query", 7), None],
                         ids=["batch-behind", "other-query", "no-marker"])
def test_a_producer_whose_marker_is_not_at_the_batch_is_replaced_ahead(
        made: _Made, marker: tuple[str, int] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another worker wrote the partition since (its init_transactions fenced this one):
    the new producer is made while the task decides, not after the fence is met."""
    config = _config()
    txn_id = config.transactional_id(6)
    dropped: list[str] = []

    def drop(txn: str) -> None:
        dropped.append(txn)
        tx._PRODUCERS.pop(txn, None)
        tx._MARKERS.pop(txn, None)

    monkeypatch.setattr(tx, "drop_producer", drop)
    old, _ = tx.get_producer(config, 6)
    if marker is not None:
        tx._MARKERS[txn_id] = marker
    with tx.producer_ahead(config, 6, "q", 7):
        assert made.started.wait(5)
        producer, fresh = tx.get_producer(config, 6)
    assert fresh and producer is not old and made.calls == 2
    assert dropped == [txn_id] and tx._PRODUCERS[txn_id] is producer
    assert txn_id not in tx._MARKERS, "a new producer reads the marker"
