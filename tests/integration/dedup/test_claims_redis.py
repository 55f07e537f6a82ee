"""Shard-level claims against the real Redis and the real Lua script (no Spark).

The property test drives several simulated workers (each with its own Bloom
filter cache, as separate Python workers have) through random batches with
random duplicate patterns, random worker assignment and random retries of
(batch, shard), and compares with the reference model: first occurrence wins.
"""

from __future__ import annotations

import uuid
import zlib

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup import (
    AppIdInUseError,
    BloomConfig,
    DedupConfig,
    RedisCatalog,
    RedisConfig,
    ShardClaimer,
    ShardCountMismatchError,
)
from dedup.bloom import FilterCache
from dedup.catalog import decisions_key, journal_key, state_key
from tests.integration.dedup.helpers import driver_catalog, query_ids

pytestmark = [pytest.mark.integration, pytest.mark.redis]

NUM_SHARDS = 3


def shard_of(key: str) -> int:
    return zlib.crc32(key.encode()) % NUM_SHARDS


batch_strategy = st.lists(st.integers(0, 40), min_size=0, max_size=25)


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(batch_strategy, min_size=1, max_size=6),
    workers=st.integers(1, 3),
    choices=st.lists(st.integers(0, 1000), min_size=60, max_size=60),
    capacity=st.sampled_from([2, 8, 1000]),
    journal=st.sampled_from([1, 2, 64]),
    bloom=st.booleans(),
)
def test_claims_match_reference_model(redis_url: str, batches: list[list[int]], workers: int,
                                      choices: list[int], capacity: int, journal: int,
                                      bloom: bool) -> None:
    cfg = DedupConfig(f"prop-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url),
                      num_shards=NUM_SHARDS, journal_versions=journal,
                      bloom=BloomConfig(enabled=bloom, capacity=capacity, error_rate=0.2))
    catalog = RedisCatalog(cfg)
    pool = [ShardClaimer(cfg, catalog, FilterCache()) for _ in range(workers)]
    pick = iter(choices * 10)
    seen: set[str] = set()
    (q,) = query_ids()
    for batch_id, raw in enumerate(batches):
        ids = list(dict.fromkeys(f"k{x}" for x in raw))  # unique, first occurrence order
        expected = {k for k in ids if k not in seen}
        seen.update(ids)
        by_shard: dict[int, list[str]] = {}
        for key in ids:
            by_shard.setdefault(shard_of(key), []).append(key)
        kept: set[str] = set()
        for shard, group in by_shard.items():
            first = pool[next(pick) % workers].claim(q, batch_id, shard, group, q)
            kept |= first.kept
            for _ in range(next(pick) % 3):  # retries, maybe on another worker
                again = pool[next(pick) % workers].claim(q, batch_id, shard, group, q)
                assert again.replay and again.kept == first.kept
        assert kept == expected, (batch_id, sorted(kept ^ expected))


def test_round_trips_constant_in_batch_size(redis_url: str) -> None:
    cfg = DedupConfig(f"rt-{uuid.uuid4().hex[:8]}", RedisConfig(redis_url), num_shards=1)
    claimer = ShardClaimer(cfg, filters=FilterCache())
    (q,) = query_ids()
    claimer.claim(q, 0, 0, ["warm"], q)
    big = claimer.claim(q, 1, 0, [f"id{i}" for i in range(20_000)], q)
    assert big.round_trips == 1 and len(big.kept) == 20_000 and big.lookups == 0
    dup = claimer.claim(q, 2, 0, [f"id{i}" for i in range(0, 40_000, 2)], q)
    assert dup.round_trips == 1 and len(dup.kept) == 10_000


def test_lease_gc_and_shard_guard(redis_url: str) -> None:
    app = f"lease-{uuid.uuid4().hex[:8]}"
    cfg = DedupConfig(app, RedisConfig(redis_url), num_shards=2, lease_seconds=60)
    claimer = ShardClaimer(cfg, filters=FilterCache())
    q1, q2, q3 = query_ids(3)
    claimer.claim(q1, 0, 0, ["a"], q1)
    claimer.claim(q1, 1, 0, ["b"], q1)
    with pytest.raises(AppIdInUseError, match=f"in use by streaming query {q1}"):
        claimer.claim(q2, 0, 0, ["c"], q2)
    claimer.claim("static", "job", 0, ["c"], "")  # batch jobs are exempt
    shared = DedupConfig(app, RedisConfig(redis_url), num_shards=2, allow_shared_app_id=True)
    ShardClaimer(shared, filters=FilterCache()).claim(q2, 0, 0, ["d"], q2)
    catalog = driver_catalog(cfg)
    catalog.commit_progress(q2, 0)  # else q2's batch 0 would be unfinished work
    client = redis.Redis.from_url(redis_url)
    assert client.hexists(decisions_key(app, 0), f"{q1}:0")
    assert catalog.commit_progress(q1, 1) == 1  # only batches < the committed one
    assert not client.hexists(decisions_key(app, 0), f"{q1}:0")
    assert client.hexists(decisions_key(app, 0), f"{q1}:1")
    catalog.release(q1)
    claimer.claim(q3, 0, 0, ["e"], q3)  # released, nothing unfinished: q3 may take over
    assert int(client.hget(state_key(app, 0), "version") or b"0") == 5
    assert client.hlen(journal_key(app, 0)) <= cfg.journal_versions
    other = DedupConfig(app, RedisConfig(redis_url), num_shards=3)
    with pytest.raises(ShardCountMismatchError, match="num_shards=2"):
        ShardClaimer(other, filters=FilterCache()).claim(q3, 5, 0, ["z"], q3)
