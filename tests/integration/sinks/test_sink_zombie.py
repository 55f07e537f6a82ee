"""Zombie fencing: two producers for one (app, partition); the older is fenced, output exact."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException, Producer

import sinks.transactions as tx
from dedup.constants import RECORD_ID_HEADER
from sinks import SinkConfig
from sinks.admin import abort_transactions, list_transactions, prepare
from sinks.kafka_io import ensure_topic
from sinks.transactions import _PRODUCERS, close_clients, drop_producer, write_partition
from tests.integration.sinks.partition_writes import batch_records, output_ids, prepared_config

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


@pytest.fixture(autouse=True)
def _close_cached_clients() -> Iterator[None]:
    yield
    close_clients()  # this test process is the "worker": its cache must not outlive the test


def test_older_producer_is_fenced_and_output_is_exact(kafka_bootstrap: str, app_id: str) -> None:
    topic = f"{app_id}-out"
    config = prepared_config(kafka_bootstrap, app_id, topic)
    records = batch_records(topic, 0)
    # The zombie: an older task of partition 0 that produced batch 0 but has not committed.
    zombie = Producer(config.producer_settings(0))
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for record in records:
        zombie.produce(topic, key=record.key, value=record.value,
                       headers=[(RECORD_ID_HEADER, record.record_id)])
    zombie.flush(30)
    # The retry of the same (app, partition) takes over and writes batch 0.
    result = write_partition(config, records, "query-a", 0, 0)
    assert (result.produced, result.skipped) == (len(records), False)
    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(30)
    assert caught.value.args[0].fatal() or "fenced" in str(caught.value).lower()

    committed = output_ids(kafka_bootstrap, topic)
    assert sorted(committed) == sorted(r.record_id.decode() for r in records)  # 0 lost, 0 dup
    assert len(output_ids(kafka_bootstrap, topic, "read_uncommitted")) == 2 * len(records), \
        "the zombie's aborted records must be in the log"
    # A repeat of the same batch is skipped by the marker.
    assert write_partition(config, records, "query-a", 0, 0).skipped
    drop_producer(config.transactional_id(0))


def test_next_write_fences_a_newer_producer_of_another_worker(kafka_bootstrap: str,
                                                              app_id: str) -> None:
    """A partition moved to another worker and back: the cached producer is stale.

    Its first transactional call (the marker) reports the fence before any
    record is produced; the redo's new producer fences the other worker's.
    """
    topic = f"{app_id}-out"
    config = prepared_config(kafka_bootstrap, app_id, topic)
    write_partition(config, batch_records(topic, 0), "query-a", 0, 0)
    cached = _PRODUCERS[config.transactional_id(0)]
    newer = Producer(config.producer_settings(0))  # another worker's producer: fences `cached`
    newer.init_transactions(30)
    newer.begin_transaction()  # ...and it left a transaction open (its worker crashed)
    newer.produce(topic, value=b"zombie", headers=[(RECORD_ID_HEADER, b"zombie")])
    newer.flush(30)
    result = write_partition(config, batch_records(topic, 1), "query-a", 1, 0)
    assert result.produced == 20 and result.attempts == 2
    assert _PRODUCERS[config.transactional_id(0)] is not cached
    with pytest.raises(KafkaException):  # the newer one is now the fenced zombie
        newer.commit_transaction(30)
    committed = output_ids(kafka_bootstrap, topic)
    expected = [r.record_id.decode() for b in (0, 1) for r in batch_records(topic, b)]
    assert sorted(committed) == sorted(expected)
    assert len(output_ids(kafka_bootstrap, topic, "read_uncommitted")) == len(expected) + 1, \
        "the stale producer must not have produced anything before it was fenced"
    # Operator tools: the app's transactional id is listed, and aborting is harmless.
    listed = list_transactions(kafka_bootstrap, app_id)
    assert [(t.transactional_id, t.query_id, t.next_batch) for t in listed] == \
        [(config.transactional_id(0), "query-a", 2)]
    drop_producer(config.transactional_id(0))
    assert abort_transactions(kafka_bootstrap, app_id) == [config.transactional_id(0)]
    assert sorted(output_ids(kafka_bootstrap, topic)) == sorted(expected)


def test_fenced_during_the_write_is_redone_once(kafka_bootstrap: str, app_id: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Another producer takes over between init and commit: one redo, exact output."""
    import sinks.transactions as tx

    topic = f"{app_id}-out"
    config = prepared_config(kafka_bootstrap, app_id, topic)
    original = tx.read_marker
    intruders: list[Producer] = []

    def read_marker_then_get_fenced(cfg: SinkConfig, partition: int,
                                    **kwargs: float | None) -> tuple[str | None, int]:
        marker = original(cfg, partition, **kwargs)
        if not intruders:  # a concurrent writer of the same (app, partition) starts now
            intruder = Producer(cfg.producer_settings(partition))
            intruder.init_transactions(30)
            intruders.append(intruder)
        return marker

    monkeypatch.setattr(tx, "read_marker", read_marker_then_get_fenced)
    result = write_partition(config, batch_records(topic, 0), "query-a", 0, 0)
    assert (result.produced, result.attempts) == (20, 2)
    assert sorted(output_ids(kafka_bootstrap, topic)) == \
        sorted(r.record_id.decode() for r in batch_records(topic, 0))


