"""Every Redis key the toolkit writes, the catalog's and the sink's: their one home.

``{...}`` is the Redis Cluster hash tag: every key one Lua call touches shares it,
so the call stays within one slot. What each key holds: docs/design.md, "Names".
The strings are the stored layout: changing one orphans the data under the old name.
"""

from __future__ import annotations

from dedup.constants import KEY_PREFIX

# The ID catalog (dedup/catalog.py): per shard, per app id, per streaming query.


def shard_tag(app_id: str, shard: int) -> str:
    """Hash tag shared by every key of one shard."""
    return f"{{{app_id}:s{shard}}}"


def state_key(app_id: str, shard: int) -> str:
    return f"{KEY_PREFIX}:{shard_tag(app_id, shard)}:state"


def decisions_key(app_id: str, shard: int) -> str:
    return f"{KEY_PREFIX}:{shard_tag(app_id, shard)}:dec"


def journal_key(app_id: str, shard: int) -> str:
    return f"{KEY_PREFIX}:{shard_tag(app_id, shard)}:jr"


def index_key(app_id: str, shard: int, bucket: int) -> str:
    """The index of the IDs ``shard`` claimed in time bucket ``bucket``; its sub-buckets
    are ``<index key>:<n>`` (``idstore.lua``)."""
    return f"{KEY_PREFIX}:{shard_tag(app_id, shard)}:idx:{bucket}"


def old_id_sets_pattern(app_id: str, shard: int) -> str:
    """``SCAN`` pattern of the ID sets of a format-1 catalog (earlier releases), which
    ``dedup migrate-catalog`` converts."""
    return f"{KEY_PREFIX}:{shard_tag(app_id, shard)}:ids:*"


def ack_key(app_id: str, shard: int) -> str:
    return f"{KEY_PREFIX}:{shard_tag(app_id, shard)}:ack"


def slot_ack_key(key: str) -> str:
    """A key in the slot of ``key`` (same hash tag) that an acknowledged write sets
    before its ``WAIT``, so the ``WAIT`` covers the write even when the write itself
    changed nothing (a record that an unacknowledged attempt already made)."""
    return key.rpartition(":")[0] + ":ack"


def meta_key(app_id: str) -> str:
    return f"{KEY_PREFIX}:{{{app_id}}}:meta"


def lease_key(app_id: str) -> str:
    return f"{KEY_PREFIX}:{{{app_id}}}:lease"


def queries_key(app_id: str) -> str:
    return f"{KEY_PREFIX}:{{{app_id}}}:queries"


def user_tag(user: str) -> str:
    """The Redis user's name as it stands in its keys: ``~`` (no app id starts with
    one), then the name with every character but ``[A-Za-z0-9._@+=,-]`` percent-encoded,
    so a ``:``, ``}`` or glob character can neither end the hash tag nor widen the ACL
    pattern (user ``a:b`` must not fall under user ``a``'s pattern)."""
    from urllib.parse import quote

    return "~" + quote(user, safe="._@+=,-")


def query_apps_key(user: str, query_id: str) -> str:
    """Hash of the app ids that Redis user ``user`` runs on streaming query ``query_id``
    (each with the first batch it claimed in); the query's own slot.

    Per user, not shared: whoever may write it may write those app ids' catalogs
    anyway (docs/operations.md, "Redis ACL")."""
    return f"{KEY_PREFIX}:{{{user_tag(user)}:{query_id}}}:apps"


def legacy_query_apps_key(query_id: str) -> str:
    """Where earlier releases kept :func:`query_apps_key`, shared by every app id: read
    once per process and query, and taken over if the new record is absent."""
    return f"{KEY_PREFIX}:query:{{{query_id}}}:apps"


# The sink's strong productions (sinks/checkpoint.py), per output identity
# (``<app id>`` or ``<app id>/<output.name>``) and partition.


def sink_checkpoint_key(identity: str, query_id: str, batch: int, partition: int) -> str:
    """A partition's checkpointed input rows of one batch."""
    return f"{KEY_PREFIX}:{{{identity}:p{partition}}}:sink:ckpt:{query_id}:{batch}"


def sink_checkpoint_index_key(identity: str) -> str:
    """Sorted set of an output's checkpoints by batch, for garbage collection."""
    return f"{KEY_PREFIX}:{{{identity}}}:sink:ckpt-index"


def sink_marker_key(identity: str, partition: int) -> str:
    """Hash with the Redis copy of a partition's batch marker."""
    return f"{KEY_PREFIX}:{{{identity}:p{partition}}}:sink:marker"


def sink_meta_key(identity: str) -> str:
    """Hash of what an output records once (the broker's marker retention)."""
    return f"{KEY_PREFIX}:{{{identity}}}:sink:meta"


def sink_lease_key(identity: str) -> str:
    """Hash ``owner``, ``until``: an output's lease."""
    return f"{KEY_PREFIX}:{{{identity}}}:sink:lease"


