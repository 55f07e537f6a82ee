"""Options of the exactly-once Kafka sink, parsed once on the driver.

:meth:`SinkConfig.from_options` takes the same option names as Spark's own
Kafka sink (``kafka.bootstrap.servers``, ``topic``, ``kafka.*`` passed to the
producer) plus ``app.id`` and the toolkit's own switches, all in Spark's dotted
style, checks them, and returns a frozen, picklable :class:`SinkConfig` that is shipped to the
executors. Secrets (``kafka.sasl.password`` and friends, a Redis password)
never appear in ``repr`` or in error messages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dedup.config import (
    DEFAULT_LEASE_SECONDS,
    FALSE_WORDS,
    FailPointConfig,
    RedisConfig,
    parse_bool,
    parse_int,
    parse_seconds,
    redact_url,
    validate_app_id,
)
from dedup.constants import DEFAULT_ID_COLUMN
from dedup.exceptions import ConfigError
from sinks.exceptions import SinkConfigError, UnsafeSinkSettingError

DATA_SOURCE_NAME = "exactly_once_kafka"
DEFAULT_MARKER_TOPIC = "__dedup_markers"
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
"""Kafka's ``transaction.timeout.ms`` of the sink's producers (Kafka's unit, ms)."""
DEFAULT_MAX_BATCH_DURATION_SECONDS = 60.0
DEFAULT_PRODUCER_MAX_MESSAGE_BYTES = 1_000_000
"""librdkafka's default ``message.max.bytes``."""

_SECRET_WORDS = ("password", "secret", "token", "oauthbearer.config", "ssl.key.pem",
                 "ssl.keystore", "sasl.jaas")
# Java client settings that Spark's sink accepts but librdkafka does not know;
# the sink always writes bytes, so they have no meaning here.
_JAVA_ONLY = {"key.serializer", "value.serializer", "key.deserializer", "value.deserializer"}
# Like an app id; no '/', which separates the two in every name (app ids cannot
# contain it, so "<app>/<output>" never equals another app id's names).
_OUTPUT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

def is_secret(name: str) -> bool:
    """Whether a client property holds a secret that must never be logged."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def redact_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config with secret values replaced by ``***``."""
    return {k: ("***" if is_secret(k) else v) for k, v in config.items()}


def normalize_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options with lower-case names (option names are case-insensitive, as Spark's).

    Pure and safe to repeat.
    """
    return {str(k).lower(): v for k, v in options.items()}


# The options' readers: the core's parsers (dedup.config), under the option's name.
def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    return default if raw is None else parse_bool(f"option {name}", raw, SinkConfigError)


def _int(options: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = options.get(name)
    return default if raw is None else parse_int(f"option {name}", raw, minimum,
                                                 SinkConfigError)


def _seconds(options: Mapping[str, str], name: str, default: float) -> float:
    raw = options.get(name)
    return default if raw is None else parse_seconds(f"option {name}", raw,
                                                     error=SinkConfigError)


def sink_identity(app_id: str, output_name: str = "") -> str:
    """The name every key of one output derives from: ``<app_id>`` or ``<app_id>/<output>``.

    An empty output name keeps the original key formats, so pipelines that
    predate ``output.name`` keep their markers and checkpoints.
    """
    return f"{app_id}/{output_name}" if output_name else app_id


CLIENT_SETTING_PREFIXES = ("security.", "sasl.", "ssl.", "client.", "socket.", "broker.")
"""librdkafka settings of the sink's producer that its admin clients and consumers share
(how to reach and authenticate to the brokers)."""


def client_settings(producer_config: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``producer_config`` (names without ``kafka.``) every client of the
    same brokers needs: security, TLS, SASL and socket settings (secrets: never log)."""
    return {k: v for k, v in producer_config.items() if k.startswith(CLIENT_SETTING_PREFIXES)}


@dataclass(frozen=True)
class SinkConfig:
    """Everything a sink partition writer needs; picklable and validated.

    Parameters
    ----------
    app_id:
        Option ``app.id``: stable, unique pipeline name. Transactional ids
        (``<app_id>.p<partition>``), marker groups and checkpoint keys derive from it.
    bootstrap_servers:
        ``kafka.bootstrap.servers``.
    topic:
        Default output topic (option ``topic``); ``None`` requires a ``topic`` column.
    producer_config:
        The ``kafka.*`` options without the prefix, passed to the producer.
    redis:
        Options ``redis.url`` and ``redis.require.persistence``: the checkpoint
        store; required with strong productions.
    strong_productions:
        Option ``strong.productions``: checkpoint each partition's rows before
        emitting them, so a retried task replays the first attempt instead of
        recomputing it. Turn off only when everything between the source and the
        sink is deterministic.
    record_id_column:
        Option ``record.id.column``: column with the record ID. When the input
        has no such column, the writer derives a 128-bit ID from (topic, key, value).
    dead_letter_topic:
        Option ``dead.letter.topic``: where records that cannot be written (null
        record ID, no topic) go, inside the same transaction. ``None``: such a
        record fails the task.
    marker_topic:
        Option ``marker.topic``: one-partition topic whose offsets, committed in
        each transaction for the group ``<app_id>.sink.p<partition>``, are the
        batch markers.
    max_batch_duration_seconds:
        Option ``max.batch.duration.seconds`` (fractions allowed): the longest
        one partition write may take; the transaction timeout
        (``kafka.transaction.timeout.ms``, Kafka's milliseconds) must not be
        shorter.
    transaction_retries:
        Option ``transaction.retries``: attempts of one partition after abortable
        Kafka errors.
    fail_points:
        Option ``fail.points.directory``: :class:`~dedup.config.FailPointConfig`,
        the folder of armed fail-points (tests and chaos runs only; see
        :mod:`dedup.failpoints`), as ``DedupConfig.fail_points``.
    output_name:
        Option ``output.name``: names one of several outputs of an app id (for
        example two sinks in one ``foreachBatch``). When set, transactional ids
        (``<app_id>/<output>.p<partition>``), marker groups and checkpoint keys
        include it, so the outputs never share markers. Empty (the default)
        keeps the key formats of a single output.
    lease_seconds:
        Option ``lease.seconds`` (fractions allowed; the default is
        ``DedupConfig.lease_seconds``'s): the output's lease (strong
        productions only, kept in the checkpoint Redis). Every partition write
        that produces takes it for its streaming query; another query id is
        refused (:class:`~sinks.OutputNameInUseError`) until it lapses this
        many seconds (Redis's clock) after the holder's last write, or the
        holder's query terminates. 0 turns it off (only for queries that are
        one pipeline).
    timings_path:
        Option ``timings.path``: a file on the driver's machine to which each
        committed batch appends the phase timings of its partition writes
        (JSON lines, :func:`sinks.read_phase_timings`); for profiling. Unset:
        nothing is written.
    """

    app_id: str
    bootstrap_servers: str
    topic: str | None = None
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    redis: RedisConfig | None = None
    strong_productions: bool = True
    record_id_column: str = DEFAULT_ID_COLUMN
    dead_letter_topic: str | None = None
    marker_topic: str = DEFAULT_MARKER_TOPIC
    max_batch_duration_seconds: float = DEFAULT_MAX_BATCH_DURATION_SECONDS
    transaction_retries: int = 3
    fail_points: FailPointConfig = field(default_factory=FailPointConfig)
    output_name: str = ""
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    timings_path: str | None = None

    def __post_init__(self) -> None:
        try:
            validate_app_id(self.app_id)
        except ConfigError as exc:
            raise SinkConfigError(f"option app.id: {exc}") from exc
        if self.output_name and not _OUTPUT_NAME.fullmatch(self.output_name):
            raise SinkConfigError(
                f"option output.name={self.output_name!r} is invalid: use 1-100 letters, "
                "digits, '.', '_' or '-', starting with a letter or digit"
            )
        if not self.bootstrap_servers:
            raise SinkConfigError("option kafka.bootstrap.servers is required "
                                  "(host:port of the Kafka brokers)")
        if self.strong_productions and self.redis is None:
            raise SinkConfigError(
                "strong productions need a checkpoint store: set option redis.url "
                "(redis://host:port/db), or strong.productions=false if everything "
                "upstream of the sink is deterministic"
            )
        if self.transaction_retries < 1:
            raise SinkConfigError("option transaction.retries must be >= 1, not "
                                  f"{self.transaction_retries}")
        if not self.lease_seconds >= 0:
            raise SinkConfigError(f"option lease.seconds must be >= 0, not {self.lease_seconds!r}")
        config = dict(self.producer_config)
        object.__setattr__(self, "producer_config", config)
        if "transactional.id" in config:
            raise UnsafeSinkSettingError(
                "option kafka.transactional.id must not be set: the sink derives one per "
                f"(app.id, output.name, partition) as '{self.identity}.p<partition>'; "
                "remove the option"
            )
        if str(config.get("enable.idempotence", "true")).lower() in FALSE_WORDS:
            raise UnsafeSinkSettingError(
                "option kafka.enable.idempotence=false is refused: transactions need the "
                "idempotent producer; remove the option"
            )
        bad = sorted(_JAVA_ONLY & config.keys())
        if bad:
            raise SinkConfigError(
                f"options {', '.join('kafka.' + b for b in bad)} are Java client settings; "
                "this sink writes the key and value columns as bytes: remove them"
            )
        self.max_message_bytes  # noqa: B018 - parsed (and refused if not >= 1) here, once
        if not self.max_batch_duration_seconds > 0:
            raise SinkConfigError("option max.batch.duration.seconds must be > 0, not "
                                  f"{self.max_batch_duration_seconds!r}")
        if self.transaction_timeout_ms < self.max_batch_duration_seconds * 1000:
            raise UnsafeSinkSettingError(
                f"kafka.transaction.timeout.ms={self.transaction_timeout_ms} is shorter than "
                f"max.batch.duration.seconds={self.max_batch_duration_seconds:g} (the longest "
                "a partition write may take): a slow batch would be aborted by the broker. "
                "Raise kafka.transaction.timeout.ms (up to the broker's "
                "transaction.max.timeout.ms) or lower the trigger interval / "
                "maxOffsetsPerTrigger and max.batch.duration.seconds"
            )

    @property
    def transaction_timeout_ms(self) -> int:
        """The producer's ``transaction.timeout.ms`` (the sink's default when unset)."""
        raw = self.producer_config.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
        return parse_int("option kafka.transaction.timeout.ms", raw, 1, SinkConfigError)

    @property
    def max_message_bytes(self) -> int:
        """The producer's ``message.max.bytes`` (librdkafka's default when unset): the
        largest record it sends, to any topic."""
        raw = self.producer_config.get("message.max.bytes", DEFAULT_PRODUCER_MAX_MESSAGE_BYTES)
        return parse_int("option kafka.message.max.bytes", raw, 1, SinkConfigError)

    @property
    def compresses(self) -> bool:
        """Whether the producer compresses (``compression.type`` or ``compression.codec``
        set and not ``none``): a topic's ``max.message.bytes`` then bounds compressed
        batches, which only the broker measures."""
        codec = self.producer_config.get("compression.type",
                                         self.producer_config.get("compression.codec", "none"))
        return str(codec).strip().lower() not in ("", "none")

    @property
    def identity(self) -> str:
        """``<app_id>`` or ``<app_id>/<output.name>``: the stem of every name of this output."""
        return sink_identity(self.app_id, self.output_name)

    def transactional_id(self, partition: int) -> str:
        """``transactional.id`` of the producer of ``partition``."""
        return f"{self.identity}.p{partition}"

    def marker_group(self, partition: int) -> str:
        """Consumer group whose committed marker offset records the last batch of ``partition``."""
        return f"{self.identity}.sink.p{partition}"

    def client_config(self) -> dict[str, Any]:
        """Settings for admin clients and consumers: bootstrap plus security settings."""
        return {"bootstrap.servers": self.bootstrap_servers,
                **client_settings(self.producer_config)}

    def producer_settings(self, partition: int) -> dict[str, Any]:
        """The full producer config of ``partition`` (contains secrets: never log it)."""
        return {
            "linger.ms": 5,
            # librdkafka's default of 100 ms also delays the first connection to
            # each broker the bootstrap metadata names: a new producer (one per
            # partition and Python worker) then spends ~55 ms before its first
            # request, against ~15 ms with 10 ms (measured). Reconnects after a
            # failure still back off exponentially up to reconnect.backoff.max.ms.
            "reconnect.backoff.ms": 10,
            **dict(self.producer_config),
            "bootstrap.servers": self.bootstrap_servers,
            "transactional.id": self.transactional_id(partition),
            "enable.idempotence": True,
            "transaction.timeout.ms": self.transaction_timeout_ms,
        }

    def __repr__(self) -> str:
        redis = redact_url(self.redis.url) if self.redis else None
        return (
            f"SinkConfig(app_id={self.app_id!r}, output_name={self.output_name!r}, "
            f"bootstrap_servers={self.bootstrap_servers!r}, "
            f"topic={self.topic!r}, producer_config={redact_config(self.producer_config)!r}, "
            f"redis={redis!r}, strong_productions={self.strong_productions}, "
            f"record_id_column={self.record_id_column!r}, "
            f"dead_letter_topic={self.dead_letter_topic!r}, marker_topic={self.marker_topic!r})"
        )

    @classmethod
    def from_options(cls, options: Mapping[str, Any],
                     redis: RedisConfig | None = None) -> SinkConfig:
        """Parse Spark writer options (case-insensitive names) into a config.

        ``redis``, when given, is the checkpoint store instead of the options
        ``redis.url`` and ``redis.require.persistence`` (the caller checks that
        they agree). Raises :class:`SinkConfigError` naming the option and the
        fix. Pure: safe to repeat, contacts no service.
        """
        opts = normalize_options(options)
        producer = {k[len("kafka."):]: v for k, v in opts.items()
                    if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}
        redis_url = opts.get("redis.url")
        if redis is None and redis_url:
            try:
                redis = RedisConfig(
                    url=str(redis_url),
                    require_persistence=_bool(opts, "redis.require.persistence",
                                              RedisConfig.require_persistence),
                )
            except ConfigError as exc:
                raise SinkConfigError(f"option redis.url: {exc}") from exc
        return cls(
            app_id=opts.get("app.id", ""),
            bootstrap_servers=str(opts.get("kafka.bootstrap.servers", "")),
            topic=opts.get("topic") or None,
            producer_config=producer,
            redis=redis,
            strong_productions=_bool(opts, "strong.productions", True),
            record_id_column=str(opts.get("record.id.column") or DEFAULT_ID_COLUMN),
            dead_letter_topic=opts.get("dead.letter.topic") or None,
            marker_topic=str(opts.get("marker.topic") or DEFAULT_MARKER_TOPIC),
            max_batch_duration_seconds=_seconds(opts, "max.batch.duration.seconds",
                                                DEFAULT_MAX_BATCH_DURATION_SECONDS),
            transaction_retries=_int(opts, "transaction.retries", 3, minimum=1),
            fail_points=FailPointConfig(opts.get("fail.points.directory") or None),
            output_name=str(opts.get("output.name") or "").strip(),
            lease_seconds=_seconds(opts, "lease.seconds", DEFAULT_LEASE_SECONDS),
            timings_path=opts.get("timings.path") or None,
        )
