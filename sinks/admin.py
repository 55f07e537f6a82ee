"""Driver-side checks and operator tools: broker limits, marker topic, lingering transactions.

confluent-kafka 2.16 has no ``list_transactions``/``describe_transactions``
admin calls, so the transactional ids of an app are found from the sink's
marker consumer groups (``<app_id>.sink.p<n>``, or ``<app_id>/<output>.sink.p<n>``
for a named output, created by the first commit of each partition) plus,
optionally, a probe of partitions ``0..n-1``.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

from dedup.config import validate_app_id
from sinks.acls import authorization_error, denied, required_acls, sink_needs
from sinks.config import SinkConfig, sink_identity
from sinks.exceptions import KafkaUnavailableError, SinkConfigError, UnsafeSinkSettingError
from sinks.kafka_io import admin_client, ensure_topic

TIMEOUT_S = 30.0
log = logging.getLogger(__name__)


def broker_configs(client_config: dict[str, Any], names: tuple[str, ...]) -> dict[str, str]:
    """The values of broker settings ``names`` (those the broker reports; one round trip).

    Read-only, safe to repeat. Raises :class:`~sinks.exceptions.KafkaDeniedError`
    (naming the ACL) when the principal may not describe the cluster's configs,
    :class:`~sinks.exceptions.KafkaUnavailableError` when Kafka cannot be reached.
    """
    admin = admin_client(client_config)
    try:
        brokers = sorted(admin.list_topics(timeout=TIMEOUT_S).brokers)
        if not brokers:
            return {}
        resource = ConfigResource(ResourceType.BROKER, str(brokers[0]))
        [future] = admin.describe_configs([resource]).values()
        entries = future.result(TIMEOUT_S)
    except KafkaException as exc:
        refused = authorization_error(exc)
        if refused is not None:
            # Not "unreachable": the broker answered, and every retry gets the same.
            [acl] = [a for a in required_acls("-", "-") if a.resource_type == "CLUSTER"]
            raise denied(f"DescribeConfigs of the broker's settings {', '.join(names)}",
                         refused, [acl]) from exc
        raise KafkaUnavailableError(
            f"could not read broker configs from {client_config.get('bootstrap.servers')}: "
            f"{exc}; check kafka.bootstrap.servers and that the broker is up"
        ) from exc
    return {name: str(entries[name].value) for name in names
            if name in entries and entries[name].value is not None}


def broker_transaction_max_timeout_ms(client_config: dict[str, Any]) -> int | None:
    """The broker's ``transaction.max.timeout.ms`` (``None`` when it cannot be read)."""
    value = broker_configs(client_config, ("transaction.max.timeout.ms",)).get(
        "transaction.max.timeout.ms")
    return int(value) if value is not None else None


def check_transaction_timeout(config: SinkConfig, broker_limit: str | None = None) -> None:
    """Refuse a ``transaction.timeout.ms`` above the broker's maximum.

    Contacts Kafka unless ``broker_limit`` (already read) is given; safe to repeat.
    """
    limit = (int(broker_limit) if broker_limit is not None
             else broker_transaction_max_timeout_ms(config.client_config()))
    if limit is not None and config.transaction_timeout_ms > limit:
        raise UnsafeSinkSettingError(
            f"kafka.transaction.timeout.ms={config.transaction_timeout_ms} is above the "
            f"broker's transaction.max.timeout.ms={limit}: init_transactions would fail. "
            f"Lower kafka.transaction.timeout.ms to <= {limit} or raise "
            "transaction.max.timeout.ms on the brokers"
        )


def warn_marker_retention(config: SinkConfig, retention_minutes: str | None) -> None:
    """Warn when the batch markers live only in Kafka, which deletes them after
    ``offsets.retention.minutes`` of no commits: a batch committed to Kafka but not
    to Spark's log, re-run after that long a stop, would be produced again."""
    if (config.strong_productions and config.redis is not None) or retention_minutes is None:
        return
    days = int(retention_minutes) / 1440
    # The Redis copy of the markers lives beside the checkpoints, so it needs both.
    if config.redis is None:
        why, fix = "without redis.url", "Set options redis.url and strong.productions=true"
    else:
        why, fix = "with strong.productions=false", "Set option strong.productions=true"
    log.warning(
        "exactly_once_kafka %s: %s the batch markers are kept only as Kafka "
        "consumer-group offsets, which the broker deletes after offsets.retention.minutes="
        "%s (%.1f days) without commits; a query stopped longer than that right after a "
        "Kafka commit would write its last batch again. %s, or keep stops shorter than "
        "offsets.retention.minutes", config.identity, why, retention_minutes, days, fix)


