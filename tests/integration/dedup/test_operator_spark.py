"""The dedup operator on real Spark and real Redis: output == first occurrence of each ID."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from dedup import (
    BloomConfig,
    CatalogUnavailableError,
    DedupConfig,
    Deduplicator,
    RecordIdError,
    RedisConfig,
    ShardClaimer,
    ShardCountMismatchError,
    UnsafeSettingError,
)
from dedup.bloom import FilterCache
from dedup.catalog import decisions_key
from dedup.local.services import RedisServer, free_port
from tests.integration.dedup.helpers import (
    BatchCollector,
    Record,
    assert_exact,
    reference,
    run_stream,
    write_batches,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.redis]


def make_batches(seed: int, n_batches: int, size: int, id_space: int) -> list[list[Record]]:
    rng = random.Random(seed)
    return [[(f"id{rng.randrange(id_space)}", b * 100_000 + i) for i in range(size)]
            for b in range(n_batches)]


def config(app_id: str, redis_url: str, **kw: Any) -> DedupConfig:
    return DedupConfig(app_id, RedisConfig(redis_url), num_shards=kw.pop("num_shards", 6), **kw)



def _decision_batches(client: Any, app: str) -> set[int]:
    """Batch ids of the decisions still recorded for ``app`` (6 shards)."""
    return {int(str(f).rsplit(":", 1)[1]) for s in range(6)
            for f in client.hkeys(decisions_key(app, s))}

def test_batch_dataframe_dups_within_batch_and_replay(spark: Any, redis_url: str,
                                                      app_id: str) -> None:
    data = make_batches(1, 1, 400, 150)[0]
    df = spark.createDataFrame(data, "_record_id string, v long")
    dedup = Deduplicator(config(app_id, redis_url))
    out = dedup.apply(df)
    first = [(r["_record_id"], r["v"]) for r in out.collect()]
    assert_exact(first, reference([data]))
    metrics = dedup.metrics()
    assert metrics is not None and metrics.records_in == 400
    assert metrics.kept == len(first) and metrics.duplicates_in_batch == 400 - len(first)
    # Re-executing the same DataFrame replays the recorded decisions: its own
    # claims are not mistaken for duplicates (docs/design.md, invariant 4).
    again = [(r["_record_id"], r["v"]) for r in out.collect()]
    assert sorted(again) == sorted(first)
    # A new DataFrame over the same IDs is a different run: all duplicates now.
    assert Deduplicator(config(app_id, redis_url)).apply(df).count() == 0


def test_streaming_across_batches_and_restarts(spark: Any, redis_url: str, app_id: str,
                                               tmp_path: Path) -> None:
    batches = make_batches(2, 6, 150, 400)
    src = tmp_path / "in"
    write_batches(src, batches[:3])
    dedup = Deduplicator(config(app_id, redis_url))
    ck = str(tmp_path / "ck")
    first_run = BatchCollector()
    query = run_stream(spark, dedup, src, ck, first_run)
    metrics = dedup.metrics(query, with_catalog_size=True)
    assert metrics is not None and metrics.records_in == 150
    assert metrics.round_trips >= 1 and metrics.catalog_size == len(reference(batches[:3]))
    # Restart from the checkpoint, failing once after the claims of a batch:
    # the restarted query re-runs that batch and gets the recorded decisions.
    write_batches(src, batches[3:], start=3)
    second_run = BatchCollector(fail_on_batch=4)
    with pytest.raises(Exception, match="injected sink failure"):
        run_stream(spark, dedup, src, ck, second_run)
    run_stream(spark, dedup, src, ck, second_run)
    assert second_run.failed and sorted(second_run.batches) == [3, 4, 5]
    assert_exact(first_run.rows() + second_run.rows(), reference(batches))
    # Decisions of committed batches are collected by the listener (async): on each
    # progress event those before the committed batch, and at the query's end (all
    # six batches committed) the rest, so nothing is left to refuse a new query for.
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    deadline = time.monotonic() + 20
    while True:
        left = _decision_batches(client, app_id)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert left == set(), f"decisions of committed batches not collected: {left}"


def test_tiny_bloom_filter_is_still_exact(spark: Any, redis_url: str, app_id: str,
                                          tmp_path: Path) -> None:
    batches = make_batches(3, 4, 200, 300)
    write_batches(tmp_path / "in", batches)
    dedup = Deduplicator(config(app_id, redis_url,
                                bloom=BloomConfig(capacity=4, error_rate=0.5)))
    collector = BatchCollector()
    query = run_stream(spark, dedup, tmp_path / "in", str(tmp_path / "ck"), collector)
    assert_exact(collector.rows(), reference(batches))
    metrics = dedup.metrics(query)
    assert metrics is not None and metrics.bloom_positives > 0


def test_stale_bloom_filter_is_not_trusted(spark: Any, redis_url: str, app_id: str,
                                           tmp_path: Path) -> None:
    batches = make_batches(4, 2, 200, 100_000)
    src = tmp_path / "in"
    write_batches(src, batches[:1])
    cfg = config(app_id, redis_url, journal_versions=2)
    dedup = Deduplicator(cfg)
    ck = str(tmp_path / "ck")
    collector = BatchCollector()
    run_stream(spark, dedup, src, ck, collector)  # workers now cache current filters
    # Another process claims IDs of the next batch (and bumps versions past the
    # journal on some shards): the workers' filters are behind and must not be
    # trusted to say "new".
    stolen = sorted({rid for rid, _ in batches[1][::3]})
    other = ShardClaimer(cfg, filters=FilterCache())
    by_shard = _shard_ids(spark, stolen, cfg.num_shards)
    for round_ in range(3):
        for shard, ids in by_shard.items():
            part = ids[round_::3]
            if part:
                other.claim("other-process", f"r{round_}", shard, part)
    write_batches(src, batches[1:], start=1)
    run_stream(spark, dedup, src, ck, collector)
    assert_exact(collector.rows(), _expected_with_stolen(batches, stolen))


def _expected_with_stolen(batches: list[list[Record]], stolen: list[str]) -> list[Record]:
    first = reference(batches[:1])
    seen = {rid for rid, _ in first} | set(stolen)
    return first + reference(batches[1:], seen=seen)


def _shard_ids(spark: Any, ids: list[str], num_shards: int) -> dict[int, list[str]]:
    from pyspark.sql import functions as sf

    df = spark.createDataFrame([(i,) for i in ids], "id string").withColumn(
        "s", sf.pmod(sf.xxhash64("id"), sf.lit(num_shards)).cast("int"))
    out: dict[int, list[str]] = {}
    for row in df.collect():
        out.setdefault(row["s"], []).append(row["id"])
    return out


def test_clear_errors(spark: Any, redis_url: str, app_id: str, tmp_path: Path) -> None:
    df = spark.createDataFrame([("a", 1), (None, 2)], "_record_id string, v long")
    with pytest.raises(RecordIdError, match=r"'nope' is missing; available columns: \['_rec"):
        Deduplicator(DedupConfig(app_id, RedisConfig(redis_url), id_column="nope")).apply(df)
    with pytest.raises(Exception, match=r"record id column '_record_id' has 1 null") as info:
        Deduplicator(config(app_id, redis_url)).apply(df).collect()
    assert "with_record_id(strategy='hash')" in str(info.value)
    with pytest.raises(ShardCountMismatchError, match=r"num_shards changed: recorded 6, now 7"):
        Deduplicator(config(app_id, redis_url, num_shards=7)).apply(df)
    closed = f"redis://:secret@127.0.0.1:{free_port()}/0"
    with pytest.raises(CatalogUnavailableError, match="unreachable") as unreachable:
        Deduplicator(config(app_id + "x", closed)).apply(df)
    assert "secret" not in str(unreachable.value) and "***" in str(unreachable.value)
    with RedisServer(tmp_path / "volatile", appendonly=False) as volatile:
        with pytest.raises(UnsafeSettingError, match=r"appendonly=no.*require_persistence"):
            Deduplicator(config(app_id + "v", volatile.url)).apply(df)
        allowed = DedupConfig(app_id + "v", RedisConfig(volatile.url, require_persistence=False))
        ok = spark.createDataFrame([("a", 1), ("a", 2)], "_record_id string, v long")
        assert Deduplicator(allowed).apply(ok).count() == 1


def test_redis_restart_with_aof(spark: Any, app_id: str, tmp_path: Path) -> None:
    batches = make_batches(5, 4, 150, 300)
    src = tmp_path / "in"
    write_batches(src, batches[:2])
    server = RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always")
    server.start()
    try:
        dedup = Deduplicator(config(app_id, server.url))
        ck = str(tmp_path / "ck")
        collector = BatchCollector()
        run_stream(spark, dedup, src, ck, collector)
        server.kill()  # SIGKILL: only the AOF survives
        server.start()
        write_batches(src, batches[2:], start=2)
        run_stream(spark, dedup, src, ck, collector)
        assert_exact(collector.rows(), reference(batches))
    finally:
        server.stop()



def test_one_gc_listener_per_session_serves_every_app_id(spark: Any, redis_url: str,
                                                         app_id: str, tmp_path: Path) -> None:
    # One Python listener per app id made every progress event of every query
    # cost a py4j round trip per app id ever started in the session.
    def listeners() -> int:
        return len(spark._jsparkSession.streams().listListeners())

    before = listeners()
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    apps = [f"{app_id}-a", f"{app_id}-b", f"{app_id}-c"]
    for n, app in enumerate(apps):
        batches = make_batches(10 + n, 3, 100, 300)
        src = tmp_path / app / "in"
        write_batches(src, batches)
        collector = BatchCollector()
        run_stream(spark, Deduplicator(config(app, redis_url)), src,
                   str(tmp_path / app / "ck"), collector)
        assert_exact(collector.rows(), reference(batches))
    assert listeners() <= max(before, 1), (before, listeners())
    deadline = time.monotonic() + 20
    while any(_decision_batches(client, app) - {2} for app in apps):
        assert time.monotonic() < deadline, {a: _decision_batches(client, a) for a in apps}
        time.sleep(0.5)
