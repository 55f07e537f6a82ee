"""The sink's checkpoint Redis failing: one line naming the Redis (password hidden) and
the fix, whichever call failed (a frozen Redis showed "could not record the marker
retention: TimeoutError" with neither, chaos_full runs 128 and 152)."""

from __future__ import annotations

import pytest

from dedup.config import RedisConfig
from sinks import CheckpointUnavailableError
from sinks.checkpoint import CheckpointStore

URL = "redis://:s3cret@127.0.0.1:1/0"  # nothing listens on port 1: refused at once


@pytest.mark.parametrize("call", [
    lambda store: store.put_if_absent("q", 3, 0, b"rows"),
    lambda store: store.delete("q", 3, 0),
    lambda store: store.collect_garbage("q", 3),
    lambda store: store.record_intent("q", 3, 0),
], ids=["checkpoint", "delete", "gc", "intent"])
def test_every_checkpoint_call_names_the_redis_and_the_fix(call: object) -> None:
    store = CheckpointStore(RedisConfig(URL, socket_timeout=1.0, replica_timeout=0.5),
                            "ckpt-errors")
    with pytest.raises(CheckpointUnavailableError) as caught:
        call(store)  # type: ignore[operator]
    message = str(caught.value)
    assert "Redis at redis://:***@127.0.0.1:1/0" in message, message
    assert "s3cret" not in message
    assert "redis.url" in message and "retries" in message, message
    assert "\n" not in message


def test_a_cluster_never_reached_fails_with_the_sinks_error_once_the_wait_is_over() -> None:
    """A Redis Cluster no node of which answers: every repeat of the failover wait fails
    to connect, and the call then fails with the sink's one-line error (the wait's
    topology refresh, which creates the client again, never raises a redis-py error)."""
    store = CheckpointStore(RedisConfig("redis+cluster://:s3cret@127.0.0.1:1", socket_timeout=1.0,
                                        replica_timeout=0.5, failover_wait=0.5), "ckpt-errors")
    with pytest.raises(CheckpointUnavailableError) as caught:
        store.record_intent("q", 3, 0)
    assert "s3cret" not in str(caught.value)
