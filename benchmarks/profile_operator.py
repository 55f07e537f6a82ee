"""Where the operator's Python worker spends its time: cProfile of one partition.

Runs :func:`dedup.partition_step.decide_partition` -- exactly what each Spark
task of the operator runs on its partition -- in this process, against a real
``redis-server``, on a partition of ``rows`` rows (all ``shards`` shards,
5% duplicates), after one warm-up partition so the Bloom filters exist (the
steady state). Writes ``results/profile_operator.json`` with the per-row
cost and the share of time in the Bloom filter, the Redis claim, and the
rest (Arrow/NumPy/Python bookkeeping), plus the top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import time
from typing import Any

import numpy as np

from benchmarks.common import bench_services, run_metadata, write_json
from dedup.bloom import FilterCache
from dedup.catalog import RedisCatalog
from dedup.claim import ShardClaimer
from dedup.config import DedupConfig, RedisConfig
from dedup.partition_step import decide_partition


def partition(rng: random.Random, rows: int, shards: int, dup_rate: float,
              earlier: list[str]) -> tuple[list[str], np.ndarray]:
    """IDs (``dup_rate`` of them repeats of ``earlier``) and their shards."""
    ids = [rng.choice(earlier) if earlier and rng.random() < dup_rate
           else f"{rng.getrandbits(128):032x}" for _ in range(rows)]
    return ids, np.array([int(k[:8], 16) % shards for k in ids], dtype=np.int64)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows = 20_000
    rng = random.Random(11)
    with bench_services("profile") as services:
        cfg = DedupConfig(app_id="profile", redis=RedisConfig(url=services.redis_url),
                          num_shards=args.shards)
        claimer = ShardClaimer(cfg, RedisCatalog(cfg), FilterCache())
        warm_ids, warm_shards = partition(rng, args.rows, args.shards, 0.05, [])
        decide_partition(cfg, warm_ids, warm_shards, "q", "0", "", 0, claimer)
        ids, shards = partition(rng, args.rows, args.shards, 0.05, warm_ids)
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        decide_partition(cfg, ids, shards, "q", "1", "", 0, claimer)
        profiler.disable()
        wall = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())

    def share(*needles: str) -> float:
        own = sum(v[2] for k, v in raw.items() if any(n in f"{k[0]}:{k[2]}" for n in needles))
        return round(own / total, 3) if total else 0.0

    buffer = io.StringIO()
    pstats.Stats(profiler, stream=buffer).sort_stats("tottime").print_stats(15)
    result = {
        "metadata": run_metadata(),
        "level": "one operator partition (decide_partition) in-process, real redis-server, "
                 "steady state (filters built)",
        "setup": {"rows": args.rows, "shards": args.shards, "dup_rate": 0.05},
        "wall_seconds": round(wall, 3),
        "us_per_row": round(wall / args.rows * 1e6, 2),
        "rows_per_s_one_core": round(args.rows / wall, 1),
        "share_of_profiled_time": {
            "bloom_filter (hashing, bit array)": share("pybloom", "bitarray", "bloom.py",
                                                       "built-in method builtins.hash"),
            "redis (socket, protocol, Lua wait)": share("redis", "socket", "hiredis",
                                                        "catalog.py"),
        },
        "top_functions_by_own_time": buffer.getvalue().splitlines()[-25:],
    }
    shares = result["share_of_profiled_time"]
    shares["rest (arrow, numpy, python bookkeeping)"] = round(1 - sum(shares.values()), 3)
    write_json("profile_operator.json", result)
    return result


if __name__ == "__main__":
    main()
