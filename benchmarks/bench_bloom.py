"""What the Bloom filter's false-positive rate costs (shard-claim level, no Spark).

Matrix: configured error rate {0.1, 0.01, 0.001, 0.0001} x duplicate rate
{0, 1%, 10%, 50%}, plus a "no Bloom filter" row (every ID goes to the
catalog). Each cell drives :class:`dedup.claim.ShardClaimer` against a
:class:`dedup.catalog.RedisCatalog` on a real ``redis-server`` (AOF on,
fsync everysec) started by the script, exactly as one Spark Python worker
would, minus Spark and Arrow:

1. pre-fill: the catalog and the per-shard filters are filled (in large
   claims) so that the measured phase ends with the filters at their sized
   capacity -- the load the configured error rate is promised for;
2. measured phase: batches of ``batch`` records, a share ``dup_rate`` of them
   re-sends of already claimed IDs, the rest new IDs, one claim per shard
   and batch. Measured: observed FP rate (Bloom positives the catalog called
   new / new IDs checked), catalog lookups per 1,000 records, Redis CPU
   (INFO cpu used_cpu_sys + used_cpu_user delta), records/s and p50/p99
   batch latency of the claims, Redis round trips per shard and batch;
3. probe: ``probes`` fresh random IDs (known new) checked against the full
   filters, the FP rate at design load with more samples.

Bits per ID are the filter's ``num_bits / capacity`` against the theory
``-ln p / (ln 2)^2``. Writes ``results/bloom.json``.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

from benchmarks.common import (
    bench_args,
    bench_services,
    percentile,
    poisson_interval,
    progress,
    redis_cpu_seconds,
    run_metadata,
    write_json,
)
from dedup.bloom import FilterCache, ShardFilter
from dedup.catalog import RedisCatalog, client_and_scripts
from dedup.claim import ShardClaimer
from dedup.config import BloomConfig, DedupConfig, RedisConfig

ERROR_RATES = (0.1, 0.01, 0.001, 0.0001)
DUP_RATES = (0.0, 0.01, 0.1, 0.5)
SHARDS = 4
PREFILL_CHUNK = 50_000
LEVEL = ("shard-claim level: ShardClaimer + RedisCatalog + pybloom-live in one Python "
         "process against a real redis-server; no Spark, no Arrow")


def theory_bits_per_id(error_rate: float) -> float:
    """Optimal Bloom bits per ID for ``error_rate``: ``-ln p / (ln 2)^2``."""
    return -math.log(error_rate) / math.log(2) ** 2


def filter_fp(bf: ShardFilter) -> float:
    """Theoretical FP rate of pybloom's partitioned filter at its current fill."""
    inner = bf._bf  # the benchmark reads pybloom's sizing; the operator never needs it
    fill = 1 - (1 - 1 / inner.bits_per_slice) ** inner.count
    return float(fill ** inner.num_slices)


