"""The failover wait of a claim (dedup.failover): what is repeated, for how long."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import redis

from dedup.config import RedisConfig
from dedup.exceptions import (
    AppIdInUseError,
    CatalogStateError,
    CatalogUnavailableError,
    ConfigError,
    ReplicaAckError,
    ShardCountMismatchError,
)
from dedup.failover import is_failover_error, ride_out_failover

KEY = "dedup:{app:s0}:state"


@dataclass
class FakeTopology:
    """A :class:`dedup.failover.Topology` whose primary has ``replicas`` connected, or
    cannot be asked (``probe_error``)."""

    cluster: bool = True
    replicas: int = 0
    probe_error: Exception | None = None
    refreshes: int = 0

    def refresh(self) -> None:
        self.refreshes += 1

    def connected_replicas(self, key: str) -> int:
        assert key == KEY
        if self.probe_error is not None:
            raise self.probe_error
        return self.replicas


@dataclass
class FakeClock:
    now: float = 0.0
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def unavailable(cause: Exception) -> CatalogUnavailableError:
    """What redis_errors makes of ``cause``: the redis-py error is the ``__cause__``."""
    try:
        raise CatalogUnavailableError(f"unreachable ({type(cause).__name__})") from cause
    except CatalogUnavailableError as exc:
        return exc


def one(n: int) -> Callable[[], int]:
    return lambda: n


@pytest.mark.parametrize("cause", [
    redis.exceptions.ConnectionError("Connection refused"),
    redis.exceptions.TimeoutError("Timeout reading from socket"),
    redis.exceptions.BusyLoadingError("LOADING"),
    redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down"),
    redis.exceptions.TryAgainError("TRYAGAIN"),
    redis.exceptions.MovedError("3999 127.0.0.1:7001"),
    redis.exceptions.AskError("3999 127.0.0.1:7001"),
    redis.exceptions.ReadOnlyError("READONLY You can't write against a read only replica"),
    redis.exceptions.RedisClusterException("All nodes failed"),
    redis.exceptions.SlotNotCoveredError("slot not covered"),
])
def test_a_cluster_failover_error_is_waited_out(cause: Exception) -> None:
    assert is_failover_error(unavailable(cause), FakeTopology(cluster=True), KEY, one(1))


@pytest.mark.parametrize("cause", [
    redis.exceptions.AuthenticationError("WRONGPASS"),
    redis.exceptions.AuthorizationError("NOPERM"),
    redis.exceptions.CrossSlotTransactionError("cross slot"),
    redis.exceptions.ResponseError("ERR unknown command"),
])
def test_a_refusal_of_a_cluster_is_not_waited_out(cause: Exception) -> None:
    assert not is_failover_error(unavailable(cause), FakeTopology(cluster=True), KEY, one(1))


def test_a_lost_single_redis_is_not_waited_out() -> None:
    """A single Redis does not fail over by itself: its connection errors fail as before."""
    lost = unavailable(redis.exceptions.ConnectionError("Connection refused"))
    assert not is_failover_error(lost, FakeTopology(cluster=False), KEY, one(1))


@pytest.mark.parametrize("error", [
    CatalogStateError("refused"),
    AppIdInUseError("in use by streaming query q2"),
    ShardCountMismatchError("num_shards changed"),
])
def test_state_lease_and_shard_errors_are_never_waited_out(error: Exception) -> None:
    assert not is_failover_error(error, FakeTopology(cluster=True), KEY, one(1))


@pytest.mark.parametrize("cluster", [True, False])
def test_too_few_acks_is_waited_out_only_while_the_primary_lacks_replicas(
        cluster: bool) -> None:
    """A promoted replica with none of its own: wait. A slow replica link (the replica
    is connected, it just did not ack in time): a repeat does not help, fail."""
    ack = ReplicaAckError("reached 0 of 1 replicas")
    lacking = FakeTopology(cluster=cluster, replicas=0)
    assert is_failover_error(ack, lacking, KEY, one(1))
    assert lacking.refreshes == 1  # asked the primary of now, not of before
    assert not is_failover_error(ack, FakeTopology(cluster=cluster, replicas=1), KEY, one(1))
    assert is_failover_error(ReplicaAckError("reached 1 of 2"),
                             FakeTopology(cluster=cluster, replicas=1), KEY, one(2))


def test_too_few_acks_and_a_primary_that_cannot_be_asked() -> None:
    gone = unavailable(redis.exceptions.ConnectionError("Connection refused"))
    ack = ReplicaAckError("reached 0 of 1 replicas")
    assert is_failover_error(ack, FakeTopology(cluster=True, probe_error=gone), KEY, one(1))
    assert not is_failover_error(ack, FakeTopology(cluster=False, probe_error=gone), KEY,
                                 one(1))
    refused = CatalogStateError("refused INFO")
    assert not is_failover_error(ack, FakeTopology(cluster=True, probe_error=refused), KEY,
                                 one(1))


class Attempts:
    """An idempotent call that fails with ``errors`` in turn, then returns "decided"."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "decided"


