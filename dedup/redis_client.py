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
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from dedup.config import RedisConfig, redact_url
from dedup.exceptions import (
    CatalogStateError,
    CatalogUnavailableError,
    DedupError,
    RedisPermissionError,
)
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


_LEGACY: dict[tuple[Any, ...], list[str]] = {}


def legacy_record(redis_config: RedisConfig, key: str) -> list[str]:
    """A query record as an earlier release kept it, shared by every app id
    (:func:`dedup.keys.legacy_query_apps_key`), as the flat field/value list the join
    scripts take over when the new record is absent; read once per process and key.

    ``[]`` when there is none, and when the user may not read it: a user made with this
    release's ACL line has no pattern for it, and needs none (its records are new).
    Other errors are raised as redis-py's."""
    import redis

    seen = (*cache_key(redis_config), key)
    found = _LEGACY.get(seen)
    if found is None:
        try:
            raw = connect(redis_config)[0].hgetall(key)
        except redis.exceptions.NoPermissionError:
            raw = {}
        found = [part.decode() if isinstance(part, bytes) else str(part)
                 for pair in sorted(raw.items()) for part in pair]
        if len(_LEGACY) > 4096:  # one entry per query this process joined: bounded anyway
            _LEGACY.clear()
        _LEGACY[seen] = found
    return found


def forget_legacy_record(redis_config: RedisConfig, key: str, field: str) -> None:
    """Drop ``field`` of an earlier release's record ``key`` (``dedup forget-query``), so
    that it is not taken over again; nothing when the user may not write it."""
    import redis

    _LEGACY.pop((*cache_key(redis_config), key), None)
    with contextlib.suppress(redis.exceptions.NoPermissionError):
        connect(redis_config)[0].hdel(key, field)


@contextmanager
def redis_errors(redis_config: RedisConfig, what: str,
                 raise_as: Callable[[str, BaseException], Exception] | None = None,
                 keys: Sequence[str] = (), script: str = "") -> Iterator[None]:
    """Turn redis-py errors into this toolkit's, naming the (redacted) URL.

    ``raise_as``: what every redis-py error raised while trying to ``what`` becomes,
    made from ``what`` and the error (the sink's checkpoint store raises its own
    :class:`~sinks.exceptions.CheckpointUnavailableError`); without it, the catalog's:
    :class:`CatalogUnavailableError` for an unreachable Redis or one failing over,
    :class:`CatalogStateError` for a refusal, other errors unchanged. Either way a
    refusal of the Redis user's ACL is :class:`RedisPermissionError`, naming the
    command, or the keys the call touches (``keys``) and the key patterns to grant, or
    the commands of Lua script ``script`` (:func:`permission_refusal`)."""
    import redis
    from redis.exceptions import RedisClusterException

    try:
        yield
    except (redis.exceptions.RedisError, RedisClusterException) as exc:
        refusal = permission_refusal(redis_config, what, exc, keys, script)
        if refusal is not None:
            raise RedisPermissionError(refusal) from exc
        error = (raise_as(what, exc) if raise_as is not None
                 else _catalog_error(redis_config, what, exc))
        if error is None:
            raise
        raise error from exc


ACL_DOCS = "docs/operations.md, Redis ACL"
_COMMAND_REFUSED = re.compile(r"no permissions to run the '([^']+)' command")
_KEY_REFUSED = "no permissions to access one of the keys"
# Redis's words for a script's own call refused (7.0; it names neither command nor key)
_SCRIPT_COMMAND_REFUSED = "can't run this command or subcommand"
_SCRIPT_KEY_REFUSED = "can't access at least one of the keys"


def script_commands(script: str) -> list[str]:
    """The commands Lua script ``dedup/lua/<script>.lua`` runs (``redis.call``), in the
    form of an ACL rule (``hset``), sorted: Redis checks each against the user's ACL."""
    return sorted({name.lower() for name in re.findall(
        r"redis\.p?call\(\s*'(\w+)'", lua_source(f"{script}.lua"))})


def permission_refusal(redis_config: RedisConfig, what: str, exc: BaseException,
                       keys: Sequence[str] = (), script: str = "") -> str | None:
    """The one-line refusal of an ACL error ``exc`` raised while trying to ``what``, or None
    when ``exc`` is no ACL error.

    It names the Redis user (never the password), then the command and the ``+command``
    to add; or the keys the call touches (``keys``: Redis does not say which one it
    refused) and the ``~pattern`` of each to grant
    (:func:`dedup.keys.acl_key_pattern`); or, refused inside Lua script ``script``, the
    commands of that script (Redis names neither the command nor the key there)."""

    from dedup.keys import acl_key_pattern

    text = " ".join(str(exc).split())
    if not any(sign in text for sign in ("no permissions", _SCRIPT_COMMAND_REFUSED,
                                         _SCRIPT_KEY_REFUSED)):
        return None
    user = redis_config.user
    who = f"Redis user {user!r} at {redact_url(redis_config.url)}"
    command = _COMMAND_REFUSED.search(text)
    if command is not None:
        name = command.group(1).lower()
        # CONFIG GET shows the whole configuration (requirepass too): say how to do without
        unless = (", or, if AOF is on and maxmemory-policy is noeviction, set "
                  "RedisConfig(require_persistence=False) (the sink: option "
                  "redis.require.persistence=false)" if name == "config|get" else "")
        return (f"{who} may not run the {name!r} command ({what}): add +{name} to its ACL "
                f"(ACL SETUSER {user} +{name}; the whole line: {ACL_DOCS}){unless}")
    if _SCRIPT_COMMAND_REFUSED in text:
        needed = " ".join(f"+{name}" for name in script_commands(script)) if script else ""
        grant = (f"add the commands of Lua script {script}.lua to its ACL ({needed})"
                 if needed else "add the commands the toolkit runs to its ACL")
        return (f"{who} may not run a command of a Lua script ({what}): {grant} "
                f"(the whole line: {ACL_DOCS})")
    if keys:
        # the keys of one call have one hash tag, so one pattern, except a sink's write
        # that touches an output's index and a partition's key: name each pattern
        patterns = " ".join(dict.fromkeys(f"~{acl_key_pattern(key)}" for key in keys))
        named = " or ".join(repr(key) for key in dict.fromkeys(keys))
        return (f"{who} may not access key {named} ({what}): grant it the key "
                f"pattern{'s' if ' ' in patterns else ''} {patterns} (ACL SETUSER {user} "
                f"{patterns}; the whole line of its app id: {ACL_DOCS})")
    return (f"{who} may not access a key ({what}): grant it the key patterns of its app id "
            f"({ACL_DOCS})")


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
