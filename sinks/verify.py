"""The verifier's Kafka half: read a topic as a ``read_committed`` consumer and check it.

The comparison itself (what counts as lost, duplicated, phantom, mismatched)
is :mod:`dedup.verify`, which needs no Kafka client.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from dedup.constants import RECORD_ID_HEADER
from dedup.verify import VerificationReport, compare
from sinks.kafka_io import consume_all


def read_observed(bootstrap: str, topic: str, id_header: str = RECORD_ID_HEADER,
                  isolation_level: str = "read_committed",
                  client_config: dict[str, Any] | None = None,
                  ) -> list[tuple[str | None, bytes | None]]:
    """``(record_id from the header, value)`` of every record in ``topic``."""
    out: list[tuple[str | None, bytes | None]] = []
    for record in consume_all(bootstrap, topic, isolation_level, client_config=client_config):
        raw = record.header(id_header)
        out.append((raw.decode() if raw is not None else None, record.value))
    return out


RETRY_SECONDS = 30.0
"""How long a read is repeated while Kafka answers with a retriable error (a partition
leader that moved: right after a broker restart the client's metadata is stale)."""
RETRY_PAUSE_S = 0.5
# Errors of stale metadata, which librdkafka does not always flag retriable.
_STALE_METADATA = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION,
                             KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART})


def high_watermark(consumer: Any, topic: str, partition: int) -> int:
    """The partition's end for ``consumer``'s isolation level, repeated for up to
    :data:`RETRY_SECONDS` while Kafka's answer is retriable."""
    deadline = time.monotonic() + RETRY_SECONDS
    while True:
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                      timeout=10, cached=False)[1])
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            retriable = bool(getattr(error, "retriable", lambda: False)()) or getattr(
                error, "code", lambda: None)() in _STALE_METADATA
            if not retriable or time.monotonic() > deadline:
                raise
            time.sleep(RETRY_PAUSE_S)


def open_transaction_partitions(bootstrap: str, topic: str,
                                client_config: dict[str, Any] | None = None) -> list[int]:
    """Partitions of ``topic`` whose last stable offset is behind the high watermark.

    Such a partition ends in a transaction that is neither committed nor
    aborted yet: its records are invisible to ``read_committed`` readers and
    block everything after them.
    """
    ends: dict[str, dict[int, int]] = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "dedup-verify-watermarks",
            "isolation.level": isolation, "enable.auto.commit": False,
            **(client_config or {}),
        })
        try:
            metadata = consumer.list_topics(topic, timeout=10)
            partitions = sorted(metadata.topics[topic].partitions) \
                if topic in metadata.topics else []
            ends[isolation] = {p: high_watermark(consumer, topic, p) for p in partitions}
        finally:
            consumer.close()
    return [p for p, high in ends["read_uncommitted"].items()
            if ends["read_committed"].get(p, high) < high]


def verify_topic(bootstrap: str, topic: str,
                 expected: Mapping[str, Any] | Iterable[str] | None = None,
                 id_header: str = RECORD_ID_HEADER, compare_payloads: bool = True,
                 client_config: dict[str, Any] | None = None) -> VerificationReport:
    """Read ``topic`` with ``read_committed`` and check it.

    With ``expected``: losses, duplicates, phantoms, mismatches and open
    transactions. Without it: an audit for repeated record IDs (every distinct
    observed ID is taken as expected once). Safe to repeat; reads only.
    """
    observed = read_observed(bootstrap, topic, id_header, client_config=client_config)
    if expected is None:
        expected = {rid for rid, _ in observed if rid is not None}
        compare_payloads = False
    report = compare(expected, observed, compare_payloads=compare_payloads)
    open_parts = open_transaction_partitions(bootstrap, topic, client_config)
    return VerificationReport(
        expected=report.expected, observed=report.observed, lost=report.lost,
        duplicated=report.duplicated, phantoms=report.phantoms,
        mismatched=report.mismatched, open_transactions=len(open_parts),
        samples={**report.samples, "open_partitions": tuple(str(p) for p in open_parts)},
    )
