"""``dedup forget-query`` lets a new query past an abandoned one's unfinished batch."""

from __future__ import annotations

import time

import pytest

from dedup import AppIdInUseError, DedupConfig, RedisConfig, ShardClaimer
from dedup.bloom import FilterCache
from dedup.cli.main import main
from tests.integration.dedup.helpers import query_ids

pytestmark = [pytest.mark.integration, pytest.mark.redis]

NOW = time.time()  # bucket keys of a claim expire a horizon after its time


def test_forget_query_drops_the_abandoned_decisions(redis_url: str, app_id: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    cfg = DedupConfig(app_id, RedisConfig(redis_url), num_shards=2, lease_seconds=60)
    gone, new = query_ids(2)
    ShardClaimer(cfg, filters=FilterCache()).claim(gone, 3, 1, ["x"], gone, now=NOW)
    from dedup import RedisCatalog

    RedisCatalog(cfg).release(gone)
    newcomer = ShardClaimer(cfg, filters=FilterCache())
    with pytest.raises(AppIdInUseError, match=rf"dedup forget-query .*--query-id {gone} "
                                              r"--num-shards 2"):
        newcomer.claim(new, 0, 1, ["x", "y"], new, now=NOW)
    assert main(["forget-query", "--app-id", app_id, "--query-id", gone, "--num-shards", "3",
                 "--redis-url", redis_url, "--quiet"]) == 2  # wrong count: refused, kept
    assert "num_shards changed" in capsys.readouterr().err
    assert main(["forget-query", "--app-id", app_id, "--query-id", gone, "--num-shards", "2",
                 "--redis-url", redis_url, "--quiet"]) == 0
    assert "1 decision(s) dropped" in capsys.readouterr().out
    assert newcomer.claim(new, 0, 1, ["x", "y"], new, now=NOW).keep.tolist() == [False, True]
    # The forgotten query's record of its app id went too: another app id may join it.
    renamed = DedupConfig(f"{app_id}-renamed", RedisConfig(redis_url), num_shards=2)
    assert ShardClaimer(renamed, filters=FilterCache()).claim(
        gone, 4, 0, ["z"], gone, now=NOW).keep.tolist() == [True]
