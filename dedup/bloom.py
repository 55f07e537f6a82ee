"""Per-shard Bloom filters, the fast path in front of the Redis catalog.

A :class:`ShardFilter` wraps a fixed-size ``pybloom_live.BloomFilter`` (the
scalable variant overshoots its error rate) and carries the tag
``(epoch, version)`` of the shard state it reflects: it holds every ID the
shard claimed up to that version. The tag is sent with each claim; Redis
trusts the filter's negatives only when the tag is current (invariant 3),
and a hit never decides a duplicate, it only sends the ID to Redis
(invariant 2).

:class:`FilterCache` keeps the filters of one Python worker across batches,
keyed by ``(app_id, shard)``; :data:`WORKER_FILTERS` is the worker's cache.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from struct import pack
from typing import Any

import numpy as np
from pybloom_live import BloomFilter

_UINT = {"H": np.uint16, "I": np.uint32, "Q": np.uint64}


class _BatchHasher:
    """pybloom-live's bit positions for many keys at once.

    pybloom hashes one key at a time through a generator (~4 us per key);
    this computes the SAME positions (same hash function, salts and layout as
    ``pybloom_live.pybloom.make_hashfuncs``) with one digest per key and
    salt and numpy for the rest, so the filter stays a plain pybloom
    ``BloomFilter``. A self-check against pybloom at construction falls back
    to pybloom's own path if a future version changes the layout.
    """

    def __init__(self, bf: Any) -> None:
        num_slices, num_bits = bf.num_slices, bf.bits_per_slice
        if num_bits >= (1 << 31):
            code, size = "Q", 8
        elif num_bits >= (1 << 15):
            code, size = "I", 4
        else:
            code, size = "H", 2
        hashfn = bf.hashfn
        per_digest = hashfn().digest_size // size
        salts_needed = -(-num_slices // per_digest)
        self.salts = [hashfn(hashfn(pack("I", i)).digest()) for i in range(salts_needed)]
        self.dtype = np.dtype(_UINT[code]).newbyteorder("=")
        self.per_digest = per_digest
        self.num_slices = num_slices
        self.bits_per_slice = num_bits
        self.offsets = (np.arange(num_slices, dtype=np.uint64) * np.uint64(num_bits))
        probe = ["a", "probe-\u00e9", "x" * 40]
        self.exact = all(
            self.positions([key])[0].tolist()
            == [i * num_bits + h for i, h in enumerate(bf.make_hashes(key))]
            for key in probe
        )

    def positions(self, keys: list[str]) -> np.ndarray:
        """``(len(keys), num_slices)`` absolute bit positions."""
        encoded = [key.encode("utf-8") for key in keys]
        parts = []
        for salt in self.salts:
            copy = salt.copy
            digests: list[bytes] = []
            append = digests.append
            for key in encoded:
                h = copy()
                h.update(key)
                append(h.digest())
            raw = np.frombuffer(b"".join(digests), dtype=self.dtype)
            parts.append(raw.reshape(len(keys), self.per_digest))
        hashes = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        # modulo in the digest's own integer width: 3x cheaper than in uint64
        sliced = hashes[:, : self.num_slices] % self.dtype.type(self.bits_per_slice)
        return sliced.astype(np.uint64) + self.offsets


class ShardFilter:
    """A fixed-size Bloom filter plus the shard version it reflects.

    Parameters
    ----------
    capacity, error_rate:
        Sizing of the underlying ``BloomFilter``; ``add_all`` reports
        ``False`` instead of overfilling (pybloom raises ``IndexError``), and
        the owner rebuilds the filter bigger.
    epoch, version:
        Tag of the shard state whose IDs this filter holds.
    """

    __slots__ = ("_bf", "_bits", "_hasher", "capacity", "epoch", "error_rate", "version")

    def __init__(self, capacity: int, error_rate: float, epoch: str, version: int) -> None:
        self.capacity = capacity
        self.error_rate = error_rate
        self._bf = BloomFilter(capacity=capacity, error_rate=error_rate)
        hasher = _BatchHasher(self._bf)
        self._hasher: _BatchHasher | None = hasher if hasher.exact else None
        # a writable zero-copy view of pybloom's bit array (little-endian bits)
        self._bits = np.frombuffer(self._bf.bitarray, dtype=np.uint8)
        self.epoch = epoch
        self.version = version

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

    def add_all(self, ids: Iterable[str]) -> bool:
        """Add ``ids`` (str keys only); False (and nothing added) when the filter is full."""
        keys = list(ids)
        if not keys:
            return True
        if not self.has_room(len(keys)):
            return False
        if self._hasher is not None:
            return self.add_positions(self._hasher.positions(keys))
        add = self._bf.add
        try:
            for key in keys:
                add(key)
        except IndexError:
            return False
        return True

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

    def probe(self, ids: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """Hit mask of ``ids`` and their bit positions (None on pybloom's slow path).

        A False in the mask means the key was surely never added.
        """
        if self._hasher is not None:
            positions = self._hasher.positions(ids) if ids else np.zeros(
                (0, self._hasher.num_slices), dtype=np.uint64)
            return self._contains(positions), positions
        bf = self._bf
        return np.fromiter((key in bf for key in ids), dtype=bool, count=len(ids)), None

    def split(self, ids: list[str]) -> tuple[list[str], list[str]]:
        """``(negatives, positives)`` of ``ids``: negatives were surely never added."""
        hit, _ = self.probe(ids)
        keys = np.array(ids, dtype=object)
        return keys[~hit].tolist(), keys[hit].tolist()

    def retag(self, epoch: str, version: int) -> None:
        """Record that the filter now holds every ID up to ``(epoch, version)``."""
        self.epoch = epoch
        self.version = version

    @property
    def tag(self) -> tuple[str, int]:
        return self.epoch, self.version


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
