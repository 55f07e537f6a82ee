"""The Kafka ACLs a pipeline's principal needs on a broker with an authorizer.

One definition: ``docs/operations.md`` ("Kafka ACLs") lists the same
permissions (a unit test compares them), the ACL tests grant exactly these, and
the sink's authorization errors point at them. Each entry is one ACL: Kafka
lets READ and WRITE imply DESCRIBE of the same resource, so DESCRIBE is listed
only where nothing more is needed.

Found by reading every Kafka call of each part:

* the sink's start (driver, :func:`sinks.admin.prepare`): DescribeConfigs of the
  broker (``transaction.max.timeout.ms``, ``offsets.retention.minutes`` and the
  settings a topic created on first write gets), the topic list, and the marker
  topic's creation when it does not exist;
* each partition write (:mod:`sinks.transactions`): the transactional producer
  (``<identity>.p<n>``: InitProducerId, AddPartitions, AddOffsets, EndTxn), the
  produce to the output topic, the marker offset committed inside the
  transaction (TxnOffsetCommit: READ on the group ``<identity>.sink.p<n>`` and on
  the marker topic) and read back (OffsetFetch), DescribeConfigs of the output
  topic (its ``max.message.bytes``; without it the sink warns and the broker
  still enforces the limit), and, with strong productions after a batch marker
  expired, a ``read_committed`` read of the output (group ``<identity>.sink.check-*``);
* ``dedup txn list`` / ``abort``: ListGroups and OffsetFetch of the marker groups,
  InitProducerId of the transactional ids: covered by the sink's ACLs;
* ``dedup verify``: a ``read_committed`` read of the output topic, by a consumer
  whose group (``dedup-reader-*``) is only looked up, never joined;
* Spark's Kafka source: Metadata, ListOffsets and Fetch of the source topics
  (``sources.kafka.topic_ids`` describes them). Its consumers have a group
  (``spark-kafka-source-*``) but are assigned their partitions and commit nothing,
  so the Java client never looks the group up: no group ACL (measured: ``dedup run``
  is exact without one, ``tests/integration/security/test_kafka_acls_run.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sinks.config import DEFAULT_MARKER_TOPIC, SinkConfig, sink_identity
from sinks.exceptions import KafkaDeniedError

CLUSTER = "kafka-cluster"
"""The one name of the CLUSTER resource."""

_ACL_FLAGS = {"TOPIC": "--topic", "GROUP": "--group",
              "TRANSACTIONAL_ID": "--transactional-id", "CLUSTER": "--cluster"}
_OPERATION_WORDS = {"READ": "Read", "WRITE": "Write", "CREATE": "Create",
                    "DESCRIBE": "Describe", "DESCRIBE_CONFIGS": "DescribeConfigs"}


@dataclass(frozen=True)
class KafkaAcl:
    """One ALLOW ACL of the pipeline's principal.

    Parameters
    ----------
    resource_type:
        ``TOPIC``, ``GROUP``, ``TRANSACTIONAL_ID`` or ``CLUSTER``.
    name:
        The resource name (``kafka-cluster`` for the cluster), or its prefix.
    pattern:
        ``LITERAL`` or ``PREFIXED``.
    operation:
        ``READ``, ``WRITE``, ``CREATE``, ``DESCRIBE`` or ``DESCRIBE_CONFIGS``.
    part:
        Which part needs it (``sink``, ``sink start``, ``dedup verify``, ``source``).
    when:
        ``always`` (every run of the part fails without it) or the case that needs it.
    """

    resource_type: str
    name: str
    pattern: str
    operation: str
    part: str
    when: str = "always"

    @property
    def resource(self) -> str:
        """The resource in words, as an error names it (``topic 'out'``)."""
        kind = self.resource_type.lower().replace("_", " ")
        if self.resource_type == "CLUSTER":
            return "the cluster"
        prefix = "prefix " if self.pattern == "PREFIXED" else ""
        return f"{kind} {prefix}'{self.name}'"

    def command(self, principal: str = "User:<principal>",
                bootstrap: str = "<bootstrap>") -> str:
        """The ``kafka-acls.sh`` line that grants it (pure)."""
        resource = (_ACL_FLAGS[self.resource_type] if self.resource_type == "CLUSTER"
                    else f"{_ACL_FLAGS[self.resource_type]} '{self.name}'")
        pattern = (" --resource-pattern-type prefixed" if self.pattern == "PREFIXED" else "")
        return (f"kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal "
                f"{principal} --operation {_OPERATION_WORDS[self.operation]} "
                f"{resource}{pattern}")

    def binding(self, principal: str) -> Any:
        """The confluent-kafka ``AclBinding`` that grants it to ``principal`` (pure)."""
        from confluent_kafka.admin import (
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePatternType,
            ResourceType,
        )

        kind = ResourceType.BROKER if self.resource_type == "CLUSTER" \
            else ResourceType[self.resource_type]
        return AclBinding(kind, self.name, ResourcePatternType[self.pattern], principal, "*",
                          AclOperation[self.operation], AclPermissionType.ALLOW)


def required_acls(app_id: str, output_topic: str, marker_topic: str = DEFAULT_MARKER_TOPIC,
                  output_name: str = "", dead_letter_topic: str | None = None,
                  source_topics: Sequence[str] = ()) -> list[KafkaAcl]:
    """Every ACL the pipeline's principal needs (no super user, no wildcard).

    Pure and safe to repeat. Parameters are the sink's options (``app.id``,
    ``topic``, ``marker.topic``, ``output.name``, ``dead.letter.topic``) and, for a
    Kafka source, its topics.
    A part run without one of its ``always`` ACLs fails at once with an error that
    names the ACL (:func:`denied_message`).
    """
    identity = sink_identity(app_id, output_name)
    acls = [
        KafkaAcl("CLUSTER", CLUSTER, "LITERAL", "DESCRIBE_CONFIGS", "sink start"),
        KafkaAcl("TOPIC", marker_topic, "LITERAL", "CREATE", "sink start",
                 "until the marker topic exists"),
        KafkaAcl("TOPIC", marker_topic, "LITERAL", "READ", "sink"),
        KafkaAcl("GROUP", f"{identity}.sink.", "PREFIXED", "READ", "sink"),
        KafkaAcl("TRANSACTIONAL_ID", f"{identity}.p", "PREFIXED", "WRITE", "sink"),
    ]
    for topic in [output_topic, *([dead_letter_topic] if dead_letter_topic else [])]:
        acls += [
            KafkaAcl("TOPIC", topic, "LITERAL", "WRITE", "sink"),
            KafkaAcl("TOPIC", topic, "LITERAL", "DESCRIBE_CONFIGS", "sink",
                     "to route records above max.message.bytes (else a warning)"),
        ]
    acls.append(KafkaAcl("TOPIC", output_topic, "LITERAL", "READ", "dedup verify, sink",
                         "the sink: only to look for a batch whose marker expired"))
    # librdkafka wants a group.id of every consumer, and looks its coordinator up
    # (FindCoordinator: DESCRIBE on the group) even when it only reads, assigned.
    acls.append(KafkaAcl("GROUP", "dedup-reader-", "PREFIXED", "DESCRIBE", "dedup verify"))
    for topic in source_topics:
        acls.append(KafkaAcl("TOPIC", topic, "LITERAL", "READ", "source"))
    return acls


AUTHORIZATION_ERRORS = frozenset({"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
                                  "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                                  "CLUSTER_AUTHORIZATION_FAILED"})
"""The names of Kafka's authorization errors, as librdkafka reports them."""


