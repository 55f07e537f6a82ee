"""Unit tests of the dedup core: config, IDs, Bloom wrapper, keys, claim logic."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

from dedup.arrow_step import SHARD_COLUMN, late_mask, process_table, validate_ids
from dedup.bloom import FilterCache, ShardFilter
from dedup.catalog import (
    bucket_key,
    decisions_key,
    journal_key,
    live_buckets,
    meta_key,
    shard_tag,
    state_key,
)
from dedup.claim import ShardClaimer
from dedup.config import BloomConfig, DedupConfig, RedisConfig, RetentionConfig
from dedup.exceptions import ConfigError, RecordIdError
from dedup.metrics import DUP_CATALOG, DUP_IN_BATCH, KEPT, LATE_DROPPED, DedupMetrics
from tests.unit.dedup.fake_catalog import FakeCatalog


def cfg(**kw: object) -> DedupConfig:
    return DedupConfig("app", RedisConfig("redis://127.0.0.1:1/0"), num_shards=4, **kw)  # type: ignore[arg-type]


def test_config_new_fields_validated() -> None:
    with pytest.raises(ConfigError, match="lease_seconds"):
        cfg(lease_seconds=-1)
    with pytest.raises(ConfigError, match="journal_versions"):
        cfg(journal_versions=0)
    assert pickle.loads(pickle.dumps(cfg())) == cfg()


def test_keys_share_one_hash_tag_per_shard() -> None:
    keys = [state_key("a", 3), decisions_key("a", 3), journal_key("a", 3), bucket_key("a", 3, 7)]
    assert {k[k.index("{"):k.index("}") + 1] for k in keys} == {shard_tag("a", 3)} == {"{a:s3}"}
    assert meta_key("a") == "dedup:{a}:meta"
    assert state_key("a", 3) != state_key("a", 4)


def test_live_buckets() -> None:
    c = cfg(retention=RetentionConfig(horizon_seconds=300, bucket_seconds=100))
    assert live_buckets(c, 1000.5) == [10, 9, 8, 7]


def _id_column(values: list[str | None]) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array(values, pa.string())])


@pytest.mark.parametrize("values, problem", [
    (["a", None], "1 null"),
    (["a", ""], "1 empty"),
    (["a\nb"], "newline"),
    (["x" * 1025], "longer than 1024"),
])
def test_bad_ids_named(values: list[str | None], problem: str) -> None:
    with pytest.raises(RecordIdError, match=problem) as info:
        validate_ids(cfg(), _id_column(values), "q1", "7")
    assert "'_record_id'" in str(info.value) and "batch 7" in str(info.value)
    assert "with_record_id" in str(info.value)


def test_non_string_id_rejected() -> None:
    with pytest.raises(RecordIdError, match="must be a string"):
        validate_ids(cfg(), pa.chunked_array([pa.array([1, 2])]), "q", "0")


def test_bloom_filter_wrapper() -> None:
    bf = ShardFilter(10, 0.01, "e", 0)
    assert bf.add_all([f"k{i}" for i in range(5)])
    neg, pos = bf.split(["k1", "zz", "k4"])
    assert set(pos) >= {"k1", "k4"} and "k1" not in neg
    assert bf.has_room(5) and not bf.has_room(7)
    assert not bf.add_all([f"x{i}" for i in range(20)])  # full: reported, not raised
    bf.retag("e2", 5)
    assert bf.tag == ("e2", 5)
    cache = FilterCache()
    cache.put("a", 1, bf)
    assert cache.get("a", 1) is bf and cache.get("a", 2) is None
    cache.put("a", 1, None)
    assert cache.get("a", 1) is None


def test_claim_keeps_new_and_replays() -> None:
    fake = FakeCatalog()
    claimer = ShardClaimer(cfg(), fake, FilterCache())
    first = claimer.claim("q", 0, 1, ["a", "b"], now=0)
    assert first.kept == {"a", "b"} and first.round_trips == 2  # cold: snapshot + claim
    again = claimer.claim("q", 0, 1, ["a", "b"], now=0)
    assert again.replay and again.kept == {"a", "b"}  # a retry keeps its own claims
    nxt = claimer.claim("q", 1, 1, ["a", "c"], now=0)
    assert nxt.kept == {"c"} and nxt.round_trips == 1 and nxt.mode == "trust"
    assert nxt.bloom_positives >= 1 and nxt.lookups >= 1


def test_stale_filter_catches_up_through_journal() -> None:
    fake = FakeCatalog(journal_versions=4)
    w1, w2 = (ShardClaimer(cfg(), fake, FilterCache()) for _ in range(2))
    w1.claim("q", 0, 0, ["a"], now=0)
    w2.claim("q", 1, 0, ["b"], now=0)  # w1's filter is now behind
    out = w1.claim("q", 2, 0, ["b", "c"], now=0)
    assert out.kept == {"c"} and out.mode == "journal"
    assert w1.filters.get("app", 0).version == fake.shard(0).version  # type: ignore[union-attr]


def test_filter_beyond_journal_is_bypassed_and_rebuilt() -> None:
    fake = FakeCatalog(journal_versions=2)
    w1, w2 = (ShardClaimer(cfg(), fake, FilterCache()) for _ in range(2))
    w1.claim("q", 0, 0, ["a"], now=0)
    for b, key in enumerate(["b", "c", "d", "e"], start=1):
        w2.claim("q", b, 0, [key], now=0)
    out = w1.claim("q", 9, 0, ["a", "c", "e", "f"], now=0)
    assert out.kept == {"f"} and out.mode == "full" and out.round_trips == 2
    assert w1.filters.get("app", 0).version == fake.shard(0).version  # type: ignore[union-attr]


def test_full_filter_is_rebuilt_bigger_and_stays_exact() -> None:
    fake = FakeCatalog()
    claimer = ShardClaimer(cfg(bloom=BloomConfig(capacity=2, error_rate=0.3)), fake,
                           FilterCache())
    seen: set[str] = set()
    for b in range(10):
        ids = [f"k{(b * 3 + i) % 17}" for i in range(5)]
        out = claimer.claim("q", b, 0, ids, now=0)
        assert out.kept == set(ids) - seen
        seen |= set(ids)
    assert claimer.filters.get("app", 0).capacity > 2  # type: ignore[union-attr]


def test_bloom_disabled_checks_everything() -> None:
    fake = FakeCatalog()
    claimer = ShardClaimer(cfg(bloom=BloomConfig(enabled=False)), fake, FilterCache())
    claimer.claim("q", 0, 0, ["a"], now=0)
    out = claimer.claim("q", 1, 0, ["a", "b"], now=0)
    assert out.kept == {"b"} and out.round_trips == 1 and out.lookups == 2


def _table(ids: list[str], shards: list[int], times: list[float] | None = None) -> pa.Table:
    cols = {"_record_id": pa.array(ids, pa.string()), SHARD_COLUMN: pa.array(shards, pa.int32())}
    if times is not None:
        cols["ts"] = pa.array(np.array(times) * 1e6, pa.int64()).cast(
            pa.timestamp("us", tz="UTC"))
    return pa.table(cols)


def test_process_table_first_occurrence_and_status() -> None:
    fake = FakeCatalog()
    c = cfg()
    claimer = ShardClaimer(c, fake, FilterCache())
    claimer.claim("q", "old", 1, ["b"], now=0)
    table = _table(["a", "b", "a", "c"], [0, 1, 0, 0])
    out = process_table(c, table, "q", "5", "q", 0, claimer, now=0)
    status = out.column("_dedup_status").to_pylist()
    assert status == [KEPT, DUP_CATALOG, DUP_IN_BATCH, KEPT]
    assert SHARD_COLUMN not in out.column_names
    assert out.column("_dedup_round_trips").type == pa.int32()
    assert sum(out.column("_dedup_round_trips").to_pylist()) == 3  # 2 shards, 1 cold snapshot


def test_late_policy_drop_counts() -> None:
    c = cfg(retention=RetentionConfig(horizon_seconds=100, bucket_seconds=100,
                                      event_time_column="ts"))
    table = _table(["a", "b", "b"], [0, 0, 0], [1000.0, 850.0, 990.0])
    late = late_mask(c, table, 1000.0)
    assert late is not None and late.tolist() == [False, True, False]
    out = process_table(c, table, "q", "0", "q", 0, ShardClaimer(c, FakeCatalog(), FilterCache()),
                        now=1000.0)
    assert out.column("_dedup_status").to_pylist() == [KEPT, LATE_DROPPED, KEPT]


def test_metrics_from_observed() -> None:
    m = DedupMetrics.from_observed({"records_in": 5, "kept": 3, "duplicates_in_batch": 1,
                                    "duplicates_catalog": 1}, catalog_size=9)
    assert m.duplicates_dropped == 2 and m.catalog_size == 9 and m.round_trips == 0


@pytest.mark.parametrize("capacity, error_rate", [(4, 0.5), (100, 0.2), (50_000, 0.01),
                                                  (400_000, 0.01), (10_000, 0.0001)])
def test_vectorised_bloom_is_bit_identical_to_pybloom(capacity: int, error_rate: float) -> None:
    from pybloom_live import BloomFilter

    keys = [f"rec-{i}-\u00e9" for i in range(min(capacity, 3000))]
    ours = ShardFilter(capacity, error_rate, "e", 0)
    assert ours._hasher is not None  # the fast path is in use
    assert ours.add_all(keys)
    ref = BloomFilter(capacity, error_rate)
    for key in keys:
        ref.add(key)
    assert ours._bf.bitarray == ref.bitarray
    probe = [f"probe-{i}" for i in range(3000)] + keys[:50]
    neg, pos = ours.split(probe)
    assert set(pos) == {k for k in probe if k in ref} and set(neg) | set(pos) == set(probe)
