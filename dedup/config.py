"""Configuration of the dedup operator, as frozen dataclasses.

Every value is checked once, in ``__post_init__``, so a bad setting fails on
the driver when the pipeline is built, not later on an executor. All classes
are plain picklable values: they are shipped to Spark's Python workers.
Secrets (a Redis password in the URL) are never shown by ``repr``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from dedup.constants import DEFAULT_ID_COLUMN
from dedup.exceptions import ConfigError
from dedup.redis_nodes import CLUSTER_SCHEMES

APP_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
MAX_SHARDS = 4096
DEFAULT_LEASE_SECONDS = 60.0
"""The app id's lease (``DedupConfig.lease_seconds``) and the sink output's
(option ``lease.seconds``), in seconds."""
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})
"""What :func:`parse_bool` reads as true and as false (any case)."""


# The one parser of settings given as text (the sink's Spark options): every
# duration in seconds, every name in the words of the config fields it sets.
def parse_bool(name: str, raw: object, error: type[ConfigError] = ConfigError) -> bool:
    """``raw`` (true/false, 1/0, yes/no, on/off, any case; or a bool) as a boolean.

    Pure. Raises ``error`` (a :class:`ConfigError`) naming ``name`` and the
    accepted values.
    """
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise error(f"{name}={raw!r} must be true or false")


def parse_int(name: str, raw: object, minimum: int = 0,
              error: type[ConfigError] = ConfigError) -> int:
    """``raw`` (an integer or its text) as an integer of at least ``minimum``.

    Pure. Raises ``error`` naming ``name`` when it is no integer or too small.
    """
    try:
        if isinstance(raw, (bool, float)):
            raise ValueError(raw)
        value = int(str(raw).strip())
    except ValueError as exc:
        raise error(f"{name}={raw!r} must be an integer") from exc
    if value < minimum:
        raise error(f"{name} must be >= {minimum}, not {value}")
    return value


def parse_seconds(name: str, raw: object, minimum: float = 0.0,
                  error: type[ConfigError] = ConfigError) -> float:
    """``raw`` (a number of seconds or its text, fractions allowed) as seconds, at least
    ``minimum``. Pure. Raises ``error`` naming ``name`` when it is no finite number or
    too small."""
    try:
        if isinstance(raw, bool):
            raise ValueError(raw)
        value = float(str(raw).strip())
    except ValueError as exc:
        raise error(f"{name}={raw!r} must be a number of seconds") from exc
    if not math.isfinite(value) or value < minimum:
        raise error(f"{name} must be a number of seconds >= {minimum:g}, not {raw!r}")
    return value


def validate_app_id(app_id: object) -> str:
    """Return ``app_id`` if it is a valid app id, else raise :class:`ConfigError`."""
    if not isinstance(app_id, str) or not app_id:
        raise ConfigError(
            "app_id is required: a stable name for this pipeline, unique among pipelines "
            "(every Redis key and Kafka transactional id is derived from it)"
        )
    # fullmatch: the pattern's $ would let a trailing newline through
    if not APP_ID_PATTERN.fullmatch(app_id):
        raise ConfigError(
            f"app_id {shown(app_id, 120)} is invalid: use 1-100 characters of letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return app_id


_PASSWORD_QUERY = re.compile(r"(?i)(password=)[^&#]*")


def redact_url(url: str) -> str:
    """``redis://user:secret@host`` -> ``redis://user:***@host``; also a ``password=``
    query argument, and a malformed URL's user info (a missing ``//``, a ``/`` or ``[``
    in the password): everything before its last ``@`` after the first ``:`` of the
    user info is taken for a password, as a message must never show one."""
    text = _PASSWORD_QUERY.sub(r"\1***", str(url))
    head, at, tail = text.rpartition("@")
    if not at:
        return text
    scheme, separator, userinfo = head.rpartition("://")
    user, colon, _ = userinfo.partition(":")
    if not colon:  # a user name only (redis://user@host): no secret
        return text
    return f"{scheme}{separator}{user}:***@{tail}"


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for a one-line message: URLs redacted, at most ``limit`` characters
    (a 5,000-character value would bury the message)."""
    text = repr(redact_url(value)) if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else f"{text[:limit - 5]}...{text[-1]}"


