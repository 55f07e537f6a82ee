"""Small Kafka helpers: the sink's admin clients and the logger of its clients, topics,
and a bounded read of a topic (the sink, the verifier, the CLI and the tests)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sinks.acls import KafkaAcl, authorization_error, denied, required_acls
from sinks.exceptions import KafkaUnavailableError


class _FenceIsRoutine(logging.Filter):
    """Demote librdkafka's report of a fenced producer to DEBUG.

    Spark moves sink partitions between Python workers, and each worker's
    cached producer of a partition is fenced by the next worker's
    ``init_transactions()``: normal operation, which librdkafka reports as a
    FATAL transaction error. The sink replaces the producer and says so in
    its own error if the fence was not routine.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if "fenced by a newer instance" in record.getMessage():
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


CLIENT_LOG = logging.getLogger("sinks.librdkafka")
"""Where the sink's Kafka clients log librdkafka's own lines (without a logger
librdkafka prints them on stderr, its INFO lines too)."""
CLIENT_LOG.addFilter(_FenceIsRoutine())


def admin_client(settings: Mapping[str, Any]) -> AdminClient:
    """An ``AdminClient`` of ``settings`` that logs to :data:`CLIENT_LOG`, unless
    ``settings`` name a ``logger`` of their own (the CLI's silent clients do).

    Without a logger, an admin client destroyed right after its call sometimes
    still has an event in librdkafka's background queue and reports it on stderr
    (``BGQUEUE ... Purging 1 unserved events``; about 5 calls in 100), which the
    sink's start checks then printed at random
    (``tests/integration/sinks/test_sink_admin_logs.py``).
    """
    config: dict[str, Any] = {"logger": CLIENT_LOG, **settings}
    return AdminClient(config)


@dataclass(frozen=True)
class ConsumedRecord:
    """One record as a consumer saw it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


def ensure_topic(bootstrap: str, topic: str, partitions: int = 1,
                 config: dict[str, str] | None = None, timeout: float = 30.0,
                 client_config: dict[str, Any] | None = None,
                 replication_factor: int = -1) -> None:
    """Create ``topic`` if it does not exist. Safe to repeat.

    ``replication_factor`` -1 takes the brokers' ``default.replication.factor``
    (1 on a single broker, 3 on a production cluster set up as README says): a
    topic the sink needs (its marker topic) must not live on one node only.
    """
    admin = admin_client({"bootstrap.servers": bootstrap, **(client_config or {})})
    try:
        if topic in admin.list_topics(timeout=timeout).topics:
            return
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                      config=config or {})],
            operation_timeout=timeout,
        )
        for future in futures.values():
            try:
                future.result(timeout)
            except KafkaException as exc:
                if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                    raise
    except KafkaException as exc:
        raise KafkaUnavailableError(
            f"could not create Kafka topic {topic!r} on {bootstrap}: {exc}; "
            "check kafka.bootstrap.servers and that the broker is up"
        ) from exc
    # Metadata propagates asynchronously; wait until the topic is visible.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if topic in admin.list_topics(topic=topic, timeout=timeout).topics:
            return
        time.sleep(0.1)


def consume_all(bootstrap: str, topic: str, isolation_level: str = "read_committed",
                idle_timeout: float = 30.0, max_wait: float | None = None,
                client_config: dict[str, Any] | None = None) -> list[ConsumedRecord]:
    """Read every record of ``topic`` from the beginning up to its end.

    Returns once every partition reported its end (for ``read_committed``, its last
    stable offset) and no record arrived for half a second. No group offsets are
    committed. Safe to repeat.

    Raises
    ------
    KafkaDeniedError
        The principal may not read the topic or look up the reader's group (one
        line naming the ACL to grant).
    KafkaUnavailableError
        The read did not reach the end of every partition: no record arrived for
        ``idle_timeout`` seconds, or ``max_wait`` seconds passed (None: no limit while
        records keep arriving). Never a part of the topic returned as the whole: a
        verifier would count the records not reached as lost.
    """
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"dedup-reader-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation_level,
        "enable.partition.eof": True,
        **(client_config or {}),
    })
    records: list[ConsumedRecord] = []
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            hidden = authorization_error(found.error) if found is not None else None
            if hidden is not None:
                # Hidden from the principal (no READ, so no DESCRIBE): not an empty
                # topic, which a verifier would report as every record lost.
                raise denied(f"the read of topic {topic!r}", hidden,
                             [KafkaAcl("TOPIC", topic, "LITERAL", "READ", "dedup verify")])
            return records
        partitions = sorted(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        at_eof: set[int] = set()
        started = last_progress = time.monotonic()
        while True:
            now = time.monotonic()
            if len(at_eof) == len(partitions) and now - last_progress > 0.5:
                return records
            stalled = now - last_progress > idle_timeout
            if stalled or (max_wait is not None and now - started > max_wait):
                behind = sorted(set(partitions) - at_eof)
                why = (f"no record for {idle_timeout:g} s" if stalled
                       else f"the limit of {max_wait:g} s passed")
                raise KafkaUnavailableError(
                    f"reading topic {topic!r}: partitions {behind} not read to the end "
                    f"({why}, {len(records)} records read): the topic was not verified; "
                    "check that its brokers are up, then read it again")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_eof.add(int(msg.partition() or 0))
                    continue
                refused = authorization_error(error)
                if refused is not None:
                    # A refusal, not an outage: the read would never reach the end.
                    reader = ([acl for acl in required_acls("-", topic)
                               if acl.part == "dedup verify"] if refused ==
                              "GROUP_AUTHORIZATION_FAILED" else
                              [KafkaAcl("TOPIC", topic, "LITERAL", "READ", "dedup verify")])
                    raise denied(f"the read of topic {topic!r}", refused, reader)
                raise KafkaUnavailableError(f"reading {topic!r} failed: {error}")
            last_progress = time.monotonic()
            at_eof.discard(int(msg.partition() or 0))
            records.append(ConsumedRecord(
                topic=str(msg.topic()), partition=int(msg.partition() or 0),
                offset=int(msg.offset() or 0),
                key=_as_bytes(msg.key()), value=_as_bytes(msg.value()),
                headers=_headers(msg.headers()),
            ))
    finally:
        consumer.close()


def _as_bytes(data: str | bytes | None) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    return data.encode()


def _headers(raw: object) -> tuple[tuple[str, bytes | None], ...]:
    if not raw:
        return ()
    pairs = raw.items() if isinstance(raw, dict) else raw
    return tuple((str(k), _as_bytes(v)) for k, v in pairs)  # type: ignore[attr-defined]
