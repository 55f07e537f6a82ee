"""Two tenants on one Redis (issue 50, item 3): tenant A, a Redis ACL user with the
documented line of its own app id, tries to read and write tenant B's catalog keys,
lease, decisions and sink checkpoint keys, through the toolkit's own calls and through a
plain client. Every attempt is denied, B's keys are unchanged byte for byte, and B's
output is exact. The records of B's streaming queries (which app ids deduplicate them,
which outputs write them) sit under B's Redis user, out of A's reach too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from dedup import DedupConfig, DedupError, RedisConfig, ShardClaimer
from dedup.bloom import FilterCache
from dedup.catalog import RedisCatalog
from dedup.keys import (
    acl_key_patterns,
    acl_setuser_line,
    lease_key,
)
from dedup.redis_client import client_and_scripts
from sinks.checkpoint import CheckpointStore
from tests.integration.security.acl import NOW, every_call, make_user, new_query

pytestmark = [pytest.mark.integration, pytest.mark.redis]


@pytest.fixture
def tenants(redis_url: str, app_id: str) -> Iterator[tuple[str, str, str, str]]:
    """``(app A, URL of A's user, app B, URL of B's user)``; both users deleted after."""
    admin = redis.Redis.from_url(redis_url)
    app_a, app_b = f"{app_id}-a", f"{app_id}-b"
    url_a = make_user([admin], redis_url, app_a, acl_setuser_line(app_a))
    url_b = make_user([admin], redis_url, app_b, acl_setuser_line(app_b))
    yield app_a, url_a, app_b, url_b
    for app in (app_a, app_b):
        admin.execute_command("ACL", "DELUSER", f"dedup-{app}")
    admin.close()


def _own_keys(admin: Any, app: str) -> dict[bytes, bytes]:
    """Every key of ``app`` (the patterns of its line) with its DUMP."""
    keys = {key for pattern in acl_key_patterns(app)
            for key in admin.scan_iter(match=pattern, count=1000)}
    return {key: admin.dump(key) for key in sorted(keys)}


def _toolkit_attempts(url_a: str, app_b: str, query_b: str) -> list[tuple[str, Callable[[], Any]]]:
    """The toolkit's own calls on B's app id, made with A's credentials."""
    config = DedupConfig(app_b, RedisConfig(url_a), num_shards=2)
    catalog = RedisCatalog(config)
    claimer = ShardClaimer(config, catalog, FilterCache())
    store = CheckpointStore(RedisConfig(url_a), app_b, "main")
    return [
        ("catalog.check_setup", catalog.check_setup),
        ("catalog.take_lease", lambda: catalog.take_lease("tenant-a-query")),
        ("claim", lambda: claimer.claim("tenant-a-query", 0, 0, ["x"], "tenant-a-query",
                                         now=NOW)),
        ("catalog.commit_progress", lambda: catalog.commit_progress(query_b, 99)),
        ("catalog.collect_garbage", lambda: catalog.collect_garbage(query_b, 2**40)),
        ("catalog.release", lambda: catalog.release(query_b)),
        ("catalog.forget_query", lambda: catalog.forget_query(query_b)),
        ("catalog.catalog_size", lambda: catalog.catalog_size(NOW)),
        ("catalog.lease_name", lambda: catalog.lease_name(query_b)),
        ("sink.take_lease", lambda: store.take_lease("tenant-a-query", 30)),
        ("sink.put_if_absent", lambda: store.put_if_absent(query_b, 0, 1, b"forged")),
        ("sink.read_marker_copy", lambda: store.read_marker_copy(1, query_b)),
        ("sink.record_committed", lambda: store.record_committed(query_b, 7, 1)),
        ("sink.collect_garbage", lambda: store.collect_garbage(query_b, 2**40)),
        ("sink.release_lease", lambda: store.release_lease(query_b)),
        ("sink.set_marker_retention", lambda: store.set_marker_retention(1)),
    ]


def _client_attempts(url_a: str, keys_b: list[bytes]) -> list[tuple[str, Callable[[], Any]]]:
    """A plain client as A: for each of B's keys a read and a write with commands A's line
    allows (so that only the key pattern refuses), and Lua run on B's lease."""
    client = redis.Redis.from_url(url_a)
    attempts: list[tuple[str, Callable[[], Any]]] = []
    for key in keys_b:
        name = key.decode()
        attempts.append((f"HGETALL/GET {name}", lambda k=key: client.hgetall(k)
                         if b":sink:ckpt:" not in k else client.get(k)))
        attempts.append((f"HSET {name}", lambda k=key: client.hset(k, "tenant-a", "1")))
        attempts.append((f"DEL {name}", lambda k=key: client.delete(k)))
    return attempts


def test_a_tenant_can_touch_nothing_of_another_tenants_app_id(
        tenants: tuple[str, str, str, str], redis_url: str) -> None:
    _, url_a, app_b, url_b = tenants
    admin = redis.Redis.from_url(redis_url)
    query_b = new_query()
    every_call(url_b, app_b, query_b)  # B's catalog and sink keys, as B's user made them
    store_b = CheckpointStore(RedisConfig(url_b), app_b, "main")
    store_b.put_if_absent(query_b, 9, 0, b"rows of b")  # a checkpoint left to protect
    catalog_b = RedisCatalog(DedupConfig(app_b, RedisConfig(url_b), num_shards=2))
    catalog_b.take_lease(query_b)
    catalog_b.join_query(query_b, 9)
    store_b.join_query(query_b, "run-b", 9, "topic-b", "cluster-b")  # a record to protect
    before = _own_keys(admin, app_b)
    assert lease_key(app_b).encode() in before and len(before) >= 8, sorted(before)
    records = [key for key in before if key.endswith((b":apps", b":outputs"))]
    assert len(records) == 2, f"B's query records are not among its keys: {sorted(before)}"

    attempts = [*_toolkit_attempts(url_a, app_b, query_b),
                *_client_attempts(url_a, list(before))]
    _, scripts = client_and_scripts(RedisConfig(url_a))
    attempts.append(("EVALSHA lease.lua on B's lease", lambda: scripts["lease"](
        keys=[lease_key(app_b)], args=["tenant-a-query", 60_000, "take"])))
    allowed = []
    for what, attempt in attempts:
        try:
            attempt()
        except (DedupError, redis.exceptions.NoPermissionError) as exc:
            assert "\n" not in str(exc), (what, str(exc))
        else:
            allowed.append(what)
    assert len(attempts) >= 20
    print(f"tenant_attempts={len(attempts)} tenant_attempts_allowed={len(allowed)}")
    assert allowed == [], f"{len(allowed)} of {len(attempts)} attempts went through: {allowed}"
    assert _own_keys(admin, app_b) == before, "tenant B's keys changed"
    # B's own calls still go through as before
    RedisCatalog(DedupConfig(app_b, RedisConfig(url_b), num_shards=2)).release(query_b)
    every_call(url_b, app_b, new_query())
    admin.close()