def check_number(name: str, value: object, integer: bool = False,
                 error: type[ConfigError] = ConfigError) -> None:
    """Refuse a value of a numeric setting that is no number (a string, None, a bool),
    or not finite: the range checks that follow compare it, and a comparison of the wrong
    type is a TypeError, of NaN always false."""
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if (isinstance(value, bool) or not isinstance(value, kinds)
            or (isinstance(value, float) and not math.isfinite(value))):
        what = "an integer" if integer else "a finite number"
        raise error(f"{name} must be {what}, not {shown(value)}")


def _host_port(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6) of one cluster node, or ConfigError."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"Redis Cluster node {text!r} must be host:port")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class RedisConfig:
    """How to reach the Redis that holds the ID catalog.

    Parameters
    ----------
    url:
        ``redis://``, ``rediss://`` (TLS) or ``unix://`` URL; a password in it
        is passed through and never logged. ``redis+cluster://`` or
        ``rediss+cluster://`` names nodes of a Redis Cluster, one or several
        separated by commas (``redis+cluster://h1:6379,h2:6379``: a worker that
        starts while one is down reaches another); the client finds the rest, and
        each claim waits for the replicas of its own primary.
    socket_timeout, connect_timeout:
        Seconds before a call is given up; the batch then fails (fail closed).
    require_persistence:
        Refuse a Redis with the append-only file off: a restart would forget
        claimed IDs and let duplicates through. Set False only for throwaway
        pipelines.
    options:
        Extra keyword arguments for ``redis.Redis.from_url`` (``ssl_ca_certs``,
        ``username``, ...), passed through unchanged.
    wait_replicas:
        Replicas that must hold a claim before its rows go on (Redis ``WAIT``),
        so a failover to any of them cannot forget it. None (the default)
        waits for the count recorded for the app id: the most replicas the
        primary had at any start. 0 never waits (no replica is ever promoted).
    replica_timeout:
        Seconds a claim waits for its replicas; then the batch fails (fail closed)
        and Spark retries it. Must be below ``socket_timeout``.
    failover_wait:
        Seconds a claim keeps repeating itself, with backoff, while Redis fails
        over (:mod:`dedup.failover`): on a Redis Cluster while a slot has no
        primary or moved, and on any Redis while the claim's primary has fewer
        connected replicas than claims wait for (a promoted replica before one
        attaches). The default 20 s covers a primary's death on a cluster with
        Redis' default ``cluster-node-timeout`` (15 s) plus the election, and a
        restarted old primary rejoining as a replica. Other errors fail at once.
        When the wait runs out the batch fails closed exactly as with 0 (no wait,
        every failed claim fails its task at once); a held claim delays its
        batch by at most this long plus one call's timeouts.
    """

    url: str = "redis://127.0.0.1:6379/0"
    socket_timeout: float = 10.0
    connect_timeout: float = 5.0
    require_persistence: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)
    wait_replicas: int | None = None
    replica_timeout: float = 5.0
    failover_wait: float = 20.0

    def __post_init__(self) -> None:
        if not isinstance(self.url, str):
            raise ConfigError(f"redis url must be a string like redis://host:6379/0, not "
                              f"{type(self.url).__name__}")
        try:
            scheme = urlsplit(self.url).scheme
        except ValueError as exc:  # an unclosed '[' (IPv6): urlsplit's own words
            raise ConfigError(f"redis url {redact_url(self.url)!r} is malformed ({exc}): "
                              "write it as redis://host:port/db") from exc
        if scheme not in {"redis", "rediss", "unix", *CLUSTER_SCHEMES}:
            raise ConfigError(
                f"redis url {redact_url(self.url)!r} must start with redis://, rediss://, "
                "unix://, or redis+cluster:// / rediss+cluster:// for a Redis Cluster"
            )
        hosts = urlsplit(self.url).netloc.rpartition("@")[2]
        if "," in hosts and scheme not in CLUSTER_SCHEMES:
            raise ConfigError(f"redis url {redact_url(self.url)!r} names several hosts: only a "
                              "Redis Cluster URL may (redis+cluster://h1:p1,h2:p2)")
        if scheme in CLUSTER_SCHEMES:
            for host in hosts.split(","):
                try:
                    _host_port(host)
                except ConfigError as exc:
                    # a malformed URL's "host" may be part of its password: name the
                    # redacted URL, not the node
                    raise ConfigError(f"redis url {redact_url(self.url)!r} names a Redis "
                                      "Cluster node that is not host:port: write "
                                      "redis+cluster://host:port,host:port") from exc
        for name in ("socket_timeout", "connect_timeout", "replica_timeout", "failover_wait"):
            check_number(f"redis {name}", getattr(self, name))
        if not isinstance(self.options, Mapping):
            raise ConfigError(f"redis options must be a mapping of redis.Redis keyword "
                              f"arguments, not {shown(self.options)}")
        if self.socket_timeout <= 0 or self.connect_timeout <= 0:
            raise ConfigError("redis socket_timeout and connect_timeout must be > 0 seconds")
        if self.wait_replicas is not None and (isinstance(self.wait_replicas, bool) or not
                                               isinstance(self.wait_replicas, int)
                                               or self.wait_replicas < 0):
            raise ConfigError(f"redis wait_replicas must be None (the recorded count) or an "
                              f"integer >= 0, not {self.wait_replicas!r}")
        if not 0 < self.replica_timeout < self.socket_timeout:
            raise ConfigError(f"redis replica_timeout ({self.replica_timeout} s) must be > 0 "
                              f"and below socket_timeout ({self.socket_timeout} s)")
        if isinstance(self.failover_wait, bool) or not isinstance(
                self.failover_wait, (int, float)) or not 0 <= self.failover_wait < 3600:
            raise ConfigError(f"redis failover_wait must be >= 0 and below 3600 seconds "
                              f"(0: no wait), not {self.failover_wait!r}")
        object.__setattr__(self, "options", dict(self.options))

    def __repr__(self) -> str:
        return (
            f"RedisConfig(url={redact_url(self.url)!r}, socket_timeout={self.socket_timeout}, "
            f"require_persistence={self.require_persistence}, "
            f"wait_replicas={self.wait_replicas}, failover_wait={self.failover_wait}, "
            f"options=<{len(self.options)} keys>)"
        )

    @property
    def cluster(self) -> bool:
        """Whether the URL names a Redis Cluster (``redis+cluster://``)."""
        return urlsplit(self.url).scheme in CLUSTER_SCHEMES

    @property
    def user(self) -> str:
        """The Redis ACL user the client authenticates as: the URL's user name (it wins
        over option ``username`` in redis-py), else that option, else ``default``.
        The records of a query's app ids and outputs are kept per user
        (:func:`dedup.keys.query_apps_key`)."""
        try:
            name = urlsplit(self.url).username
        except ValueError:
            name = None
        return unquote(name) if name else str(self.options.get("username") or "default")

    def client(self) -> Any:
        """A new ``redis.Redis`` client, or a ``redis.cluster.RedisCluster`` for a
        cluster URL (connections open lazily)."""
        import redis

        if self.cluster:
            from redis.cluster import ClusterNode, RedisCluster

            parts = urlsplit(self.url)
            userinfo, _, hosts = parts.netloc.rpartition("@")
            first, *others = hosts.split(",")
            netloc = f"{userinfo}@{first}" if userinfo else first
            nodes = [ClusterNode(*_host_port(h)) for h in others]
            from redis.exceptions import RedisClusterException

            try:
                return RedisCluster.from_url(
                    urlunsplit(parts._replace(scheme=CLUSTER_SCHEMES[parts.scheme],
                                              netloc=netloc)),
                    startup_nodes=nodes, socket_timeout=self.socket_timeout,
                    socket_connect_timeout=self.connect_timeout,
                    **dict(self.options),
                )
            except RedisClusterException as exc:
                # redis-py reads a refused CLUSTER SLOTS as "Cluster mode is not enabled":
                # ask one node as a plain client whether the user's ACL refuses it
                refused = self._slot_map_refusal(
                    urlunsplit(parts._replace(scheme=CLUSTER_SCHEMES[parts.scheme],
                                              netloc=netloc))) if parts.username else None
                if refused is not None:
                    raise refused from exc
                # The cluster client connects at once (to read the slot map) and its
                # error is no RedisError: every caller's "unavailable" handling would
                # miss it. A ConnectionError is what a plain client raises on first use.
                raise redis.exceptions.ConnectionError(
                    f"no node of the Redis Cluster at {redact_url(self.url)} answered: {exc}"
                ) from exc
        return redis.Redis.from_url(
            self.url,
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.connect_timeout,
            **dict(self.options),
        )

    def _slot_map_refusal(self, node_url: str) -> Exception | None:
        """The ACL error of ``CLUSTER SLOTS`` sent to the node at ``node_url`` as a plain
        client, or None (it answers, or cannot say): the cluster client's own error for
        it names neither the command nor the user."""
        import redis

        probe = redis.Redis.from_url(node_url, socket_timeout=self.socket_timeout,
                                     socket_connect_timeout=self.connect_timeout,
                                     **dict(self.options))
        try:
            probe.execute_command("CLUSTER", "SLOTS")
        except redis.exceptions.NoPermissionError as exc:
            return exc
        except (redis.exceptions.RedisError, OSError, ValueError, TypeError):
            return None
        finally:
            probe.close()
        return None


