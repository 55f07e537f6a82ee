"""The catalog's compact ID store (format 2) against a real Redis.

IDs are kept as 16-byte digests concatenated in strings (sub-buckets of a linear-hashing
index) that must hold each digest once, expire together, and be refused when another
release wrote the catalog in another format (reading it would miss the IDs already
claimed).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis

from dedup import CatalogStateError, DedupConfig, RedisConfig
from dedup.bloom import FilterCache
from dedup.catalog import (
    RedisCatalog,
    decisions_key,
    id_digests,
    index_key,
    lookup_buckets,
    meta_key,
    state_key,
)
from dedup.claim import CATCH_UP_FIRST_MIN, ShardClaimer
from dedup.config import BloomConfig, RetentionConfig

pytestmark = pytest.mark.integration
NOW = 1_800_000_000.0


def _config(redis_url: str, **kwargs: Any) -> DedupConfig:
    return DedupConfig(f"fmt-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url), num_shards=2,
                       **kwargs)


def _sub_buckets(client: Any, app_id: str, shard: int) -> list[bytes]:
    """The keys holding digests: each sub-bucket's string and its tail (``<a>:t``)."""
    return list(client.scan_iter(match=f"dedup:{{{app_id}:s{shard}}}:idx:*:*", count=1000))


def _address(key: bytes) -> int:
    """The sub-bucket a digest key belongs to (a tail's is its string's)."""
    parts = key.split(b":")
    return int(parts[-2] if parts[-1] == b"t" else parts[-1])


@pytest.mark.parametrize("bloom", [True, False], ids=["bloom", "no-bloom"])
def test_the_index_grows_compact_and_finds_every_id_again(redis_url: str, bloom: bool) -> None:
    cfg = _config(redis_url, bloom=BloomConfig(enabled=bloom))
    client = redis.Redis.from_url(redis_url)
    claimer = ShardClaimer(cfg, filters=FilterCache())
    first = [f"a{i}" for i in range(20_000)]  # one claim that splits a new index ~9 times
    assert claimer.claim("q", 0, 0, first, now=NOW).keep.all()
    more = [f"b{i}" for i in range(5_000)]
    for batch in range(1, 6):  # then growth a claim at a time
        assert claimer.claim("q", batch, 0, more[(batch - 1) * 1000:batch * 1000],
                             now=NOW).keep.all()
    everything = first + more
    # A fresh worker (no filter) and this one (its filter current) both see every ID
    # as claimed, and new IDs mixed in as new.
    mixed = everything[::7] + [f"c{i}" for i in range(300)]
    for worker, batch in ((ShardClaimer(cfg, filters=FilterCache()), 10), (claimer, 11)):
        outcome = worker.claim("q", batch, 0, mixed, now=NOW)
        kept = {key for key, k in zip(mixed, outcome.keep.tolist(), strict=True) if k}
        if batch == 10:
            assert kept == {f"c{i}" for i in range(300)}
        else:  # batch 10 claimed the new ones
            assert kept == set()
    catalog = RedisCatalog(cfg)
    assert catalog.catalog_size(NOW) == len(everything) + 300
    snapshot = catalog.snapshot(0, NOW)
    assert len(snapshot.ids) == len(set(snapshot.ids)) == len(everything) + 300
    assert all(len(digest) == 16 for digest in snapshot.ids)
    assert catalog.contains(0, "a123", NOW) and not catalog.contains(0, "zzz", NOW)

    keys = _sub_buckets(client, cfg.app_id, 0)
    assert len(keys) >= 8, "the index never split"
    expire_at = int(client.expiretime(index_key(cfg.app_id, 0, lookup_buckets(cfg, NOW)[0])))
    assert expire_at > NOW
    stored: list[bytes] = []
    for key in keys:
        blob = client.get(key)
        assert len(blob) % 16 == 0 and len(blob) <= 16 * 4 * 2048, (key, len(blob))
        stored += [blob[i:i + 16] for i in range(0, len(blob), 16)]
        assert client.expiretime(key) == expire_at, f"{key!r} lives on its own"
    assert sorted(stored) == sorted(snapshot.ids), "a digest stored twice or lost in a split"


def _addr(digest: bytes, level: int, split: int) -> int:
    head = int.from_bytes(digest[:4], "big")  # idstore.lua's addr_of
    a = head % 2 ** level
    return head % 2 ** (level + 1) if a < split else a


