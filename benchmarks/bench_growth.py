"""Catalog growth: records/s, Redis memory and bytes per ID up to 10M IDs.

Shard-claim level (no Spark): :class:`dedup.claim.ShardClaimer` with the
default Bloom settings (capacity 1M per shard, error rate 0.01, so each
filter is rebuilt at twice the size once it fills) against a real
``redis-server`` (AOF on, fsync everysec). Batches of ``batch`` new IDs are
claimed one claim per shard, decisions are garbage-collected after every
batch as the operator's listener does after Spark's commit, and every
``sample`` IDs the script records claim records/s over the interval, batch
latency percentiles, Redis round trips per shard and batch, and
``used_memory`` (INFO). At the end, ``MEMORY USAGE`` splits the memory
between the ID index, the catch-up journal, the decisions and the rest. Writes
``results/growth.json``.
"""

from __future__ import annotations

import random
import time
from typing import Any

from benchmarks.common import (
    bench_args,
    bench_services,
    percentile,
    progress,
    redis_cpu_seconds,
    redis_used_memory,
    run_metadata,
    write_json,
)
from dedup.bloom import FilterCache
from dedup.catalog import RedisCatalog, client_and_scripts
from dedup.claim import ShardClaimer
from dedup.config import BloomConfig, DedupConfig, RedisConfig

SHARDS = 8
LEVEL = ("shard-claim level: ShardClaimer + RedisCatalog + pybloom-live in one Python "
         "process against a real redis-server; no Spark, no Arrow")


def memory_breakdown(client: Any) -> dict[str, int]:
    """Bytes per key family (``MEMORY USAGE ... SAMPLES 0`` counts every element)."""
    parts = {"id_index": 0, "journal": 0, "decisions": 0, "other": 0}
    for key in client.scan_iter(match="*", count=1000):
        name = key.decode()
        size = int(client.memory_usage(key, samples=0) or 0)
        if ":idx:" in name:
            parts["id_index"] += size
        elif name.endswith(":jr"):
            parts["journal"] += size
        elif name.endswith(":dec"):
            parts["decisions"] += size
        else:
            parts["other"] += size
    return parts


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = bench_args(__doc__, argv,
                      full={"ids": 10_000_000, "batch": 100_000, "sample": 1_000_000},
                      quick={"ids": 400_000, "batch": 20_000, "sample": 100_000})
    log = progress("growth")
    samples: list[dict[str, Any]] = []
    with bench_services("growth") as services:
        cfg = DedupConfig(app_id="growth", redis=RedisConfig(url=services.redis_url),
                          num_shards=SHARDS, bloom=BloomConfig())
        client, _ = client_and_scripts(cfg.redis)
        catalog = RedisCatalog(cfg)
        claimer = ShardClaimer(cfg, catalog, FilterCache())
        rng = random.Random(7)
        base_memory = redis_used_memory(client)
        claimed = 0
        batch_no = 0
        latencies: list[float] = []
        round_trips = claims = 0
        interval_seconds = 0.0
        interval_ids = 0
        cpu0 = redis_cpu_seconds(client)
        now = time.time()
        while claimed < args.ids:
            size = min(args.batch, args.ids - claimed)
            per_shard: list[list[str]] = [[] for _ in range(SHARDS)]
            for i in range(size):
                per_shard[i % SHARDS].append(f"{rng.getrandbits(128):032x}")
            start = time.perf_counter()
            for shard in range(SHARDS):
                out = claimer.claim("grow", batch_no, shard, per_shard[shard], now=now)
                round_trips += out.round_trips
                claims += 1
                if len(out.kept) != len(per_shard[shard]):
                    raise RuntimeError(f"growth: shard {shard} batch {batch_no} kept "
                                       f"{len(out.kept)} of {len(per_shard[shard])} new IDs")
            elapsed = time.perf_counter() - start
            latencies.append(elapsed)
            interval_seconds += elapsed
            # The operator's listener deletes decisions once Spark committed the batch.
            catalog.collect_garbage("grow", batch_no)
            claimed += size
            interval_ids += size
            batch_no += 1
            if claimed % args.sample == 0 or claimed == args.ids:
                memory = redis_used_memory(client)
                cpu = redis_cpu_seconds(client)
                sample = {
                    "catalog_ids": claimed,
                    "records_per_s": round(interval_ids / interval_seconds, 1),
                    "batch_latency_ms_p50": round(percentile(latencies, 50) * 1000, 1),
                    "batch_latency_ms_p99": round(percentile(latencies, 99) * 1000, 1),
                    "round_trips_per_shard_batch": round(round_trips / claims, 3),
                    "redis_used_memory": memory,
                    "bytes_per_id": round((memory - base_memory) / claimed, 1),
                    "redis_cpu_ms_per_1000": round((cpu - cpu0) / interval_ids * 1e6, 3),
                }
                samples.append(sample)
                log(f"{claimed:>10,} IDs: {sample['records_per_s']:.0f} rec/s, "
                    f"{sample['bytes_per_id']} B/ID, round trips/shard-batch "
                    f"{sample['round_trips_per_shard_batch']}")
                latencies, round_trips, claims, interval_seconds = [], 0, 0, 0.0
                interval_ids = 0
                cpu0 = cpu
        breakdown = memory_breakdown(client)
        size_check = catalog.catalog_size(now)
    final = samples[-1]
    result = {
        "metadata": run_metadata(),
        "level": LEVEL,
        "setup": {"ids": args.ids, "batch": args.batch, "sample_every": args.sample,
                  "shards": SHARDS, "bloom": "capacity 1,000,000 per shard, error rate 0.01",
                  "journal_versions": cfg.journal_versions,
                  "redis": "redis-server, appendonly yes, appendfsync everysec",
                  "gc": "decisions deleted after every batch"},
        "samples": samples,
        "catalog_size_read_back": size_check,
        "memory_breakdown_bytes": breakdown,
        "id_index_bytes_per_id": round(breakdown["id_index"] / args.ids, 1),
        "journal_bytes_per_id": round(breakdown["journal"] / args.ids, 1),
        "catalog_bytes_per_id": final["bytes_per_id"],
        "records_per_s_first_over_last": round(samples[0]["records_per_s"]
                                               / final["records_per_s"], 3),
        "redis_roundtrips_per_shard_batch_max": max(s["round_trips_per_shard_batch"]
                                                    for s in samples),
    }
    write_json("growth.json", result)
    return result


if __name__ == "__main__":
    main()