@dataclass(frozen=True)
class BloomConfig:
    """The per-shard Bloom filter in front of the catalog (the fast path).

    A Bloom hit never decides a duplicate; it only sends the ID to Redis. A
    higher ``error_rate`` costs catalog lookups, never records.

    Parameters
    ----------
    enabled:
        False sends every ID to the catalog (the "no Bloom filter" variant).
    capacity:
        Expected number of IDs per shard within the retention horizon. When a
        filter fills up it is rebuilt with twice the capacity.
    error_rate:
        Target false-positive rate, 0 < error_rate < 1.
    """

    enabled: bool = True
    capacity: int = 1_000_000
    error_rate: float = 0.01

    def __post_init__(self) -> None:
        check_number("bloom error_rate", self.error_rate)
        check_number("bloom capacity", self.capacity, integer=True)
        if not 0.0 < self.error_rate < 1.0:
            raise ConfigError(f"bloom error_rate must be in (0, 1), not {self.error_rate}")
        if self.capacity < 1:
            raise ConfigError(f"bloom capacity must be >= 1, not {self.capacity}")


class LatePolicy(StrEnum):
    """What happens to a record whose event time is older than the horizon.

    Its ID may already have expired from the catalog, so the catalog cannot
    tell whether it is a duplicate. Either way the record is counted.
    """

    DROP = "drop"
    """Drop it (counted as ``late_dropped``): no duplicate, possible loss of a late original."""
    PASS = "pass"
    """Check it against what the catalog still holds and keep it if absent
    (counted as ``late_passed``): no loss, possible duplicate of an expired ID."""


