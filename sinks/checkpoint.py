"""Strong productions: a partition's output, checkpointed in Redis before it is emitted.

Key layout, built in :mod:`dedup.keys` (``{...}`` is the Redis Cluster hash tag, one
slot per (app, partition); ``<app>`` is the app id, or ``<app id>/<output.name>`` when
that option is set):

``dedup:{<app>:p<partition>}:sink:ckpt:<query id>:<batch>``
    The partition's input rows with their record IDs (Arrow IPC stream, as
    the first attempt received them from Spark), written with ``SET NX``: the
    first attempt wins, and every retry reads the winner back and emits it.
``dedup:{<app>}:sink:ckpt-index``
    Sorted set of ``<query id>:<batch>:<partition>`` scored by batch, to find
    checkpoints for garbage collection after Spark committed their batch.
``dedup:{<app>:p<partition>}:sink:marker``
    Hash with the Redis copy of the partition's batch marker: ``committed``
    (query id and batch of the last commit), ``intent`` (just before a commit,
    with the time) and ``q:<query id>`` (the last batch each query committed:
    another query's commit replaces the Kafka marker, not this).
``dedup:{<app>}:sink:lease``
    Hash ``owner`` (query id), ``until`` (ms, Redis's clock): the output's lease.
``dedup:{~<Redis user>:<query id>}:outputs``
    Hash of the outputs (``<app>``) that the Redis user writes for one streaming
    query (earlier releases: ``dedup:query:{<query id>}:outputs``, shared), each with
    ``<batch>:<run id>:<topic>:<cluster id>``: the last batch it began, the run of
    the query (Spark's run id, new at every start) it began it in, its option
    ``topic`` and its Kafka cluster. A batch another run began is being replayed: an
    output new to the query may not begin it (a renamed output would write it
    again), nor may an output whose topic or cluster changed (its committed
    partitions would not reach the new one).
"""

from __future__ import annotations

import io
import time
from typing import Any

from dedup.config import redact_url
from dedup.failover import ride_out_failover
from dedup.keys import (
    legacy_query_outputs_key,
    query_outputs_key,
    sink_checkpoint_index_key,
    sink_checkpoint_key,
    sink_lease_key,
    sink_marker_key,
    sink_meta_key,
)
from dedup.redis_client import RedisTopology, connect, legacy_record, redis_errors
from dedup.redis_nodes import node_clients
from sinks.config import sink_identity
from sinks.exceptions import (
    CheckpointStateError,
    CheckpointUnavailableError,
    OutputChangedError,
    OutputNameInUseError,
    UnsafeSinkSettingError,
)

LEASE_RETRY_S = 0.2
"""Pause between two takes of an output lease that another query holds (take_lease)."""

# (Redis url, output, query id, run id) -> the last batch this process recorded
_JOINED: dict[tuple[str, str, str, str], int] = {}


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def encode_batches(batches: list[Any]) -> bytes:
    """Arrow IPC bytes of a partition's input batches (no pickle: a checkpoint is data).

    The batches hold the rows with their record IDs exactly as the first
    attempt saw them; zero rows encode as ``b""``.
    """
    import pyarrow as pa

    if not batches:
        return b""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue()


def decode_batches(data: bytes) -> list[Any]:
    """Inverse of :func:`encode_batches`."""
    import pyarrow as pa

    if not data:
        return []
    try:
        return list(pa.ipc.open_stream(io.BytesIO(data)))
    except (pa.ArrowException, ValueError) as exc:
        raise CheckpointStateError(
            "a sink checkpoint could not be decoded; it is corrupt or was written by "
            "something else under the toolkit's keys"
        ) from exc


