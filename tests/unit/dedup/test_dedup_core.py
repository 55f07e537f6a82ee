"""Unit tests of the dedup core: config, IDs, Bloom wrapper, keys, claim logic."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dedup import claim as claim_module
from dedup.bloom import FilterCache, ShardFilter
from dedup.catalog import (
    decisions_key,
    index_key,
    journal_key,
    live_buckets,
    meta_key,
    state_key,
)
from dedup.claim import ShardClaimer
from dedup.config import BloomConfig, DedupConfig, RedisConfig, RetentionConfig
from dedup.exceptions import ConfigError, RecordIdError
from dedup.keys import shard_tag
from dedup.metrics import DUP_CATALOG, DUP_IN_BATCH, KEPT, LATE_DROPPED, DedupMetrics
from dedup.partition_step import (
    decide_partition,
    id_problem_codes,
    late_mask,
    raise_for_problems,
)
from dedup.placement import placement_keys, spark_hash_int
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
    keys = [state_key("a", 3), decisions_key("a", 3), journal_key("a", 3), index_key("a", 3, 7)]
    assert {k[k.index("{"):k.index("}") + 1] for k in keys} == {shard_tag("a", 3)} == {"{a:s3}"}
    assert meta_key("a") == "dedup:{a}:meta"
    assert state_key("a", 3) != state_key("a", 4)


def test_live_buckets() -> None:
    c = cfg(retention=RetentionConfig(horizon_seconds=300, bucket_seconds=100))
    assert live_buckets(c, 1000.5) == [10, 9, 8, 7]


@pytest.mark.parametrize("values, problem", [
    (["a", None], "1 null"),
    (["a", ""], "1 empty"),
    (["a\nb"], "newline"),
    (["x" * 1025], "longer than 1024"),
])
def test_bad_ids_named(values: list[str | None], problem: str) -> None:
    with pytest.raises(RecordIdError, match=problem) as info:
        raise_for_problems(cfg(), id_problem_codes(values), "q1", "7")
    assert "'_record_id'" in str(info.value) and "batch 7" in str(info.value)
    assert "with_record_id" in str(info.value)


def test_bad_ids_fail_the_partition_before_any_claim() -> None:
    fake = FakeCatalog()
    claimer = ShardClaimer(cfg(), fake, FilterCache())
    with pytest.raises(RecordIdError, match="1 null, 1 empty"):
        decide_partition(cfg(), ["a", None, ""], np.zeros(3), "q", "0", "q", 0, claimer, now=0)
    assert fake.calls == 0


def test_placement_keys_cover_each_partition() -> None:
    # Reference values of Spark's hash(int) (Murmur3 x86_32, seed 42), read from Spark 4.0.
    assert [spark_hash_int(i) for i in range(4)] == [933211791, -559580957, 1765031574,
                                                     -1823081949]
    for shards, parts in [(8, 4), (16, 4), (3, 8), (64, 7)]:
        keys = placement_keys(shards, parts)
        assert [spark_hash_int(k) % parts for k in keys] == [s % parts for s in range(shards)]


def test_bloom_filter_wrapper() -> None:
    bf = ShardFilter(10, 0.01, "e", 0)
    assert bf.add_all([f"k{i}" for i in range(5)])
    neg, pos = bf.split(["k1", "zz", "k4"])
    assert set(pos) >= {"k1", "k4"} and "k1" not in neg
    assert bf.has_room(5) and not bf.has_room(7)
    assert not bf.add_all([f"x{i}" for i in range(20)])  # full: reported, not raised
    bf.retag("e2", 5)
    assert bf.tag == ("e2", 5, "")
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


def test_a_large_claim_from_a_stale_filter_catches_up_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At CATCH_UP_FIRST_MIN candidates and more, a filter behind the shard gets the
    catch-up alone (nothing claimed), then claims on the trust path: the same keeps."""
    monkeypatch.setattr(claim_module, "CATCH_UP_FIRST_MIN", 2)
    fake = FakeCatalog(journal_versions=4)
    w1, w2 = (ShardClaimer(cfg(), fake, FilterCache()) for _ in range(2))
    w1.claim("q", 0, 0, ["a", "x"], now=0)
    w2.claim("q", 1, 0, ["b", "y"], now=0)  # w1's filter is now behind
    calls = fake.calls
    out = w1.claim("q", 2, 0, ["b", "c", "y"], now=0)
    assert out.kept == {"c"} and out.mode == "trust" and out.round_trips == 2
    assert fake.calls == calls + 2
    assert len(fake.shard(0).decisions["q:2"]) == 1  # one decision, made by the second call
    assert w1.filters.get("app", 0).version == fake.shard(0).version  # type: ignore[union-attr]
    # below the threshold the journal path judges it in one round trip
    w2.claim("q", 3, 0, ["d", "z"], now=0)
    small = w1.claim("q", 4, 0, ["d"], now=0)
    assert small.kept == set() and small.mode == "journal" and small.round_trips == 1


