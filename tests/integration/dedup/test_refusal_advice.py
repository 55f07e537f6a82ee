"""Every catalog refusal that tells the operator what to do, done literally (issue 33).

Each test provokes the refusal against a real Redis (no Spark), checks the message
names the advice, does what it says and nothing more, and then checks the
decisions are exact: every ID first seen is kept once, every duplicate dropped.
The registry of all refusals and the tests that follow them is docs/refusals.md
(checked by tests/unit/test_refusals.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from dedup import (
    AppIdInUseError,
    BloomConfig,
    CatalogStateError,
    DedupConfig,
    RedisCatalog,
    RedisConfig,
    ReplicaAckError,
    ShardClaimer,
    ShardCountMismatchError,
    UnsafeSettingError,
)
from dedup.bloom import FilterCache
from tests.integration.dedup.helpers import driver_catalog, query_ids

pytestmark = [pytest.mark.integration, pytest.mark.redis]

NOW = 1_800_000_000.0


def make_config(url: str, **changes: Any) -> DedupConfig:
    return DedupConfig(f"adv-{uuid.uuid4().hex[:10]}", RedisConfig(url), **changes)


def claimer(cfg: DedupConfig) -> ShardClaimer:
    """One simulated Python worker: its own Bloom filter cache."""
    return ShardClaimer(cfg, RedisCatalog(cfg), FilterCache())


def test_persistence_off_is_refused_and_turning_it_on_as_told_is_accepted(
        tmp_path: Path) -> None:
    """``appendonly=no``: "enable it with `CONFIG SET appendonly yes`"."""
    from dedup.local.services import RedisServer

    with RedisServer(tmp_path / "redis-no-aof", appendonly=False) as server:
        cfg = make_config(server.url, num_shards=1)
        with pytest.raises(UnsafeSettingError, match="CONFIG SET appendonly yes") as refusal:
            RedisCatalog(cfg).check_setup()
        assert "appendonly=no" in str(refusal.value)
        client = redis.Redis.from_url(server.url)
        client.config_set("appendonly", "yes")
        RedisCatalog(cfg).check_setup()
        (q,) = query_ids()
        worker = claimer(cfg)
        assert worker.claim(q, 0, 0, ["a", "b"], q, now=NOW).keep.tolist() == [True, True]
        assert worker.claim(q, 1, 0, ["b", "c"], q, now=NOW).keep.tolist() == [False, True]


@pytest.mark.parametrize("how", ["renamed", "acl"])
def test_config_get_refused_is_refused_and_opting_out_as_told_on_a_safe_redis_is_exact(
        tmp_path: Path, how: str) -> None:
    """A Redis that refuses ``CONFIG`` (managed Redis renames it away, or a user's ACL
    lacks it): "refused CONFIG GET ... if AOF is on and maxmemory-policy is noeviction,
    set RedisConfig(require_persistence=False)" (an ACL's refusal names +config|get too,
    RedisPermissionError). On a Redis where both hold, doing that lets the start check
    pass and the claims decide exactly."""
    from dedup.exceptions import RedisPermissionError
    from dedup.local.services import RedisServer

    config_command = "config" if how == "acl" else "admin-only-config"
    extra = () if how == "acl" else ("--rename-command", "CONFIG", config_command)
    with RedisServer(tmp_path / "redis-no-config", appendonly=True, extra_args=extra) as server:
        admin = redis.Redis.from_url(server.url)
        # what the operator confirms before opting out: AOF on, nothing evicted
        def setting(name: str) -> str:
            reply = admin.execute_command(config_command, "GET", name)
            value = next(iter(reply.values())) if isinstance(reply, dict) else reply[1]
            return value.decode() if isinstance(value, bytes) else str(value)

        assert setting("appendonly") == "yes"
        assert setting("maxmemory-policy") == "noeviction"
        url = server.url
        if how == "acl":
            admin.execute_command("ACL", "SETUSER", "app", "on", ">app-secret", "~*", "&*",
                                  "+@all", "-config")
            url = server.url.replace("redis://", "redis://app:app-secret@", 1)
        with pytest.raises(redis.exceptions.ResponseError):
            redis.Redis.from_url(url).config_get("appendonly")  # the Redis refuses CONFIG
        cfg = make_config(url, num_shards=1)
        expected = (RedisPermissionError, r"\+config\|get") if how == "acl" else (
            UnsafeSettingError, "refused CONFIG GET")
        with pytest.raises(expected[0], match=expected[1]) as refusal:
            RedisCatalog(cfg).check_setup()
        assert "set RedisConfig(require_persistence=False)" in str(refusal.value)
        # the advice, literally: the same app id, require_persistence=False
        cfg = DedupConfig(cfg.app_id, RedisConfig(url, require_persistence=False),
                          num_shards=1)
        RedisCatalog(cfg).check_setup()
        (q,) = query_ids()
        worker = claimer(cfg)
        assert worker.claim(q, 0, 0, ["a", "b"], q, now=NOW).keep.tolist() == [True, True]
        assert worker.claim(q, 1, 0, ["b", "c", "a"], q, now=NOW).keep.tolist() == [
            False, True, False]
        assert claimer(cfg).claim(q, 2, 0, ["c", "d"], q, now=NOW).keep.tolist() == [
            False, True]


@pytest.mark.parametrize("where", ["start", "claim"])
def test_a_changed_shard_count_is_refused_and_the_recorded_count_as_told_is_exact(
        redis_url: str, where: str) -> None:
    """``num_shards`` changed: "use num_shards=<recorded>" at the start check, "use the
    recorded count" at a claim (a pipeline that skipped the start check)."""
    (q,) = query_ids()
    first = make_config(redis_url, num_shards=2, bloom=BloomConfig(enabled=False))
    RedisCatalog(first).check_setup()
    assert claimer(first).claim(q, 0, 1, ["a", "b"], q, now=NOW).keep.tolist() == [True, True]
    changed = DedupConfig(first.app_id, first.redis, num_shards=3,
                          bloom=BloomConfig(enabled=False))
    if where == "start":
        with pytest.raises(ShardCountMismatchError, match="use num_shards=2"):
            RedisCatalog(changed).check_setup()
    else:
        with pytest.raises(ShardCountMismatchError, match="use the recorded count"):
            claimer(changed).claim(q, 1, 1, ["b", "c"], q, now=NOW)
    told = DedupConfig(first.app_id, first.redis, num_shards=2,
                       bloom=BloomConfig(enabled=False))
    RedisCatalog(told).check_setup()
    assert claimer(told).claim(q, 1, 1, ["b", "c"], q, now=NOW).keep.tolist() == [False, True]


