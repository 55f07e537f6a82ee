"""The sink on a broker with an authorizer (StandardAuthorizer, no ACL means no access),
as a principal that is no super user and holds exactly the ACLs of
:func:`sinks.acls.required_acls` (docs/operations.md, "Kafka ACLs").

With all of them the ``read_committed`` output is exact. Without any one that
every run needs, the write fails at once, in one line that names the missing
permission and its resource, and leaves nothing a ``read_committed`` reader sees.
The partition write path is driven directly (:func:`sinks.admin.prepare` on the
driver, :func:`sinks.transactions.write_partition` per partition, as each Spark
task of the sink runs it): no Spark query, to keep it fast.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dedup.local.services import KafkaBroker
from dedup.verify import VerificationReport
from sinks import SinkConfig
from sinks.acls import KafkaAcl, required_acls
from sinks.records import OutRecord
from tests.integration.security.conftest import PIPELINE_USER

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

PRINCIPAL = f"User:{PIPELINE_USER}"
PARTITIONS = 2
FAIL_WITHIN_S = 60.0


def _admin(broker: KafkaBroker) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap_servers, **broker.client_config})


def _set_acls(broker: KafkaBroker, acls: list[KafkaAcl], principal: str = PRINCIPAL) -> None:
    """``principal`` (the pipeline's) holds exactly ``acls`` afterwards (applied on the
    broker).

    Only the difference is applied: an ACL held before and after is never absent in
    between (deleting all and creating them again once revoked the transactional id's
    ACL for an instant, which a cached producer saw and died of: CI, 2026-11-29)."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = _admin(broker)
    # None: any resource name, any host (the stubs want str)
    any_name: Any = None
    anything = AclBindingFilter(ResourceType.ANY, any_name, ResourcePatternType.ANY, principal,
                                any_name, AclOperation.ANY, AclPermissionType.ANY)
    wanted = {acl.binding(principal) for acl in acls}
    held = set(admin.describe_acls(anything).result(30))
    gone = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                             b.operation, b.permission_type) for b in held - wanted]
    if gone:
        for future in admin.delete_acls(gone).values():
            future.result(30)
    if wanted - held:
        for future in admin.create_acls(list(wanted - held)).values():
            future.result(30)
    # The authorizer applies ACLs from the metadata log, after the call returns.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if set(admin.describe_acls(anything).result(30)) == wanted:
            break
        time.sleep(0.1)
    time.sleep(0.5)


@pytest.fixture
def acls_cleared(locked_kafka: KafkaBroker) -> Iterator[None]:
    from sinks.transactions import close_clients

    yield
    close_clients()
    _set_acls(locked_kafka, [])


def _config(broker: KafkaBroker, app_id: str) -> SinkConfig:
    return SinkConfig(app_id=app_id, bootstrap_servers=broker.bootstrap_servers,
                      topic=f"{app_id}-out", strong_productions=False,
                      marker_topic=f"{app_id}-markers",
                      producer_config=broker.user_config(PIPELINE_USER))


def _acls(app_id: str) -> list[KafkaAcl]:
    return required_acls(app_id, f"{app_id}-out", marker_topic=f"{app_id}-markers")


def _records(topic: str, batch: int, partition: int, n: int = 25) -> list[OutRecord]:
    return [OutRecord(topic, partition, f"k{batch}-{partition}-{i}".encode(),
                      f"v{batch}-{partition}-{i}".encode(), (),
                      f"id-{batch}-{partition}-{i}".encode()) for i in range(n)]


def _expected(batches: int) -> dict[str, bytes]:
    return {f"id-{b}-{p}-{i}": f"v{b}-{p}-{i}".encode()
            for b in range(batches) for p in range(PARTITIONS) for i in range(25)}


def _run(config: SinkConfig, batches: int) -> None:
    """The sink's start, then ``batches`` batches of every partition, the last one twice
    (Spark's re-run of a batch whose Kafka commit preceded its own)."""
    from sinks.admin import prepare
    from sinks.transactions import write_partition

    prepare(config)
    topic = str(config.topic)
    for batch in [*range(batches), batches - 1]:
        for partition in range(PARTITIONS):
            write_partition(config, _records(topic, batch, partition),
                            "query-1", batch, partition)


