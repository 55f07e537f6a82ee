"""A worker's Bloom filter past the retention horizon (issue 38, item 4: what must not grow).

The catalog holds the IDs of the horizon and no more: its buckets expire. A worker's
filter for a shard is rebuilt from the catalog's snapshot when it fills; until
2026-11-27 at twice its old capacity and never smaller, so past the horizon it kept
doubling with the IDs claimed since the worker started (room for 41,600 after 40,000
claims here), while the IDs it must hold stay those of the horizon. Now sized by the
snapshot (``ShardClaimer._rebuild``). Real Redis, no Spark; time is passed as ``now``.
"""

from __future__ import annotations

import random
import time
import uuid

import pytest

from dedup import BloomConfig, DedupConfig, RedisCatalog, RedisConfig, ShardClaimer
from dedup.bloom import FilterCache
from dedup.config import RetentionConfig

pytestmark = [pytest.mark.integration, pytest.mark.redis]


def test_a_filter_past_the_horizon_stays_sized_by_the_horizon(redis_url: str) -> None:
    cfg = DedupConfig(f"filter-growth-{uuid.uuid4().hex[:8]}", RedisConfig(redis_url),
                      num_shards=1, bloom=BloomConfig(capacity=1000),
                      retention=RetentionConfig(horizon_seconds=10, bucket_seconds=5))
    catalog = RedisCatalog(cfg)
    filters = FilterCache()
    claimer = ShardClaimer(cfg, catalog, filters)
    rng = random.Random(38)
    now = time.time()
    live = 0
    for batch in range(200):  # 200 new IDs a second for 200 s; the horizon is 10 s
        ids = [f"{rng.getrandbits(96):024x}" for _ in range(200)]
        assert claimer.claim("q", batch, 0, ids, now=now).keep.all()
        catalog.collect_garbage("q", batch)
        now += 1.0
        live = max(live, len(catalog.snapshot(0, now).ids))
    bf = filters.get(cfg.app_id, 0)
    assert bf is not None
    assert live <= 200 * 15  # the horizon and a bucket: the catalog stays flat
    # 40,000 IDs claimed in all; the filter holds room for about twice the live ones
    assert bf.capacity <= max(cfg.bloom.capacity, 4 * live)