def test_new_ids_of_a_trusted_filter_land_in_their_own_sub_bucket(redis_url: str) -> None:
    """A claim whose filter is current sends its new IDs in spread order and the script
    appends them run by run (no per-ID work): every digest must still sit in the
    sub-bucket a lookup searches, through splits that move the split pointer mid-level."""
    cfg = _config(redis_url, bloom=BloomConfig(enabled=True, capacity=200_000))
    client = redis.Redis.from_url(redis_url)
    claimer = ShardClaimer(cfg, filters=FilterCache())
    claimed: list[str] = []
    sizes = [10, 9_000, 1, 14_321, 2_047, 2_049, 7_777]
    for batch, size in enumerate(sizes):
        ids = [f"t{batch}-{i}" for i in range(size)]
        outcome = claimer.claim("q", batch, 0, ids, now=NOW)
        assert outcome.keep.all()
        if batch:
            assert outcome.mode == "trust", "the fast path was not taken"
        claimed += ids
    index = index_key(cfg.app_id, 0, lookup_buckets(cfg, NOW)[0])
    level, split, n = (int(v) for v in client.hmget(index, "L", "p", "n"))
    assert n == len(claimed) and level >= 3 and split > 0, (level, split, n)
    for key in _sub_buckets(client, cfg.app_id, 0):
        a = _address(key)
        blob = client.get(key)
        wrong = [blob[i:i + 16] for i in range(0, len(blob), 16)
                 if _addr(blob[i:i + 16], level, split) != a]
        assert not wrong, f"{len(wrong)} digests in sub-bucket {a} belong elsewhere"
    # a worker without a filter judges every ID by lookups: all found, new ones new
    fresh = ShardClaimer(cfg, filters=FilterCache())
    probe = claimed[::5] + [f"new-{i}" for i in range(100)]
    outcome = fresh.claim("q", 100, 0, probe, now=NOW)
    kept = {key for key, k in zip(probe, outcome.keep.tolist(), strict=True) if k}
    assert kept == {f"new-{i}" for i in range(100)}


def test_a_claim_into_a_bucket_already_expired_leaves_nothing_behind(redis_url: str) -> None:
    """A batch whose time lies beyond the horizon (a retry long after, a clock far
    behind) writes into a bucket Redis already expired: no key may outlive it."""
    cfg = _config(redis_url, retention=RetentionConfig(horizon_seconds=60, bucket_seconds=30))
    client = redis.Redis.from_url(redis_url)
    long_ago = time.time() - 3600
    outcome = ShardClaimer(cfg, filters=FilterCache()).claim(
        "q", 0, 1, [f"x{i}" for i in range(500)], now=long_ago)
    assert outcome.keep.all()
    assert not list(client.scan_iter(match=f"dedup:{{{cfg.app_id}:s1}}:idx:*"))


def test_a_catalog_of_the_older_format_is_refused_not_read(redis_url: str) -> None:
    """An app id whose catalog a release with ID sets wrote (its meta has no format,
    its shard states no ``f``): reading it would miss every ID it holds."""
    cfg = _config(redis_url)
    client = redis.Redis.from_url(redis_url)
    client.hset(meta_key(cfg.app_id), mapping={"num_shards": "2", "placement": "hash"})
    with pytest.raises(CatalogStateError, match=r"format 1.*dedup migrate-catalog"):
        RedisCatalog(cfg).check_setup()
    assert client.hget(meta_key(cfg.app_id), "catalog_format") is None, "a refusal wrote"

    other = _config(redis_url)
    client.hset(state_key(other.app_id, 0), mapping={"epoch": "e", "version": "3", "n": "2"})
    for call in (lambda: ShardClaimer(other, filters=FilterCache()).claim(
                     "q", 0, 0, ["x"], now=NOW),
                 lambda: RedisCatalog(other).snapshot(0, NOW)):
        with pytest.raises(CatalogStateError, match="format 1"):
            call()
    assert not _sub_buckets(client, other.app_id, 0), "the refused claim wrote IDs"


def test_a_new_app_id_records_the_format(redis_url: str) -> None:
    cfg = _config(redis_url)
    client = redis.Redis.from_url(redis_url)
    RedisCatalog(cfg).check_setup()
    RedisCatalog(cfg).check_setup()  # safe to repeat
    assert client.hget(meta_key(cfg.app_id), "catalog_format") == b"3"
    ShardClaimer(cfg, filters=FilterCache()).claim("q", 0, 1, ["x"], now=NOW)
    assert client.hget(state_key(cfg.app_id, 1), "f") == b"3"