# Broker settings that say what a topic created on first write gets.
AUTO_CREATE_SETTINGS = ("auto.create.topics.enable", "num.partitions",
                        "default.replication.factor", "message.max.bytes")

# (bootstrap servers, topic) already announced as created on first write
_ANNOUNCED: set[tuple[str, str]] = set()


def check_output_topics(config: SinkConfig, settings: dict[str, str],
                        existing: set[str]) -> None:
    """An output topic (``topic``, ``dead.letter.topic``) not in ``existing``: refused
    when the broker does not create topics, else announced once per process in one
    line (the broker creates it at the first write, with its defaults).

    ``settings``: the broker's :data:`AUTO_CREATE_SETTINGS` as read. Safe to repeat.

    Raises
    ------
    SinkConfigError
        A missing topic the broker will not create (one line: which, and the fix).
    """
    for option, topic in (("topic", config.topic), ("dead.letter.topic",
                                                     config.dead_letter_topic)):
        if not topic or topic in existing:
            continue
        if settings.get("auto.create.topics.enable", "true").lower() == "false":
            raise SinkConfigError(
                f"{option} {topic!r} does not exist on {config.bootstrap_servers} and the "
                "broker does not create topics (auto.create.topics.enable=false): create it "
                f"(kafka-topics.sh --create --topic {topic} --partitions <n>), then start "
                "the query again")
        key = (config.bootstrap_servers, topic)
        if key in _ANNOUNCED:
            continue
        _ANNOUNCED.add(key)
        log.warning(
            "%s %r does not exist yet: the broker creates it at the first write with its "
            "defaults (num.partitions=%s, default.replication.factor=%s, max.message.bytes="
            "%s); create it before the first run to choose others", option, topic,
            settings.get("num.partitions", "?"), settings.get("default.replication.factor", "?"),
            settings.get("message.max.bytes", "?"))


def existing_topics(config: SinkConfig) -> set[str]:
    """The names of the topics on the cluster (one metadata round trip, no topic is
    created by it)."""
    try:
        metadata = admin_client(config.client_config()).list_topics(timeout=TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaUnavailableError(
            f"could not list the topics of {config.bootstrap_servers}: {exc}; check "
            "kafka.bootstrap.servers and that the broker is up") from exc
    return set(metadata.topics)


def refuse_hidden_topics(config: SinkConfig, topics: list[str]) -> None:
    """Refuse an output topic the principal may not describe, before it is taken for a
    missing one (one DescribeTopics round trip; nothing when ``topics`` is empty).

    Kafka leaves a topic the principal may not describe out of the topic list, and
    answers TOPIC_AUTHORIZATION_FAILED whether it exists or not: the sink, which
    needs WRITE on it (WRITE implies DESCRIBE), names that ACL instead of announcing
    a topic the broker would create, or refusing one it "does not" have. Read-only,
    safe to repeat; raises :class:`~sinks.exceptions.KafkaDeniedError`.
    """
    if not topics:
        return
    from confluent_kafka import TopicCollection

    admin = admin_client(config.client_config())
    try:
        futures = admin.describe_topics(TopicCollection(topics), request_timeout=TIMEOUT_S)
        outcomes = []
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                outcomes.append((name, authorization_error(exc)))
    except KafkaException as exc:  # the call as a whole: left to the checks after it
        log.debug("could not describe topics %s: %s", topics, exc)
        return
    for name, refused in outcomes:
        if refused is not None:
            raise denied(f"a description of topic {name!r} (it is hidden from the "
                         "pipeline's principal)", refused,
                         sink_needs(config, refused, "produce", (name,)))


def prepare(config: SinkConfig) -> None:
    """Driver-side start checks: broker limit, marker topic exists, marker retention
    (a warning), output topics that do not exist yet (refused or announced). Safe to
    repeat. A missing ACL raises :class:`~sinks.exceptions.KafkaDeniedError` naming it
    (the cluster's DescribeConfigs: the marker retention read here guards exactness)."""
    settings = broker_configs(config.client_config(),
                              ("transaction.max.timeout.ms", "offsets.retention.minutes",
                               *AUTO_CREATE_SETTINGS))
    check_transaction_timeout(config, settings.get("transaction.max.timeout.ms"))
    if config.topic or config.dead_letter_topic:
        existing = existing_topics(config)
        refuse_hidden_topics(config, [t for t in (config.topic, config.dead_letter_topic)
                                      if t and t not in existing])
        check_output_topics(config, settings, existing)
    warn_marker_retention(config, settings.get("offsets.retention.minutes"))
    if (config.strong_productions and config.redis is not None
            and settings.get("offsets.retention.minutes") is not None):
        from sinks.checkpoint import CheckpointStore

        # The executors judge an old commit intent against it (sinks.transactions).
        CheckpointStore.for_config(config).set_marker_retention(
            int(settings["offsets.retention.minutes"]))
    try:
        ensure_topic(config.bootstrap_servers, config.marker_topic, partitions=1,
                     client_config={k: v for k, v in config.client_config().items()
                                    if k != "bootstrap.servers"})
    except KafkaUnavailableError as exc:
        refused = authorization_error(exc)
        if refused is None:
            raise
        raise denied(f"the creation of the marker topic {config.marker_topic!r}", refused,
                     sink_needs(config, refused, "start")) from exc


@dataclass(frozen=True)
class SinkTransaction:
    """A transactional id of an app and its last committed batch marker."""

    transactional_id: str
    partition: int
    query_id: str | None
    next_batch: int


def _client_config(bootstrap: str, client_config: dict[str, Any] | None) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, **(client_config or {})}


