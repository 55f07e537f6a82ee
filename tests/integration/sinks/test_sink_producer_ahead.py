"""A partition's new producer made while the task decides (sinks.transactions.producer_ahead),
on a real broker: the write uses it, a fenced cached producer is replaced before the write
meets the fence, the output stays exact, and no thread outlives the task."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException

import sinks.transactions as tx
from dedup.constants import RECORD_ID_HEADER
from tests.integration.sinks.partition_writes import batch_records, output_ids, prepared_config

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


@pytest.fixture(autouse=True)
def _close_cached_clients() -> Iterator[None]:
    yield
    tx.close_clients()  # this test process is the "worker": its cache must not outlive the test


def _ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dedup-producer-")]


def test_a_partition_back_from_another_worker_gets_its_new_producer_ahead(
        kafka_bootstrap: str, app_id: str) -> None:
    """Spark moved the partition away and back: the other worker's init_transactions
    fenced this worker's producer. It is replaced while the task decides, so the write
    takes one attempt (no fence met at the marker) and the output is exact."""
    topic = f"{app_id}-out"
    config = prepared_config(kafka_bootstrap, app_id, topic)
    txn_id = config.transactional_id(0)
    with tx.producer_ahead(config, 0, "query-a", 0):
        first = tx.write_partition(config, batch_records(topic, 0), "query-a", 0, 0)
    assert (first.produced, first.attempts) == (20, 1)
    cached = tx._PRODUCERS[txn_id]
    # batch 1 on another worker (its own caches): its new producer fences `cached`
    tx._PRODUCERS.pop(txn_id), tx._MARKERS.pop(txn_id)
    tx.write_partition(config, batch_records(topic, 1), "query-a", 1, 0)
    other_worker = tx._PRODUCERS.pop(txn_id)
    tx._PRODUCERS[txn_id], tx._MARKERS[txn_id] = cached, ("query-a", 1)  # back to ours
    # batch 2 back here: its marker says this worker last committed batch 0
    with tx.producer_ahead(config, 0, "query-a", 2):
        assert _ahead_threads(), "no producer made ahead for a worker that missed a batch"
        result = tx.write_partition(config, batch_records(topic, 2), "query-a", 2, 0)
    assert (result.produced, result.attempts) == (20, 1), "the write met the fence"
    assert tx._PRODUCERS[txn_id] is not cached
    assert result.phases["producer"] < 5.0
    assert not _ahead_threads()
    other_worker.begin_transaction()  # the other worker's producer is fenced now
    other_worker.produce(topic, value=b"zombie", headers=[(RECORD_ID_HEADER, b"zombie")])
    with pytest.raises(KafkaException):
        other_worker.commit_transaction(30)
    expected = sorted(r.record_id.decode() for b in (0, 1, 2) for r in batch_records(topic, b))
    assert sorted(output_ids(kafka_bootstrap, topic)) == expected  # 0 lost, 0 duplicated
    assert len(output_ids(kafka_bootstrap, topic, "read_uncommitted")) <= len(expected) + 1
    # the next batch on this worker needs no new producer
    with tx.producer_ahead(config, 0, "query-a", 3):
        assert not _ahead_threads()
        assert tx.write_partition(config, batch_records(topic, 3), "query-a", 3, 0).attempts == 1


def test_a_task_that_fails_before_its_write_leaves_no_thread_and_a_usable_producer(
        kafka_bootstrap: str, app_id: str) -> None:
    """The decision failed: the producer made ahead is joined before the error leaves
    the task (no later init_transactions fences the retry) and kept for the retry."""
    topic = f"{app_id}-out"
    config = prepared_config(kafka_bootstrap, app_id, topic)
    txn_id = config.transactional_id(1)
    with pytest.raises(RuntimeError, match="Redis went away"), \
            tx.producer_ahead(config, 1, "query-b", 0):
        raise RuntimeError("Redis went away")
    assert not _ahead_threads()
    made = tx._PRODUCERS[txn_id]
    result = tx.write_partition(config, batch_records(topic, 0), "query-b", 0, 1)
    assert (result.produced, result.attempts) == (20, 1)
    assert tx._PRODUCERS[txn_id] is made
    assert sorted(output_ids(kafka_bootstrap, topic)) == \
        sorted(r.record_id.decode() for r in batch_records(topic, 0))
