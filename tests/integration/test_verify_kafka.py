"""The verifier against the real broker: committed, aborted and still-open transactions."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from dedup.constants import RECORD_ID_HEADER
from sinks.kafka_io import ensure_topic
from sinks.verify import open_transaction_partitions, verify_topic

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def _produce(producer: Producer, topic: str, ids: list[str]) -> None:
    for rid in ids:
        producer.produce(topic, value=f"v-{rid}".encode(), headers=[(RECORD_ID_HEADER, rid)])


def test_verify_topic_counts_each_discrepancy(kafka_bootstrap: str, app_id: str) -> None:
    topic = f"{app_id}-out"
    ensure_topic(kafka_bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": app_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    _produce(producer, topic, ["a", "b", "b"])          # one duplicate
    producer.commit_transaction(30)
    producer.begin_transaction()
    _produce(producer, topic, ["c"])                      # aborted: must count as lost
    producer.abort_transaction(30)

    expected = {"a": b"v-a", "b": b"v-b", "c": b"v-c"}
    report = verify_topic(kafka_bootstrap, topic, expected)
    assert (report.lost, report.duplicated, report.phantoms, report.open_transactions) == \
        (1, 1, 0, 0)
    assert not report.ok


def test_open_transaction_is_reported(kafka_bootstrap: str, app_id: str) -> None:
    topic = f"{app_id}-open"
    ensure_topic(kafka_bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": app_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    producer.begin_transaction()
    _produce(producer, topic, ["x"])
    producer.flush(30)
    try:
        assert open_transaction_partitions(kafka_bootstrap, topic) == [0]
    finally:
        producer.abort_transaction(30)
    assert open_transaction_partitions(kafka_bootstrap, topic) == []
