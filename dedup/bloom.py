"""Per-shard Bloom filters, the fast path in front of the Redis catalog.

A :class:`ShardFilter` is a fixed-size ``pybloom_live.BloomFilter`` (the
scalable variant overshoots its error rate): pybloom-live sizes it from the
capacity and error rate (``k`` slices of ``m`` bits) and holds its bits. It
carries the tag ``(epoch, version)`` of the shard state it reflects: it holds
every ID the shard claimed up to that version. The tag is sent with each
claim; Redis trusts the filter's negatives only when the tag is current
(docs/design.md, invariant 3), and a hit never decides a duplicate, it only
sends the ID to Redis (invariant 2).

Bit positions come from Python's own string hash (SipHash, computed in C and
cached on the string) by double hashing: slice ``i`` gets bit
``(h1 + i * h2) mod m``. pybloom's per-key SHA path cost about 1.3 us per ID
in a Python loop; this costs about 0.1 us. A filter is private to one Python
worker process (it is built and caught up there from ID digests and never
shipped), so a hash that is only stable within the process is enough; a
false positive it causes costs a catalog lookup, never a record. Its keys are
the IDs' 16-byte digests, the form the catalog stores and replies with
(:func:`dedup.catalog.id_digests`).

:class:`FilterCache` keeps the filters of one Python worker across batches,
keyed by ``(app_id, shard)``; :data:`WORKER_FILTERS` is the worker's cache.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from pybloom_live import BloomFilter

_LOW32 = np.uint64(0xFFFFFFFF)


def bit_positions(keys: Sequence[bytes | str], num_slices: int, bits_per_slice: int) -> np.ndarray:
    """``(len(keys), num_slices)`` absolute bit positions of ``keys`` (this process only)."""
    hashes = np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys)).view(np.uint64)
    h1 = (hashes & _LOW32)[:, None]
    h2 = ((hashes >> np.uint64(32)) | np.uint64(1))[:, None]  # odd: never a zero stride
    slices = np.arange(num_slices, dtype=np.uint64)[None, :]
    width = np.uint64(bits_per_slice)
    return (h1 + slices * h2) % width + slices * width


class ShardFilter:
    """A fixed-size Bloom filter plus the shard version it reflects.

    Parameters
    ----------
    capacity, error_rate:
        Sizing of the underlying ``BloomFilter``; ``add_all`` reports
        ``False`` instead of overfilling (pybloom raises ``IndexError``), and
        the owner rebuilds the filter bigger.
    epoch, version, token:
        Tag of the shard state whose IDs this filter holds (the token tells
        apart two states with one version number, before and after a rollback
        of Redis).
    """

    __slots__ = ("_bf", "_bits", "capacity", "epoch", "error_rate", "token", "version")

    def __init__(self, capacity: int, error_rate: float, epoch: str, version: int,
                 token: str = "") -> None:
        self.capacity = capacity
        self.error_rate = error_rate
        self._bf = BloomFilter(capacity=capacity, error_rate=error_rate)
        # a writable zero-copy view of pybloom's bit array (little-endian bits)
        self._bits = np.frombuffer(self._bf.bitarray, dtype=np.uint8)
        self.epoch = epoch
        self.version = version
        self.token = token

    def positions(self, keys: Sequence[bytes | str]) -> np.ndarray:
        """Bit positions of ``keys`` in this filter (see :func:`bit_positions`)."""
        return bit_positions(keys, self._bf.num_slices, self._bf.bits_per_slice)

    def _contains(self, positions: np.ndarray) -> np.ndarray:
        bits = self._bits[positions >> np.uint64(3)] >> (positions & np.uint64(7)).astype(np.uint8)
        result: np.ndarray = np.all(bits & 1, axis=1)
        return result

    @property
    def count(self) -> int:
        """IDs added so far."""
        return int(self._bf.count)

    def has_room(self, extra: int) -> bool:
        """Whether ``extra`` more IDs fit without exceeding the capacity."""
        return self.count + extra <= self.capacity

    def add_all(self, ids: Iterable[bytes | str]) -> bool:
        """Add ``ids`` (ID digests); False (and nothing added) when the filter is full."""
        keys = list(ids)
        if not keys:
            return True
        if not self.has_room(len(keys)):
            return False
        return self.add_positions(self.positions(keys))

    def add_positions(self, positions: np.ndarray) -> bool:
        """Add keys given by their bit positions (from :meth:`probe`); False when full."""
        if not len(positions):
            return True
        if not self.has_room(len(positions)):
            return False
        fresh = int(np.count_nonzero(~self._contains(positions)))
        flat = positions.ravel()
        masks = (np.uint8(1) << (flat & np.uint64(7)).astype(np.uint8)).astype(np.uint8)
        np.bitwise_or.at(self._bits, flat >> np.uint64(3), masks)
        self._bf.count += fresh
        return True

    def probe(self, ids: Sequence[bytes | str],
              positions: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Hit mask of ``ids`` and their bit positions (``positions``: those this
        filter gave for ``ids`` before, not hashed again).

        A False in the mask means the key was surely never added.
        """
        if positions is None:
            positions = self.positions(ids)
        return self._contains(positions), positions

    def split(self, ids: Sequence[bytes | str]) -> tuple[list[bytes | str], list[bytes | str]]:
        """``(negatives, positives)`` of ``ids``: negatives were surely never added."""
        hit, _ = self.probe(ids)
        keys = np.array(ids, dtype=object)
        return keys[~hit].tolist(), keys[hit].tolist()

    def retag(self, epoch: str, version: int, token: str = "") -> None:
        """Record that the filter now holds every ID up to ``(epoch, version, token)``."""
        self.epoch = epoch
        self.version = version
        self.token = token

    @property
    def tag(self) -> tuple[str, int, str]:
        return self.epoch, self.version, self.token


@dataclass
class FilterCache:
    """Bloom filters of one worker process, keyed by ``(app_id, shard)``.

    Spark may run tasks of one worker in threads of the same process, so
    access to the dict is locked; one filter is only ever used by the task
    that holds its shard (a shard lives in one partition per batch).
    """

    def __post_init__(self) -> None:
        self._filters: dict[tuple[str, int], ShardFilter] = {}
        self._lock = threading.Lock()

    def get(self, app_id: str, shard: int) -> ShardFilter | None:
        with self._lock:
            return self._filters.get((app_id, shard))

    def put(self, app_id: str, shard: int, bf: ShardFilter | None) -> None:
        with self._lock:
            if bf is None:
                self._filters.pop((app_id, shard), None)
            else:
                self._filters[(app_id, shard)] = bf

    def clear(self) -> None:
        with self._lock:
            self._filters.clear()


WORKER_FILTERS = FilterCache()
"""The filters of this Python worker, kept across batches."""