def _output_topic(broker: KafkaBroker, app_id: str) -> str:
    from sinks.kafka_io import ensure_topic

    topic = f"{app_id}-out"
    ensure_topic(broker.bootstrap_servers, topic, PARTITIONS, client_config=broker.client_config)
    return topic


def _report(broker: KafkaBroker, topic: str, expected: dict[str, bytes]) -> VerificationReport:
    from sinks.verify import verify_topic

    return verify_topic(broker.bootstrap_servers, topic, expected,
                        client_config=broker.client_config)


def test_the_sink_is_exact_with_exactly_the_documented_acls(
        locked_kafka: KafkaBroker, acls_cleared: None, app_id: str) -> None:
    topic = _output_topic(locked_kafka, app_id)
    _set_acls(locked_kafka, _acls(app_id))
    _run(_config(locked_kafka, app_id), batches=3)
    report = _report(locked_kafka, topic, _expected(3))
    assert (report.lost, report.duplicated, report.phantoms,
            report.mismatched, report.open_transactions) == (0, 0, 0, 0, 0), \
        report.summary()


NEEDED_BY_EVERY_RUN = [acl for acl in _acls("app") if acl.part.startswith("sink")
                       and acl.when in {"always", "until the marker topic exists"}]


@pytest.mark.slow
@pytest.mark.parametrize("missing", NEEDED_BY_EVERY_RUN,
                         ids=[f"{a.resource_type}-{a.operation}" for a in NEEDED_BY_EVERY_RUN])
def test_without_one_acl_the_write_fails_at_once_naming_it(
        locked_kafka: KafkaBroker, acls_cleared: None, app_id: str,
        missing: KafkaAcl) -> None:
    topic = _output_topic(locked_kafka, app_id)
    [wanted] = [acl for acl in _acls(app_id) if (acl.resource_type, acl.pattern,
                                                 acl.operation, acl.part) ==
                (missing.resource_type, missing.pattern, missing.operation, missing.part)]
    _set_acls(locked_kafka, [acl for acl in _acls(app_id) if acl != wanted])
    started = time.monotonic()
    with pytest.raises(Exception) as failure:
        _run(_config(locked_kafka, app_id), batches=1)
    took = time.monotonic() - started
    message = str(failure.value)
    assert took < FAIL_WITHIN_S, f"failed only after {took:.0f} s: {message}"
    assert "\n" not in message, message
    assert "Kafka denied" in message and wanted.resource in message, message
    assert wanted.operation in message and "docs/operations.md" in message, message
    report = _report(locked_kafka, topic, {})
    assert (report.observed, report.open_transactions) == (0, 0), \
        report.summary()


def _with_dead_letter_topic(broker: KafkaBroker, app_id: str) -> tuple[SinkConfig,
                                                                        list[KafkaAcl]]:
    """The sink's config with a dead-letter topic (made by the admin) and its ACLs."""
    import dataclasses

    from sinks.kafka_io import ensure_topic

    dead = f"{app_id}-dead"
    ensure_topic(broker.bootstrap_servers, dead, PARTITIONS, client_config=broker.client_config)
    config = dataclasses.replace(_config(broker, app_id), dead_letter_topic=dead)
    return config, required_acls(app_id, f"{app_id}-out", marker_topic=f"{app_id}-markers",
                                 dead_letter_topic=dead)