def list_transactions(bootstrap: str, app_id: str, probe_partitions: int = 0,
                      marker_topic: str = "__dedup_markers",
                      client_config: dict[str, Any] | None = None,
                      output_name: str = "") -> list[SinkTransaction]:
    """The sink's transactional ids of ``app_id`` (and ``output_name``, the option
    ``output.name``) with their last committed markers.

    Read-only, safe to repeat. Whether one of them holds an open transaction
    is not knowable with this client version; :func:`abort_transactions` is
    harmless for ids without one.
    """
    validate_app_id(app_id)
    identity = sink_identity(app_id, output_name)
    prefix = f"{identity}.sink.p"
    cfg = _client_config(bootstrap, client_config)
    admin = admin_client(cfg)
    try:
        groups = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaUnavailableError(f"could not list consumer groups on {bootstrap}: {exc}") \
            from exc
    partitions = {int(g.group_id[len(prefix):]) for g in groups.valid
                  if g.group_id.startswith(prefix) and g.group_id[len(prefix):].isdigit()}
    partitions |= set(range(probe_partitions))
    out = []
    for partition in sorted(partitions):
        qid, next_batch = None, -1
        offsets = admin.list_consumer_group_offsets(
            [_group_request(f"{prefix}{partition}", marker_topic)])
        try:
            for future in offsets.values():
                for tp in future.result(TIMEOUT_S).topic_partitions or []:
                    if tp.error is None and tp.offset >= 0:
                        qid, next_batch = tp.metadata, tp.offset
        except KafkaException:
            pass  # no committed marker for this partition yet
        out.append(SinkTransaction(f"{identity}.p{partition}", partition, qid, next_batch))
    return out


def _group_request(group: str, topic: str) -> Any:
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])


def abort_transactions(bootstrap: str, app_id: str, partitions: list[int] | None = None,
                       client_config: dict[str, Any] | None = None,
                       output_name: str = "") -> list[str]:
    """Abort any open transaction of the app's sink producers (of ``output_name``, the
    option ``output.name``); return the ids handled.

    For each partition (default: every one :func:`list_transactions` finds), a
    producer with that ``transactional.id`` calls ``init_transactions``: the
    broker aborts an open transaction and fences its owner. Run it only while
    the pipeline is stopped (a running writer would be fenced and retried).
    Safe to repeat.
    """
    validate_app_id(app_id)
    if partitions is None:
        partitions = [t.partition for t in list_transactions(bootstrap, app_id,
                                                             client_config=client_config,
                                                             output_name=output_name)]
    done = []
    for partition in partitions:
        txn_id = f"{sink_identity(app_id, output_name)}.p{partition}"
        producer = Producer({**_client_config(bootstrap, client_config),
                             "transactional.id": txn_id})
        try:
            producer.init_transactions(TIMEOUT_S)
        except KafkaException as exc:
            refused = authorization_error(exc)
            if refused is not None:
                raise denied(f"the abort of transactional id {txn_id!r}", refused, [
                    acl for acl in required_acls(app_id, "-", output_name=output_name)
                    if acl.resource_type == "TRANSACTIONAL_ID"]) from exc
            raise KafkaUnavailableError(f"could not abort transactions of {txn_id}: {exc}") \
                from exc
        finally:
            # a producer the broker refused is fatal: its flush raises that again,
            # which must not hide the error above
            with contextlib.suppress(KafkaException):
                producer.flush(0)
        done.append(txn_id)
    return done