class CheckpointStore:
    """Per-(app, query, batch, partition) checkpoints in Redis.

    Safe to use from many processes; the client is created lazily and cached
    per worker process and Redis config, so an instance is cheap to pickle and ship.
    """

    def __init__(self, redis_config: Any, app_id: str, output_name: str = "") -> None:
        self.redis_config = redis_config
        self.app_id = app_id
        self.output_name = output_name

    @classmethod
    def for_config(cls, config: Any) -> CheckpointStore:
        """The store of a :class:`~sinks.config.SinkConfig` (its app id and output name)."""
        return cls(config.redis, config.app_id, config.output_name)

    @property
    def identity(self) -> str:
        return sink_identity(self.app_id, getattr(self, "output_name", ""))

    def __getstate__(self) -> dict[str, Any]:
        return {"redis_config": self.redis_config, "app_id": self.app_id,
                "output_name": self.output_name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def client(self) -> Any:
        """This process's client for the store's :class:`~dedup.config.RedisConfig`,
        shared with the catalog (:func:`dedup.redis_client.connect`); redis-py's
        errors as they are."""
        return connect(self.redis_config)[0]

    def key(self, query_id: str, batch: int, partition: int) -> str:
        return sink_checkpoint_key(self.identity, query_id, batch, partition)

    @property
    def index_key(self) -> str:
        return sink_checkpoint_index_key(self.identity)

    def marker_key(self, partition: int) -> str:
        """Hash with the Redis copy of a partition's batch marker (``committed``,
        ``intent``): Kafka deletes its own after ``offsets.retention.minutes``."""
        return sink_marker_key(self.identity, partition)

    @property
    def meta_key(self) -> str:
        return sink_meta_key(self.identity)

    @property
    def lease_key(self) -> str:
        return sink_lease_key(self.identity)

    def _script(self, name: str, keys: list[str], args: list[Any], what: str) -> list[Any]:
        """Run script ``dedup/lua/<name>.lua``, registered once per client
        (:mod:`dedup.redis_client`)."""
        def run() -> list[Any]:
            return list(connect(self.redis_config)[1][name](keys=keys, args=args))

        return list(self._call(what, run, keys, name))

    def _lease(self, query_id: str, lease_seconds: float, mode: str) -> list[Any]:
        # The script counts milliseconds of Redis's clock (PEXPIRE); a lease under
        # one is still one (0 would mean none).
        millis = max(1, int(lease_seconds * 1000)) if lease_seconds > 0 else 0
        return self._script("sink_lease", [self.lease_key], [query_id, millis, mode],
                            f"{mode} the lease of sink output {self.identity!r}")

    def join_query(self, query_id: str, run_id: str, batch: int, topic: str = "",
                   cluster: str = "") -> None:
        """Record that this output begins ``batch`` of streaming query ``query_id`` in
        its run ``run_id``, to its option ``topic`` on the Kafka cluster whose id is
        ``cluster``. Call before anything of the batch is written; safe to repeat (one
        round trip per process and batch).

        Raises
        ------
        OutputChangedError
            The batch was cut short (a driver crash after the sink's commit, before
            Spark's) and is being replayed, and the output changed since: this
            output is new to the query while another output of it began the batch
            (if it is that one renamed, it has no marker of the batch and would
            write it again), or it began the batch to another topic or Kafka
            cluster (the partitions it committed there would be skipped, never
            reaching the new one). Fatal: a retry sees the same record.
        """
        seen = (self.redis_config.url, self.identity, query_id, run_id)
        if _JOINED.get(seen) == batch:
            return
        what = f"record that sink output {self.identity!r} begins batch {batch}"
        key = query_outputs_key(self.redis_config.user, query_id)
        # an earlier release's record of the query, taken over by the script
        legacy = self._call(what, lambda: legacy_record(
            self.redis_config, legacy_query_outputs_key(query_id)), [key])
        reply = self._script("sink_join", [key],
                             [self.identity, batch, run_id, topic, cluster, *legacy], what)
        if int(reply[0]) == 0:
            other = _text(reply[1])
            raise OutputChangedError(
                f"sink output {self.identity!r} (app.id/output.name) is new to streaming "
                f"query {query_id}, which replays batch {batch}: output {other!r} began batch "
                f"{int(reply[2])} before the query restarted, and Spark never recorded it as "
                f"done. If {self.identity!r} is {other!r} renamed, it would write again what "
                f"{other!r} committed of that batch (duplicates): restart once with the old "
                f"app.id and output.name until batch {batch} is committed, then rename (an "
                "output added at this restart waits the same way)")
        if int(reply[0]) == 2:
            # the topic changed, or else the cluster
            what, old, now = (("topic", _text(reply[1]), f"its option topic is now {topic!r}")
                              if _text(reply[1]) != topic else
                              ("Kafka cluster", _text(reply[3]), "option kafka.bootstrap.servers "
                               f"now reaches cluster {cluster!r}"))
            raise OutputChangedError(
                f"sink output {self.identity!r} replays batch {batch} of streaming query "
                f"{query_id}, which it began writing to {what} {old!r} before the query "
                f"restarted, and {now}: the partitions it committed went to {old!r} and would "
                f"be skipped (their batch markers say done), never reaching the new {what}. "
                f"Restart once with the old {what} until batch {batch} is committed, then "
                "change it")
        if len(_JOINED) > 4096:  # one entry per (output, query run): bounded anyway
            _JOINED.clear()
        _JOINED[seen] = batch

    def take_lease(self, query_id: str, lease_seconds: float, patience: float = 0.0) -> None:
        """Take or renew this output's lease for ``query_id`` for ``lease_seconds``.

        While another query holds it, tries again for up to ``patience`` seconds: a
        query that stopped holds it until the session's listener hears the stop, which
        Spark tells it asynchronously, and a new query on the output may start first.
        Safe to repeat. Raises :class:`~sinks.exceptions.OutputNameInUseError`
        (fatal) when another query still holds it then: a second pipeline on this
        (app_id, output.name) would overwrite the first one's batch markers.
        """
        deadline = time.monotonic() + patience
        while True:
            held, owner, left_ms = self._lease(query_id, lease_seconds, "take")
            if held or time.monotonic() >= deadline:
                break
            time.sleep(min(LEASE_RETRY_S, max(0.0, deadline - time.monotonic())))
        if not held:
            owner = owner.decode() if isinstance(owner, bytes) else str(owner)
            waited = f" (after waiting {patience:g} s for its release)" if patience else ""
            raise OutputNameInUseError(
                f"sink output {self.identity!r} is written by streaming query {owner}{waited}; "
                f"its lease lapses in {int(left_ms) / 1000:.0f} s unless it writes again. Two "
                "queries writing one output would overwrite each other's batch markers: stop "
                "that query (its lease is released when it terminates), give this one its own "
                "option app.id or output.name, or, if that query is gone, start again once "
                "the lease has lapsed"
            )

    def release_lease(self, query_id: str) -> None:
        """Give up this output's lease if ``query_id`` holds it (its query stopped).

        Safe to repeat; a lease held by another query is left alone.
        """
        self._lease(query_id, 0, "release")

    def unreachable(self, what: str, exc: BaseException) -> CheckpointUnavailableError:
        """The one-line error of a Redis call that failed while trying to ``what``."""
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())
        return CheckpointUnavailableError(
            f"the sink's checkpoint Redis at {redact_url(self.redis_config.url)} is unreachable "
            f"while trying to {what} ({detail}); the task fails and Spark retries it. Check "
            "that Redis runs and option redis.url (password, TLS)")

    def _call(self, what: str, fn: Any, keys: list[str] | None = None,
              script: str = "") -> Any:
        """``fn()`` (a Redis call that is safe to repeat), repeated with backoff while a
        Redis Cluster fails over, for up to ``failover_wait`` seconds, as a claim is
        (:func:`dedup.failover.ride_out_failover`): Spark's task attempts come one
        right after the other and would all fail inside the failover. Other errors,
        and the last one once the wait is used up, raise
        :class:`CheckpointUnavailableError` (the task fails); a refusal of the Redis
        user's ACL raises :class:`~dedup.exceptions.RedisPermissionError` (fatal),
        naming the keys the call touches (``keys``) or the command (of Lua script
        ``script``) to grant."""
        def once() -> Any:
            with redis_errors(self.redis_config, what, self.unreachable, keys=keys or (),
                              script=script):
                return fn()

        # the sink raises no ReplicaAckError: only a cluster's failover errors are waited out
        return ride_out_failover(once, RedisTopology(self.redis_config), "", lambda: 0,
                                 self.redis_config.failover_wait,
                                 f"sink: {what}", unavailable=(CheckpointUnavailableError,))

    def record_intent(self, query_id: str, batch: int, partition: int) -> None:
        """Note that ``batch`` is about to be committed to Kafka (with the time, ms)."""
        import time

        value = f"{query_id}:{batch}:{int(time.time() * 1000)}"
        self._call(f"record the commit intent of batch {batch} partition {partition}",
                   lambda: self.client.hset(self.marker_key(partition), mapping={
                       "intent": value, f"i:{query_id}": value}), [self.marker_key(partition)])

    def record_committed(self, query_id: str, batch: int, partition: int) -> None:
        """Note that ``batch`` is committed to Kafka. Safe to repeat."""
        self._call(f"record the commit of batch {batch} partition {partition}",
                   lambda: self.client.hset(self.marker_key(partition), mapping={
                       "committed": f"{query_id}:{batch}", f"q:{query_id}": batch}),
                   [self.marker_key(partition)])

    def read_marker_copy(self, partition: int, query_id: str = ""
                         ) -> tuple[tuple[str, int] | None, tuple[str, int, int] | None]:
        """``(committed (query, batch), intent (query, batch, ms))``, each None if absent.

        Each is the partition's last one, or, when ``query_id`` has one, that
        query's own (another query's commits do not replace it). Read-only.
        """
        raw = self._call(f"read the marker copy of partition {partition}",
                         lambda: self.client.hmget(self.marker_key(partition), "committed",
                                                   "intent", f"q:{query_id}", f"i:{query_id}"),
                         [self.marker_key(partition)])
        committed = intent = None
        if raw[2] is not None and query_id:
            committed = (query_id, int(raw[2]))
        elif raw[0] is not None:
            qid, _, batch = raw[0].decode().rpartition(":")
            committed = (qid, int(batch))
        own_intent = raw[3] if raw[3] is not None and query_id else raw[1]
        if own_intent is not None:
            rest, _, ms = own_intent.decode().rpartition(":")
            qid, _, batch = rest.rpartition(":")
            intent = (qid, int(batch), int(ms))
        return committed, intent

    def set_marker_retention(self, minutes: int) -> None:
        """Remember the broker's ``offsets.retention.minutes`` (driver, at start)."""
        self._call("record the marker retention",
                   lambda: self.client.hset(self.meta_key, "retention_ms", minutes * 60_000),
                   [self.meta_key])

    def marker_retention_ms(self) -> int:
        """The recorded retention; Kafka's default (7 days) when never recorded."""
        raw = self._call("read the marker retention",
                         lambda: self.client.hget(self.meta_key, "retention_ms"), [self.meta_key])
        return int(raw) if raw is not None else 7 * 24 * 3600 * 1000

    def check_persistence(self) -> None:
        """Refuse a Redis without AOF, or one that cannot show it has AOF (a restart would
        lose checkpoints). Safe to repeat."""
        if not self.redis_config.require_persistence:
            return
        import redis

        with redis_errors(self.redis_config, "check its persistence settings",
                          self.unreachable):
            try:
                # every node of a cluster: a failover makes a replica the primary
                found = {name: node.config_get("appendonly").get("appendonly")
                         for name, node in node_clients(self.client)}
            except redis.exceptions.NoPermissionError:
                raise  # the user's ACL lacks +config|get: refused, naming it (redis_errors)
            except redis.ResponseError as exc:
                # CONFIG disabled or not permitted (managed Redis): persistence cannot
                # be verified, so fail closed as the dedup core does; the operator
                # who knows it is on says so with the opt-out.
                raise UnsafeSinkSettingError(
                    f"the checkpoint Redis refused CONFIG GET appendonly ({exc}), so "
                    "persistence cannot be verified; if AOF is known to be on (managed "
                    "Redis), set option redis.require.persistence=false"
                ) from exc
        off = sorted(name or "" for name, value in found.items() if value != "yes")
        if off:
            where = f" (node {', '.join(off)})" if off != [""] else ""
            raise UnsafeSinkSettingError(
                f"the checkpoint Redis{where} runs with appendonly=no: a Redis restart would lose "
                "sink checkpoints and let a retry emit different rows. Enable AOF "
                "(CONFIG SET appendonly yes) or set option redis.require.persistence=false"
            )

    def put_if_absent(self, query_id: str, batch: int, partition: int,
                      data: bytes) -> tuple[bytes, bool]:
        """Store ``data`` unless a checkpoint exists; return ``(stored data, won)``.

        Safe to repeat: every caller gets the first attempt's records back.
        Redis errors raise :class:`CheckpointUnavailableError` (the task fails).
        """
        key = self.key(query_id, batch, partition)

        def write() -> tuple[bool, Any]:
            # Index first: a checkpoint that exists is always findable by GC.
            self.client.zadd(self.index_key, {f"{query_id}:{batch}:{partition}": batch})
            if self.client.set(key, data, nx=True):
                return True, data
            # lost or not: a repeat whose first SET's reply was lost reads its own data
            return False, self.client.get(key)

        won, stored = self._call(
            f"write the sink checkpoint of batch {batch} partition {partition}", write,
            [self.index_key, key])
        if won:
            return data, True
        if stored is None:
            raise CheckpointStateError(
                f"the sink checkpoint of batch {batch} partition {partition} vanished between "
                "SET NX and GET: was it garbage-collected by another query with this app_id?"
            )
        return bytes(stored), False

    def delete(self, query_id: str, batch: int, partition: int) -> None:
        """Delete one checkpoint that this call's caller created. Safe to repeat."""
        self._call(f"delete the checkpoint of batch {batch} partition {partition}",
                   lambda: (self.client.delete(self.key(query_id, batch, partition)),
                            self.client.zrem(self.index_key, f"{query_id}:{batch}:{partition}")),
                   [self.key(query_id, batch, partition), self.index_key])

    def collect_garbage(self, query_id: str, before_batch: int) -> int:
        """Delete this query's checkpoints of batches ``< before_batch``; return how many.

        Call only for batches Spark has committed. Safe to repeat.
        """
        def collect() -> int:
            members = self.client.zrangebyscore(self.index_key, "-inf", f"({before_batch}")
            removed = 0
            for raw in members:
                member = raw.decode() if isinstance(raw, bytes) else str(raw)
                qid, batch, partition = member.rsplit(":", 2)
                if qid != query_id:
                    continue
                removed += int(self.client.delete(self.key(qid, int(batch), int(partition))))
                self.client.zrem(self.index_key, member)
            return removed

        return int(self._call("collect the checkpoints of committed batches", collect,
                              [self.index_key, self.key(query_id, 0, 0)]))

    def drop_query(self, query_id: str) -> int:
        """Delete every checkpoint of ``query_id`` (after the query is gone for good)."""
        return self.collect_garbage(query_id, 2**62)


def release_on_stop(spark: Any, spark_query_id: str, owner: str, config: Any) -> bool:
    """Release ``config``'s output lease held by ``owner`` when the streaming query
    ``spark_query_id`` of ``spark`` terminates; return whether that was arranged.

    Without it the lease lapses ``lease.seconds`` after the query's last write, and
    a new query on the output (a checkpoint reset) is refused until then.
    Safe to repeat. Arranged only when ``spark``'s query manager runs that
    query (its listener hears only its own queries).
    """
    if not (config.strong_productions and config.redis is not None and config.lease_seconds):
        return False
    from dedup.gc import session_listener

    try:
        if spark.streams.get(spark_query_id) is None:
            return False
    except Exception:  # py4j errors of a stopping session: no release
        return False
    store = CheckpointStore.for_config(config)
    session_listener(spark).on_stop(spark_query_id, f"the lease of sink output {store.identity}",
                                    lambda: store.release_lease(owner))
    return True