def test_a_catalog_of_format_2_is_read_as_it_is_and_recorded_as_format_3(
        redis_url: str) -> None:
    """Format 2 is format 3 without tails: this release reads it as it is, and records
    format 3 so that a format-2 release, which would not read the tails, refuses it."""
    cfg = _config(redis_url)
    client = redis.Redis.from_url(redis_url)
    old = [f"old-{i}" for i in range(3_000)]
    bucket = lookup_buckets(cfg, NOW)[0]
    index = index_key(cfg.app_id, 0, bucket)
    retention = cfg.retention  # the expiry every release gives the bucket's keys
    expire_at = (bucket + 1) * retention.bucket_seconds + retention.horizon_seconds
    # what a format-2 release left: one sub-bucket string per address, no tails
    digests = sorted(id_digests(old))
    client.hset(meta_key(cfg.app_id), mapping={"num_shards": "2", "catalog_format": "2"})
    client.hset(state_key(cfg.app_id, 0), mapping={"epoch": "e2", "version": "1", "n": "2",
                                                   "f": "2", "tok": "t", "jlo": "2"})
    client.hset(index, mapping={"L": 1, "p": 0, "n": len(digests)})
    for a in (0, 1):
        client.set(f"{index}:{a}", b"".join(d for d in digests if _addr(d, 1, 0) == a))
    for key in (index, f"{index}:0", f"{index}:1"):
        client.expireat(key, expire_at)

    RedisCatalog(cfg).check_setup()
    assert client.hget(meta_key(cfg.app_id), "catalog_format") == b"3"
    assert RedisCatalog(cfg).contains(0, "old-7", NOW)
    assert len(RedisCatalog(cfg).snapshot(0, NOW).ids) == len(old)
    assert client.hget(state_key(cfg.app_id, 0), "f") == b"2", "a read wrote the format"
    probe = old[::10] + [f"new-{i}" for i in range(50)]
    outcome = ShardClaimer(cfg, filters=FilterCache()).claim("q", 0, 0, probe, now=NOW)
    kept = {key for key, k in zip(probe, outcome.keep.tolist(), strict=True) if k}
    assert kept == {f"new-{i}" for i in range(50)}
    assert client.hget(state_key(cfg.app_id, 0), "f") == b"3"
    for key in _sub_buckets(client, cfg.app_id, 0):  # the new tails expire with the rest
        assert client.expiretime(key) == expire_at, key

    newer = _config(redis_url)
    client.hset(meta_key(newer.app_id), mapping={"num_shards": "2", "catalog_format": "4"})
    with pytest.raises(CatalogStateError, match="format 4"):
        RedisCatalog(newer).check_setup()