def ride(attempt: Attempts, topology: FakeTopology, wait: float,
         clock: FakeClock, required: int = 1) -> str:
    return ride_out_failover(attempt, topology, KEY, one(required), wait, "the claim",
                             clock=clock, sleep=clock.sleep)


def test_a_failover_is_ridden_out_with_backoff() -> None:
    down = unavailable(redis.exceptions.ClusterDownError("CLUSTERDOWN"))
    attempt = Attempts(down, down, ReplicaAckError("0 of 1"), ReplicaAckError("0 of 1"))
    topology, clock = FakeTopology(cluster=True, replicas=0), FakeClock()
    assert ride(attempt, topology, 20.0, clock) == "decided"
    assert attempt.calls == 5
    assert clock.slept == [0.2, 0.4, 0.8, 1.6]
    assert topology.refreshes >= 4  # the slot map is read again before each repeat


def test_the_wait_is_bounded_then_the_last_error_is_raised() -> None:
    down = unavailable(redis.exceptions.ConnectionError("Connection refused"))
    attempt = Attempts(*[down] * 100)
    clock = FakeClock()
    with pytest.raises(CatalogUnavailableError) as caught:
        ride(attempt, FakeTopology(cluster=True), 20.0, clock)
    assert isinstance(caught.value.__cause__, redis.exceptions.ConnectionError)
    assert clock.now == pytest.approx(20.0)  # never sleeps past the deadline
    assert max(clock.slept) == 2.0
    assert 10 < attempt.calls < 20


def test_no_wait_is_todays_behaviour() -> None:
    down = unavailable(redis.exceptions.ClusterDownError("CLUSTERDOWN"))
    attempt, clock = Attempts(down), FakeClock()
    with pytest.raises(CatalogUnavailableError):
        ride(attempt, FakeTopology(cluster=True), 0.0, clock)
    assert attempt.calls == 1 and clock.slept == []


@pytest.mark.parametrize("error", [
    CatalogStateError("refused"), AppIdInUseError("in use"),
    ShardCountMismatchError("changed"),
])
def test_errors_that_are_not_a_failover_fail_at_once(error: Exception) -> None:
    attempt, clock = Attempts(error), FakeClock()
    with pytest.raises(type(error)):
        ride(attempt, FakeTopology(cluster=True), 20.0, clock)
    assert attempt.calls == 1 and clock.slept == []


def test_a_slow_replica_fails_at_once() -> None:
    attempt, clock = Attempts(ReplicaAckError("0 of 1")), FakeClock()
    with pytest.raises(ReplicaAckError):
        ride(attempt, FakeTopology(cluster=True, replicas=1), 20.0, clock)
    assert attempt.calls == 1


def test_failover_wait_setting() -> None:
    assert RedisConfig().failover_wait == 20.0
    assert RedisConfig(failover_wait=0).failover_wait == 0
    assert "failover_wait=20.0" in repr(RedisConfig())
    for bad in (-1, True, "20", 3600):
        with pytest.raises(ConfigError, match="failover_wait"):
            RedisConfig(failover_wait=bad)  # type: ignore[arg-type]
