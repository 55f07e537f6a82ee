"""Reading a whole topic (``consume_all``, under ``dedup verify`` and ``--verify``)
never returns part of it as if it were all of it (found by the soak benchmark, issue
38: a 60 s cap on the read counted the records it had not reached as lost)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from sinks.exceptions import KafkaUnavailableError
from sinks.kafka_io import consume_all, ensure_topic

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

RECORDS = 4_000


def _filled_topic(bootstrap: str) -> str:
    topic = f"read-{uuid.uuid4().hex[:10]}"
    ensure_topic(bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    return topic


def test_a_read_cut_short_by_its_time_limit_is_an_error_not_a_shorter_topic(
        kafka_bootstrap: str) -> None:
    topic = _filled_topic(kafka_bootstrap)
    with pytest.raises(KafkaUnavailableError, match=rf"{topic}.* not read to the end"):
        consume_all(kafka_bootstrap, topic, max_wait=0.05)


def test_a_whole_read_returns_every_record(kafka_bootstrap: str) -> None:
    topic = _filled_topic(kafka_bootstrap)
    records = consume_all(kafka_bootstrap, topic)
    assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(RECORDS))
