"""The catalog under operational faults, against the real Redis and Lua scripts (no Spark).

* Redis rolls back (``appendfsync everysec`` and a crash, or failover to a
  lagging replica) and moves forward again: a Bloom filter tagged with the
  lost state must not be trusted.
* Clocks disagree across a bucket boundary: an ID written into bucket k+1 by
  a fast clock must be found by a slow clock that looks at bucket k.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from dedup import (
    BloomConfig,
    DedupConfig,
    RedisCatalog,
    RedisConfig,
    RetentionConfig,
    ShardClaimer,
)
from dedup.bloom import FilterCache
from tests.integration.dedup.helpers import (
    catalog_holds,
    driver_catalog,
    query_ids,
    replicate,
)

pytestmark = [pytest.mark.integration, pytest.mark.redis]


def make_config(redis_url: str, **changes: Any) -> DedupConfig:
    return DedupConfig(f"op-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url), num_shards=1,
                       **changes)


def claimer(cfg: DedupConfig) -> ShardClaimer:
    """One simulated Python worker: its own Bloom filter cache."""
    return ShardClaimer(cfg, RedisCatalog(cfg), FilterCache())


def keys_of(client: Any, app_id: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"dedup:{{{app_id}*"))


def test_filter_tagged_before_a_rollback_is_not_trusted(redis_url: str) -> None:
    (q,) = query_ids()
    cfg = make_config(redis_url, bloom=BloomConfig(capacity=1000, error_rate=0.01))
    client = redis.Redis.from_url(redis_url)
    worker_a = claimer(cfg)
    worker_b = claimer(cfg)
    now = 1_800_000_000.0
    assert worker_a.claim(q, 0, 0, ["x1"], now=now).keep.tolist() == [True]
    # What a replica that lags one claim behind holds (or an AOF that lost the last second).
    saved = {key: client.dump(key) for key in keys_of(client, cfg.app_id)}
    assert worker_a.claim(q, 1, 0, ["x2"], now=now).keep.tolist() == [True]
    # Failover to that replica: the state goes back to before x2.
    for key in keys_of(client, cfg.app_id):
        client.delete(key)
    for key, blob in saved.items():
        client.restore(key, 0, blob, replace=True)
    # Another worker claims x3: the shard moves forward to the same version number.
    assert worker_b.claim(q, 2, 0, ["x3"], now=now).keep.tolist() == [True]
    # Worker A's filter carries the old tag of that version number, without x3.
    outcome = worker_a.claim(q, 3, 0, ["x3"], now=now)
    assert outcome.keep.tolist() == [False], \
        "a filter tagged before the rollback was trusted: duplicate x3 kept"


def test_id_in_the_next_bucket_is_found_by_a_slower_clock(redis_url: str) -> None:
    (q,) = query_ids()
    retention = RetentionConfig(horizon_seconds=3600, bucket_seconds=60)
    cfg = make_config(redis_url, retention=retention, bloom=BloomConfig(enabled=False))
    boundary = 1_800_000_000 // 60 * 60 + 60.0
    fast, slow = claimer(cfg), claimer(cfg)
    # A fast clock already in bucket k+1 claims x; a slow one, still in k, sees x again.
    assert fast.claim(q, 0, 0, ["x"], now=boundary + 0.5).keep.tolist() == [True]
    outcome = slow.claim(q, 1, 0, ["x"], now=boundary - 0.5)
    assert outcome.keep.tolist() == [False], "duplicate kept across a bucket boundary"


def test_a_longer_horizon_keeps_every_live_bucket_for_the_new_horizon(redis_url: str) -> None:
    """``retention.horizon_seconds`` lengthened between runs of one app id (issue 33,
    finding 1). A bucket's keys get their expiry when the bucket is created; the
    buckets that already exist, the current one included, must live on for the new
    horizon, or a duplicate within it passes as new. Real time is short here: 1 s
    buckets and a 3 s horizon, whose buckets expire within seconds of the claims."""
    import dataclasses
    import time

    (q,) = query_ids()
    short = make_config(redis_url, bloom=BloomConfig(enabled=False),
                        retention=RetentionConfig(horizon_seconds=3, bucket_seconds=1))
    longer = dataclasses.replace(short, retention=RetentionConfig(horizon_seconds=60,
                                                                  bucket_seconds=1))
    b = int(time.time())  # the current bucket: under the 3 s horizon it expires at b + 4
    old = claimer(short)
    assert old.claim(q, 0, 0, ["z"], q, now=b - 0.5).keep.tolist() == [True]  # bucket b - 1
    assert old.claim(q, 1, 0, ["x"], q, now=b + 0.1).keep.tolist() == [True]  # bucket b
    new = claimer(longer)  # the restart with the longer horizon
    assert new.claim(q, 2, 0, ["y"], q, now=b + 0.2).keep.tolist() == [True]  # bucket b
    time.sleep(max(0.0, b + 5.5 - time.time()))  # past the old horizon of both buckets
    outcome = new.claim(q, 3, 0, ["x", "y", "z"], q, now=time.time())
    assert outcome.keep.tolist() == [False, False, False], (
        "a duplicate within the new horizon was kept: the buckets kept the old horizon's "
        f"expiry (kept {outcome.keep.tolist()} of x, y, z)")


def test_redis_that_evicts_keys_is_refused_and_a_full_one_fails_closed(tmp_path: Any) -> None:
    (q,) = query_ids()
    from dedup import CatalogStateError, UnsafeSettingError
    from dedup.local.services import RedisServer

    with RedisServer(tmp_path / "redis-lru") as server:
        client = redis.Redis.from_url(server.url)
        client.config_set("maxmemory", "50mb")
        client.config_set("maxmemory-policy", "allkeys-lru")
        cfg = make_config(server.url)
        with pytest.raises(UnsafeSettingError, match=r"maxmemory-policy=allkeys-lru.*noeviction"):
            RedisCatalog(cfg).check_setup()
        # At maxmemory with noeviction a claim is refused by Redis: the batch fails.
        client.config_set("maxmemory-policy", "noeviction")
        RedisCatalog(cfg).check_setup()
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", str(used + 1024))
        ids = [f"id-{i:06d}-{'x' * 40}" for i in range(20_000)]
        with pytest.raises(CatalogStateError, match="maxmemory"):
            claimer(cfg).claim(q, 0, 0, ids, now=1_800_000_000.0)


def test_a_second_pipeline_claims_no_shard_while_the_first_holds_the_app_id(
        redis_url: str) -> None:
    """The lease is the app id's, not a shard's: pipeline B may not claim shard 1 because
    pipeline A so far only claimed shard 0 (B's claims would later drop A's records)."""
    qa, qb = query_ids(2)
    from dedup import AppIdInUseError

    cfg = DedupConfig(f"op-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url), num_shards=2,
                      lease_seconds=60)
    first, second = claimer(cfg), claimer(cfg)
    first.claim(qa, 0, 0, ["a"], qa, now=1_800_000_000.0)
    with pytest.raises(AppIdInUseError, match=qa):
        second.claim(qb, 0, 1, ["b"], qb, now=1_800_000_000.0)
    client = redis.Redis.from_url(redis_url)
    assert not list(client.scan_iter(match=f"dedup:{{{cfg.app_id}:s1}}:idx:*")), \
        "pipeline B claimed IDs on shard 1"


def test_a_fenced_pipeline_cannot_claim_after_another_took_over(redis_url: str) -> None:
    """A's lease lapsed (A paused), B took the app id over; A's next claim is fenced."""
    qa, qb = query_ids(2)
    from dedup import AppIdInUseError

    cfg = DedupConfig(f"op-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url), num_shards=1,
                      lease_seconds=1)
    paused, successor = claimer(cfg), claimer(cfg)
    paused.claim(qa, 0, 0, ["a"], qa, now=1_800_000_000.0)
    driver_catalog(cfg).commit_progress(qa, 0)  # Spark committed A's batch 0
    import time

    time.sleep(1.2)  # A's lease lapses
    successor.claim(qb, 0, 0, ["b"], qb, now=1_800_000_000.0)
    with pytest.raises(AppIdInUseError, match=qb):
        paused.claim(qa, 1, 0, ["c"], qa, now=1_800_000_000.0)


def test_a_zombie_task_cannot_claim_a_shard_the_new_owner_has_not_claimed_yet(
        redis_url: str) -> None:
    """Found by the protocol model (tests/model, bound takeover4). A's task of batch 1
    took its fence and paused before its claim; A's lease lapsed and B took the app id
    over (no batch of A unfinished, so B's check passed) and claimed shard 1. The paused
    task then claims shard 0 with its cached fence: a shard remembers only the fences
    that claimed it, and B had not claimed shard 0 yet, so the claim went through. B's
    batch then dropped `a` as seen, and A's transaction is fenced: `a` is lost. A new
    owner must fence every shard before it claims."""
    qa, qb = query_ids(2)
    from dedup import AppIdInUseError

    cfg = DedupConfig(f"op-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url), num_shards=2,
                      lease_seconds=1, bloom=BloomConfig(enabled=False))
    paused, successor = claimer(cfg), claimer(cfg)
    paused.claim(qa, 0, 0, ["w"], qa, now=1_800_000_000.0)
    driver_catalog(cfg).commit_progress(qa, 0)  # Spark committed A's batch 0
    paused.catalog._fence(qa, f"{qa}:1")  # A's task of batch 1 takes its fence, pauses
    import time

    time.sleep(1.2)  # A's lease lapses
    successor.claim(qb, 0, 1, ["b"], qb, now=1_800_000_000.0)  # B owns the app id now
    with pytest.raises(AppIdInUseError, match=qb):
        paused.claim(qa, 1, 0, ["a"], qa, now=1_800_000_000.0)
    assert successor.claim(qb, 1, 0, ["a"], qb, now=1_800_000_000.0).keep.tolist() == [True]


def test_a_new_query_is_refused_while_an_abandoned_batch_holds_claims(redis_url: str) -> None:
    """Query A claimed batch 5 and died before Spark committed it (a crash, a checkpoint
    then deleted); query B on the same app id would drop those IDs as seen, although
    nobody emitted them. B must be told to finish A first."""
    qa, qb = query_ids(2)
    import time

    from dedup import AppIdInUseError

    cfg = DedupConfig(f"op-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url), num_shards=2,
                      lease_seconds=1)
    abandoned, successor = claimer(cfg), claimer(cfg)
    abandoned.claim(qa, 5, 0, ["x", "y"], qa, now=1_800_000_000.0)
    time.sleep(1.2)  # A's lease lapses: A is gone
    with pytest.raises(AppIdInUseError, match=rf"{qa}.*batch 5"):
        successor.claim(qb, 0, 0, ["x", "z"], qb, now=1_800_000_000.0)


def test_a_new_query_may_take_over_once_the_old_one_committed_or_was_forgotten(
        redis_url: str) -> None:
    qa, qb = query_ids(2)
    from dedup import AppIdInUseError

    cfg = DedupConfig(f"op-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url), num_shards=2,
                      lease_seconds=60)
    catalog = driver_catalog(cfg)
    old, new = claimer(cfg), claimer(cfg)
    old.claim(qa, 4, 0, ["x"], qa, now=1_800_000_000.0)
    catalog.commit_progress(qa, 4)  # batch 4 committed ...
    old.claim(qa, 5, 1, ["y"], qa, now=1_800_000_000.0)  # ... 5 is not
    catalog.release(qa)  # A stopped
    with pytest.raises(AppIdInUseError, match=rf"{qa} left batch 5 unfinished"):
        new.claim(qb, 0, 1, ["y", "z"], qb, now=1_800_000_000.0)
    assert catalog.forget_query(qa) == 2
    outcome = new.claim(qb, 0, 1, ["y", "z"], qb, now=1_800_000_000.0)
    assert outcome.keep.tolist() == [False, True]  # y counts as seen, as the message said


def test_a_claim_is_acknowledged_only_once_a_replica_holds_it(tmp_path: Any) -> None:
    """Failover to a lagging replica: a claim the primary acknowledged but never
    replicated is gone after the failover, and its ID passes as new a second time.
    A claim may only be acknowledged (its rows emitted) once the replicas hold it."""
    (q,) = query_ids()
    from dedup import CatalogUnavailableError
    from dedup.local.services import RedisServer

    with RedisServer(tmp_path / "primary") as primary, \
            RedisServer(tmp_path / "replica") as replica_server:
        replica = replicate(primary.url, replica_server.url)
        # failover_wait=0: the claim below fails at once, as it does once the wait ran out;
        # its WAIT gives up after 1 s instead of the default 5 (how long is not the point)
        cfg = DedupConfig(f"op-{uuid.uuid4().hex[:10]}",
                          RedisConfig(primary.url, failover_wait=0, replica_timeout=1.0),
                          num_shards=1,
                          bloom=BloomConfig(enabled=False))
        RedisCatalog(cfg).check_setup()
        worker = claimer(cfg)
        now = 1_800_000_000.0
        assert worker.claim(q, 0, 0, ["x1"], now=now).keep.tolist() == [True]
        # The replica is cut off: from now on it holds what it had.
        replica.execute_command("REPLICAOF", "NO", "ONE")
        try:
            acknowledged = worker.claim(q, 1, 0, ["x2"], now=now).keep.tolist() == [True]
        except CatalogUnavailableError as exc:
            assert "replica" in str(exc)
            acknowledged = False
        # Failover: the replica is the catalog now.
        held = catalog_holds(replica, cfg.app_id, 0, "x2")
        assert held or not acknowledged, \
            "claim of x2 acknowledged but lost by the failover: x2 would be kept twice"
        assert catalog_holds(replica, cfg.app_id, 0, "x1")


def test_a_claim_no_replica_held_is_retried_once_it_is_back_and_a_failover_is_told(
        tmp_path: Any) -> None:
    """The failed claim's retry replays its decision once the replica is back; a start
    on a promoted replica with none of its own is refused until the user says how many
    replicas must hold a claim."""
    (q,) = query_ids()
    from dataclasses import replace

    from dedup import ReplicaAckError
    from dedup.local.services import RedisServer

    with RedisServer(tmp_path / "primary") as primary, \
            RedisServer(tmp_path / "replica") as replica_server:
        replica = replicate(primary.url, replica_server.url)
        cfg = DedupConfig(f"op-{uuid.uuid4().hex[:10]}",
                          RedisConfig(primary.url, replica_timeout=0.5, failover_wait=0),
                          num_shards=1, bloom=BloomConfig(enabled=False))
        assert RedisCatalog(cfg).check_setup()["replicas"] == "1"
        worker = claimer(cfg)
        now = 1_800_000_000.0
        replica.execute_command("REPLICAOF", "NO", "ONE")
        with pytest.raises(ReplicaAckError, match=r"reached 0 of 1 replicas"):
            worker.claim(q, 0, 0, ["x1"], now=now)
        replicate(primary.url, replica_server.url)
        retry = worker.claim(q, 0, 0, ["x1"], now=now)  # the decision is replayed
        assert retry.keep.tolist() == [True]
        assert catalog_holds(replica, cfg.app_id, 0, "x1")
        # Failover: the replica is promoted and has no replica of its own.
        replica.execute_command("REPLICAOF", "NO", "ONE")
        promoted = replace(cfg, redis=RedisConfig(replica_server.url))
        with pytest.raises(ReplicaAckError, match=r"0 connected replicas.*wait for 1"):
            RedisCatalog(promoted).check_setup()
        told = replace(cfg, redis=RedisConfig(replica_server.url, wait_replicas=0))
        assert RedisCatalog(told).check_setup()["replicas"] == "0"
        assert RedisCatalog(promoted).check_setup()["replicas"] == "0"  # recorded now
        assert claimer(told).claim(q, 1, 0, ["x1"], now=now).keep.tolist() == [False]


def test_a_claim_waits_for_a_replica_that_comes_back_within_the_failover_wait(
        tmp_path: Any) -> None:
    """The primary lost its only replica (a failover just promoted it, or the link
    broke): the claim repeats itself until the replica is back, and its decision is
    trusted only once the replica holds it (the repeat replays it and WAITs again)."""
    (q,) = query_ids()
    import threading
    import time

    from dedup.local.services import RedisServer

    with RedisServer(tmp_path / "primary") as primary, \
            RedisServer(tmp_path / "replica") as replica_server:
        replica = replicate(primary.url, replica_server.url)
        # The default replica_timeout (5 s), not a shorter one: a replica back online
        # acknowledges a WAIT only at its next GETACK reply, which took over 0.5 s on a
        # loaded 2-core machine (a README run, 2026-12-03) and over 2 s (a fresh clone's
        # README run, 2026-12-04: "online", 0 of 1 acknowledged, given up as a slow
        # link, which is what that outcome means). The wait ends at the acknowledgement.
        cfg = DedupConfig(f"op-{uuid.uuid4().hex[:10]}",
                          RedisConfig(primary.url, failover_wait=30),
                          num_shards=1, bloom=BloomConfig(enabled=False))
        assert RedisCatalog(cfg).check_setup()["replicas"] == "1"
        replica.execute_command("REPLICAOF", "NO", "ONE")
        back = threading.Timer(2.0, replicate, (primary.url, replica_server.url))
        back.start()
        started = time.monotonic()
        try:
            outcome = claimer(cfg).claim(q, 0, 0, ["x1"], now=1_800_000_000.0)
        finally:
            back.join()
        assert outcome.keep.tolist() == [True]
        assert time.monotonic() - started >= 2.0, "acknowledged before a replica held it"
        assert catalog_holds(replica, cfg.app_id, 0, "x1")


def test_an_app_id_that_joins_a_query_later_than_another_is_refused(redis_url: str) -> None:
    """The app id renamed with the checkpoint kept: its catalog holds none of the IDs
    claimed so far. Two dedup steps of one query from its first batch are no rename;
    once the old app ids' record of the query is forgotten, the new one may join."""
    from dedup import SettingChangedError

    (q,) = query_ids()
    now = 1_800_000_000.0
    old, beside, renamed = (make_config(redis_url) for _ in range(3))
    assert claimer(old).claim(q, 0, 0, ["a"], q, now=now).keep.tolist() == [True]
    assert claimer(beside).claim(q, 0, 0, ["a"], q, now=now).keep.tolist() == [True]
    claimer(old).claim(q, 1, 0, ["b"], q, now=now)
    claimer(beside).claim(q, 1, 0, ["b"], q, now=now)  # joined at 0: known, not refused
    with pytest.raises(SettingChangedError,
                       match=rf"app id '{renamed.app_id}' joins streaming query {q} at batch 2, "
                             rf"but the query has deduplicated with app id '{old.app_id}' "
                             r"since batch 0"):
        claimer(renamed).claim(q, 2, 0, ["a"], q, now=now)
    for cfg in (old, beside):
        driver_catalog(cfg).commit_progress(q, 1)
        RedisCatalog(cfg).forget_query(q)
    assert claimer(renamed).claim(q, 2, 0, ["a"], q, now=now).keep.tolist() == [True]


def test_a_streaming_query_unknown_to_its_redis_past_batch_0_is_refused(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``strict`` claims (the streaming forms, each batch of which leaves a record): a
    query past batch 0 with no record here ran against another Redis, and is refused
    after the wait for the record of its committed batches (written by the driver's
    listener, asynchronously); a retry in the same process is refused at once. The
    record of a committed batch, or a claim recorded before, lets it join."""
    import time

    import dedup.catalog
    from dedup import SettingChangedError

    monkeypatch.setattr(dedup.catalog, "QUERY_RECORD_WAIT", 1.0)
    moved, empty_start, known = query_ids(3)
    now = 1_800_000_000.0
    cfg = make_config(redis_url)
    started = time.monotonic()
    with pytest.raises(SettingChangedError,
                       match=rf"streaming query {moved} is at batch 3, but the Redis at .* has "
                             rf"no record of streaming query {moved} under app id "
                             rf"'{cfg.app_id}'"):
        claimer(cfg).claim(moved, 3, 0, ["a"], moved, now=now, strict=True)
    assert time.monotonic() - started >= 1.0, "refused without waiting for the record"
    started = time.monotonic()
    with pytest.raises(SettingChangedError, match="has no record of streaming query"):
        claimer(cfg).claim(moved, 3, 1, ["b"], moved, now=now, strict=True)
    assert time.monotonic() - started < 1.0, "a retry waited again"
    # nothing was recorded by the refusals: the query is as unknown as before
    assert not RedisCatalog(cfg).knows_query(moved)
    # batch 0 empty (no claim), its commit recorded by the listener: batch 1 joins
    cfg = make_config(redis_url)  # an app id per query (each query takes its lease)
    driver_catalog(cfg).commit_progress(empty_start, 0)
    assert claimer(cfg).claim(empty_start, 1, 0, ["c"], empty_start, now=now,
                              strict=True).keep.tolist() == [True]
    # claimed from batch 0 on: known at batch 5 in any process
    cfg = make_config(redis_url)
    assert claimer(cfg).claim(known, 0, 0, ["d"], known, now=now, strict=True).keep.tolist() \
        == [True]
    dedup.catalog._JOINED.clear()
    assert claimer(cfg).claim(known, 5, 1, ["e"], known, now=now, strict=True).keep.tolist() \
        == [True]
    # a batch DataFrame inside foreachBatch leaves no record: not strict, it joins
    other = make_config(redis_url)
    assert claimer(other).claim(moved, 3, 0, ["f"], moved, now=now).keep.tolist() == [True]
