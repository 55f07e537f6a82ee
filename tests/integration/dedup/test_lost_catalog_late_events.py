"""A lost catalog must be refused, also when the stopped query's last listener events
reach the Redis after it lost its data (found by the operator-sequence explorer,
issue 33 item 5: ``benchmarks/results/chaos_sequences_failed_ci9002.json``).

Spark delivers a query's progress and termination events to the session's listener
asynchronously, after ``query.stop()`` returned. When the Redis is flushed (or
replaced by an empty one at the same address) in that window, those late events
write into the empty catalog: ``commit_progress`` records the query under the app
id (``HSET`` of the app's queries hash) and the lease is taken or renewed. The
restart of the kept checkpoint then passes ``check_catalog_knows`` ("the Redis
knows this query"), is not refused, and deduplicates against an empty catalog: in
the explorer's sequence 14 duplicates of 168 records went through, no error.
"""

from __future__ import annotations

import uuid

import pytest
import redis

from dedup import DedupConfig, RedisCatalog, RedisConfig

pytestmark = [pytest.mark.integration, pytest.mark.redis]


def _forget(url: str, *tags: str) -> None:
    """What FLUSHALL does to this pipeline's keys (the shared test Redis keeps the rest)."""
    client = redis.Redis.from_url(url)
    for tag in tags:
        for key in client.scan_iter(match=f"*{tag}*"):
            client.delete(key)


def test_a_late_progress_event_does_not_make_a_flushed_redis_know_the_query(
        redis_url: str) -> None:
    app, query = f"lost-{uuid.uuid4().hex[:10]}", f"q-{uuid.uuid4().hex[:10]}"
    catalog = RedisCatalog(DedupConfig(app, RedisConfig(redis_url)))
    catalog.check_setup()
    catalog.take_lease(query)
    catalog.commit_progress(query, 0)
    assert catalog.knows_query(query)
    _forget(redis_url, app, query)  # the catalog is lost
    assert not catalog.knows_query(query)
    # the stopped query's last events, delivered late by Spark's listener bus
    catalog.commit_progress(query, 1)
    catalog.collect_garbage(query, 2)
    catalog.release(query)
    assert not catalog.knows_query(query), (
        "the flushed Redis knows the query again: its kept checkpoint will not be refused")