class IdSource:
    """Random 128-bit hex IDs, assigned to shards round robin (exact balance)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.next_shard = 0

    def fresh(self) -> tuple[str, int]:
        shard = self.next_shard
        self.next_shard = (shard + 1) % SHARDS
        return f"{self.rng.getrandbits(128):032x}", shard


def run_cell(redis_url: str, error_rate: float | None, dup_rate: float, capacity: int,
             measured: int, batch: int, probes: int, seed: int) -> dict[str, Any]:
    """One cell of the matrix; ``error_rate=None`` is the no-Bloom variant."""
    client, _ = client_and_scripts(RedisConfig(url=redis_url))
    client.flushall()
    tag = f"bloom-{error_rate or 'off'}-{dup_rate}".replace(".", "_")
    cap_per_shard = capacity // SHARDS
    bloom = (BloomConfig(enabled=True, capacity=cap_per_shard, error_rate=error_rate)
             if error_rate is not None else BloomConfig(enabled=False))
    cfg = DedupConfig(app_id=tag, redis=RedisConfig(url=redis_url), num_shards=SHARDS,
                      bloom=bloom)
    filters = FilterCache()
    claimer = ShardClaimer(cfg, RedisCatalog(cfg), filters)
    ids = IdSource(seed)
    claimed: list[list[str]] = [[] for _ in range(SHARDS)]
    n_batches = measured // batch
    dups_per_batch = round(batch * dup_rate)
    new_per_shard = math.ceil(n_batches * (batch - dups_per_batch) / SHARDS)
    prefill_per_shard = cap_per_shard - new_per_shard - 1
    now = time.time()
    for shard in range(SHARDS):
        while len(claimed[shard]) < prefill_per_shard:
            chunk: list[str] = []
            while len(chunk) < min(PREFILL_CHUNK, prefill_per_shard - len(claimed[shard])):
                key, s = ids.fresh()
                if s == shard:
                    chunk.append(key)
            out = claimer.claim("prefill", len(claimed[shard]), shard, chunk, now=now)
            claimed[shard].extend(out.kept)
    rng = random.Random(seed + 1)
    latencies: list[float] = []
    fp = new_checked = lookups = round_trips = positives = kept_wrong = records = 0
    expected_fp = 0.0
    cpu0 = redis_cpu_seconds(client)
    for b in range(n_batches):
        per_shard: list[list[str]] = [[] for _ in range(SHARDS)]
        fresh: list[set[str]] = [set() for _ in range(SHARDS)]
        for _ in range(batch - dups_per_batch):
            key, s = ids.fresh()
            per_shard[s].append(key)
            fresh[s].add(key)
        for i in range(dups_per_batch):
            s = i % SHARDS
            per_shard[s].append(rng.choice(claimed[s]))
        for s in range(SHARDS):
            per_shard[s] = list(dict.fromkeys(per_shard[s]))
            rng.shuffle(per_shard[s])
            bf = filters.get(cfg.app_id, s)
            if bf is not None:
                expected_fp += filter_fp(bf) * len(fresh[s])
        start = time.perf_counter()
        outcomes = [claimer.claim("bench", b, s, per_shard[s], now=now) for s in range(SHARDS)]
        latencies.append(time.perf_counter() - start)
        records += batch
        for s, out in enumerate(outcomes):
            fp += out.false_positives
            positives += out.bloom_positives
            lookups += out.lookups
            round_trips += out.round_trips
            new_checked += len(fresh[s])
            kept_wrong += len(out.kept ^ fresh[s])
            claimed[s].extend(out.kept)
    cpu = redis_cpu_seconds(client) - cpu0
    claim_seconds = sum(latencies)
    cell: dict[str, Any] = {
        "error_rate": error_rate, "bloom": error_rate is not None, "dup_rate": dup_rate,
        "records": records, "new_ids_checked": new_checked, "batches": n_batches,
        "batch": batch, "shards": SHARDS, "catalog_ids_before": prefill_per_shard * SHARDS,
        "records_per_s": round(records / claim_seconds, 1),
        "batch_latency_ms_p50": round(percentile(latencies, 50) * 1000, 2),
        "batch_latency_ms_p99": round(percentile(latencies, 99) * 1000, 2),
        "catalog_lookups_per_1000": round(lookups / records * 1000, 2),
        "redis_cpu_s": round(cpu, 3),
        "redis_cpu_ms_per_1000": round(cpu / records * 1e6, 3),
        "round_trips_per_shard_batch": round(round_trips / (n_batches * SHARDS), 3),
        "wrong_decisions": kept_wrong,
    }
    if error_rate is None:
        return cell
    lo, hi = poisson_interval(fp)
    sized = [filters.get(cfg.app_id, s) for s in range(SHARDS)]
    bits = sum(bf._bf.num_bits for bf in sized if bf is not None)
    cap = sum(bf.capacity for bf in sized if bf is not None)
    count = sum(bf.count for bf in sized if bf is not None)
    cell.update({
        "bloom_positives": positives, "false_positives": fp,
        "fp_observed": fp / new_checked if new_checked else 0.0,
        "fp_observed_95ci": [lo / new_checked, hi / new_checked] if new_checked else None,
        "fp_expected_at_actual_fill": expected_fp / new_checked if new_checked else 0.0,
        "fp_observed_over_configured": round(fp / new_checked / error_rate, 3)
        if new_checked else None,
        "filter_load_end": round(count / cap, 3),
        "bits_per_id": round(bits / cap, 3),
        "bits_per_id_theory": round(theory_bits_per_id(error_rate), 3),
        "bits_per_id_over_theory": round(bits / cap / theory_bits_per_id(error_rate), 3),
    })
    # Probe at design load: fresh IDs are new by construction (random 128 bits).
    probe_pos = 0
    probe_rng = random.Random(seed + 2)
    for s in range(SHARDS):
        bf = sized[s]
        if bf is None:
            continue
        keys = [f"{probe_rng.getrandbits(128):032x}" for _ in range(probes // SHARDS)]
        probe_pos += len(bf.split(keys)[1])
    n_probe = probes // SHARDS * SHARDS
    plo, phi = poisson_interval(probe_pos)
    cell.update({
        "probe_fp_95ci": [plo / n_probe, phi / n_probe],
        "probe_ids": n_probe, "probe_false_positives": probe_pos,
        "probe_fp": probe_pos / n_probe,
        "probe_fp_over_configured": round(probe_pos / n_probe / error_rate, 3),
        "probe_fp_expected": sum(filter_fp(bf) for bf in sized if bf is not None) / SHARDS,
    })
    return cell


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = bench_args(
        __doc__, argv,
        full={"capacity": 1_000_000, "measured": 200_000, "batch": 10_000, "probes": 200_000},
        quick={"capacity": 100_000, "measured": 40_000, "probes": 20_000},
        helps={"capacity": "filter capacity per cell (all shards); filled by the end",
               "measured": "records in the measured phase of a cell"})
    log = progress("bloom")
    cells: list[dict[str, Any]] = []
    with bench_services("bloom") as services:
        variants: list[float | None] = [*ERROR_RATES, None]
        for i, error_rate in enumerate(variants):
            for j, dup_rate in enumerate(DUP_RATES):
                cell = run_cell(services.redis_url, error_rate, dup_rate, args.capacity,
                                args.measured, args.batch, args.probes, seed=1000 * i + j)
                log(f"p={error_rate} dup={dup_rate}: {cell['records_per_s']:.0f} rec/s, "
                    f"lookups/1000={cell['catalog_lookups_per_1000']}, "
                    f"fp={cell.get('fp_observed', '-')}, "
                    f"redis cpu ms/1000={cell['redis_cpu_ms_per_1000']}")
                cells.append(cell)
    bloom_cells = [c for c in cells if c["bloom"]]
    worst = max(bloom_cells, key=lambda c: c["fp_observed_over_configured"] or 0.0)
    worst_probe = max(bloom_cells, key=lambda c: c["probe_fp_over_configured"])
    result = {
        "metadata": run_metadata(),
        "level": LEVEL,
        "setup": {"capacity": args.capacity, "measured": args.measured, "batch": args.batch,
                  "probes": args.probes, "shards": SHARDS,
                  "redis": "redis-server, appendonly yes, appendfsync everysec",
                  "retention": "defaults (7 day horizon, 1 day buckets: 8 live buckets)"},
        "cells": cells,
        "bloom_fp_observed_over_configured": worst["fp_observed_over_configured"],
        "bloom_fp_worst_cell": {"error_rate": worst["error_rate"],
                                "dup_rate": worst["dup_rate"]},
        "bloom_fp_probe_over_configured": worst_probe["probe_fp_over_configured"],
        "bloom_bits_per_id_over_theory": max(c["bits_per_id_over_theory"]
                                             for c in bloom_cells),
        "redis_roundtrips_per_shard_batch": max(c["round_trips_per_shard_batch"]
                                                for c in cells),
        "wrong_decisions": sum(c["wrong_decisions"] for c in cells),
    }
    write_json("bloom.json", result)
    return result


if __name__ == "__main__":
    main()