def test_a_catch_up_without_room_rebuilds_the_filter_bigger(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claim_module, "CATCH_UP_FIRST_MIN", 1)
    fake = FakeCatalog(journal_versions=4)
    small = cfg(bloom=BloomConfig(capacity=4, error_rate=0.3))
    w1, w2 = (ShardClaimer(small, fake, FilterCache()) for _ in range(2))
    w1.claim("q", 0, 0, ["a"], now=0)
    w2.claim("q", 1, 0, ["b", "c", "d"], now=0)
    out = w1.claim("q", 2, 0, ["b", "e", "f"], now=0)
    assert out.kept == {"e", "f"} and out.round_trips == 3  # catch-up, snapshot, claim
    bf = w1.filters.get("app", 0)
    assert bf is not None and bf.capacity >= 8 and bf.version == fake.shard(0).version


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


def test_decide_partition_first_occurrence_and_status() -> None:
    fake = FakeCatalog()
    c = cfg()
    claimer = ShardClaimer(c, fake, FilterCache())
    claimer.claim("q", "old", 1, ["b"], now=0)
    out = decide_partition(c, ["a", "b", "a", "c"], np.array([0, 1, 0, 0]), "q", "5", "q", 0,
                           claimer, now=0)
    assert out["status"].tolist() == [KEPT, DUP_CATALOG, DUP_IN_BATCH, KEPT]
    assert out["round_trips"].dtype == np.int32
    assert int(out["round_trips"].sum()) == 3  # 2 shards, 1 cold snapshot
    again = decide_partition(c, ["a", "b", "a", "c"], np.array([0, 1, 0, 0]), "q", "5", "q", 0,
                             claimer, now=0)
    assert again["status"].tolist() == out["status"].tolist()  # a retry replays


def test_late_policy_drop_counts() -> None:
    c = cfg(retention=RetentionConfig(horizon_seconds=100, bucket_seconds=100,
                                      event_time_column="ts"))
    times = np.array([1000.0, 850.0, 990.0, np.nan])
    late = late_mask(c, times, 1000.0)
    assert late is not None and late.tolist() == [False, True, False, False]
    out = decide_partition(c, ["a", "b", "b", "c"], np.zeros(4), "q", "0", "q", 0,
                           ShardClaimer(c, FakeCatalog(), FilterCache()), now=1000.0,
                           event_seconds=times)
    assert out["status"].tolist() == [KEPT, LATE_DROPPED, KEPT, KEPT]
    assert out["late"].tolist() == [0, 1, 0, 0]


def test_metrics_from_observed() -> None:
    m = DedupMetrics.from_observed({"records_in": 5, "kept": 3, "duplicates_in_batch": 1,
                                    "duplicates_catalog": 1}, catalog_size=9)
    assert m.duplicates_dropped == 2 and m.catalog_size == 9 and m.round_trips == 0


@pytest.mark.parametrize("capacity, error_rate", [(4, 0.5), (100, 0.2), (50_000, 0.01),
                                                  (400_000, 0.01), (10_000, 0.0001)])
def test_bloom_positions_one_bit_per_pybloom_slice(capacity: int, error_rate: float) -> None:
    bf = ShardFilter(capacity, error_rate, "e", 0)
    keys = [f"rec-{i}-\u00e9" for i in range(min(capacity, 3000))]
    positions = bf.positions(keys)
    k, m = bf._bf.num_slices, bf._bf.bits_per_slice
    assert positions.shape == (len(keys), k)
    slice_of = positions // np.uint64(m)
    assert (slice_of == np.arange(k, dtype=np.uint64)).all()  # bit i lies in slice i
    assert bf.add_all(keys)
    hit, _ = bf.probe(keys)
    assert hit.all()  # never a false negative
    assert bf.count == pytest.approx(len(keys), rel=0.01)


@pytest.mark.parametrize("error_rate", [0.1, 0.01, 0.001])
def test_bloom_false_positive_rate_close_to_configured(error_rate: float) -> None:
    capacity = 20_000
    bf = ShardFilter(capacity, error_rate, "e", 0)
    assert bf.add_all([f"in-{i}" for i in range(capacity)])
    probes = 200_000
    hit, _ = bf.probe([f"out-{i}" for i in range(probes)])
    observed = hit.sum() / probes
    # within 1.5x of the configured rate (the benchmark's bar), with room for sampling noise
    assert observed <= 1.5 * error_rate + 3 * (error_rate / probes) ** 0.5


@pytest.mark.parametrize("bad", [-1, True, 1.5, "1"])
def test_wait_replicas_must_be_a_count(bad: object) -> None:
    with pytest.raises(ConfigError, match="wait_replicas"):
        RedisConfig("redis://127.0.0.1:1/0", wait_replicas=bad)  # type: ignore[arg-type]


def test_replica_timeout_must_be_below_the_socket_timeout() -> None:
    with pytest.raises(ConfigError, match="replica_timeout"):
        RedisConfig("redis://127.0.0.1:1/0", replica_timeout=10.0, socket_timeout=10.0)
    assert RedisConfig("redis://127.0.0.1:1/0", wait_replicas=0).wait_replicas == 0

