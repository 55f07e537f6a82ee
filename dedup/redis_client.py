"""This process's Redis clients and Lua scripts, shared by the catalog and the sink.

One client per :class:`~dedup.config.RedisConfig` (the whole config: two that
differ in a password or a TLS option never share one), created lazily, one per
worker process, with every script of ``dedup/lua/`` registered on it once
(redis-py reloads a script on ``NOSCRIPT``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import pkgutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dedup.config import RedisConfig, redact_url
from dedup.exceptions import CatalogStateError, CatalogUnavailableError, DedupError
from dedup.redis_nodes import client_for_key, refresh_topology

SCRIPTS = ("claim", "snapshot", "gc", "lease", "fence", "contains", "import", "join",
           "progress", "sink_lease", "sink_join")
"""The scripts registered on every client, each ``dedup/lua/<name>.lua``: the catalog's,
and the sink's (``sink_*``: its output's lease and the outputs of a query)."""
_ID_STORE_SCRIPTS = ("claim", "snapshot", "contains", "import")

_CLIENTS: dict[tuple[Any, ...], tuple[Any, dict[str, Any]]] = {}
_CLIENTS_LOCK = threading.Lock()


def lua_source(name: str) -> str:
    """The text of script ``dedup/lua/<name>`` as Redis runs it."""
    # pkgutil works from an installed package, a checkout and a zip on the
    # executors' path alike (importlib.resources tripped over a namespace path)
    data = pkgutil.get_data("dedup", f"lua/{name}")
    if data is None:
        raise CatalogStateError(f"Lua script dedup/lua/{name} is missing from the package")
    text = data.decode()
    if name.removesuffix(".lua") in _ID_STORE_SCRIPTS:
        # Redis runs one chunk per script: the ID index's functions go in front
        text = lua_source("idstore.lua") + "\n" + text
    return text


def cache_key(redis_config: RedisConfig) -> tuple[Any, ...]:
    """Every field of ``redis_config``, hashable: its ``options`` (a dict, which makes
    the frozen dataclass itself unhashable) as the text of its sorted items."""
    return tuple(repr(sorted(redis_config.options.items())) if field.name == "options"
                 else getattr(redis_config, field.name)
                 for field in dataclasses.fields(redis_config))


def connect(redis_config: RedisConfig) -> tuple[Any, dict[str, Any]]:
    """This process's client for ``redis_config`` and its registered scripts; redis-py's
    errors as they are (a cluster client connects at once)."""
    key = cache_key(redis_config)
    with _CLIENTS_LOCK:
        found = _CLIENTS.get(key)
        if found is None:
            client = redis_config.client()
            scripts = {name: client.register_script(lua_source(f"{name}.lua"))
                       for name in SCRIPTS}
            found = _CLIENTS[key] = (client, scripts)
        return found


def client_and_scripts(redis_config: RedisConfig) -> tuple[Any, dict[str, Any]]:
    """:func:`connect`, its errors the toolkit's (:func:`redis_errors`)."""
    with redis_errors(redis_config, "connecting"):
        return connect(redis_config)


@contextmanager
def redis_errors(redis_config: RedisConfig, what: str,
                 raise_as: Callable[[str, BaseException], Exception] | None = None
                 ) -> Iterator[None]:
    """Turn redis-py errors into this toolkit's, naming the (redacted) URL.

    ``raise_as``: what every redis-py error raised while trying to ``what`` becomes,
    made from ``what`` and the error (the sink's checkpoint store raises its own
    :class:`~sinks.exceptions.CheckpointUnavailableError`); without it, the catalog's:
    :class:`CatalogUnavailableError` for an unreachable Redis or one failing over,
    :class:`CatalogStateError` for a refusal, other errors unchanged."""
    import redis
    from redis.exceptions import RedisClusterException

    try:
        yield
    except (redis.exceptions.RedisError, RedisClusterException) as exc:
        error = (raise_as(what, exc) if raise_as is not None
                 else _catalog_error(redis_config, what, exc))
        if error is None:
            raise
        raise error from exc


def _catalog_error(redis_config: RedisConfig, what: str, exc: BaseException
                   ) -> Exception | None:
    """The catalog's error for redis-py's ``exc``, or None to raise ``exc`` unchanged."""
    import redis
    from redis.exceptions import RedisClusterException

    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                        # a Redis Cluster in a failover: no primary for a slot yet, or the
                        # slot moved under a node client; the batch's retry finds the new
                        # primary
                        redis.exceptions.ClusterDownError, redis.exceptions.TryAgainError,
                        redis.exceptions.AskError, RedisClusterException)):
        return CatalogUnavailableError(
            f"Redis at {redact_url(redis_config.url)} is unreachable during {what} "
            f"({type(exc).__name__}: {exc}); the batch fails and Spark retries it. Check that "
            "Redis runs and the URL, password and TLS settings are right"
        )
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        if not redis_config.cluster:
            return CatalogStateError(
                f"Redis at {redact_url(redis_config.url)} refused {what}: {exc}")
        # a cluster node demoted by a failover, still in this client's slot map
        return CatalogUnavailableError(
            f"Redis at {redact_url(redis_config.url)} is failing over during {what} "
            f"({type(exc).__name__}: {exc}); the batch fails and Spark retries it"
        )
    if isinstance(exc, redis.exceptions.ResponseError):
        return CatalogStateError(f"Redis at {redact_url(redis_config.url)} refused {what}: {exc}")
    return None


class RedisTopology:
    """:class:`dedup.failover.Topology` of a Redis, through this process's client: the
    catalog's, and the sink's checkpoint store's (which raises no
    :class:`~dedup.exceptions.ReplicaAckError`, so only a cluster's failover errors are
    waited out for it)."""

    def __init__(self, redis_config: RedisConfig) -> None:
        self.redis_config = redis_config

    @property
    def cluster(self) -> bool:
        return self.redis_config.cluster

    def refresh(self) -> None:
        with contextlib.suppress(DedupError):  # not even reachable: the next attempt says
            refresh_topology(client_and_scripts(self.redis_config)[0])

    def connected_replicas(self, key: str) -> int:
        client, _ = client_and_scripts(self.redis_config)
        with redis_errors(self.redis_config, "reading the replicas of a shard's primary"):
            info = client_for_key(client, key).info("replication")
        # A replica that just (re)attached is connected long before it can acknowledge
        # anything (a full sync first): count only those past it (state=online).
        return sum(1 for name, value in info.items()
                   if name.startswith("slave") and isinstance(value, dict)
                   and value.get("state") == "online")
