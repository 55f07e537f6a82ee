"""The authoritative ID catalog in Redis: key names and the atomic Lua steps.

Every key one Lua call touches shares the hash tag ``{<app>:s<shard>}``, so a
call stays within one Redis Cluster slot:

``dedup:{app:s3}:state``      hash: f (catalog format), epoch, version, tok, n (shards),
                              owner, fence
``dedup:{app:s3}:dec``        hash: ``<query id>:<batch>`` ->
                              ``<version>|\n<candidates digest>\n<kept digests>``
``dedup:{app:s3}:jr``         hash: version -> digests newly claimed at that version,
                              ``t<version>`` -> the random token of that version
``dedup:{app:s3}:idx:<b>``    hash L, p, n: the index of the IDs claimed in time bucket
                              ``b``; ``dedup:{app:s3}:idx:<b>:<a>``: its sub-bucket ``a``,
                              a string of 16-byte ID digests, and ``...:<a>:t`` the
                              tail claims append to (``idstore.lua``; all expire
                              together)
``dedup:{app}:meta``          hash: the layout settings recorded on first use
                              (:data:`LAYOUT_SETTINGS`), ``replicas``, the
                              replicas every claim waits for, and under coordinate
                              IDs ``kafka_topic_id:<topic>``, the topic's Kafka id
``dedup:{app:s3}:ack``        string: written before a ``WAIT`` that must cover a
                              replayed decision (expires)
``dedup:{app}:lease``         hash: owner (query id), until (ms), fence, checked: the
                              app id's lease; every shard state keeps the highest
                              fence that claimed it
``dedup:{app}:queries``       hash: query id -> the last batch Spark committed
``dedup:{~user:q}:apps``      hash: app id -> the first batch it claimed in, for
                              streaming query ``q``, per Redis user
                              (:meth:`RedisCatalog.join_query`)

The key names are built in :mod:`dedup.keys` (imported here for the callers that
know them from this module).

The catalog stores an ID as its 16-byte BLAKE2b digest (:func:`id_digests`, format
:data:`CATALOG_FORMAT`) in strings of concatenated digests: about 19 bytes of Redis
memory per ID in the index instead of a set member's 90 or more. Two IDs with one
digest would count as one: at 10**10 IDs the chance that any two collide is below 10**-18.

Clients are created lazily, one per worker process and :class:`RedisConfig`, and the
scripts are registered once per client (:mod:`dedup.redis_client`).
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dedup.config import DedupConfig, redact_url
from dedup.exceptions import (
    AppIdInUseError,
    CatalogStateError,
    ReplicaAckError,
    SettingChangedError,
    ShardCountMismatchError,
    UnsafeSettingError,
)
from dedup.failover import ride_out_failover
from dedup.keys import (
    ack_key,
    decisions_key,
    index_key,
    journal_key,
    lease_key,
    legacy_query_apps_key,
    meta_key,
    queries_key,
    query_apps_key,
    slot_ack_key,
    state_key,
)
from dedup.redis_client import (
    RedisTopology,
    client_and_scripts,
    forget_legacy_record,
    legacy_record,
    redis_errors,
)
from dedup.redis_nodes import client_for_key, is_cluster, node_clients, refresh_topology

log = logging.getLogger(__name__)


def live_buckets(config: DedupConfig, now: float) -> list[int]:
    """Bucket numbers that hold the IDs remembered at ``now``, the current one first."""
    current = int(now) // config.retention.bucket_seconds
    return [current - i for i in range(config.retention.live_buckets)]


def lookup_buckets(config: DedupConfig, now: float) -> list[int]:
    """Buckets a claim at ``now`` checks: the current one, the next one, then older ones.

    The next bucket is there for a clock that went back across a bucket
    boundary (a driver restarted on another machine, an NTP step): an ID
    written into bucket ``k + 1`` must still be found from bucket ``k``.
    """
    live = live_buckets(config, now)
    return [live[0], live[0] + 1, *live[1:]]


CATALOG_FORMAT = "3"
"""How the catalog stores IDs; recorded in every shard state (``f``) and the app's meta.
``1`` (earlier releases): a SET of the ID strings per time bucket; ``2``: 16-byte
digests in strings indexed by linear hashing (``idstore.lua``); ``3``: the same, each
string with a tail that claims append to (merged into it when it grows, so the string
keeps no spare room). A catalog of a format outside :data:`READABLE_FORMATS` is
refused."""

READABLE_FORMATS = ("2", "3")
"""Formats this release reads as they are: format 2 is format 3 without tails. The
first start of this release records format 3 in the app's meta (and a shard's first
claim in its state), so a format-2 release refuses the catalog from then on: it would
not read the tails."""
DIGEST_BYTES = 16


def id_digests(ids: Sequence[str | bytes]) -> list[bytes]:
    """The 16-byte digests (BLAKE2b-128 of the UTF-8 text) the catalog stores for ``ids``;
    an ID given as bytes (``decide_partition`` takes them) is digested as it is.

    Pure; stable across processes, machines and releases of this format."""
    # Copies of one empty hasher, fed the IDs encoded by a C-level map: 0.27 us per ID
    # against 0.37 for a new hasher and a type test per ID (benchmarks/results/NOTES.md,
    # 2026-12-05); the same digests.
    fresh = hashlib.blake2b(digest_size=DIGEST_BYTES).copy
    digests: list[bytes] = []
    append = digests.append
    try:
        encoded: Iterator[bytes] = map(str.encode, ids)  # type: ignore[arg-type]
        for data in encoded:
            hasher = fresh()
            hasher.update(data)
            append(hasher.digest())
    except TypeError:  # an ID given as bytes: digested as it is
        digests.clear()
        for key in ids:
            hasher = fresh()
            hasher.update(key if isinstance(key, bytes) else key.encode())
            append(hasher.digest())
    return digests


# bit-reversed bytes: spread_order sorts by the head's low bits first
_REVERSED_BITS = np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], dtype=np.uint32)


def spread_order(blob: bytes) -> np.ndarray:
    """Positions of the digests concatenated in ``blob``, sorted by their bit-reversed
    head (first four bytes, big-endian).

    ``idstore.lua`` picks a digest's sub-bucket by the head's low bits, so in this
    order each sub-bucket's share of the digests is one run at every index level,
    which a claim appends whole (``append_sorted``); the claim's new IDs must reach
    it in this order. Pure; a stable sort.
    """
    heads = np.frombuffer(blob, dtype=np.uint8).reshape(-1, DIGEST_BYTES)[:, :4]
    key = ((_REVERSED_BITS[heads[:, 3]] << 24) | (_REVERSED_BITS[heads[:, 2]] << 16)
           | (_REVERSED_BITS[heads[:, 1]] << 8) | _REVERSED_BITS[heads[:, 0]])
    return np.argsort(key, kind="stable")


def split_digests(blob: bytes) -> list[bytes]:
    """Digests concatenated in ``blob`` (a catalog reply), one ``bytes`` each."""
    return [blob[i:i + DIGEST_BYTES] for i in range(0, len(blob), DIGEST_BYTES)]


# (app id, query id) -> (decision, fence) of the last lease taken in this process:
# the lease is taken (and renewed) once per batch, not once per shard. Bound: one entry
# per query this process serves (replaced each batch, dropped when the lease is released).
_FENCES: dict[tuple[str, str], tuple[str, int]] = {}
# (url, app id, query id) that joined the query in this process (join.lua, once).
# Bound: one entry per query this process serves, never per batch.
_JOINED: set[tuple[str, str, str]] = set()
# (url, app id, query id) refused in this process as unknown to its Redis: a task's
# retry is refused at once instead of waiting out QUERY_RECORD_WAIT again (a retry in
# another Python worker of the executor learns it from _unknown_marker). Bound: one
# entry per refused query (each one fails its query).
_UNKNOWN: set[tuple[str, str, str]] = set()
# How long a claim past batch 0 of a query its Redis has no record of waits for the
# record of the query's committed batches before it refuses: the streaming operator's
# record is written by the driver's listener on the progress event of the batch before,
# asynchronously, so the next batch's first claim can come a moment before it.
QUERY_RECORD_WAIT = 10.0


def _task_folder() -> Path | None:
    """Spark's per-application folder of this executor, shared by its Python workers and
    removed with the application; None outside a task."""
    from pyspark import SparkFiles, TaskContext

    if TaskContext.get() is None:
        return None
    try:
        return Path(SparkFiles.getRootDirectory())
    except Exception:  # no folder to share: each process waits once, as before
        return None


def _unknown_marker(seen: tuple[str, str, str]) -> Path | None:
    """A file that tells the other Python workers of this executor that ``seen`` (url,
    app id, query id) waited out :data:`QUERY_RECORD_WAIT` unknown, so that the task's
    retries (in other worker processes, where ``_UNKNOWN`` is empty) refuse at once
    instead of waiting again: with ``spark.task.maxFailures`` 4 a refusal took 40 s.
    Named by a digest: the URL may hold a password. None outside a task."""
    folder = _task_folder()
    if folder is None:
        return None
    digest = hashlib.sha256("\0".join(seen).encode()).hexdigest()[:32]
    return folder / f"dedup-unknown-query-{digest}"


# (url, app id) -> the replicas its claims wait for, read once per process from the
# app's meta when the config leaves it to the recorded count. Bound: one entry per
# (Redis, app id) this process serves.
_REPLICAS: dict[tuple[str, str], int] = {}


@contextmanager
def _topology_refreshed_on_error(client: Any) -> Iterator[None]:
    """Re-read a cluster's slot map when a call through a node client fails, so the
    batch's retry in this worker reaches the slot's new primary after a failover."""
    try:
        yield
    except Exception:
        refresh_topology(client)
        raise


def _pipelined(client: Any, calls: list[tuple[str, Any]]) -> list[Any]:
    """Run ``calls`` (routing key, ``fn(pipe)`` queuing one command) in pipelines; the
    replies in call order. One pipeline for a single Redis; on a cluster one per primary
    (its node client), since a cluster pipeline refuses scripts. A plain pipeline loads
    a script a node does not know (a primary promoted since the script was loaded)."""
    if not is_cluster(client):
        pipe = client.pipeline(transaction=False)
        for _key, fn in calls:
            fn(pipe)
        return list(pipe.execute())
    with _topology_refreshed_on_error(client):
        groups: dict[str, tuple[Any, list[int]]] = {}
        for index, (key, fn) in enumerate(calls):
            node = client.get_node_from_key(key)
            pipe, order = groups.setdefault(
                node.name, (client.get_redis_connection(node).pipeline(transaction=False), []))
            fn(pipe)
            order.append(index)
        replies: list[Any] = [None] * len(calls)
        for pipe, order in groups.values():
            for index, reply in zip(order, pipe.execute(), strict=True):
                replies[index] = reply
        return replies


@dataclass(frozen=True)
class ClaimReply:
    """What one claim returned.

    ``keep`` is the decision over the candidates in the order they were sent
    (negatives, then positives): True for an ID this batch keeps. ``replay``
    is True when the decision of this (query, batch, shard) was already
    recorded; then ``keep`` is None, ``replay_kept`` lists the digests of the
    IDs that decision kept and the tag fields are meaningless. ``mode`` says
    how Bloom negatives were judged: ``trust``, ``journal`` (filter caught up
    with the digests in ``catch_up``) or ``full`` (not used); or ``catch_up``
    (asked for with ``catch_up_first``): nothing was claimed, ``keep`` is None,
    and ``catch_up`` holds what the filter misses to reach ``(epoch, version,
    token)``, after which the caller claims again.
    """

    keep: np.ndarray | None
    replay: bool
    epoch: str
    version: int
    catch_up: list[bytes]
    mode: str
    lookups: int
    replay_kept: list[bytes] = field(default_factory=list)
    token: str = ""

    @classmethod
    def replayed(cls, kept: list[bytes]) -> ClaimReply:
        """The reply for a (query, batch, shard) whose decision was already recorded."""
        return cls(None, True, "", -1, [], "replay", 0, kept)


@dataclass(frozen=True)
class Snapshot:
    """The digest of every live ID of a shard at ``(epoch, version, token)``."""

    epoch: str
    version: int
    ids: list[bytes]
    token: str = ""


def candidates_digest(negatives: list[bytes], positives: list[bytes]) -> str:
    """Order-free digest of a claim's candidate ID digests (rows of a retry arrive in
    any order): their count and the sums, modulo 2**64, of each half."""
    return _blobs_digest(b"".join(negatives), b"".join(positives))


def late_settings(config: DedupConfig) -> str:
    """The settings that decide which rows of a batch are late (and so not claimed under
    ``late_policy`` drop), as text kept with each decision; "" without an event-time
    column (no row is late). A retry under other ones claims other rows."""
    retention = config.retention
    if not retention.event_time_column:
        return ""
    return (f"event_time_column={retention.event_time_column};"
            f"late_policy={retention.late_policy};horizon_seconds={retention.horizon_seconds}")


def describe_late_change(then: str, now: str) -> str:
    """``retention <name> <then> then, <now> now`` for each of :func:`late_settings` that
    differs."""
    def fields(text: str) -> dict[str, str]:
        if not text:
            return {"event_time_column": "None"}
        return dict(part.split("=", 1) for part in text.split(";"))

    old, new = fields(then), fields(now)
    if "None" in (old["event_time_column"], new["event_time_column"]):
        names = ["event_time_column"]
    else:
        names = [name for name in old if old[name] != new.get(name)]
    return "; ".join(f"retention {name} {old.get(name)} then, {new.get(name)} now"
                     for name in names)


def _blobs_digest(*blobs: bytes) -> str:
    """:func:`candidates_digest` of digests already concatenated (a claim's arguments)."""
    words = np.frombuffer(b"".join(blobs), dtype="<u8")
    count = len(words) // 2
    if not count:
        return "0:0"
    low, high = words.reshape(count, 2).sum(axis=0, dtype=np.uint64)  # wraps: order-free
    return f"{count}:{int(low):x}:{int(high):x}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _blob(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("latin-1")


class RedisCatalog:
    """The catalog of one app id. Picklable: holds only the config.

    Every method is one round trip (one Lua call or one pipeline); a failure
    raises :class:`CatalogUnavailableError` (retriable) and changes nothing
    that a retry would not undo.
    """

    def __init__(self, config: DedupConfig, spark_query_id: str | None = None) -> None:
        self.config = config
        # Spark's id of the streaming query this catalog's claims run for, recorded in
        # the lease beside its owner name when they differ (see lease_name)
        self.spark_query_id = spark_query_id

    def _run(self, name: str, keys: list[str], args: list[Any], what: str) -> Any:
        _client, scripts = client_and_scripts(self.config.redis)
        with redis_errors(self.config.redis, what, keys=keys, script=name):
            return scripts[name](keys=keys, args=args)

    def _check_status(self, reply: list[Any], shard: int) -> str:
        status = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        if status == "FORMAT":
            raise CatalogStateError(format_refusal(self.config.app_id, _text(reply[1]),
                                                   self.config.num_shards))
        if status == "SHARDS":
            raise ShardCountMismatchError(
                f"app id {self.config.app_id!r} shard {shard} was created with "
                f"num_shards={int(reply[1])} but this pipeline uses "
                f"num_shards={self.config.num_shards}: use the recorded count, or a new app id "
                "(an empty catalog: duplicates of the records emitted before then pass)"
            )
        if status == "INUSE":
            owner = reply[1].decode() if isinstance(reply[1], bytes) else reply[1]
            left = (f"; its lease lapses in {int(reply[2]) / 1000:.0f} s unless renewed"
                    if len(reply) > 2 else "; it took the app id over from this query")
            raise AppIdInUseError(
                f"app id {self.config.app_id!r} is in use by streaming query {owner}{left}: "
                "give this pipeline its own app id, stop the other query, or set "
                "DedupConfig(allow_shared_app_id=True) if both are the same pipeline"
            )
        return status

    def take_lease(self, query_id: str, spark_query_id: str | None = None) -> int:
        """Take or renew the app id's lease for ``query_id``; return its fence number.

        ``spark_query_id`` (default: this catalog's): Spark's id of the query, recorded
        beside ``query_id`` for :meth:`lease_name`.

        The lease lasts ``lease_seconds`` of Redis's clock after each call and
        is renewed by every batch and progress event of the query. Safe to
        repeat; the fence grows only when the owner changes.

        Raises
        ------
        AppIdInUseError
            Another streaming query holds the lease.
        """
        key = lease_key(self.config.app_id)
        reply = self._run("lease", [key], [query_id, int(self.config.lease_seconds * 1000),
                                           "take", "",
                                           spark_query_id or self.spark_query_id or ""],
                          "taking the app id's lease")
        self._check_status(reply, -1)
        fence = int(reply[1])
        if int(reply[2]) != fence:
            # A new owner: first fence every shard (see fence.lua: a task of an earlier
            # owner that took its fence before this takeover could otherwise claim a
            # shard this query has not claimed yet), then make sure no earlier query
            # left a batch half done.
            self._fence_shards(query_id, fence)
            try:
                self._check_unfinished(query_id)
            except AppIdInUseError:
                self.release(query_id)  # so that query can come back and finish it
                raise
            self._run("lease", [key], [query_id, 0, "checked", fence],
                      "recording the app id's lease")
        return fence

    def _fence_shards(self, query_id: str, fence: int) -> None:
        """Raise every shard's remembered fence to ``fence`` (``fence.lua``). Safe to
        repeat: a fence never goes down."""
        client, scripts = client_and_scripts(self.config.redis)
        app = self.config.app_id

        def raise_fence(key: str) -> Any:
            return lambda pipe: scripts["fence"](keys=[key], args=[query_id, fence],
                                                 client=pipe)

        keys = [state_key(app, shard) for shard in range(self.config.num_shards)]
        with redis_errors(self.config.redis, "fencing the shards", keys=keys, script="fence"):
            _pipelined(client, [(key, raise_fence(key)) for key in keys])

    def lease_name(self, spark_query_id: str) -> str:
        """The name streaming query ``spark_query_id`` (Spark's id) holds the app id's
        lease and records its decisions under: the lease's owner when the lease records
        that Spark id beside it (a ``foreachBatch`` under Spark Connect with option
        ``query.id``), else the Spark id itself. One read; safe to repeat."""
        client, _ = client_and_scripts(self.config.redis)
        with redis_errors(self.config.redis, "reading the app id's lease"):
            owner, spark = client.hmget(lease_key(self.config.app_id), "owner", "spark")
        if owner and spark and _text(spark) == spark_query_id:
            return _text(owner)
        return spark_query_id

    def _check_unfinished(self, query_id: str) -> None:
        """Refuse while another query's claims of a batch Spark never committed remain.

        Such a batch's IDs are in the catalog but were (maybe) never emitted; a new
        query would drop them as seen. Only the query that claimed them can replay
        its decisions, from its checkpoint.
        """
        client, _ = client_and_scripts(self.config.redis)
        app = self.config.app_id
        with redis_errors(self.config.redis, "checking for unfinished batches",
                          keys=[decisions_key(app, 0), queries_key(app)]):
            pipe = client.pipeline(transaction=False)
            for shard in range(self.config.num_shards):
                pipe.hkeys(decisions_key(app, shard))
            pipe.hgetall(queries_key(app))
            *fields, raw = pipe.execute()
        committed = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}
        unfinished: dict[str, int] = {}
        for shard_fields in fields:
            for item in shard_fields:
                qid, _, batch = (item.decode() if isinstance(item, bytes) else item).rpartition(":")
                if qid == query_id or not batch.isdigit():  # ours, or a batch job's token
                    continue
                if int(batch) > committed.get(qid, -1):
                    unfinished[qid] = max(int(batch), unfinished.get(qid, -1))
        if unfinished:
            qid, batch = sorted(unfinished.items())[0]
            raise AppIdInUseError(
                f"app id {app!r}: query {qid} left batch {batch} unfinished (its claims are "
                "recorded, but Spark never committed the batch, so its records may never have "
                "been emitted): restart that query from its checkpoint to finish the batch "
                "(if the checkpoint committed it and the record was lost, `dedup run` records "
                "it at start, a query of your own at its next batch), "
                f"or, if its checkpoint is gone for good, run `dedup forget-query --app-id {app} "
                f"--query-id {qid} --num-shards {self.config.num_shards}` (its unemitted "
                "records then count as seen)"
            )

    def commit_progress(self, query_id: str, committed_batch: int) -> int:
        """Spark committed ``committed_batch`` of ``query_id``: record it, collect older
        decisions (those of that batch stay until the next one). Safe to repeat."""
        client, scripts = client_and_scripts(self.config.redis)

        app = self.config.app_id
        recorded = self._acknowledged(
            "progress", queries_key(app), [query_id, committed_batch],
            f"the committed batch {committed_batch} of streaming query {query_id}",
            also=[meta_key(app)])
        if not int(recorded):
            log.warning("the Redis at %s has no catalog for app id %r: the committed batch "
                        "%s of streaming query %s is not recorded (a late event of a "
                        "stopped query reaching a flushed or replaced Redis)",
                        redact_url(self.config.redis.url), app, committed_batch, query_id)
        calls = self._gc_calls(scripts, query_id, committed_batch)
        with redis_errors(self.config.redis, "collecting decisions", keys=[calls[0][0]],
                          script="gc"):
            return sum(int(x) for x in _pipelined(client, calls))

    def _acknowledged(self, script: str | None, key: str, args: list[Any], what: str,
                      also: Sequence[str] = ()) -> Any:
        """Run ``script`` on ``key`` and the keys ``also`` of its slot (None: ``HSET key
        *args``) and, when claims wait for replicas, ``WAIT`` for them on the primary
        of ``key``; the script's reply.

        A query's records hash to slots of their own ({query}, {app}): on a Redis
        Cluster often another primary than the claimed shard's, whose ``WAIT`` does not
        cover them. Lost in a failover, every later claim of the query would be refused
        as run against another Redis. Raises :class:`ReplicaAckError` when too few
        replicas hold the write (it is safe to repeat)."""
        cfg = self.config
        client, scripts = client_and_scripts(cfg.redis)
        required = self.required_replicas()
        with redis_errors(cfg.redis, what, keys=[key, *also], script=script or ""), \
                _topology_refreshed_on_error(client):
            node = client_for_key(client, key)
            pipe = node.pipeline(transaction=False)
            if script is None:
                pipe.hset(key, *args)
            else:
                scripts[script](keys=[key, *also], args=args, client=pipe)
            if required:
                pipe.set(slot_ack_key(key), what, px=60_000)
                pipe.wait(required, int(cfg.redis.replica_timeout * 1000))
            replies = pipe.execute()
        if required:
            self._check_acked(int(replies[-1]), required, what)
        return replies[0]

    def _gc_calls(self, scripts: Mapping[str, Any], query_id: str,
                  before_batch: int, every: bool = False) -> list[tuple[str, Any]]:
        """``gc.lua`` per shard: decisions of batches before ``before_batch``, or
        (``every``) all of the query's, a batch job's token-keyed ones too."""
        def gc(key: str) -> Any:
            args = [query_id, before_batch, "all" if every else ""]
            return lambda pipe: scripts["gc"](keys=[key], args=args, client=pipe)

        keys = [decisions_key(self.config.app_id, s) for s in range(self.config.num_shards)]
        return [(key, gc(key)) for key in keys]

    def forget_query(self, query_id: str) -> int:
        """Drop every decision of ``query_id`` and its record (its checkpoint is gone).

        Its claimed IDs stay in the catalog: records of a batch it never finished
        count as seen. Safe to repeat; returns the decisions deleted.
        """
        client, _ = client_and_scripts(self.config.redis)
        app, cfg = self.config.app_id, self.config
        with redis_errors(self.config.redis, "forgetting a query", keys=[meta_key(app)]):
            pipe = client.pipeline(transaction=False)
            pipe.hget(meta_key(app), "num_shards")
            for shard in range(cfg.num_shards):
                pipe.hget(state_key(app, shard), "n")
            recorded = next((x for x in pipe.execute() if x is not None), None)
        # Read, never record: a wrong count here must not become the app id's.
        if recorded is not None and int(recorded) != cfg.num_shards:
            raise ShardCountMismatchError(
                f"app id {app!r}: num_shards changed: recorded {int(recorded)}, now "
                f"{cfg.num_shards}; use num_shards={int(recorded)}"
            )
        client, scripts = client_and_scripts(self.config.redis)
        with redis_errors(self.config.redis, "forgetting a query",
                          keys=[decisions_key(app, 0)], script="gc"):
            removed = sum(int(x) for x in _pipelined(
                client, self._gc_calls(scripts, query_id, 0, every=True)))
        with redis_errors(self.config.redis, "forgetting a query", keys=[queries_key(app)]):
            client.hdel(queries_key(app), query_id)
        record = query_apps_key(self.config.redis.user, query_id)
        with redis_errors(self.config.redis, "forgetting a query", keys=[record]):
            client.hdel(record, app)
            forget_legacy_record(self.config.redis, legacy_query_apps_key(query_id), app)
        _JOINED.discard((self.config.redis.url, app, query_id))
        return removed

    def knows_query(self, query_id: str) -> bool:
        """Whether this app id has deduplicated streaming query ``query_id`` in this
        Redis: a claim recorded the app id for the query, or a progress event the batch
        Spark committed. Read-only, safe to repeat.

        A query whose checkpoint has committed batches but that this Redis does not
        know is pointed at another Redis than the one it used (moved, replaced,
        flushed): the IDs it claimed are unknown here.
        """
        client, _ = client_and_scripts(self.config.redis)
        app = self.config.app_id
        record = query_apps_key(self.config.redis.user, query_id)
        with redis_errors(self.config.redis, "looking up a streaming query", keys=[record]):
            if client.hexists(record, app):
                return True
            if app in legacy_record(self.config.redis, legacy_query_apps_key(query_id))[::2]:
                return True
        with redis_errors(self.config.redis, "looking up a streaming query",
                          keys=[queries_key(app)]):
            return bool(client.hexists(queries_key(app), query_id))

    def committed_batch(self, query_id: str) -> int | None:
        """The last batch of streaming query ``query_id`` recorded as committed under
        this app id (:meth:`commit_progress`), or None. Read-only, safe to repeat.

        A query about to run a batch below it is not the query that committed it:
        its query id was reused (a fixed id with a reset checkpoint location).
        """
        client, _ = client_and_scripts(self.config.redis)
        with redis_errors(self.config.redis, "looking up a streaming query",
                          keys=[queries_key(self.config.app_id)]):
            raw = client.hget(queries_key(self.config.app_id), query_id)
        return None if raw is None else int(raw)

    def join_query(self, query_id: str, batch: int, strict: bool = False) -> None:
        """Record that this app id deduplicates ``query_id`` from ``batch`` on. Safe to
        repeat (one round trip per process and query).

        ``strict`` is for the streaming forms, every batch of which leaves a record
        here (a claim, or the committed batch): a query past batch 0 that this Redis
        has never seen is refused, after waiting up to :data:`QUERY_RECORD_WAIT`
        seconds for the record of the batch before (written asynchronously).

        Raises
        ------
        SettingChangedError
            Another app id deduplicated this query from an earlier batch: the app id
            was renamed with the checkpoint kept. Or (``strict``) this Redis has no
            record of the query although Spark committed its earlier batches: it is
            not the Redis the query used. Either way the catalog holds none of the
            IDs claimed so far, so their duplicates would pass.
        """
        app = self.config.app_id
        seen = (self.config.redis.url, app, query_id)
        if seen in _JOINED:
            return
        what = f"the record of streaming query {query_id}"
        key = query_apps_key(self.config.redis.user, query_id)
        with redis_errors(self.config.redis, what, keys=[key]):
            # an earlier release's record of the query, taken over by the script
            legacy = legacy_record(self.config.redis, legacy_query_apps_key(query_id))
        reply = self._acknowledged("join", key, [app, batch, int(strict), *legacy], what)
        if int(reply[0]) == 2:
            self._await_query_record(query_id, batch)
            reply = self._acknowledged("join", key, [app, batch, 0, *legacy], what)
        if int(reply[0]) != 1:
            other, first = _text(reply[1]), int(reply[2])
            raise SettingChangedError(
                f"app id {app!r} joins streaming query {query_id} at batch {batch}, but the "
                f"query has deduplicated with app id {other!r} since batch {first}: a renamed "
                f"app id starts from an empty catalog, and duplicates of every record emitted "
                f"so far would pass. Restore app_id {other!r}; a dedup step added to a running "
                "query needs a new checkpoint location, as Spark requires for a new stateful "
                "operator")
        _JOINED.add(seen)

    def _await_query_record(self, query_id: str, batch: int) -> None:
        """Wait up to :data:`QUERY_RECORD_WAIT` s for the record of a committed batch
        of ``query_id`` (:meth:`commit_progress`); refuse the query without one."""
        app = self.config.app_id
        seen = (self.config.redis.url, app, query_id)
        marker = _unknown_marker(seen)
        waited = seen in _UNKNOWN or (marker is not None and marker.exists())
        deadline = time.monotonic() + (0.0 if waited else QUERY_RECORD_WAIT)
        while True:
            if self.knows_query(query_id):  # the listener's record may land meanwhile
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        _UNKNOWN.add(seen)
        if marker is not None and not waited:
            with suppress(OSError):  # only a retry's shortcut: without it, it waits again
                marker.touch()
        raise SettingChangedError(
            f"streaming query {query_id} is at batch {batch}, but the Redis at "
            f"{redact_url(self.config.redis.url)} has no record of streaming query "
            f"{query_id} under app id {app!r}: it is not the Redis this query deduplicated "
            "with (another URL, or a replaced or flushed Redis) or the app id is not the one "
            "it ran with (renamed, the checkpoint kept), the IDs claimed so far are unknown "
            "there, and their duplicates would pass. Point the dedup config's Redis URL at "
            "the Redis the query used, with the app id it ran with; if that catalog is lost "
            "for good, start with a new checkpoint location (duplicates of records emitted "
            "before are then not caught). A dedup step added to a query that ran without one "
            "needs a new checkpoint location too")

    def _fence(self, lease_owner: str, decision: str) -> int:
        if not lease_owner or self.config.allow_shared_app_id:
            return 0
        key = (self.config.app_id, lease_owner)
        known = _FENCES.get(key)
        if known is not None and known[0] == decision:
            return known[1]
        fence = self.take_lease(lease_owner)
        _FENCES[key] = (decision, fence)
        return fence

    def claim(self, shard: int, decision: str, tag: tuple[str, int, str] | None,
              negatives: list[bytes], positives: list[bytes], lease_owner: str,
              now: float, strict: bool = False, catch_up_first: bool = False) -> ClaimReply:
        """The atomic, idempotent claim of one (query, batch, shard); see ``claim.lua``.

        ``negatives`` and ``positives`` are the candidates' digests (:func:`id_digests`);
        ``tag`` is the ``(epoch, version, token)`` of the caller's Bloom filter;
        ``now`` the batch's timestamp (the same for every attempt of the batch);
        ``strict`` refuses a streaming query this Redis has no record of
        (:meth:`join_query`). ``catch_up_first``: a filter the journal can catch up
        gets a ``catch_up`` reply (:class:`ClaimReply`) and nothing is claimed.

        Safe to repeat. While Redis fails over, the claim is repeated for up to
        ``RedisConfig.failover_wait`` seconds (:func:`dedup.failover.ride_out_failover`);
        a replayed decision is trusted only once the replicas hold it, as a new one.

        Raises
        ------
        CatalogStateError
            The decision of this (query, batch, shard) was recorded for other
            candidate IDs: a second dedup step with this app id in the same
            batch, or an input that changed between attempts. Replaying it
            would drop IDs that were never claimed, so the batch fails instead.
        SettingChangedError
            The query was deduplicated under another app id from an earlier
            batch (:meth:`join_query`): the app id was renamed; or (``strict``)
            this Redis has no record of the query past its first batch.
        CatalogUnavailableError
            Redis could not be reached, or (:class:`ReplicaAckError`) too few
            replicas acknowledged the claim, and a failover wait, if any, ran out:
            the batch fails closed and its retry replays or redoes the claim.
        """
        query_id, _, batch = decision.rpartition(":")

        def claim_once() -> ClaimReply:
            if query_id and batch.isdigit():  # a streaming batch (a batch job's is a token)
                self.join_query(query_id, int(batch), strict)
            key = (self.config.app_id, lease_owner)
            cached = _FENCES.get(key)
            try:
                return self._claim_once(shard, decision, tag, negatives, positives,
                                        lease_owner, now, catch_up_first)
            except AppIdInUseError:
                if cached is None or cached[0] != decision:
                    raise  # refused with the fence just taken: the refusal stands
                # Refused with the fence this process cached for the batch: another query
                # may have taken the app id over since and given it back (refused, or its
                # lease lapsed), raising every shard's fence (fence.lua) above the cached
                # one. Take the lease afresh: the refusal stands only if another query
                # holds it now. (Found by the model's conformance replay, docs/model.md.)
                _FENCES.pop(key, None)
                return self._claim_once(shard, decision, tag, negatives, positives,
                                        lease_owner, now, catch_up_first)

        return ride_out_failover(
            claim_once,
            RedisTopology(self.config.redis), state_key(self.config.app_id, shard),
            self.required_replicas, self.config.redis.failover_wait,
            f"the claim of shard {shard} ({decision})")

    def _claim_once(self, shard: int, decision: str, tag: tuple[str, int, str] | None,
                    negatives: list[bytes], positives: list[bytes], lease_owner: str,
                    now: float, catch_up_first: bool = False) -> ClaimReply:
        app, cfg = self.config.app_id, self.config
        buckets = lookup_buckets(cfg, now)
        keys = [state_key(app, shard), decisions_key(app, shard), journal_key(app, shard)]
        keys += [index_key(app, shard, b) for b in buckets]
        expire_at = (buckets[0] + 1) * cfg.retention.bucket_seconds + cfg.retention.horizon_seconds
        # joined once: the script's arguments and the candidates' digest; the
        # negatives (new IDs, when the filter is current) go in spread order
        negative_blob, positive_blob = b"".join(negatives), b"".join(positives)
        digest = _blobs_digest(negative_blob, positive_blob)
        late = late_settings(cfg)
        order = spread_order(negative_blob)
        negative_blob = (np.frombuffer(negative_blob, dtype=np.uint8)
                         .reshape(-1, DIGEST_BYTES)[order].tobytes())
        args: list[Any] = [
            decision, tag[0] if tag else "", tag[1] if tag else -1, int(now), expire_at,
            cfg.num_shards, "" if cfg.allow_shared_app_id else lease_owner,
            self._fence(lease_owner, decision), cfg.journal_versions, uuid.uuid4().hex,
            negative_blob, positive_blob, tag[2] if tag else "",
            f"{digest}@{late}" if late else digest,  # kept in the decision: see REPLAY
            "1" if catch_up_first else "",
            cfg.retention.horizon_seconds, cfg.retention.bucket_seconds,
        ]
        what = f"the claim of shard {shard} ({decision})"
        required = self.required_replicas()
        if required:
            # One round trip: the claim, then WAIT for the replicas to hold it (its
            # rows go on only then, so a failover to a replica cannot forget it).
            # WAIT counts the writes of its own connection, so both go to the
            # shard's primary through one pipeline (on a cluster, its node client).
            client, scripts = client_and_scripts(cfg.redis)
            with redis_errors(cfg.redis, what, keys=keys, script="claim"), \
                    _topology_refreshed_on_error(client):
                node = client_for_key(client, keys[0])
                pipe = node.pipeline(transaction=False)
                scripts["claim"](keys=keys, args=args, client=pipe)
                pipe.wait(required, int(cfg.redis.replica_timeout * 1000))
                reply, acked = pipe.execute()
                if reply[0] in (b"REPLAY", "REPLAY"):
                    # A replay wrote nothing on this connection, so the WAIT above may
                    # not cover the recorded decision: write, then wait again.
                    pipe = node.pipeline(transaction=False)
                    pipe.set(ack_key(app, shard), decision, px=60_000)
                    pipe.wait(required, int(cfg.redis.replica_timeout * 1000))
                    acked = pipe.execute()[1]
            self._check_acked(int(acked), required, what)
        else:
            reply = self._run("claim", keys, args, what)
        status = self._check_status(reply, shard)
        if status == "REPLAY":
            recorded = _blob(reply[1])
            _version, _, rest = recorded.partition(b"|")
            if rest.startswith(b"\n"):  # the candidates' digest (text), then kept digests
                stored, _, rest = rest[1:].partition(b"\n")
                stored_digest, _, stored_late = stored.decode().partition("@")
                if stored_digest != digest and stored_late != late:
                    # The candidates differ because the rows a batch claims changed:
                    # the settings that decide late records are not those of the
                    # first attempt (a restart with them changed, the batch half done).
                    raise CatalogStateError(
                        f"app id {app!r}: the decision of {decision} shard {shard} was "
                        "recorded under other settings that decide which records are late "
                        f"({describe_late_change(stored_late, late)}), so this attempt "
                        "claims other rows and replaying it would drop IDs that were never "
                        "claimed: restore them until batch "
                        f"{decision.rpartition(':')[2]} is committed, then change them")
                if stored_digest != digest:
                    raise CatalogStateError(
                        f"app id {app!r}: the decision of {decision} shard {shard} was recorded "
                        "for other IDs: two dedup steps with this app id in one batch (give "
                        "each its own app id), or an input that changed between attempts of "
                        "the batch (make the source replayable); replaying it would drop IDs "
                        "that were never claimed"
                    )
            return ClaimReply.replayed(split_digests(rest))
        if status == "CATCHUP":
            epoch, version, token = _text(reply[1]), int(_text(reply[2])), _text(reply[4])
            return ClaimReply(keep=None, replay=False, epoch=epoch, version=version,
                              catch_up=split_digests(_blob(reply[3])), mode="catch_up",
                              lookups=0, token=token)
        if status != "OK":
            raise CatalogStateError(f"unexpected claim reply {status!r} for shard {shard}")
        text = [_text(x) for x in (*reply[1:4], *reply[5:])]
        keep = np.ones(len(negatives) + len(positives), dtype=bool)
        if text[2]:
            dropped = np.array(text[2].split(","), dtype=np.int64)
            negative = dropped < len(negatives)  # sent position -> the caller's position
            dropped[negative] = order[dropped[negative]]
            keep[dropped] = False
        return ClaimReply(keep=keep, replay=False, epoch=text[0], version=int(text[1]),
                          catch_up=split_digests(_blob(reply[4])), mode=text[3],
                          lookups=int(text[4]), token=text[5])

    def required_replicas(self) -> int:
        """Replicas every claim waits for: ``RedisConfig.wait_replicas``, or the count
        recorded for the app id (read once per process)."""
        explicit = self.config.redis.wait_replicas
        if explicit is not None:
            return explicit
        key = (self.config.redis.url, self.config.app_id)
        known = _REPLICAS.get(key)
        if known is None:
            client, _ = client_and_scripts(self.config.redis)
            with redis_errors(self.config.redis, "reading the app id's replica count",
                              keys=[meta_key(self.config.app_id)]):
                raw = client.hget(meta_key(self.config.app_id), "replicas")
            known = _REPLICAS[key] = int(raw or 0)
        return known

    def _check_acked(self, acked: int, required: int, what: str) -> None:
        if acked < required:
            raise ReplicaAckError(
                f"Redis at {redact_url(self.config.redis.url)}: {what} reached {acked} of "
                f"{required} replicas within {self.config.redis.replica_timeout:g} s; a "
                "failover now could forget it, so the batch fails and Spark retries it: check "
                "the replicas' links (INFO replication), or set RedisConfig(wait_replicas=N) "
                "to the replicas that must hold every claim (0 if no replica is ever promoted)"
            )

    def snapshot(self, shard: int, now: float) -> Snapshot:
        """All live IDs of ``shard`` and the version they reflect (one atomic read).

        Safe to repeat; repeated like a claim while Redis fails over."""
        return ride_out_failover(
            lambda: self._snapshot_once(shard, now), RedisTopology(self.config.redis),
            state_key(self.config.app_id, shard), lambda: 0, self.config.redis.failover_wait,
            f"the Bloom snapshot of shard {shard}")

    def _snapshot_once(self, shard: int, now: float) -> Snapshot:
        app = self.config.app_id
        keys = [state_key(app, shard)]
        keys += [index_key(app, shard, b) for b in lookup_buckets(self.config, now)]
        reply = self._run("snapshot", keys, [uuid.uuid4().hex, self.config.num_shards],
                          f"the Bloom snapshot of shard {shard}")
        self._check_status(reply, shard)
        digests = split_digests(b"".join(_blob(x) for x in reply[4:]))
        return Snapshot(_text(reply[1]), int(_text(reply[2])), digests, token=_text(reply[3]))

    def collect_garbage(self, query_id: str, before_batch: int) -> int:
        """Delete decisions of ``query_id`` for batches ``< before_batch``, all shards.

        Safe to repeat. Call only with a batch Spark has committed
        (docs/design.md, invariant 7).
        """
        client, scripts = client_and_scripts(self.config.redis)

        calls = self._gc_calls(scripts, query_id, before_batch)
        with redis_errors(self.config.redis, "garbage collection", keys=[calls[0][0]],
                          script="gc"):
            return sum(int(x) for x in _pipelined(client, calls))

    def release(self, query_id: str) -> None:
        """Give up the app id's lease if ``query_id`` holds it (its query stopped).

        Safe to repeat; a lease held by another query is left alone.
        """
        self._run("lease", [lease_key(self.config.app_id)], [query_id, 0, "release"],
                  "releasing the app id")
        _FENCES.pop((self.config.app_id, query_id), None)

    def catalog_size(self, now: float) -> int:
        """IDs currently remembered (the counts of the live buckets' indexes, all shards,
        one pipeline)."""
        client, _ = client_and_scripts(self.config.redis)
        with redis_errors(self.config.redis, "reading the catalog size",
                          keys=[index_key(self.config.app_id, 0, 0)]):
            pipe = client.pipeline(transaction=False)
            for shard in range(self.config.num_shards):
                for bucket in live_buckets(self.config, now):
                    pipe.hget(index_key(self.config.app_id, shard, bucket), "n")
            return sum(int(x or 0) for x in pipe.execute())

    def contains(self, shard: int, record_id: str, now: float) -> bool:
        """Whether the live buckets of ``shard`` hold ``record_id`` (a read, for tools
        and tests; claims never ask this way). Safe to repeat."""
        _client, scripts = client_and_scripts(self.config.redis)
        keys = [index_key(self.config.app_id, shard, b) for b in lookup_buckets(self.config, now)]
        with redis_errors(self.config.redis, "looking an ID up", keys=keys, script="contains"):
            return bool(scripts["contains"](keys=keys, args=id_digests([record_id])))

    def check_setup(self, layout: Mapping[str, str] | None = None) -> dict[str, str]:
        """Driver-side checks: reachable, safe settings (unless allowed), shard count.

        Records ``num_shards`` and every entry of ``layout`` (:data:`LAYOUT_SETTINGS`)
        on first use and returns what is recorded for the app id (each field is
        set only if absent, so two first users agree on one value); the caller
        compares. Safe to repeat.

        Raises
        ------
        ShardCountMismatchError
            ``num_shards`` differs from the recorded count.
        CatalogStateError
            The app id's catalog was written in another format
            (:data:`CATALOG_FORMAT`) by another release.
        ReplicaAckError
            Fewer replicas are connected than claims wait for (see
            ``RedisConfig.wait_replicas``).
        UnsafeSettingError
            Persistence is off, Redis may evict keys, or the settings cannot be
            read (unless ``RedisConfig(require_persistence=False)``).
        CatalogUnavailableError
            Redis is unreachable.
        """
        client, _ = client_and_scripts(self.config.redis)
        cfg = self.config
        url = redact_url(cfg.redis.url)
        wanted = {"num_shards": str(cfg.num_shards), "catalog_format": CATALOG_FORMAT,
                  **dict(layout or {})}
        with redis_errors(cfg.redis, "the start-up check", keys=[meta_key(cfg.app_id)]):
            client.ping()
            if cfg.redis.require_persistence:
                _check_safe_settings(client, url)
            connected = _connected_replicas(client)
            pipe = client.pipeline(transaction=False)
            pipe.hlen(meta_key(cfg.app_id))
            pipe.hget(meta_key(cfg.app_id), "catalog_format")
            fields, found = pipe.execute()
            if fields and (found is None or _text(found) not in READABLE_FORMATS):
                # a meta without a format was written by a release that stored ID sets
                raise CatalogStateError(format_refusal(
                    cfg.app_id, "1" if found is None else _text(found), cfg.num_shards))
            pipe = client.pipeline(transaction=False)
            if fields and _text(found) != CATALOG_FORMAT:
                # read as it is; recorded now, so that its own release refuses it
                pipe.hset(meta_key(cfg.app_id), "catalog_format", CATALOG_FORMAT)
            for name, value in wanted.items():
                if value != "":  # an unknown value (e.g. a hand-made ID column) is not pinned
                    pipe.hsetnx(meta_key(cfg.app_id), name, value)
            pipe.hgetall(meta_key(cfg.app_id))
            raw = pipe.execute()[-1]
        recorded = {(k.decode() if isinstance(k, bytes) else k):
                    (v.decode() if isinstance(v, bytes) else v) for k, v in raw.items()}
        if int(recorded["num_shards"]) != cfg.num_shards:
            raise ShardCountMismatchError(
                f"app id {cfg.app_id!r}: num_shards changed: recorded {recorded['num_shards']}, "
                f"now {cfg.num_shards}; changing the count would re-shard IDs and let "
                f"duplicates through: use num_shards={recorded['num_shards']}, or a new app id "
                "(an empty catalog: duplicates of the records emitted before then pass)"
            )
        recorded["replicas"] = str(self._record_replicas(client, recorded, connected))
        return recorded

    def _record_replicas(self, client: Any, recorded: dict[str, str], connected: int) -> int:
        """Record the replicas claims wait for; refuse when fewer are connected.

        Without ``wait_replicas`` the count only grows (the most replicas seen at
        a start): a replica that dropped out must be reattached, or the user says
        how many suffice. An explicit count is recorded as the new one.
        """
        cfg = self.config
        explicit = cfg.redis.wait_replicas
        before = int(recorded.get("replicas", 0))
        required = explicit if explicit is not None else max(before, connected)
        if required != before or "replicas" not in recorded:
            with redis_errors(cfg.redis, "recording the replica count",
                              keys=[meta_key(cfg.app_id)]):
                client.hset(meta_key(cfg.app_id), "replicas", required)
        _REPLICAS[(cfg.redis.url, cfg.app_id)] = required
        if connected < required:
            raise ReplicaAckError(
                f"Redis at {redact_url(cfg.redis.url)} has {connected} connected replicas, but "
                f"claims of app id {cfg.app_id!r} wait for {required} (so a failover cannot "
                "forget them): reattach the replicas, or set RedisConfig(wait_replicas=N) to "
                "the replicas that must hold every claim (0 if no replica is ever promoted)"
            )
        return required


