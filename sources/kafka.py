"""Read Kafka with Spark's connector, committed records only, with record IDs."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dedup.constants import DEFAULT_ID_COLUMN, RECORD_ID_HEADER
from dedup.ids import tag_kafka_topic_ids, with_record_id
from sources._ids import source_strategy
from sources.exceptions import SourceConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Options this helper owns; passing them through ``options`` would silently
# undo the guarantee (an uncommitted read sees aborted transactions).
_FORCED = {"kafka.isolation.level": "read_committed", "includeHeaders": "true"}
_DESCRIBE_TIMEOUT_S = 15.0
# What a broker reports for a topic that has no id (a release before topic ids).
_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
log = logging.getLogger(__name__)
_JAAS_FIELD = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def client_settings(options: Mapping[str, str]) -> dict[str, str] | None:
    """The librdkafka settings of a Python client that connects as Spark's Kafka source
    with ``options`` does (holds secrets: never log it); None when they cannot be told.

    Spark's source takes Java client settings (``kafka.security.protocol``,
    ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
    ``kafka.ssl.truststore.type=PEM`` with ``kafka.ssl.truststore.location``);
    this translates those a toolkit-side client (a reachability check, the input
    left to read) needs. A plaintext source gives ``{}``; a security setting with
    no librdkafka counterpart here (a JKS trust store, Kerberos) gives None, and
    the caller leaves such a check to Spark's own client.
    """
    java = {str(k)[len("kafka."):]: str(v) for k, v in options.items()
            if str(k).startswith("kafka.")}
    protocol = java.get("security.protocol", "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return {}
    out = {"security.protocol": protocol}
    if protocol.startswith("SASL"):
        mechanism = java.get("sasl.mechanism", "GSSAPI").upper()
        fields = {name: re.sub(r"\\(.)", r"\1", value)  # JAAS escapes a quote as \"
                  for name, value in _JAAS_FIELD.findall(java.get("sasl.jaas.config", ""))}
        if mechanism not in {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} or \
                set(fields) != {"username", "password"}:
            return None
        out.update({"sasl.mechanism": mechanism, "sasl.username": fields["username"],
                    "sasl.password": fields["password"]})
    if protocol.endswith("SSL"):
        store_type = java.get("ssl.truststore.type", "").upper()
        if "ssl.truststore.location" in java:
            if store_type != "PEM":
                return None
            out["ssl.ca.location"] = java["ssl.truststore.location"]
        elif "ssl.truststore.certificates" in java:
            out["ssl.ca.pem"] = java["ssl.truststore.certificates"]
        if java.get("ssl.endpoint.identification.algorithm", "https") == "":
            out["ssl.endpoint.identification.algorithm"] = "none"
    return out


def read_kafka(
    spark: SparkSession,
    bootstrap_servers: str,
    topics: str | Sequence[str],
    id_strategy: str | None = "kafka",
    *,
    id_column: str = DEFAULT_ID_COLUMN,
    key_column: str | None = None,
    columns: Sequence[str] | None = None,
    header: str = RECORD_ID_HEADER,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """A streaming DataFrame over ``topics`` with a record ID column.

    Always reads with ``kafka.isolation.level=read_committed`` (records of
    aborted or open transactions are never seen) and ``includeHeaders=true``.

    Parameters
    ----------
    spark:
        Session with Spark's Kafka connector on its classpath
        (:func:`dedup.local.local_spark_session` puts it there).
    bootstrap_servers:
        ``host:port[,host:port]`` of the cluster.
    topics:
        One topic, a comma-separated list or a sequence of topics.
    id_strategy:
        A strategy of :func:`dedup.with_record_id`: ``kafka``
        (topic/partition/offset: catches replays only), ``key`` (the record
        key), ``header`` (``header``, by default our sink's
        ``dedup-record-id``), ``column`` (``key_column``) or ``hash`` (of
        ``columns``, all when None); or ``"none"`` / ``None``: no ID column.
    id_column:
        Name of the ID column added.
    starting_offsets, max_offsets_per_trigger:
        Spark's ``startingOffsets`` / ``maxOffsetsPerTrigger``.
    options:
        Extra connector options (``kafka.security.protocol``, ...).

    Returns
    -------
    DataFrame
        Columns ``key``, ``value`` (binary), ``topic``, ``partition``,
        ``offset``, ``timestamp``, ``timestampType``, ``headers`` and ``id_column``
        (none with no strategy).
        Building it asks the cluster for the topics' ids (strategy ``kafka`` only,
        :func:`topic_ids`); the query fails at start if Kafka is down.

    Raises
    ------
    SourceConfigError
        Unknown strategy, missing topic, or an option that conflicts with
        read_committed.
    """
    strategy = source_strategy(id_strategy, key_column)
    names = [topics] if isinstance(topics, str) else list(topics)
    subscribe = ",".join(t.strip() for name in names for t in name.split(",") if t.strip())
    if not subscribe:
        raise SourceConfigError("read_kafka needs at least one topic")
    if not bootstrap_servers:
        raise SourceConfigError("read_kafka needs bootstrap_servers (host:port)")
    extra = dict(options or {})
    for key, value in _FORCED.items():
        if key in extra and str(extra[key]).lower() != value:
            raise SourceConfigError(
                f"read_kafka always uses {key}={value}; remove {key}={extra[key]!r} from options"
            )
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", subscribe)
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "true")
        .options(**extra)
        .options(**_FORCED)
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(int(max_offsets_per_trigger)))
    df = reader.load()
    if strategy is None:
        return df
    df = with_record_id(df, strategy, columns=columns, column=key_column,
                        output_column=id_column, header=header)
    if strategy == "kafka":
        known = topic_ids(bootstrap_servers, subscribe.split(","), extra)
        if known:
            df = tag_kafka_topic_ids(df, id_column, known)
    return df


def topic_ids(bootstrap_servers: str, topics: Sequence[str],
              options: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Kafka topic id of each of ``topics`` that exists, as a client with the
    source's ``options`` reads it (one metadata round trip). Safe to repeat.

    Best effort: a topic not created yet is left out (Spark waits for it), and when
    the cluster cannot be asked (unreachable, a security setting with no Python
    client counterpart, a broker without topic ids) the result is ``{}`` with a
    warning, and the check that needs it (a topic replaced under coordinate IDs,
    :func:`dedup.ids.tag_kafka_topic_ids`) is left undone for this start.
    """
    from confluent_kafka import KafkaError, KafkaException, TopicCollection
    from confluent_kafka.admin import AdminClient

    settings = client_settings(options or {})
    if settings is None:
        log.warning("read_kafka: the source's security settings have no Python client "
                    "counterpart here, so a topic replaced under coordinate IDs is not "
                    "detected at this start")
        return {}
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **settings})
    found: dict[str, str] = {}
    try:
        futures = admin.describe_topics(TopicCollection(list(topics)),
                                        request_timeout=_DESCRIBE_TIMEOUT_S)
    except KafkaException as exc:
        log.warning("read_kafka: cannot read the topic ids of %s (%s): a topic replaced "
                    "under coordinate IDs is not detected at this start", topics, exc)
        return {}
    for name, future in futures.items():
        try:
            description = future.result()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() in (
                    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                continue  # not created yet: Spark waits for it, nothing claimed under it
            log.warning("read_kafka: cannot read the topic id of %r (%s): a topic "
                        "replaced under coordinate IDs is not detected at this start",
                        name, exc)
            continue
        topic_id = str(description.topic_id or "")
        if topic_id and topic_id != _NO_TOPIC_ID:
            found[name] = topic_id
    return found
