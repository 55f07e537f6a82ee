"""A bounded wait inside a claim while Redis fails over (``RedisConfig.failover_wait``).

When a Redis Cluster primary dies, its slots have no primary for
``cluster-node-timeout`` plus the election, and the promoted replica has no
replica of its own until one attaches (the old primary, back). A claim in that
window fails; Spark's few task attempts come one right after the other, so all
of them can fail inside it and the streaming query dies. A claim is idempotent
(a repeat of the same (query, batch, shard) replays the recorded decision, and
a replay is itself ``WAIT``-ed for the replicas), so the claim may instead be
repeated here, with backoff, until the failover is over or the wait runs out;
then the last error is raised unchanged and the batch fails closed as before.

Only errors a failover causes are waited out: on a Redis Cluster a lost
connection to a node, a timeout, ``CLUSTERDOWN``, ``TRYAGAIN``, ``MOVED`` /
``ASK``, ``READONLY`` (a demoted node) or a slot the client cannot route; on
any Redis a :class:`~dedup.exceptions.ReplicaAckError` while the slot's
primary has fewer connected replicas than claims wait for. Never a refusal
(a Redis error reply, a wrong password), a state error, another query's lease
or a changed shard count: repeating those cannot help.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from dedup.exceptions import CatalogUnavailableError, DedupError, ReplicaAckError

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_BACKOFF = 0.2
"""Seconds before the first repeat; doubled after each one up to :data:`MAX_BACKOFF`."""
MAX_BACKOFF = 2.0
"""Longest pause between two repeats: a promotion is noticed within this long."""


class Topology(Protocol):
    """What the wait needs to know of the Redis behind the catalog."""

    @property
    def cluster(self) -> bool:
        """Whether it is a Redis Cluster (only a cluster fails over by itself)."""
        ...

    def refresh(self) -> None:
        """Re-read which node serves which slot; never raises."""
        ...

    def connected_replicas(self, key: str) -> int:
        """Replicas connected now to the primary that serves ``key`` and past their
        initial sync (able to acknowledge); raises the toolkit's errors when that
        primary cannot be asked."""
        ...


def _transient_cause(cause: BaseException | None) -> bool:
    """Whether the redis-py error under a :class:`CatalogUnavailableError` is one a
    cluster failover raises (a node gone, a slot without a primary or moved)."""
    import redis
    from redis.exceptions import (
        CrossSlotTransactionError,
        InvalidPipelineStack,
        RedisClusterException,
    )

    if isinstance(cause, (redis.exceptions.AuthenticationError,
                          redis.exceptions.AuthorizationError)):
        return False  # a wrong password or ACL stays wrong
    if isinstance(cause, (CrossSlotTransactionError, InvalidPipelineStack)):
        return False  # our misuse of the client, not the cluster's state
    return isinstance(cause, (
        redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
        redis.exceptions.ClusterDownError, redis.exceptions.TryAgainError,
        redis.exceptions.AskError,  # MovedError too
        redis.exceptions.ReadOnlyError, RedisClusterException,
    ))


def is_failover_error(exc: BaseException, topology: Topology, key: str,
                      required: Callable[[], int],
                      unavailable: tuple[type[DedupError], ...] = (CatalogUnavailableError,)
                      ) -> bool:
    """Whether ``exc``, raised by a claim of the shard whose state is ``key``, may be a
    failover under way, so that repeating the claim later may succeed.

    ``unavailable``: the caller's errors for an unreachable Redis (the redis-py error
    as their cause). Re-reads the topology. Safe to repeat; never raises.
    """
    if isinstance(exc, ReplicaAckError):
        # Too few replicas acknowledged. A failover when the slot's primary (of now)
        # has fewer replicas than claims wait for; a slow replica link otherwise,
        # which a repeat does not fix.
        topology.refresh()
        try:
            return topology.connected_replicas(key) < required()
        except CatalogUnavailableError as probe:
            return topology.cluster and _transient_cause(probe.__cause__)
        except DedupError:
            return False
    if not isinstance(exc, unavailable) or not topology.cluster:
        return False  # a single Redis does not fail over by itself: fail as before
    return _transient_cause(exc.__cause__)


def ride_out_failover(attempt: Callable[[], T], topology: Topology, key: str,
                      required: Callable[[], int], wait_seconds: float, what: str,
                      clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], None] = time.sleep,
                      unavailable: tuple[type[DedupError], ...] = (CatalogUnavailableError,)
                      ) -> T:
    """Run ``attempt`` and repeat it, with backoff, while it fails with a failover
    error (:func:`is_failover_error`), for up to ``wait_seconds``.

    ``attempt`` must be safe to repeat (a claim is). ``key`` is the shard's state
    key (it names the slot), ``required`` returns the replicas claims wait for
    (asked only after a :class:`ReplicaAckError`). ``unavailable``: the errors
    ``attempt`` raises for an unreachable Redis (the sink's checkpoint store has
    its own).

    Returns
    -------
    What ``attempt`` returned, once it succeeded.

    Raises
    ------
    DedupError
        What the last attempt raised: at once when the error is not a failover's
        (or ``wait_seconds`` is 0), else once ``wait_seconds`` are used up. The
        caller's batch then fails closed exactly as without the wait.
    """
    started = clock()
    deadline = started + wait_seconds
    pause = FIRST_BACKOFF
    repeats = 0
    while True:
        try:
            result = attempt()
        except unavailable as exc:
            now = clock()
            if wait_seconds <= 0 or now >= deadline \
                    or not is_failover_error(exc, topology, key, required, unavailable):
                if repeats:
                    log.warning("%s still fails after %d repeats over %.1f s of a failover "
                                "wait; the batch fails", what, repeats, now - started)
                raise
            if not repeats:
                log.warning("%s failed during what looks like a Redis failover (%s); "
                            "repeating it for up to %.0f s", what, type(exc).__name__,
                            wait_seconds)
        else:
            if repeats:
                log.info("%s succeeded after %d repeats during a failover", what, repeats)
            return result
        sleep(max(0.0, min(pause, deadline - now)))
        pause = min(pause * 2, MAX_BACKOFF)
        repeats += 1
        topology.refresh()
