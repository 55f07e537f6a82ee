"""Settings that decide no record's fate, changed between runs at the worst moment (issue 33).

Each case runs against a real Redis with simulated Python workers (a
``ShardClaimer`` with its own Bloom filter cache each, as Spark's workers have):
batch 0 is decided and committed; batch 1 is half decided (shard 0 claimed,
shard 1 not: a task killed after its claim) when the query restarts with the
setting changed, once up and once down. The restart reuses one worker's filter
cache from before the change (a Python worker that outlived the restart) beside a
new one; it retries batch 1 (shard 0 must replay its decision) and decides
batch 2, whose input re-sends earlier records. The kept IDs must be the
failure-free output: every ID's first occurrence, once. Verdicts are in
docs/operational-changes.md ("Every name, its verdict").
"""

from __future__ import annotations

import dataclasses
import uuid
import zlib
from typing import Any

import pytest

from dedup import BloomConfig, DedupConfig, RedisCatalog, RedisConfig, ShardClaimer
from dedup.bloom import FilterCache
from tests.integration.dedup.helpers import driver_catalog, query_ids

pytestmark = [pytest.mark.integration, pytest.mark.redis]

NOW = 1_800_000_000.0
SHARDS = 2


def _bloom(**changes: Any) -> Any:
    return lambda cfg: dataclasses.replace(cfg, bloom=dataclasses.replace(cfg.bloom, **changes))


def _redis(**changes: Any) -> Any:
    return lambda cfg: dataclasses.replace(cfg, redis=dataclasses.replace(cfg.redis, **changes))


def _top(**changes: Any) -> Any:
    return lambda cfg: dataclasses.replace(cfg, **changes)


# (name, the setting before, after): both directions of each
CHANGES = {
    "bloom.enabled": (_bloom(enabled=True), _bloom(enabled=False)),
    "bloom.capacity": (_bloom(capacity=2_000), _bloom(capacity=40)),
    "bloom.error_rate": (_bloom(error_rate=0.001), _bloom(error_rate=0.3)),
    "journal_versions": (_top(journal_versions=64), _top(journal_versions=1)),
    "lease_seconds": (_top(lease_seconds=60.0), _top(lease_seconds=5.0)),
    "redis.socket_timeout": (_redis(socket_timeout=30.0), _redis(socket_timeout=8.0)),
    "redis.connect_timeout": (_redis(connect_timeout=10.0), _redis(connect_timeout=2.0)),
    "redis.replica_timeout": (_redis(replica_timeout=5.0), _redis(replica_timeout=1.0)),
    "redis.failover_wait": (_redis(failover_wait=20.0), _redis(failover_wait=0.0)),
    "redis.options": (_redis(options={}), _redis(options={"health_check_interval": 10})),
}
CASES = [(name, direction) for name in CHANGES for direction in ("up", "down")]


def shard_of(rid: str) -> int:
    return zlib.crc32(rid.encode()) % SHARDS


def _claim(worker: ShardClaimer, query: str, batch: int, ids: list[str],
           shards: tuple[int, ...] = (0, 1)) -> set[str]:
    kept: set[str] = set()
    for shard in shards:
        group = [rid for rid in dict.fromkeys(ids) if shard_of(rid) == shard]
        if group:
            kept |= worker.claim(query, batch, shard, group, query, now=NOW).kept
    return kept


@pytest.mark.parametrize(("name", "direction"), CASES, ids=[f"{n}-{d}" for n, d in CASES])
def test_a_setting_changed_mid_batch_keeps_the_decisions_exact(
        redis_url: str, name: str, direction: str) -> None:
    (query,) = query_ids()
    base = DedupConfig(f"set-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url),
                       num_shards=SHARDS, bloom=BloomConfig(capacity=2_000, error_rate=0.01))
    first, second = CHANGES[name] if direction == "down" else CHANGES[name][::-1]
    before, after = first(base), second(base)
    RedisCatalog(before).check_setup()
    batches = [[f"id-{i}" for i in range(100)],
               [f"id-{i}" for i in range(50, 150)],
               [f"id-{i}" for i in range(30)] + [f"id-{i}" for i in range(150, 180)]]
    seen: set[str] = set()
    expected = []
    for ids in batches:
        expected.append({rid for rid in ids if rid not in seen})
        seen.update(ids)

    lasting = FilterCache()  # a Python worker that outlives the restart
    old = ShardClaimer(before, RedisCatalog(before), lasting)
    kept0 = _claim(old, query, 0, batches[0])
    driver_catalog(before).commit_progress(query, 0)
    half = _claim(ShardClaimer(before, RedisCatalog(before), FilterCache()), query, 1,
                  batches[1], shards=(0,))  # shard 0 claimed, then the query died
    RedisCatalog(before).release(query)

    # The restart, with the setting changed: the lasting worker and a new one.
    catalog = driver_catalog(after)
    catalog.check_setup()
    kept_by = [ShardClaimer(after, catalog, lasting), ShardClaimer(after, catalog, FilterCache())]
    retried = _claim(kept_by[1], query, 1, batches[1], shards=(0,))
    assert retried == half, "the retry of a claimed shard did not replay its decision"
    kept1 = retried | _claim(kept_by[0], query, 1, batches[1], shards=(1,))
    catalog.commit_progress(query, 1)
    kept2 = _claim(kept_by[0], query, 2, batches[2], shards=(0,)) | \
        _claim(kept_by[1], query, 2, batches[2], shards=(1,))
    got = [kept0, kept1, kept2]
    for batch, (have, want) in enumerate(zip(got, expected, strict=True)):
        assert have == want, (f"{name} {direction}, batch {batch}: lost {sorted(want - have)[:5]}"
                              f", duplicated {sorted(have - want)[:5]}")


