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