def query_outputs_key(user: str, query_id: str) -> str:
    """Hash of the outputs that Redis user ``user`` writes for streaming query
    ``query_id``, each with the last batch it began and that batch's run; the query's
    own slot, per user as :func:`query_apps_key`."""
    return f"{KEY_PREFIX}:{{{user_tag(user)}:{query_id}}}:outputs"


def legacy_query_outputs_key(query_id: str) -> str:
    """Where earlier releases kept :func:`query_outputs_key` (see
    :func:`legacy_query_apps_key`)."""
    return f"{KEY_PREFIX}:query:{{{query_id}}}:outputs"


# Redis ACL (docs/operations.md, "Redis ACL"): the key patterns and commands one app
# id's Redis user needs. An app id has no ':', '/', '}' and no glob character
# (dedup.config.APP_ID_PATTERN), so each pattern below ends where the app id ends:
# ``dedup:{orders}*`` and ``dedup:{orders:*`` never match app id ``orders2``; a user's
# name is encoded (user_tag) so that ``dedup:{~<user>:*`` ends where the name ends.

ACL_COMMANDS = (
    # the start-up checks: reachability, replicas (INFO replication), persistence
    "ping", "info", "config|get",
    # the Lua scripts (redis-py loads a script on NOSCRIPT; a pipeline checks first)
    "evalsha", "script|load", "script|exists",
    # a claim and a query's record wait for the replicas (when Redis has some)
    "wait",
    # the Python side's own reads and writes
    "get", "set", "del", "hget", "hset", "hsetnx", "hdel", "hexists", "hgetall", "hkeys",
    "hlen", "hmget", "zadd", "zrem", "zrangebyscore",
    # what only the scripts run: Redis checks a script's calls against the user too
    "append", "exists", "expireat", "hstrlen", "time",
)
"""Every command ``dedup run`` (both forms) and the sink send, as ACL rules without the
``+``, a script's inner ``redis.call`` commands included."""


ACL_CLUSTER_COMMANDS = ("cluster|slots", "command")
"""What a Redis Cluster client sends beyond :data:`ACL_COMMANDS`: redis-py reads the slot
map (``CLUSTER SLOTS``) and the commands' key positions (``COMMAND``) when it connects."""


ACL_MIGRATE_COMMANDS = ("scan", "sscan", "expiretime")
"""What ``dedup migrate-catalog`` sends beyond :data:`ACL_COMMANDS`: it lists a format-1
catalog's ID sets (``SCAN``, which lists key names of every app id whatever the user's
key patterns), reads each and carries its expiry over."""


def acl_key_patterns(app_id: str, user: str = "") -> tuple[str, ...]:
    """The key patterns (ACL ``~`` rules without the ``~``) that cover every key of
    ``app_id`` run as Redis user ``user`` (``dedup-<app id>`` unless given): its
    catalog's (``{<app>}``, ``{<app>:s<shard>}``), its sink outputs' (``{<app>:p<n>}``,
    ``{<app>/<output>}``, ``{<app>/<output>:p<n>}``) and its user's query records
    (``{~<user>:<query id>}``)."""
    stem = f"{KEY_PREFIX}:{{{app_id}"
    return (f"{stem}}}*", f"{stem}:*", f"{stem}/*",
            f"{KEY_PREFIX}:{{{user_tag(user or 'dedup-' + app_id)}:*")


def acl_setuser_line(app_id: str, user: str = "", password: str = "<password>",
                     cluster: bool = False) -> str:
    """The ``ACL SETUSER`` line of a Redis user that may run ``app_id``'s pipeline:
    its keys and :data:`ACL_COMMANDS` (and, for a Redis Cluster,
    :data:`ACL_CLUSTER_COMMANDS`), nothing else (user ``dedup-<app id>`` unless
    ``user``)."""
    user = user or f"dedup-{app_id}"
    keys = " ".join(f"~{pattern}" for pattern in acl_key_patterns(app_id, user))
    commands = " ".join(f"+{command}" for command in
                        (*ACL_COMMANDS, *(ACL_CLUSTER_COMMANDS if cluster else ())))
    return (f"ACL SETUSER {user} on >{password} resetkeys {keys} "
            f"resetchannels -@all {commands}")


def acl_key_pattern(key: str) -> str:
    """The pattern of :func:`acl_key_patterns` that grants ``key`` (the key itself for a
    key of no app id)."""
    import fnmatch
    import re

    stem = f"{KEY_PREFIX}:{{"
    name = re.split(r"[:/}]", key[len(stem):])[0] if key.startswith(stem) else ""
    if name.startswith("~"):  # a user's query record (user_tag: no ':' in the name)
        return f"{stem}{name}:*"
    # fnmatchcase reads '*' as Redis does; the patterns hold no other glob character
    return next((pattern for pattern in acl_key_patterns(name)
                 if fnmatch.fnmatchcase(key, pattern)), key)
