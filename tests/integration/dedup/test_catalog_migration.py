"""`dedup migrate-catalog` against a real Redis: a catalog an earlier release wrote
(format 1: sets of ID strings) is converted in place, its IDs still caught afterwards.

The format-1 keys are written here as that release wrote them (docs/design.md
describes that layout).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from dedup import AppIdInUseError, CatalogStateError, DedupConfig, RedisConfig
from dedup.bloom import FilterCache
from dedup.catalog import (
    RedisCatalog,
    decisions_key,
    index_key,
    journal_key,
    meta_key,
    queries_key,
    state_key,
)
from dedup.claim import ShardClaimer
from dedup.migrate import migrate_catalog

pytestmark = pytest.mark.integration
DAY = 24 * 3600


def _old_catalog(client: Any, app: str, now: float) -> dict[int, list[str]]:
    """Write a format-1 catalog of two shards: ID sets in two live buckets (with the
    expiry the old release set), a journal of raw IDs, a committed batch's decisions."""
    bucket = int(now) // DAY
    client.hset(meta_key(app), mapping={"num_shards": "2", "placement": "hash",
                                        "bucket_seconds": str(DAY), "replicas": "0"})
    ids: dict[int, list[str]] = {}
    for shard in (0, 1):
        ids[shard] = [f"s{shard}-old-{i}" for i in range(3_000)]
        for offset, part in ((0, ids[shard][:2_000]), (1, ids[shard][2_000:])):
            key = f"dedup:{{{app}:s{shard}}}:ids:{bucket - offset}"
            client.sadd(key, *part)
            client.expireat(key, (bucket - offset + 1) * DAY + 7 * DAY)
        client.hset(state_key(app, shard), mapping={"epoch": "old-epoch", "version": "4",
                                                    "tok": "t4", "n": "2"})
        client.hset(journal_key(app, shard), mapping={"4": "\n".join(ids[shard][-5:]),
                                                      "t4": "t4"})
        client.hset(decisions_key(app, shard), "q-old:7", "4|\n3:abc\n" + ids[shard][0])
    client.hset(queries_key(app), "q-old", 7)
    return ids