def _connected_replicas(client: Any) -> int:
    """Replicas connected to this Redis now, on a cluster the fewest any primary has
    (every primary holds some shard's claims); 0 when INFO is refused."""
    import redis

    try:
        return min(int(node.info("replication").get("connected_slaves", 0))
                   for _name, node in node_clients(client, primaries_only=True))
    except redis.exceptions.NoPermissionError:
        raise  # the user's ACL lacks +info: refused, naming it (redis_errors)
    except redis.exceptions.ResponseError:
        log.warning("Redis refused INFO replication: claims wait for the replicas recorded "
                    "for the app id, or RedisConfig(wait_replicas)")
        return 0


def format_refusal(app_id: str, found: str, num_shards: int) -> str:
    """The one-line refusal of a catalog written in another format."""
    fix = (f"stop the pipeline and run `dedup migrate-catalog --app-id {app_id} --num-shards "
           f"{num_shards}` once (it converts the catalog in place), or keep running the "
           "release that wrote it" if found == "1" else "run the release that wrote it")
    return (f"app id {app_id!r}: its catalog in Redis is in format {found} (written by "
            f"another release of this toolkit), this release reads formats "
            f"{' and '.join(READABLE_FORMATS)} "
            f"only and would not see the IDs already claimed: {fix}")