def test_crashed_writer_with_pending_marker_does_not_stall_a_cached_producer(
        kafka_bootstrap: str, app_id: str) -> None:
    """A newer writer crashed after sending the marker offsets, its transaction open.

    The cached producer, fenced by that writer, fails at its first call (the
    marker's send_offsets), and the new producer's init_transactions() aborts the
    open transaction, well before the transaction timeout. (A cached producer
    that has to read the marker gives up on the pending offsets after
    STALE_PRODUCER_PATIENCE_S instead.)
    """
    import time

    from confluent_kafka import Consumer, TopicPartition

    topic = f"{app_id}-out"
    config = prepared_config(kafka_bootstrap, app_id, topic)
    write_partition(config, batch_records(topic, 0), "query-a", 0, 0)
    crashed = Producer({**config.producer_settings(0), "transaction.timeout.ms": 60_000})
    crashed.init_transactions(30)
    crashed.begin_transaction()
    crashed.produce(topic, value=b"lost-attempt", headers=[(RECORD_ID_HEADER, b"id-1-0")])
    group = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": config.marker_group(0)})
    crashed.send_offsets_to_transaction(
        [TopicPartition(config.marker_topic, 0, 2, metadata="query-a")],
        group.consumer_group_metadata(), 30)
    crashed.flush(30)
    group.close()
    started = time.monotonic()
    result = write_partition(config, batch_records(topic, 1), "query-a", 1, 0)
    took = time.monotonic() - started
    assert result.produced == 20 and not result.skipped
    assert result.attempts == 2, "the stale producer was not fenced and replaced"
    assert took < 30, f"write took {took:.1f} s"
    expected = [r.record_id.decode() for b in (0, 1) for r in batch_records(topic, b)]
    assert sorted(output_ids(kafka_bootstrap, topic)) == sorted(expected)
    with pytest.raises(KafkaException):
        crashed.commit_transaction(30)


def test_a_record_the_broker_rejects_fails_the_whole_partition(
        kafka_bootstrap: str, app_id: str, caplog: pytest.LogCaptureFixture) -> None:
    """A delivery failure inside the transaction: nothing of the partition is committed.

    The sink registers no per-record delivery callback; librdkafka turns a
    permanently failed record into an abortable error of the transaction. The
    topic accepts records up to 2 kB; one record of 8 kB passes the producer's
    own size check and is refused by the broker.
    """
    import logging

    from sinks.exceptions import TransactionFailedError

    topic = f"{app_id}-small"
    config = SinkConfig(app_id=app_id, bootstrap_servers=kafka_bootstrap, topic=topic,
                        strong_productions=False, transaction_retries=2)
    prepare(config)
    ensure_topic(kafka_bootstrap, topic, 1, config={"max.message.bytes": "2048"})
    records = batch_records(topic, 0)
    records[7] = records[7]._replace(value=b"x" * 8192)
    with caplog.at_level(logging.WARNING, logger="sinks.transactions"), \
            pytest.raises(TransactionFailedError, match="aborted 2 times") as caught:
        write_partition(config, records, "query-a", 0, 0)
    assert caught.value.retriable()
    aborts = [r.getMessage() for r in caplog.records if "aborted transaction" in r.getMessage()]
    assert aborts and "MSG_SIZE_TOO_LARGE" in aborts[0], aborts
    assert output_ids(kafka_bootstrap, topic) == [], "a failed transaction must not be visible"
    # The marker did not move either: a later good write of batch 0 is not skipped.
    good = SinkConfig(app_id=app_id, bootstrap_servers=kafka_bootstrap, topic=f"{app_id}-out",
                      strong_productions=False)
    ensure_topic(kafka_bootstrap, good.topic or "", 1)
    result = write_partition(good, batch_records(good.topic or "", 0), "query-a", 0, 0)
    assert (result.produced, result.skipped) == (20, False)