@pytest.mark.parametrize("which", ["output", "dead letter"])
def test_without_describe_configs_of_the_output_the_sink_warns_and_is_exact(
        locked_kafka: KafkaBroker, acls_cleared: None, app_id: str,
        caplog: pytest.LogCaptureFixture, which: str) -> None:
    """The docs' fallback without DESCRIBE_CONFIGS on an output topic (the output's or
    the dead-letter topic's): a warning naming it, records above the topic's
    max.message.bytes are refused by the broker instead of dead-lettered, and the
    output is exact."""
    from sinks.transactions import topic_limits

    topic = _output_topic(locked_kafka, app_id)
    config, acls = _with_dead_letter_topic(locked_kafka, app_id)
    unread = topic if which == "output" else str(config.dead_letter_topic)
    _set_acls(locked_kafka, [acl for acl in acls if not (
        acl.name == unread and acl.operation == "DESCRIBE_CONFIGS")])
    with caplog.at_level(logging.WARNING):
        _run(config, batches=1)
        topic_limits(config)(unread, True)
    assert any("DESCRIBE_CONFIGS" in r.getMessage() and unread in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    report = _report(locked_kafka, topic, _expected(1))
    assert report.ok, report.summary()


def test_without_write_on_the_dead_letter_topic_the_start_is_refused_naming_it(
        locked_kafka: KafkaBroker, acls_cleared: None, app_id: str) -> None:
    """A dead-letter topic the principal may not write is refused at the sink's start,
    before any batch, even one that would dead-letter nothing: its first record would
    fail a transaction mid-run."""
    from sinks import KafkaDeniedError

    topic = _output_topic(locked_kafka, app_id)
    config, acls = _with_dead_letter_topic(locked_kafka, app_id)
    dead = str(config.dead_letter_topic)
    _set_acls(locked_kafka, [acl for acl in acls
                             if not (acl.name == dead and acl.operation == "WRITE")])
    started = time.monotonic()
    with pytest.raises(KafkaDeniedError) as failure:
        _run(config, batches=1)
    message = str(failure.value)
    assert time.monotonic() - started < FAIL_WITHIN_S
    assert "\n" not in message and f"WRITE on topic '{dead}'" in message, message
    report = _report(locked_kafka, topic, {})
    assert (report.observed, report.open_transactions) == (0, 0), report.summary()


def test_an_acl_revoked_mid_run_shows_nothing_of_the_refused_batch_and_granting_it_resumes(
        locked_kafka: KafkaBroker, acls_cleared: None, app_id: str) -> None:
    """Batch 0 committed, then the output's WRITE revoked: batch 1 is refused in one
    line and leaves the output at batch 0 exactly; the ACL granted again (what the
    message says), the retry of batch 1 makes the output exact."""
    from sinks import KafkaDeniedError
    from sinks.transactions import write_partition

    topic = _output_topic(locked_kafka, app_id)
    everything = _acls(app_id)
    _set_acls(locked_kafka, everything)
    config = _config(locked_kafka, app_id)
    _run(config, batches=1)
    _set_acls(locked_kafka, [acl for acl in everything
                             if not (acl.name == topic and acl.operation == "WRITE")])
    started = time.monotonic()
    with pytest.raises(KafkaDeniedError, match=f"WRITE on topic '{topic}'"):
        write_partition(config, _records(topic, 1, 0), "query-1", 1, 0)
    assert time.monotonic() - started < FAIL_WITHIN_S
    report = _report(locked_kafka, topic, _expected(1))
    assert (report.lost, report.duplicated, report.phantoms, report.mismatched,
            report.open_transactions) == (0, 0, 0, 0, 0), report.summary()
    _set_acls(locked_kafka, everything)
    for partition in range(PARTITIONS):
        write_partition(config, _records(topic, 1, partition), "query-1", 1, partition)
    report = _report(locked_kafka, topic, _expected(2))
    assert (report.lost, report.duplicated, report.phantoms, report.mismatched,
            report.open_transactions) == (0, 0, 0, 0, 0), report.summary()


def test_verify_needs_the_documented_acls_and_names_a_missing_one(
        locked_kafka: KafkaBroker, acls_cleared: None, app_id: str) -> None:
    """``dedup verify``'s read of the output as the pipeline's principal: exact with the
    ACLs the table gives it, refused in one line naming the group ACL without it."""
    from sinks import KafkaDeniedError
    from sinks.verify import verify_topic

    topic = _output_topic(locked_kafka, app_id)
    _set_acls(locked_kafka, _acls(app_id))
    _run(_config(locked_kafka, app_id), batches=1)
    verify = [acl for acl in _acls(app_id) if "dedup verify" in acl.part]
    assert {acl.resource_type for acl in verify} == {"TOPIC", "GROUP"}
    _set_acls(locked_kafka, verify)
    client = locked_kafka.user_config(PIPELINE_USER)
    report = verify_topic(locked_kafka.bootstrap_servers, topic, _expected(1),
                          client_config=client)
    assert report.ok, report.summary()
    [group] = [acl for acl in verify if acl.resource_type == "GROUP"]
    _set_acls(locked_kafka, [acl for acl in verify if acl != group])
    with pytest.raises(KafkaDeniedError) as failure:
        verify_topic(locked_kafka.bootstrap_servers, topic, _expected(1), client_config=client)
    message = str(failure.value)
    assert "\n" not in message and group.resource in message and "DESCRIBE" in message, message


@pytest.mark.parametrize("with_sink", [False, True], ids=["verify-alone", "with-the-sinks"])
def test_verify_without_read_of_the_output_is_refused_naming_it(
        locked_kafka: KafkaBroker, acls_cleared: None, app_id: str, with_sink: bool) -> None:
    """``dedup verify`` without READ on the output: refused in one line naming it, never
    a report that counts every record lost. Alone, the principal may not even see the
    topic (READ implies DESCRIBE); with the sink's ACLs it sees it (WRITE implies
    DESCRIBE) and is refused the fetch."""
    from sinks import KafkaDeniedError
    from sinks.verify import verify_topic

    topic = _output_topic(locked_kafka, app_id)
    _set_acls(locked_kafka, _acls(app_id))
    _run(_config(locked_kafka, app_id), batches=1)
    [read] = [acl for acl in _acls(app_id) if acl.name == topic and acl.operation == "READ"]
    held = _acls(app_id) if with_sink else [acl for acl in _acls(app_id)
                                             if "dedup verify" in acl.part]
    _set_acls(locked_kafka, [acl for acl in held if acl != read])
    started = time.monotonic()
    with pytest.raises(KafkaDeniedError) as failure:
        verify_topic(locked_kafka.bootstrap_servers, topic, _expected(1),
                     client_config=locked_kafka.user_config(PIPELINE_USER))
    message = str(failure.value)
    assert time.monotonic() - started < FAIL_WITHIN_S
    assert "\n" not in message and f"READ on topic '{topic}'" in message, message


def test_txn_list_and_abort_need_nothing_beyond_the_sinks_acls(
        locked_kafka: KafkaBroker, acls_cleared: None, app_id: str) -> None:
    """``dedup txn list`` / ``abort`` as the pipeline's principal with the sink's ACLs:
    the marker groups' offsets are listed, the transactional ids re-initialised."""
    from sinks.admin import abort_transactions, list_transactions

    _output_topic(locked_kafka, app_id)
    _set_acls(locked_kafka, [acl for acl in _acls(app_id) if acl.part.startswith("sink")])
    _run(_config(locked_kafka, app_id), batches=2)
    client: dict[str, Any] = dict(locked_kafka.user_config(PIPELINE_USER))
    found = list_transactions(locked_kafka.bootstrap_servers, app_id,
                              marker_topic=f"{app_id}-markers", client_config=client)
    assert [(t.partition, t.query_id, t.next_batch) for t in found] == [
        (p, "query-1", 2) for p in range(PARTITIONS)]
    assert abort_transactions(locked_kafka.bootstrap_servers, app_id,
                              client_config=client) == [f"{app_id}.p{p}"
                                                        for p in range(PARTITIONS)]


def test_an_output_topic_it_may_not_write_is_refused_at_start_not_called_missing(
        locked_kafka: KafkaBroker, acls_cleared: None, app_id: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """Kafka hides a topic from a principal that may not describe it: the sink's start
    must not announce it as missing (or, with auto.create.topics.enable=false, refuse
    with "create it"), but name the WRITE to grant."""
    from sinks import KafkaDeniedError
    from sinks.admin import prepare

    topic = _output_topic(locked_kafka, app_id)
    _set_acls(locked_kafka, [acl for acl in _acls(app_id)
                             if not (acl.name == topic and acl.operation in {"WRITE", "READ"})])
    with caplog.at_level(logging.WARNING), pytest.raises(KafkaDeniedError) as failure:
        prepare(_config(locked_kafka, app_id))
    assert f"WRITE on topic '{topic}'" in str(failure.value), str(failure.value)
    assert not any("does not exist" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
