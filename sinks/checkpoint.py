"""Strong productions: a partition's output, checkpointed in Redis before it is emitted.

Key layout (``{...}`` is the Redis Cluster hash tag, one slot per (app, partition);
``<app>`` is the app id, or ``<app id>/<output.name>`` when that option is set):

``dedup:{<app>:p<partition>}:sink:ckpt:<query id>:<batch>``
    The partition's input rows with their record IDs (Arrow IPC stream, as
    the first attempt received them from Spark), written with ``SET NX``: the
    first attempt wins, and every retry reads the winner back and emits it.
``dedup:{<app>}:sink:ckpt-index``
    Sorted set of ``<query id>:<batch>:<partition>`` scored by batch, to find
    checkpoints for garbage collection after Spark committed their batch.
"""

from __future__ import annotations

import io
from typing import Any

from dedup.constants import KEY_PREFIX
from sinks.config import sink_identity
from sinks.exceptions import (
    CheckpointStateError,
    CheckpointUnavailableError,
    UnsafeSinkSettingError,
)

_CLIENTS: dict[tuple[str, float], Any] = {}


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
    per worker process, so an instance is cheap to pickle and ship.
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
        cache_key = (self.redis_config.url, self.redis_config.socket_timeout)
        client = _CLIENTS.get(cache_key)
        if client is None:
            client = _CLIENTS[cache_key] = self.redis_config.client()
        return client

    def key(self, query_id: str, batch: int, partition: int) -> str:
        return f"{KEY_PREFIX}:{{{self.identity}:p{partition}}}:sink:ckpt:{query_id}:{batch}"

    @property
    def index_key(self) -> str:
        return f"{KEY_PREFIX}:{{{self.identity}}}:sink:ckpt-index"

    def marker_key(self, partition: int) -> str:
        """Hash with the Redis copy of a partition's batch marker (``committed``,
        ``intent``): Kafka deletes its own after ``offsets.retention.minutes``."""
        return f"{KEY_PREFIX}:{{{self.identity}:p{partition}}}:sink:marker"

    @property
    def meta_key(self) -> str:
        return f"{KEY_PREFIX}:{{{self.identity}}}:sink:meta"

    def _call(self, what: str, fn: Any) -> Any:
        import redis

        try:
            return fn()
        except redis.RedisError as exc:
            raise CheckpointUnavailableError(
                f"could not {what}: {type(exc).__name__}: {exc}; the task fails and Spark "
                "retries it"
            ) from exc

    def record_intent(self, query_id: str, batch: int, partition: int) -> None:
        """Note that ``batch`` is about to be committed to Kafka (with the time, ms)."""
        import time

        value = f"{query_id}:{batch}:{int(time.time() * 1000)}"
        self._call(f"record the commit intent of batch {batch} partition {partition}",
                   lambda: self.client.hset(self.marker_key(partition), "intent", value))

    def record_committed(self, query_id: str, batch: int, partition: int) -> None:
        """Note that ``batch`` is committed to Kafka. Safe to repeat."""
        self._call(f"record the commit of batch {batch} partition {partition}",
                   lambda: self.client.hset(self.marker_key(partition), "committed",
                                            f"{query_id}:{batch}"))

    def read_marker_copy(self, partition: int
                         ) -> tuple[tuple[str, int] | None, tuple[str, int, int] | None]:
        """``(committed (query, batch), intent (query, batch, ms))``, each None if absent."""
        raw = self._call(f"read the marker copy of partition {partition}",
                         lambda: self.client.hmget(self.marker_key(partition),
                                                   "committed", "intent"))
        committed = intent = None
        if raw[0] is not None:
            qid, _, batch = raw[0].decode().rpartition(":")
            committed = (qid, int(batch))
        if raw[1] is not None:
            rest, _, ms = raw[1].decode().rpartition(":")
            qid, _, batch = rest.rpartition(":")
            intent = (qid, int(batch), int(ms))
        return committed, intent

    def set_marker_retention(self, minutes: int) -> None:
        """Remember the broker's ``offsets.retention.minutes`` (driver, at start)."""
        self._call("record the marker retention",
                   lambda: self.client.hset(self.meta_key, "retention_ms", minutes * 60_000))

    def marker_retention_ms(self) -> int:
        """The recorded retention; Kafka's default (7 days) when never recorded."""
        raw = self._call("read the marker retention",
                         lambda: self.client.hget(self.meta_key, "retention_ms"))
        return int(raw) if raw is not None else 7 * 24 * 3600 * 1000

    def check_persistence(self) -> None:
        """Refuse a Redis without AOF, or one that cannot show it has AOF (a restart would
        lose checkpoints). Safe to repeat."""
        if not self.redis_config.require_persistence:
            return
        import redis

        try:
            appendonly = self.client.config_get("appendonly").get("appendonly")
        except redis.ResponseError as exc:
            # CONFIG disabled or not permitted (managed Redis): persistence cannot
            # be verified, so fail closed as the dedup core does; the operator
            # who knows it is on says so with the opt-out.
            raise UnsafeSinkSettingError(
                f"the checkpoint Redis refused CONFIG GET appendonly ({exc}), so persistence "
                "cannot be verified; if AOF is known to be on (managed Redis), set option "
                "redis.require_persistence=false"
            ) from exc
        except redis.RedisError as exc:
            raise CheckpointUnavailableError(
                f"checkpoint Redis unreachable: {type(exc).__name__}; check option redis.url"
            ) from exc
        if appendonly != "yes":
            raise UnsafeSinkSettingError(
                "the checkpoint Redis runs with appendonly=no: a Redis restart would lose "
                "sink checkpoints and let a retry emit different rows. Enable AOF "
                "(CONFIG SET appendonly yes) or set option redis.require_persistence=false"
            )

    def put_if_absent(self, query_id: str, batch: int, partition: int,
                      data: bytes) -> tuple[bytes, bool]:
        """Store ``data`` unless a checkpoint exists; return ``(stored data, won)``.

        Safe to repeat: every caller gets the first attempt's records back.
        Redis errors raise :class:`CheckpointUnavailableError` (the task fails).
        """
        import redis

        key = self.key(query_id, batch, partition)
        try:
            # Index first: a checkpoint that exists is always findable by GC.
            self.client.zadd(self.index_key, {f"{query_id}:{batch}:{partition}": batch})
            won = bool(self.client.set(key, data, nx=True))
            if won:
                return data, True
            stored = self.client.get(key)
        except redis.RedisError as exc:
            raise CheckpointUnavailableError(
                f"could not write the sink checkpoint of batch {batch} partition {partition}: "
                f"{type(exc).__name__}: {exc}; the task fails and Spark retries it"
            ) from exc
        if stored is None:
            raise CheckpointStateError(
                f"the sink checkpoint of batch {batch} partition {partition} vanished between "
                "SET NX and GET: was it garbage-collected by another query with this app_id?"
            )
        return bytes(stored), False

    def collect_garbage(self, query_id: str, before_batch: int) -> int:
        """Delete this query's checkpoints of batches ``< before_batch``; return how many.

        Call only for batches Spark has committed. Safe to repeat.
        """
        import redis

        try:
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
        except redis.RedisError as exc:
            raise CheckpointUnavailableError(
                f"sink checkpoint GC failed: {type(exc).__name__}: {exc}"
            ) from exc

    def drop_query(self, query_id: str) -> int:
        """Delete every checkpoint of ``query_id`` (after the query is gone for good)."""
        return self.collect_garbage(query_id, 2**62)