@pytest.mark.parametrize("name", ["late_policy", "horizon_seconds", "event_time_column"])
def test_a_setting_that_decides_late_records_changed_mid_batch_is_refused_naming_it(
        redis_url: str, name: str) -> None:
    """With ``retention.event_time_column`` set, the late-record policy, the horizon and
    the column itself decide which rows a batch claims. Changed between two attempts
    of a batch whose shard is claimed, the retry's candidates differ from the recorded
    decision's: refused (replaying would drop IDs never claimed). The refusal must name
    the changed setting and say to restore it until the batch is committed (it blamed
    two dedup steps or an input that is not replayable, which the source was); done as
    told, the batch is exact, and the change applies from the next batch on."""
    import numpy as np

    from dedup import CatalogStateError, RetentionConfig
    from dedup.config import LatePolicy
    from dedup.metrics import KEPT, LATE_DROPPED, STATUS
    from dedup.partition_step import decide_partition

    (query,) = query_ids()
    before = DedupConfig(f"late-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url),
                         num_shards=1, bloom=BloomConfig(enabled=False),
                         retention=RetentionConfig(horizon_seconds=3600, bucket_seconds=600,
                                                   event_time_column="t",
                                                   late_policy=LatePolicy.DROP))
    changes: dict[str, dict[str, Any]] = {
        "late_policy": {"late_policy": LatePolicy.PASS},
        "horizon_seconds": {"horizon_seconds": 3 * 3600},
        "event_time_column": {"event_time_column": None}}
    changed = changes[name]
    after = dataclasses.replace(before, retention=dataclasses.replace(before.retention,
                                                                      **changed))
    ids = np.array(["a", "b", "c"], dtype=object)
    shards = np.zeros(3, dtype=np.int64)

    def decide(cfg: DedupConfig, batch: str, rows: np.ndarray = ids) -> Any:
        events = (np.array([NOW - 10, NOW - 2 * 3600, NOW - 5], dtype=float)[:len(rows)]
                  if cfg.retention.event_time_column else None)
        return decide_partition(cfg, rows, shards[:len(rows)], query, batch, query, 0,
                                now=NOW, event_seconds=events)

    first = decide(before, "1")[STATUS].tolist()
    assert first == [KEPT, LATE_DROPPED, KEPT]  # b is two hours old: late, dropped
    with pytest.raises(CatalogStateError) as refusal:
        decide(after, "1")  # the retry of batch 1 after the restart with the change
    message = str(refusal.value)
    assert f"retention {name}" in message and "restore" in message, message
    assert "make the source replayable" not in message, message
    assert decide(before, "1")[STATUS].tolist() == first  # restored: the same decision
    driver_catalog(before).commit_progress(query, 1)
    later = decide(after, "2", np.array(["a", "b", "d"], dtype=object))[STATUS].tolist()
    assert later[0] != KEPT and later[2] == KEPT  # a seen; d new
    assert later[1] == KEPT  # b is not dropped as late any more: claimed now, once


@pytest.mark.parametrize("direction", ["fail-to-dead_letter", "dead_letter-to-fail"])
def test_invalid_ids_changed_mid_batch_keeps_the_decisions_exact(
        redis_url: str, direction: str) -> None:
    """``invalid_ids`` changed between two attempts of a batch with an empty ID in it.
    Under ``fail`` the batch fails before it claims anything; under ``dead_letter`` the
    invalid row passes unclaimed (for the sink's dead-letter topic) and the rest is
    claimed. Either way the retry under the other policy decides the valid rows as the
    first attempt did (or would have), and re-sent copies are dropped after."""
    import numpy as np

    from dedup import RecordIdError
    from dedup.config import InvalidIdPolicy
    from dedup.metrics import DUP_CATALOG, INVALID_ID, KEPT, STATUS
    from dedup.partition_step import decide_partition

    (query,) = query_ids()
    fail = DedupConfig(f"inv-{uuid.uuid4().hex[:10]}", RedisConfig(redis_url), num_shards=1,
                       bloom=BloomConfig(enabled=False))
    letter = dataclasses.replace(fail, invalid_ids=InvalidIdPolicy.DEAD_LETTER)
    first, second = (fail, letter) if direction == "fail-to-dead_letter" else (letter, fail)
    ids = np.array(["a", "", "b"], dtype=object)
    shards = np.zeros(3, dtype=np.int64)

    def decide(cfg: DedupConfig, batch: str, rows: np.ndarray = ids) -> list[int]:
        return decide_partition(cfg, rows, shards[:len(rows)], query, batch, query, 0,
                                now=NOW)[STATUS].tolist()

    if first is fail:
        with pytest.raises(RecordIdError):
            decide(fail, "1")
        assert decide(letter, "1") == [KEPT, INVALID_ID, KEPT]
    else:
        assert decide(letter, "1") == [KEPT, INVALID_ID, KEPT]
        with pytest.raises(RecordIdError, match="filter such rows out"):
            decide(fail, "1")
        # its advice: the invalid row filtered out; the valid rows replay their decision
        assert decide(fail, "1", np.array(["a", "b"], dtype=object)) == [KEPT, KEPT]
    driver_catalog(second).commit_progress(query, 1)
    assert decide(second, "2", np.array(["a", "c"], dtype=object)) == [DUP_CATALOG, KEPT]
