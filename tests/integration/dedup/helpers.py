"""Shared helpers of the dedup integration tests: input files, queries, reference."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Record = tuple[str, int]


def query_ids(count: int = 1) -> list[str]:
    """Streaming query ids of one test (a query id names one checkpoint: the catalog
    records which app ids deduplicate it, so tests must not share one)."""
    import uuid

    return [f"q-{uuid.uuid4().hex[:12]}" for _ in range(count)]


def driver_catalog(config: Any) -> Any:
    """The catalog as a query's driver holds it: after the start-up check that every
    form runs (it sets up the app id's catalog, without which the listener records no
    committed batch: a late event of a stopped query must not set up a flushed Redis)."""
    from dedup import RedisCatalog

    catalog = RedisCatalog(config)
    catalog.check_setup()
    return catalog


_BASE_TIME = time.time() - 100_000


def write_batches(folder: Path, batches: Sequence[Sequence[Record]], start: int = 0) -> None:
    """One JSON-lines file per batch (read with maxFilesPerTrigger=1: one batch per file)."""
    folder.mkdir(parents=True, exist_ok=True)
    for offset, batch in enumerate(batches):
        lines = [json.dumps({"_record_id": rid, "v": v}) for rid, v in batch]
        tmp = folder / f".f{start + offset:04d}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        # The file source orders files by modification time, not name: spread
        # them so that file i is batch i.
        stamp = _BASE_TIME + 10 * (start + offset)
        os.utime(tmp, (stamp, stamp))
        tmp.rename(folder / f"f{start + offset:04d}.json")


def reference(batches: Sequence[Sequence[Record]], seen: set[str] | None = None) -> list[Record]:
    """First occurrence of each ID, in input order (the failure-free output)."""
    seen = set() if seen is None else seen
    out = []
    for batch in batches:
        for rid, v in batch:
            if rid not in seen:
                seen.add(rid)
                out.append((rid, v))
    return out


def compare(actual: Sequence[Record], expected: Sequence[Record]) -> dict[str, Any]:
    """Losses and duplicates counted separately (a multiset comparison)."""
    from collections import Counter

    got, want = Counter(actual), Counter(expected)
    ids = Counter(rid for rid, _ in actual)
    return {
        "lost": sorted((want - got).elements())[:10],
        "extra": sorted((got - want).elements())[:10],
        "duplicate_ids": sorted(rid for rid, n in ids.items() if n > 1)[:10],
    }


def assert_exact(actual: Sequence[Record], expected: Sequence[Record]) -> None:
    diff = compare(actual, expected)
    assert diff == {"lost": [], "extra": [], "duplicate_ids": []}, diff


class BatchCollector:
    """foreachBatch sink that is idempotent per batch id (a replayed batch overwrites)."""

    def __init__(self, fail_on_batch: int | None = None) -> None:
        self.batches: dict[int, list[Record]] = {}
        self.fail_on_batch = fail_on_batch
        self.failed = False

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [(r["_record_id"], int(r["v"])) for r in df.collect()]
        if batch_id == self.fail_on_batch and not self.failed:
            self.failed = True
            raise RuntimeError(f"injected sink failure after the claims of batch {batch_id}")
        self.batches[batch_id] = rows

    def rows(self) -> list[Record]:
        return [row for b in sorted(self.batches) for row in self.batches[b]]


def run_stream(spark: Any, dedup: Any, input_dir: Path, checkpoint: str,
               collector: BatchCollector) -> Any:
    """Run one availableNow query over ``input_dir``; returns the finished query."""
    source = (spark.readStream.schema("_record_id string, v long")
              .option("maxFilesPerTrigger", 1).json(str(input_dir)))
    query = (dedup.apply(source).writeStream.foreachBatch(collector)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return query


def catalog_holds(client: Any, app_id: str, shard: int, record_id: str) -> bool:
    """Whether the catalog on ``client`` (a primary or a replica, read directly) holds
    ``record_id`` in any time bucket of ``shard``."""
    from dedup.catalog import id_digests

    digest = id_digests([record_id])[0]
    for key in client.scan_iter(match=f"dedup:{{{app_id}:s{shard}}}:idx:*:*"):
        blob = client.get(key) or b""
        if any(blob[i:i + 16] == digest for i in range(0, len(blob), 16)):
            return True
    return False


INVALID_ID_ROWS: list[tuple[str | None, int]] = [
    ("a", 1), (None, 2), ("b\nc", 3), ("a", 4), ("", 5), ("d", 6)]
"""Two valid IDs, one repeated, and a null, a newline-holding and an empty one."""


def assert_dead_letter_split(bootstrap: str, out: str, dead: str) -> None:
    """The output of :data:`INVALID_ID_ROWS` (value = the number): the first "a" and
    "d" in ``out`` with their IDs, the invalid ones in ``dead`` (read_committed)."""
    from dedup.constants import RECORD_ID_HEADER
    from sinks.kafka_io import consume_all

    good = consume_all(bootstrap, out, "read_committed")
    bad = consume_all(bootstrap, dead, "read_committed")
    assert sorted((r.header(RECORD_ID_HEADER) or b"", r.value or b"") for r in good) == [
        (b"a", b"1"), (b"d", b"6")]
    assert sorted(r.value or b"" for r in bad) == [b"2", b"3", b"5"]


def replicate(primary_url: str, replica_url: str) -> Any:
    """Make ``replica_url`` a replica of ``primary_url``; its client once in sync."""
    from urllib.parse import urlsplit

    import redis

    replica = redis.Redis.from_url(replica_url)
    replica.execute_command("REPLICAOF", "127.0.0.1", str(urlsplit(primary_url).port))
    deadline = time.monotonic() + 30
    while replica.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica did not sync with the primary"
        time.sleep(0.1)
    primary = redis.Redis.from_url(primary_url)
    assert primary.wait(1, 5000) == 1
    return replica