def test_an_app_id_in_use_is_refused_and_stopping_the_other_query_as_told_lets_it_claim(
        redis_url: str) -> None:
    """A second pipeline on the app id: "stop the other query" (its lease is released
    when it stops); the second then claims, and what the first claimed counts as seen."""
    qa, qb = query_ids(2)
    cfg = make_config(redis_url, num_shards=2, lease_seconds=60)
    first, second = claimer(cfg), claimer(cfg)
    first.claim(qa, 0, 0, ["a"], qa, now=NOW)
    driver_catalog(cfg).commit_progress(qa, 0)  # A stops between batches ...
    with pytest.raises(AppIdInUseError, match="stop the other query"):
        second.claim(qb, 0, 0, ["a", "b"], qb, now=NOW)
    RedisCatalog(cfg).release(qa)  # ... as a stopped query's listener releases its lease
    assert second.claim(qb, 0, 0, ["a", "b"], qb, now=NOW).keep.tolist() == [False, True]


def test_an_unfinished_batch_is_refused_and_restarting_that_query_as_told_finishes_it(
        redis_url: str) -> None:
    """Query A claimed batch 5 and stopped before Spark committed it: "restart that query
    from its checkpoint to finish the batch". A's restart replays batch 5 (the same
    decision), commits it, stops; then B runs, and A's IDs count as seen."""
    qa, qb = query_ids(2)
    cfg = make_config(redis_url, num_shards=2, lease_seconds=60)
    catalog = driver_catalog(cfg)
    old = claimer(cfg)
    old.claim(qa, 4, 1, ["w"], qa, now=NOW)
    catalog.commit_progress(qa, 4)
    first = old.claim(qa, 5, 1, ["x", "y"], qa, now=NOW)
    assert first.keep.tolist() == [True, True]
    catalog.release(qa)  # A dies: its lease is gone, its batch 5 is not committed
    new = claimer(cfg)
    with pytest.raises(AppIdInUseError,
                       match=rf"{qa} left batch 5 unfinished.*restart that query"):
        new.claim(qb, 0, 1, ["y", "z"], qb, now=NOW)
    restarted = claimer(cfg)  # A from its checkpoint: batch 5 again, on a fresh worker
    again = restarted.claim(qa, 5, 1, ["x", "y"], qa, now=NOW)
    assert again.replay and again.keep.tolist() == [True, True]
    catalog.commit_progress(qa, 5)
    catalog.release(qa)
    assert new.claim(qb, 0, 1, ["y", "z"], qb, now=NOW).keep.tolist() == [False, True]