@pytest.fixture()
def old_app(redis_url: str) -> tuple[DedupConfig, dict[int, list[str]], Any]:
    cfg = DedupConfig(f"mig-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url), num_shards=2)
    client = redis.Redis.from_url(redis_url)
    return cfg, _old_catalog(client, cfg.app_id, time.time()), client


def _old_ids_caught(cfg: DedupConfig, ids: dict[int, list[str]], query: str, every: int,
                    fresh: int, name: str, now: float) -> None:
    """After a migration: every ``every``-th old ID is a duplicate, ``fresh`` new ones per
    shard are kept once (claimed by ``query`` in its batch 0)."""
    for shard in (0, 1):
        new = [f"s{shard}-{name}-{i}" for i in range(fresh)]
        candidates = ids[shard][::every] + new
        outcome = ShardClaimer(cfg, filters=FilterCache()).claim(
            query, 0, shard, candidates, query, now=now)
        kept = {key for key, k in zip(candidates, outcome.keep.tolist(), strict=True) if k}
        assert kept == set(new), f"shard {shard}: old IDs passed or new ones dropped"


def test_a_migrated_catalog_still_catches_every_old_id(
        old_app: tuple[DedupConfig, dict[int, list[str]], Any]) -> None:
    cfg, ids, client = old_app
    app, now = cfg.app_id, time.time()
    bucket = int(now) // DAY
    with pytest.raises(CatalogStateError, match="migrate-catalog"):
        RedisCatalog(cfg).check_setup()

    report = migrate_catalog(cfg, chunk=700)  # chunks smaller than a set: several calls
    assert (report.ids, report.buckets, report.decisions) == (6_000, 4, 2)
    RedisCatalog(cfg).check_setup()  # no longer refused
    assert not list(client.scan_iter(match=f"dedup:{{{app}:s*}}:ids:*")), "old sets left"
    assert not client.exists(journal_key(app, 0), decisions_key(app, 0))
    for offset in (0, 1):
        assert client.expiretime(index_key(app, 0, bucket - offset)) == \
            (bucket - offset + 1) * DAY + 7 * DAY, "the bucket's expiry did not carry over"
    assert client.hget(state_key(app, 0), "epoch") != b"old-epoch", "old filters still trusted"

    _old_ids_caught(cfg, ids, "q-new", 10, 50, "new", now)
    assert RedisCatalog(cfg).catalog_size(now) == 6_100

    again = migrate_catalog(cfg)
    assert again.already and again.ids == 0


def test_a_migration_half_done_is_finished_by_running_it_again(
        old_app: tuple[DedupConfig, dict[int, list[str]], Any]) -> None:
    cfg, ids, _client = old_app
    app, now = cfg.app_id, time.time()
    bucket = int(now) // DAY
    # A first run that stopped after importing part of one set (before deleting it):
    # its IDs are imported again, once.
    from dedup.catalog import client_and_scripts, id_digests

    _c, scripts = client_and_scripts(cfg.redis)
    scripts["import"](keys=[index_key(app, 0, bucket)],
                      args=[(bucket + 8) * DAY, b"".join(id_digests(ids[0][:500]))])
    report = migrate_catalog(cfg)
    assert report.ids == 6_000 - 500
    assert RedisCatalog(cfg).catalog_size(now) == 6_000
    snapshot = RedisCatalog(cfg).snapshot(0, now)
    assert len(snapshot.ids) == len(set(snapshot.ids)) == 3_000


def test_a_migration_is_refused_while_a_query_runs_or_left_a_batch_unfinished(
        old_app: tuple[DedupConfig, dict[int, list[str]], Any]) -> None:
    cfg, _ids, client = old_app
    app = cfg.app_id
    RedisCatalog(cfg).take_lease("q-running")
    with pytest.raises(AppIdInUseError, match="q-running"):
        migrate_catalog(cfg)
    RedisCatalog(cfg).release("q-running")
    client.hset(decisions_key(app, 1), "q-old:8", "5|\n1:abc\nx")  # batch 8 never committed
    with pytest.raises(AppIdInUseError, match="q-old left batch 8 unfinished"):
        migrate_catalog(cfg)
    assert client.hget(meta_key(app), "catalog_format") is None
    assert list(client.scan_iter(match=f"dedup:{{{app}:s*}}:ids:*")), "a refusal converted"


def test_the_command_converts_and_says_so(
        old_app: tuple[DedupConfig, dict[int, list[str]], Any], tmp_path: Path) -> None:
    cfg, _ids, client = old_app
    dedup = Path(sys.executable).parent / "dedup"
    argv = [str(dedup), "migrate-catalog", "--app-id", cfg.app_id, "--num-shards", "2",
            "--redis-url", cfg.redis.url]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "catalog converted: 6000 ID(s) in 4 time bucket(s)" in out.stdout
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "already" in again.stdout
    wrong = subprocess.run([*argv[:-3], "3", *argv[-2:]], capture_output=True, text=True,
                           timeout=120)
    assert wrong.returncode != 0 and "num_shards" in wrong.stderr
    assert client.hget(meta_key(cfg.app_id), "catalog_format") == b"3"
    assert RedisCatalog(cfg).take_lease("q-next") > 0, "the migration kept the app id's lease"


def test_a_wrong_shard_count_is_refused_and_the_count_it_names_migrates(
        old_app: tuple[DedupConfig, dict[int, list[str]], Any]) -> None:
    """Issue 33, item 4: ``migrate-catalog --num-shards 3`` on a two-shard catalog says
    "use --num-shards 2"; run that way, the migration converts and catches every old ID."""
    from dedup import ShardCountMismatchError

    cfg, ids, client = old_app
    wrong = DedupConfig(cfg.app_id, cfg.redis, num_shards=3)
    with pytest.raises(ShardCountMismatchError, match="use --num-shards 2") as refusal:
        migrate_catalog(wrong)
    assert client.hget(meta_key(cfg.app_id), "catalog_format") is None, "a refusal converted"
    told = int(str(refusal.value).rsplit("--num-shards ", 1)[1].split()[0])
    report = migrate_catalog(DedupConfig(cfg.app_id, cfg.redis, num_shards=told))
    assert report.ids == 6_000
    _old_ids_caught(cfg, ids, "q-after", 50, 20, "after", time.time())


def test_a_batch_jobs_claims_are_refused_and_forgetting_it_as_told_migrates(
        old_app: tuple[DedupConfig, dict[int, list[str]], Any]) -> None:
    """Issue 33, item 4: a batch job's recorded claims (a token, not a batch number) stop
    the migration; its advice, run literally: `dedup forget-query ...`, then migrate."""
    import shlex

    from dedup.cli.main import main

    cfg, ids, client = old_app
    client.hset(decisions_key(cfg.app_id, 1), "job-1:tok-9", "4|\n3:abc\n" + ids[1][1])
    with pytest.raises(AppIdInUseError, match="then migrate") as refusal:
        migrate_catalog(cfg)
    command = str(refusal.value).split("`")[1]
    assert command.startswith("dedup forget-query "), command
    assert main([*shlex.split(command)[1:], "--redis-url", cfg.redis.url, "--quiet"]) == 0
    report = migrate_catalog(cfg)
    assert report.ids == 6_000
    _old_ids_caught(cfg, ids, "q-after", 50, 20, "after", time.time())


def test_query_records_of_an_earlier_release_still_refuse_a_rename(
        redis_url: str, app_id: str) -> None:
    """Earlier releases kept each query's records under the query id alone,
    ``dedup:query:{<query id>}:apps`` and ``:outputs``, shared by every app id; they now
    sit under the Redis user. A record of the old layout is taken over at the first
    join, so a rename on the first restart after the upgrade is still refused."""
    from dedup.exceptions import SettingChangedError
    from sinks import OutputChangedError
    from sinks.checkpoint import CheckpointStore

    client = redis.Redis.from_url(redis_url)
    query = f"q-{uuid.uuid4().hex[:12]}"
    # as the earlier release wrote them: app id -> first batch; output -> batch:run:topic:cluster
    client.hset(f"dedup:query:{{{query}}}:apps", f"{app_id}-old", 0)
    client.hset(f"dedup:query:{{{query}}}:outputs", f"{app_id}-old/main", "4:run-1:t1:c1")

    renamed = RedisCatalog(DedupConfig(f"{app_id}-new", RedisConfig(redis_url), num_shards=2))
    with pytest.raises(SettingChangedError, match=f"'{app_id}-old' since batch 0"):
        renamed.join_query(query, 5)
    store = CheckpointStore(RedisConfig(redis_url), f"{app_id}-new", "main")
    with pytest.raises(OutputChangedError, match=f"'{app_id}-old/main' began batch 4"):
        store.join_query(query, "run-2", 4, "t1", "c1")
    # the old app id and output go on where they were
    RedisCatalog(DedupConfig(f"{app_id}-old", RedisConfig(redis_url), num_shards=2)
                 ).join_query(query, 5)
    CheckpointStore(RedisConfig(redis_url), f"{app_id}-old", "main").join_query(
        query, "run-2", 4, "t1", "c1")
    client.close()