LAYOUT_SETTINGS = ("num_shards", "num_partitions", "placement", "bucket_seconds", "id_strategy")
"""Settings that decide where a record goes, recorded per app id on first use."""
KAFKA_TOPIC_FIELD = "kafka_topic_id:"
"""Prefix of the meta field recording, for coordinate IDs, the id of the Kafka topic
of that name the app id read (:func:`dedup.ids.tag_kafka_topic_ids`)."""


def _check_safe_settings(client: Any, url: str) -> None:
    """Refuse a Redis that may forget claimed IDs; warn when it may lose the last second."""
    lax: dict[str, list[str]] = {}
    for name, node in node_clients(client):
        # each cluster node: a replica's settings matter once a failover promotes it
        fsync = _check_node_settings(node, f"{url} (node {name})" if name else url)
        if fsync != "always":
            lax.setdefault(fsync, []).append(name)
    for fsync, names in lax.items():
        nodes = f" (nodes {', '.join(names)})" if any(names) else ""
        log.warning(
            "Redis at %s%s has appendfsync=%s: a crash of its machine may lose the last "
            "second of claims, and duplicates of those IDs would pass; appendfsync always "
            "closes that window", url, nodes, fsync)


def _check_node_settings(client: Any, url: str) -> str:
    """Refuse one node's unsafe settings; return its ``appendfsync``."""
    import redis

    optout = "or set RedisConfig(require_persistence=False) if you accept the risk"
    try:
        settings = {**client.config_get("appendonly"), **client.config_get("appendfsync"),
                    **client.config_get("maxmemory"), **client.config_get("maxmemory-policy")}
    except redis.exceptions.NoPermissionError:
        raise  # the user's ACL lacks +config|get: refused, naming it (redis_errors)
    except redis.exceptions.ResponseError as exc:
        raise UnsafeSettingError(
            f"Redis at {url} refused CONFIG GET ({exc}), so persistence and eviction cannot be "
            "verified; if AOF is on and maxmemory-policy is noeviction (managed Redis), "
            "set RedisConfig(require_persistence=False)"
        ) from exc
    text = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes)
                                                          else str(v))
            for k, v in settings.items()}
    if text.get("appendonly") != "yes":
        raise UnsafeSettingError(
            f"Redis at {url} has appendonly=no: a restart would forget claimed IDs; enable it "
            f"with `CONFIG SET appendonly yes` / `appendonly yes` in redis.conf, {optout}"
        )
    policy = text.get("maxmemory-policy", "noeviction")
    if text.get("maxmemory", "0") not in ("0", "") and policy != "noeviction":
        raise UnsafeSettingError(
            f"Redis at {url} has maxmemory-policy={policy}: at maxmemory it evicts keys, and "
            "an evicted ID set lets duplicates through; set maxmemory-policy noeviction (a "
            f"full Redis then fails the batch instead), {optout}"
        )
    return text.get("appendfsync", "")
