"""Two tenants on one Kafka broker with an authorizer (issue 50, item 3, the Kafka part).

Tenant B (the pipeline's principal) holds the documented ACLs of its app id, tenant A
(another principal) those of its own. A tries B's transactional ids (the fencing of
B's producers), B's output topic, B's batch markers (the consumer-group offsets that
decide which batch a partition has committed) and the toolkit's own calls on B's app
id, with A's credentials. Every attempt is refused by the broker, B's markers are
unchanged, and B's output stays exact while A tries and after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dedup.local.services import KafkaBroker
from sinks import KafkaDeniedError
from sinks.acls import authorization_error
from tests.integration.security.conftest import TENANT_USER
from tests.integration.security.test_kafka_acls import (
    PARTITIONS,
    _acls,
    _config,
    _expected,
    _output_topic,
    _records,
    _report,
    _run,
    _set_acls,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

TENANT = f"User:{TENANT_USER}"
TIMEOUT_S = 15.0
TOOLKIT_CALLS = {"dedup txn abort of B", "B's sink with A's credentials"}
"""A's attempts through the toolkit's own calls: refused with KafkaDeniedError, whose one
line names the ACL (``dedup txn list`` of B shows A nothing instead: no group of B's is
visible to A)."""


@pytest.fixture
def tenant_acls(locked_kafka: KafkaBroker, app_id: str) -> Iterator[str]:
    """Tenant A's app id, with the documented ACLs of it granted to A; removed after."""
    from sinks.transactions import close_clients

    app_a = f"{app_id}-a"
    _set_acls(locked_kafka, _acls(app_a), principal=TENANT)
    yield app_a
    close_clients()
    _set_acls(locked_kafka, [], principal=TENANT)
    _set_acls(locked_kafka, [])


def _markers(broker: KafkaBroker, app_id: str) -> list[tuple[int, str | None, int]]:
    """B's batch markers, read with the broker's super user."""
    from sinks.admin import list_transactions

    return [(t.partition, t.query_id, t.next_batch) for t in list_transactions(
        broker.bootstrap_servers, app_id, marker_topic=f"{app_id}-markers",
        client_config=dict(broker.client_config))]


def _attempts(broker: KafkaBroker, app_a: str, app_b: str,
              topic_b: str) -> list[tuple[str, Callable[[], Any]]]:
    """What A tries on B's app id, each a call that returns what it got through."""
    from confluent_kafka import (
        Consumer,
        ConsumerGroupTopicPartitions,
        KafkaException,
        Producer,
        TopicPartition,
    )
    from confluent_kafka.admin import AdminClient

    from sinks.admin import abort_transactions, list_transactions
    from sinks.records import OutRecord
    from sinks.transactions import write_partition

    a = dict(broker.user_config(TENANT_USER))
    servers = {"bootstrap.servers": broker.bootstrap_servers, **a}
    marker_group = f"{app_b}.sink.p0"
    admin_a = AdminClient(servers)  # one, kept: a collected client cancels its futures

    def fence_b() -> Any:
        producer = Producer({**servers, "transactional.id": f"{app_b}.p0"})
        try:
            producer.init_transactions(TIMEOUT_S)
        finally:
            producer.close()
        return "B's producer fenced"

    def produce_to_b() -> Any:
        failures: list[Any] = []
        producer = Producer(servers)
        producer.produce(topic_b, b"forged", key=b"k",
                         on_delivery=lambda err, _msg: failures.append(err) if err else None)
        left = producer.flush(TIMEOUT_S)
        producer.close()
        if failures or left:
            raise RuntimeError(f"not delivered: {failures or 'timed out'}")
        return "a record in B's output"

    def read_b() -> Any:
        consumer = Consumer({**servers, "group.id": f"dedup-reader-{app_a}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed"})
        try:
            # The broker's refusal of the topic's metadata says at once what a poll of
            # the assigned partitions would only show as TIMEOUT_S of silence.
            topic = consumer.list_topics(topic_b, timeout=TIMEOUT_S).topics.get(topic_b)
            if topic is not None and topic.error is not None:
                raise KafkaException(topic.error)
            consumer.assign([TopicPartition(topic_b, p, 0) for p in range(PARTITIONS)])
            message = consumer.poll(TIMEOUT_S)
            if message is None:
                return None  # nothing read
            if message.error():
                raise RuntimeError(str(message.error()))
            return "a record of B's output read"
        finally:
            consumer.close()

    def forge_marker() -> Any:
        request = ConsumerGroupTopicPartitions(
            # on A's own marker topic, which A may read: only the group's ACL stands between
            marker_group, [TopicPartition(f"{app_a}-markers", 0, 99)])
        for future in admin_a.alter_consumer_group_offsets([request]).values():
            future.result(TIMEOUT_S)
        return "B's marker moved to batch 99"

    def read_marker() -> Any:
        request = ConsumerGroupTopicPartitions(marker_group)
        for future in admin_a.list_consumer_group_offsets([request]).values():
            offsets = future.result(TIMEOUT_S)
            if any(tp.offset >= 0 for tp in offsets.topic_partitions):
                return "B's marker read"
        return None

    def delete_markers() -> Any:
        for future in admin_a.delete_consumer_groups([marker_group],
                                                        request_timeout=TIMEOUT_S).values():
            future.result(TIMEOUT_S)
        return "B's marker group deleted"

    def delete_output() -> Any:
        for future in admin_a.delete_topics([topic_b],
                                               operation_timeout=TIMEOUT_S).values():
            future.result(TIMEOUT_S)
        return "B's output topic deleted"

    def grant_itself() -> Any:
        from sinks.acls import KafkaAcl

        acl = KafkaAcl("GROUP", f"{app_b}.sink.", "PREFIXED", "READ", "sink")
        for future in admin_a.create_acls([acl.binding(TENANT)]).values():
            future.result(TIMEOUT_S)
        return "A granted itself B's groups"

    def list_b() -> Any:
        found = list_transactions(broker.bootstrap_servers, app_b,
                                  marker_topic=f"{app_b}-markers", client_config=a)
        return f"B's transactions listed: {found}" if found else None

    def abort_b() -> Any:
        aborted = abort_transactions(broker.bootstrap_servers, app_b, [0], client_config=a)
        return f"B's transactions aborted: {aborted}"

    def write_as_b() -> Any:
        from dataclasses import replace

        from sinks.transactions import close_clients

        close_clients()  # not B's producer cached in this process: A's own
        config = replace(_config(broker, app_b), producer_config=a)
        write_partition(config, [OutRecord(topic_b, 0, b"k", b"forged", (), b"forged-id")],
                        "tenant-a-query", 5, 0)
        return "a batch written as B's sink"

    return [("init B's transactional id", fence_b), ("produce to B's output", produce_to_b),
            ("read B's output", read_b), ("move B's batch marker", forge_marker),
            ("read B's batch marker", read_marker), ("delete B's marker group", delete_markers),
            ("delete B's output topic", delete_output), ("grant itself B's ACLs", grant_itself),
            ("dedup txn list of B", list_b), ("dedup txn abort of B", abort_b),
            ("B's sink with A's credentials", write_as_b)]


