"""Balanced placement of dedup shards on the partitions of the operator's shuffle.

Every row of a shard must land in one partition (one Lua claim per batch and
shard). ``repartition(P, shard)`` gives that, but Spark hashes the few
distinct shard numbers with Murmur3 and takes ``pmod(hash, P)``, which
spreads them unevenly: 8 shards on 4 partitions land as 0/1/3/4 shards per
partition, so one task does half the work while a core idles.

Instead the operator repartitions by a *placement key* per shard, chosen so
that Spark's own hash puts shard ``s`` in partition ``s mod P``. The keys
come from a Python copy of Spark's ``Murmur3_x86_32.hashInt`` (seed 42, the
seed of ``hash()`` and of hash partitioning). If a future Spark hashed
differently, every shard would still sit in exactly one partition (the
correctness condition); only the balance would be lost, which
``tests/integration/dedup`` checks against the real Spark.
"""

from __future__ import annotations

from typing import Any

PLACEMENT_SCHEME = "shard=pmod(xxhash64(id),n);partition=spark-murmur3(key)%P;v1"
"""How IDs map to shards and shards to partitions; recorded per app id, so a
release that changed either is refused on an existing app id, not silently
re-sharded."""

_MASK = 0xFFFFFFFF
_SEED = 42


def _rotl32(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def spark_hash_int(value: int, seed: int = _SEED) -> int:
    """Spark's ``hash(<int column>)``: Murmur3 x86 32-bit of one int, as a signed int."""
    k1 = ((value & _MASK) * 0xCC9E2D51) & _MASK
    k1 = (_rotl32(k1, 15) * 0x1B873593) & _MASK
    h1 = (seed & _MASK) ^ k1
    h1 = (_rotl32(h1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # length in bytes
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= (1 << 31) else h1


def placement_keys(num_shards: int, num_partitions: int) -> list[int]:
    """One int per shard; Spark's hash partitioning puts key ``k[s]`` in partition ``s % P``.

    Pure and deterministic: the same arguments give the same keys on every
    run, so a restarted query places shards exactly as before.
    """
    if num_shards < 1 or num_partitions < 1:
        raise ValueError("num_shards and num_partitions must be >= 1")
    wanted = min(num_shards, num_partitions)
    by_partition: dict[int, int] = {}
    candidate = 0
    while len(by_partition) < wanted:
        target = spark_hash_int(candidate) % num_partitions  # Python % is pmod here
        if target < wanted:
            by_partition.setdefault(target, candidate)
        candidate += 1
    return [by_partition[shard % num_partitions] for shard in range(num_shards)]


def shard_column(record_id: Any, num_shards: int) -> Any:
    """The Spark column of each record's shard: ``pmod(xxhash64(id), num_shards)`` (an int)."""
    from pyspark.sql import functions as sf

    return sf.pmod(sf.xxhash64(record_id), sf.lit(num_shards)).cast("int")


def placement_column(shard: Any, num_shards: int, num_partitions: int) -> Any:
    """The Spark column to ``repartition(num_partitions, ...)`` by, for a shard column."""
    from pyspark.sql import functions as sf

    keys = sf.array(*[sf.lit(k) for k in placement_keys(num_shards, num_partitions)])
    return sf.element_at(keys, shard + 1)
