"""The sink on a broker with an authorizer (StandardAuthorizer, no ACL means no access),
as a principal that is no super user and holds exactly the ACLs of
:func:`sinks.acls.required_acls` (docs/operations.md, "Kafka ACLs").

With all of them the ``read_committed`` output is exact.
The partition write path is driven directly (:func:`sinks.admin.prepare` on the
driver, :func:`sinks.transactions.write_partition` per partition, as each Spark
task of the sink runs it): no Spark query, to keep it fast.
"""

from __future__ import annotations

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


def _admin(broker: KafkaBroker) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap_servers, **broker.client_config})


def _set_acls(broker: KafkaBroker, acls: list[KafkaAcl]) -> None:
    """The pipeline's principal holds exactly ``acls`` afterwards (applied on the broker)."""
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
    anything = AclBindingFilter(ResourceType.ANY, any_name, ResourcePatternType.ANY, PRINCIPAL,
                                any_name, AclOperation.ANY, AclPermissionType.ANY)
    for future in admin.delete_acls([anything]).values():
        future.result(30)
    if acls:
        for future in admin.create_acls(
                [acl.binding(PRINCIPAL) for acl in acls]).values():
            future.result(30)
    # The authorizer applies ACLs from the metadata log, after the call returns.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        held = admin.describe_acls(anything).result(30)
        if len(held) == len(acls):
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