def test_a_fenced_cached_producer_is_replaced_quietly(kafka_bootstrap: str, app_id: str,
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    """Spark moves partitions between Python workers, so a cached producer fenced by a
    newer one elsewhere is normal operation: it is replaced without librdkafka's
    FATAL lines reaching the user's console."""
    topic = f"{app_id}-out"
    config = prepared_config(kafka_bootstrap, app_id, topic)
    write_partition(config, batch_records(topic, 0), "query-a", 0, 0)
    # Another Python worker takes partition 0 over and writes batch 1.
    other = Producer(config.producer_settings(0))
    other.init_transactions(30)
    capfd.readouterr()
    # Batch 2 lands back on this worker, whose cached producer is now fenced.
    result = write_partition(config, batch_records(topic, 2), "query-a", 2, 0)
    assert (result.produced, result.skipped) == (20, False)
    console = capfd.readouterr().err
    assert "FATAL" not in console, console
    assert sorted(output_ids(kafka_bootstrap, topic)) == sorted(
        [f"id-0-{i}" for i in range(20)] + [f"id-2-{i}" for i in range(20)])


def test_a_live_cached_producer_writes_its_next_batch_without_reading_the_marker(
        kafka_bootstrap: str, app_id: str) -> None:
    """The marker of a transactional id changes only in transactions of that id, and any
    other writer of it fences the cached producer first: while the producer is live, the
    marker is what its own last commit left, so the next write need not read it."""
    topic = f"{app_id}-out"
    config = prepared_config(kafka_bootstrap, app_id, topic)
    first = write_partition(config, batch_records(topic, 0), "query-a", 0, 0)
    assert "marker" in first.phases  # a new producer reads the marker
    second = write_partition(config, batch_records(topic, 1), "query-a", 1, 0)
    assert (second.produced, second.skipped) == (20, False)
    assert "marker" not in second.phases, second.phases
    # A repeat of the batch it committed is still skipped, from what it knows.
    assert write_partition(config, batch_records(topic, 1), "query-a", 1, 0).skipped
    assert sorted(output_ids(kafka_bootstrap, topic)) == sorted(
        [f"id-0-{i}" for i in range(20)] + [f"id-1-{i}" for i in range(20)])


def test_a_stale_cached_producer_retrying_a_batch_another_worker_committed_skips_it(
        kafka_bootstrap: str, app_id: str) -> None:
    """The cached producer's own knowledge is stale once another worker committed the
    batch it is asked to write (Spark re-runs its last batch after a failure): the first
    call of its transaction reports the fence before anything is produced, and the
    redo reads the marker and skips. Nothing is written twice."""
    topic = f"{app_id}-out"
    config = prepared_config(kafka_bootstrap, app_id, topic)
    txn_id = config.transactional_id(0)
    write_partition(config, batch_records(topic, 0), "query-a", 0, 0)
    stale = _PRODUCERS.pop(txn_id)  # this worker's producer, set aside
    known = dict(tx._MARKERS)
    # Another Python worker writes batch 1 (its own producer fences `stale`).
    assert write_partition(config, batch_records(topic, 1), "query-a", 1, 0).produced == 20
    drop_producer(txn_id)
    # Spark re-runs batch 1 on this worker, whose cached producer is the stale one.
    _PRODUCERS[txn_id] = stale
    tx._MARKERS.update(known)
    retry = write_partition(config, batch_records(topic, 1), "query-a", 1, 0)
    assert retry.skipped and retry.produced == 0
    assert sorted(output_ids(kafka_bootstrap, topic)) == sorted(
        [f"id-0-{i}" for i in range(20)] + [f"id-1-{i}" for i in range(20)])
    assert len(output_ids(kafka_bootstrap, topic, "read_uncommitted")) == 40, \
        "the stale producer produced before its fence was reported"