def test_too_few_replicas_at_start_are_refused_and_reattaching_them_as_told_is_accepted(
        tmp_path: Path) -> None:
    """The app id's claims wait for one replica, and a start finds none: "reattach the
    replicas"; once attached, the start check passes and a claim is acknowledged."""
    from dedup.local.services import RedisServer
    from tests.integration.dedup.helpers import replicate

    with RedisServer(tmp_path / "primary") as primary, \
            RedisServer(tmp_path / "replica") as replica_server:
        replica = replicate(primary.url, replica_server.url)
        cfg = make_config(primary.url, num_shards=1, bloom=BloomConfig(enabled=False))
        assert RedisCatalog(cfg).check_setup()["replicas"] == "1"
        replica.execute_command("REPLICAOF", "NO", "ONE")  # the replica is gone
        deadline_client = redis.Redis.from_url(primary.url)
        from tests.integration.sinks.pipeline import wait_for

        assert wait_for(lambda: int(deadline_client.info("replication")
                                    ["connected_slaves"]) == 0, 30)
        with pytest.raises(ReplicaAckError, match="reattach the replicas"):
            RedisCatalog(cfg).check_setup()
        replicate(primary.url, replica_server.url)  # the advice
        assert RedisCatalog(cfg).check_setup()["replicas"] == "1"
        (q,) = query_ids()
        assert claimer(cfg).claim(q, 0, 0, ["x"], q, now=NOW).keep.tolist() == [True]


def test_two_dedup_steps_in_one_batch_are_refused_and_an_app_id_each_as_told_is_exact(
        redis_url: str) -> None:
    """Two dedup steps share an app id in one batch (e.g. inside ``foreachBatch``): "give
    each its own app id". Each then decides its own stream exactly."""
    (q,) = query_ids()
    cfg = make_config(redis_url, num_shards=1, bloom=BloomConfig(enabled=False))
    orders, audit = claimer(cfg), claimer(cfg)
    orders.claim(q, 0, 0, ["o1", "o2"], q, now=NOW)
    with pytest.raises(CatalogStateError, match="give each its own app id"):
        audit.claim(q, 0, 0, ["a1"], q, now=NOW)
    own = DedupConfig(f"{cfg.app_id}-audit", cfg.redis, num_shards=1,
                      bloom=BloomConfig(enabled=False))
    audit = claimer(own)
    assert audit.claim(q, 0, 0, ["a1", "o1"], q, now=NOW).keep.tolist() == [True, True]
    assert orders.claim(q, 1, 0, ["o1", "o3"], q, now=NOW).keep.tolist() == [False, True]
    assert audit.claim(q, 1, 0, ["a1", "a2"], q, now=NOW).keep.tolist() == [False, True]
