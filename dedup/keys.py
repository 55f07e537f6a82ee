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


def query_apps_key(query_id: str) -> str:
    """Hash of the app ids that deduplicate streaming query ``query_id`` (each with
    the first batch it claimed in); its own slot, found by the query id alone."""
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


def query_outputs_key(query_id: str) -> str:
    """Hash of the outputs that write streaming query ``query_id``, each with the last
    batch it began and that batch's run; its own slot, found by the query id alone."""
    return f"{KEY_PREFIX}:query:{{{query_id}}}:outputs"