def test_the_journal_stays_a_fraction_of_the_shard_and_still_catches_filters_up(
        redis_url: str) -> None:
    """The catch-up journal holds at most an eighth of the shard's live IDs or its last
    four versions, whichever is more (and at most ``journal_versions`` versions); a
    filter a version behind still catches up from it."""
    cfg = _config(redis_url, journal_versions=64)
    client = redis.Redis.from_url(redis_url)
    ahead, behind = ShardClaimer(cfg, filters=FilterCache()), ShardClaimer(cfg,
                                                                         filters=FilterCache())
    ahead.claim("q", 0, 0, [f"a{i}" for i in range(8_000)], now=NOW)
    behind.claim("q", 1, 0, ["b0"], now=NOW)  # builds its filter: current
    sizes = [8_000, 1]  # claimed per version
    for batch in range(2, 40):
        ahead.claim("q", batch, 0, [f"c{batch}-{i}" for i in range(100)], now=NOW)
        sizes.append(100)
        state = {k.decode(): v.decode() for k, v in client.hgetall(state_key(cfg.app_id, 0))
                 .items()}
        versions = int(state["version"])
        kept = sorted(int(f) for f in client.hkeys(f"dedup:{{{cfg.app_id}:s0}}:jr")
                      if not f.startswith(b"t"))
        assert kept == list(range(int(state["jlo"]), versions + 1)), "journal not contiguous"
        digests = sum(client.hstrlen(f"dedup:{{{cfg.app_id}:s0}}:jr", str(v)) for v in kept)
        assert digests // 16 == int(state["jn"])
        assert int(state["jn"]) <= max(sum(sizes[-4:]), sum(sizes) // 8)
        if versions > 4:
            assert int(state["jn"]) < 8_000, "the first, large version outlived the cap"
    # behind catches up (its filter is many versions behind: a rebuild or the journal),
    # then ahead claims once: behind's filter is one version behind and catches up
    behind.claim("q", 50, 0, ["d1"], now=NOW)
    ahead.claim("q", 51, 0, ["d2"], now=NOW)
    caught = behind.claim("q", 52, 0, ["d2", "d3"], now=NOW)
    assert caught.mode == "journal"
    assert caught.keep.tolist() == [False, True]


def test_a_filter_a_few_versions_behind_catches_up_even_after_large_claims(
        redis_url: str) -> None:
    """Spark runs a shard's claims on whichever Python worker is free, so a worker's
    filter is often two or three versions behind. The journal keeps the last four
    versions whatever their size (an eighth of the shard's IDs is the cap beyond
    them): catching up those costs what they claimed, a rebuild the whole shard."""
    cfg = _config(redis_url, journal_versions=64)
    ahead, behind = ShardClaimer(cfg, filters=FilterCache()), ShardClaimer(cfg,
                                                                         filters=FilterCache())
    ahead.claim("q", 0, 0, [f"a{i}" for i in range(4_000)], now=NOW)
    behind.claim("q", 1, 0, ["b0"], now=NOW)  # current from here
    for batch in range(2, 5):  # three claims, together far above an eighth of the shard
        ahead.claim("q", batch, 0, [f"c{batch}-{i}" for i in range(3_000)], now=NOW)
    caught = behind.claim("q", 5, 0, ["c2-7", "new"], now=NOW)
    assert caught.mode == "journal", "rebuilt from the whole shard instead of catching up"
    assert caught.round_trips == 1
    assert caught.keep.tolist() == [False, True]


def test_a_large_claim_from_a_filter_behind_catches_up_first_and_judges_alike(
        redis_url: str) -> None:
    """A claim of CATCH_UP_FIRST_MIN candidates or more from a filter the journal can
    catch up gets the catch-up alone (nothing claimed, no decision recorded), then
    claims on the trust path: the same keeps as the journal path, one decision."""
    cfg = _config(redis_url)
    client = redis.Redis.from_url(redis_url)
    ahead, behind = ShardClaimer(cfg, filters=FilterCache()), ShardClaimer(cfg,
                                                                         filters=FilterCache())
    behind.claim("q", 0, 0, ["b0"], now=NOW)  # current from here
    for batch in (1, 2):  # two versions behind's filter does not hold
        ahead.claim("q", batch, 0, [f"a{batch}-{i}" for i in range(3_000)], now=NOW)
    seen = [f"a1-{i}" for i in range(0, 3_000, 3)] + [f"a2-{i}" for i in range(0, 3_000, 5)]
    new = [f"n{i}" for i in range(CATCH_UP_FIRST_MIN)]
    candidates = seen + new + ["b0"]
    out = behind.claim("q", 3, 0, candidates, now=NOW)
    kept = {key for key, k in zip(candidates, out.keep.tolist(), strict=True) if k}
    assert kept == set(new)
    assert out.mode == "trust" and out.round_trips == 2
    assert out.false_positives == 0 and out.bloom_positives >= len(seen) + 1
    assert client.hlen(decisions_key(cfg.app_id, 0)) == 4  # batches 0-3, one each
    assert int(client.hget(state_key(cfg.app_id, 0), "version")) == 4
    again = behind.claim("q", 3, 0, candidates, now=NOW)  # a retry replays the decision
    assert again.replay and again.keep.tolist() == out.keep.tolist()
    current = behind.claim("q", 4, 0, [f"m{i}" for i in range(CATCH_UP_FIRST_MIN)], now=NOW)
    assert current.keep.all() and current.mode == "trust" and current.round_trips == 1


def test_the_index_holds_an_id_in_little_more_than_its_digest(redis_url: str) -> None:
    """IDs arriving a micro-batch at a time: each claim adds a few IDs to every
    sub-bucket. Appended in place, a string's spare room (Redis doubles it when it
    grows) made the index 26.9 bytes per 16-byte digest here, 25.3 at 10M IDs (issue
    53: 26 in all, goal 24); with tails merged at half a sub-bucket, 19.0."""
    cfg = _config(redis_url)
    client = redis.Redis.from_url(redis_url)
    claimer = ShardClaimer(cfg, filters=FilterCache())
    per_claim, claims = 2_500, 80
    for batch in range(claims):
        ids = [f"m{batch}-{i}" for i in range(per_claim)]
        assert claimer.claim("q", batch, 0, ids, now=NOW).keep.all()
    index = index_key(cfg.app_id, 0, lookup_buckets(cfg, NOW)[0])
    keys = [index.encode(), *_sub_buckets(client, cfg.app_id, 0)]
    used = sum(int(client.memory_usage(key, samples=0)) for key in keys)
    per_id = used / (per_claim * claims)
    assert per_id <= 20.0, f"{per_id:.1f} bytes of Redis per ID in the index"