def _coerce_enum(config: Any, name: str, kind: type[StrEnum]) -> None:
    """Turn the string in field ``name`` of a frozen config into ``kind``, or refuse it."""
    value = getattr(config, name)
    try:
        object.__setattr__(config, name, kind(value))
    except (ValueError, TypeError) as exc:  # TypeError: an unhashable value (a list)
        choices = " or ".join(repr(m.value) for m in kind)
        raise ConfigError(f"{name} must be {choices}, not {shown(value)}") from exc


class InvalidIdPolicy(StrEnum):
    """What happens to a record whose ID is null, empty, too long or holds a newline."""

    FAIL = "fail"
    """Fail the batch, naming the column and the batch (every retry fails the same
    way until the input or the ID derivation is fixed)."""
    DEAD_LETTER = "dead_letter"
    """Pass it on unclaimed with a null ID (counted as ``invalid_ids``): the
    exactly-once sink writes it to its ``dead.letter.topic`` in the batch's
    transaction."""


@dataclass(frozen=True)
class RetentionConfig:
    """How long the catalog remembers an ID (Dataflow-style time buckets).

    IDs are written to a bucket per ``bucket_seconds`` of claim time; a bucket
    key expires ``horizon_seconds`` after it closes. A duplicate arriving
    later than the horizon after its original is not guaranteed to be caught.

    Parameters
    ----------
    horizon_seconds:
        Minimum time an ID is remembered.
    bucket_seconds:
        Bucket width; the catalog checks ``ceil(horizon / bucket) + 1`` buckets.
    event_time_column:
        Optional timestamp column; records older than ``now - horizon`` follow
        ``late_policy``. Without it, no record is considered late.
    late_policy:
        :class:`LatePolicy` for such records.
    """

    horizon_seconds: int = 7 * 24 * 3600
    bucket_seconds: int = 24 * 3600
    event_time_column: str | None = None
    late_policy: LatePolicy = LatePolicy.DROP

    def __post_init__(self) -> None:
        check_number("retention horizon_seconds", self.horizon_seconds, integer=True)
        check_number("retention bucket_seconds", self.bucket_seconds, integer=True)
        if self.event_time_column is not None and not isinstance(self.event_time_column, str):
            raise ConfigError(f"retention event_time_column must name a column or be None, "
                              f"not {shown(self.event_time_column)}")
        if self.bucket_seconds < 1 or self.horizon_seconds < self.bucket_seconds:
            raise ConfigError(
                "retention needs bucket_seconds >= 1 and horizon_seconds >= bucket_seconds "
                f"(got horizon {self.horizon_seconds}, bucket {self.bucket_seconds})"
            )
        if -(-self.horizon_seconds // self.bucket_seconds) > 400:
            raise ConfigError(
                "retention horizon_seconds / bucket_seconds must be <= 400 buckets: "
                "use wider buckets"
            )
        _coerce_enum(self, "late_policy", LatePolicy)

    @property
    def live_buckets(self) -> int:
        """How many buckets a lookup checks."""
        return -(-self.horizon_seconds // self.bucket_seconds) + 1


@dataclass(frozen=True)
class FailPointConfig:
    """Where armed fail-points are looked up (tests and the chaos runner only).

    ``directory`` is the fail-point folder (the sink's option ``fail.points.directory``);
    ``None`` (the default) falls back to the ``DEDUP_FAIL_POINT_DIR`` environment
    variable, and with neither fail-points are off. See :mod:`dedup.failpoints`.
    """

    directory: str | None = None


@dataclass(frozen=True)
class DedupConfig:
    """Everything the dedup operator needs.

    Parameters
    ----------
    app_id:
        Stable, unique name of the pipeline; every Redis key derives from it.
        Two pipelines must never share one.
    redis:
        :class:`RedisConfig` of the ID catalog.
    id_column:
        Column holding the record ID (see :func:`dedup.with_record_id`).
    num_shards:
        Shards of the catalog. Fixed per app id: it is recorded in Redis on
        first use and a different value is refused.
    bloom, retention, fail_points:
        See :class:`BloomConfig`, :class:`RetentionConfig`,
        :class:`FailPointConfig`.
    allow_shared_app_id:
        Skip the app id's lease: several queries may claim with this app id
        at once (only for queries that are one pipeline).
    lease_seconds:
        The app id's lease: a streaming query takes it at its first claim and
        renews it on every batch and every progress or idle event; another
        query id is refused with :class:`~dedup.exceptions.AppIdInUseError`
        until the lease lapses this many seconds (Redis's clock) after the
        last renewal, or the holder terminates. A query that lost the lease
        to a newer one is fenced: it can claim nothing more.
    journal_versions:
        Versions of newly claimed IDs kept per shard so a Bloom filter that is
        a few claims behind can catch up instead of being bypassed. The last
        four are always kept; older ones only while they hold no more than an
        eighth of the shard's live IDs (a filter further behind is rebuilt
        from the catalog, which then costs at most eight times a catch-up).
    invalid_ids:
        :class:`InvalidIdPolicy` (``"fail"`` or ``"dead_letter"``) for records
        whose ID is null or malformed.
    """

    app_id: str
    redis: RedisConfig = field(default_factory=RedisConfig)
    id_column: str = DEFAULT_ID_COLUMN
    num_shards: int = 8
    bloom: BloomConfig = field(default_factory=BloomConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    fail_points: FailPointConfig = field(default_factory=FailPointConfig)
    allow_shared_app_id: bool = False
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    journal_versions: int = 64
    invalid_ids: InvalidIdPolicy = InvalidIdPolicy.FAIL

    def __post_init__(self) -> None:
        validate_app_id(self.app_id)
        _coerce_enum(self, "invalid_ids", InvalidIdPolicy)
        check_number("lease_seconds", self.lease_seconds)
        if not self.lease_seconds >= 0:
            raise ConfigError(f"lease_seconds must be >= 0, not {self.lease_seconds!r}")
        if not isinstance(self.journal_versions, int) or not 1 <= self.journal_versions <= 1000:
            raise ConfigError(f"journal_versions must be an integer in 1..1000, not "
                              f"{self.journal_versions!r}")
        if not isinstance(self.num_shards, int) or not 1 <= self.num_shards <= MAX_SHARDS:
            raise ConfigError(f"num_shards must be an integer in 1..{MAX_SHARDS}, not "
                              f"{self.num_shards!r}")
        if not self.id_column or not isinstance(self.id_column, str):
            raise ConfigError(f"id_column must name the record ID column, not "
                              f"{shown(self.id_column)}")
