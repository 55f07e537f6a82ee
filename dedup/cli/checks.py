"""Up-front reachability checks, so a wrong address fails in seconds with the fix."""

from __future__ import annotations

from typing import Any

from dedup.config import RedisConfig, redact_url
from dedup.exceptions import CatalogUnavailableError, ConfigError
from sinks.exceptions import KafkaUnavailableError

SERVICES_HINT = "start the local services with 'dedup services up'"

QUIET_KAFKA: dict[str, Any] = {"log_level": 0, "logger": lambda *args: None}
"""librdkafka client settings that keep its connection errors off stderr."""


def check_redis(url: str, timeout: float = 3.0, what: str = "redis.url") -> None:
    """PING ``url``; raise :class:`CatalogUnavailableError` naming it and the fix."""
    import redis
    from redis.exceptions import RedisClusterException

    if not url:
        raise ConfigError(f"no Redis address: set {what} or {SERVICES_HINT}")
    config = RedisConfig(url, socket_timeout=timeout, connect_timeout=timeout,
                         replica_timeout=timeout / 2)
    client = None
    try:
        # a cluster client reads the slot map here, so this may fail like the PING
        client = config.client()
        client.ping()
    except ValueError as exc:
        raise ConfigError(f"{what} {redact_url(url)!r} is not a valid Redis URL: {exc}") from exc
    except (redis.RedisError, RedisClusterException) as exc:
        reason = str(exc).split("\n")[0] or type(exc).__name__
        raise CatalogUnavailableError(
            f"cannot reach Redis at {redact_url(url)} ({reason}): {SERVICES_HINT} "
            f"or fix {what}"
        ) from exc
    finally:
        if client is not None:
            client.close()


def check_kafka(bootstrap: str, timeout: float = 5.0, what: str = "kafka bootstrap servers",
                client_config: dict[str, Any] | None = None) -> None:
    """Fetch cluster metadata with ``client_config`` (security settings); raise
    :class:`KafkaUnavailableError` naming the fix."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if not bootstrap:
        raise ConfigError(f"no Kafka address: set {what} or {SERVICES_HINT}")
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
                         **QUIET_KAFKA, **(client_config or {})})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        secured = (" with its security settings (kafka.security.protocol, kafka.sasl.*, "
                   "kafka.ssl.* options)" if client_config else "")
        raise KafkaUnavailableError(
            f"cannot reach Kafka at {bootstrap}{secured} (no answer in {timeout:.0f} s): "
            f"{SERVICES_HINT} or fix {what}"
        ) from exc
    if not metadata.brokers:
        raise KafkaUnavailableError(f"Kafka at {bootstrap} lists no brokers: {SERVICES_HINT}")