def authorization_error(error: Any) -> str | None:
    """The name of the authorization error ``error`` (a ``KafkaError``, a
    ``KafkaException`` or an exception caused by one) is, else None. Pure."""
    from confluent_kafka import KafkaError, KafkaException

    seen = 0
    while isinstance(error, BaseException) and not isinstance(error, KafkaException) \
            and seen < 5:  # a wrapper (KafkaUnavailableError) of the client's exception
        error, seen = error.__cause__, seen + 1
    if isinstance(error, KafkaException) and error.args:
        error = error.args[0]
    if isinstance(error, KafkaError) and error.name() in AUTHORIZATION_ERRORS:
        return str(error.name())
    return None


def denied(what: str, error_name: str, needed: Sequence[KafkaAcl]) -> KafkaDeniedError:
    """The one-line error of a refused call: what was refused and the ACLs to grant. Pure."""
    grants = " and ".join(f"{acl.operation} on {acl.resource} ({acl.pattern})"
                          for acl in needed) or "the ACLs listed there"
    return KafkaDeniedError(
        f"Kafka denied {what} ({error_name}): grant the pipeline's principal {grants} "
        "(docs/operations.md, Kafka ACLs)")


def sink_acls(config: SinkConfig) -> list[KafkaAcl]:
    """:func:`required_acls` of the sink ``config`` (its own ACLs only). Pure."""
    return [acl for acl in required_acls(config.app_id, config.topic or "<topic column>",
                                         config.marker_topic, config.output_name,
                                         config.dead_letter_topic)
            if acl.part.startswith("sink")]


def sink_needs(config: SinkConfig, error_name: str, stage: str,
               topics: Sequence[str] = ()) -> list[KafkaAcl]:
    """The sink's ACLs an authorization error ``error_name`` met at ``stage`` points at.

    ``stage``: ``marker`` (the marker read, or its commit inside the transaction),
    ``produce`` (the records to ``topics``), ``read`` (a read of ``topics``),
    ``start`` (the driver's checks, the marker topic's creation). Pure.
    """
    acls = sink_acls(config)

    def find(resource_type: str, operation: str, name: str | None = None) -> list[KafkaAcl]:
        return [acl for acl in acls if acl.resource_type == resource_type
                and acl.operation == operation and (name is None or acl.name == name)]

    if error_name == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED":
        return find("TRANSACTIONAL_ID", "WRITE")
    if error_name == "GROUP_AUTHORIZATION_FAILED":
        return find("GROUP", "READ")
    if error_name == "CLUSTER_AUTHORIZATION_FAILED":
        return find("CLUSTER", "DESCRIBE_CONFIGS") if stage == "start" else []
    if stage == "start":
        return find("TOPIC", "CREATE", config.marker_topic)
    if stage in {"produce", "read"}:
        operation = "WRITE" if stage == "produce" else "READ"
        return [KafkaAcl("TOPIC", topic, "LITERAL", operation, "sink") for topic in topics]
    return find("TOPIC", "READ", config.marker_topic)