@pytest.mark.slow
def test_a_tenant_can_touch_nothing_of_another_tenants_sink(
        locked_kafka: KafkaBroker, tenant_acls: str, app_id: str) -> None:
    app_a, app_b = tenant_acls, app_id
    topic_b = _output_topic(locked_kafka, app_b)
    _output_topic(locked_kafka, app_a)
    _set_acls(locked_kafka, _acls(app_b))
    _run(_config(locked_kafka, app_b), batches=2)
    markers = _markers(locked_kafka, app_b)
    assert [m[2] for m in markers] == [2] * PARTITIONS, markers

    attempts = _attempts(locked_kafka, app_a, app_b, topic_b)
    through: list[str] = []
    other_reasons: list[tuple[str, str]] = []
    for what, attempt in attempts:
        try:
            got = attempt()
        except Exception as exc:
            # kept as text: a kept exception's frames would keep A's clients alive
            if what in TOOLKIT_CALLS and not isinstance(exc, KafkaDeniedError):
                other_reasons.append((what, f"not the toolkit's one-line refusal: {exc!r}"))
            elif authorization_error(exc) is None and "AUTHORIZATION_FAILED" not in str(exc):
                other_reasons.append((what, repr(exc)))
        else:
            if got is not None:
                through.append(f"{what}: {got}")
    print(f"kafka_tenant_attempts={len(attempts)} kafka_tenant_attempts_allowed={len(through)}")
    assert through == [], f"{len(through)} of {len(attempts)} attempts went through: {through}"
    assert other_reasons == [], f"refused for another reason than an ACL: {other_reasons}"

    from sinks.transactions import close_clients

    close_clients()
    # B's markers as they were; B goes on (its producers were not fenced) and is exact
    assert _markers(locked_kafka, app_b) == markers
    _run_more(locked_kafka, app_b)
    report = _report(locked_kafka, topic_b, _expected(3))
    assert (report.lost, report.duplicated, report.phantoms, report.mismatched,
            report.open_transactions) == (0, 0, 0, 0, 0), report.summary()


def _run_more(broker: KafkaBroker, app_b: str) -> None:
    """B's batch 2 on every partition, as its running query would write it."""
    from sinks.transactions import write_partition
    config = _config(broker, app_b)
    for partition in range(PARTITIONS):
        write_partition(config, _records(str(config.topic), 2, partition), "query-1", 2,
                        partition)
