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

from pybloom_live import BloomFilter


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

    __slots__ = ("_bf", "capacity", "epoch", "error_rate", "version")

    def __init__(self, capacity: int, error_rate: float, epoch: str, version: int) -> None:
        self.capacity = capacity
        self.error_rate = error_rate
        self._bf = BloomFilter(capacity=capacity, error_rate=error_rate)
        self.epoch = epoch
        self.version = version

    @property
    def count(self) -> int:
        """IDs added so far."""
        return int(self._bf.count)

    def has_room(self, extra: int) -> bool:
        """Whether ``extra`` more IDs fit without exceeding the capacity."""
        return self.count + extra <= self.capacity

    def add_all(self, ids: Iterable[str]) -> bool:
        """Add ``ids`` (str keys only); False (and partly added) when the filter is full."""
        add = self._bf.add
        try:
            for key in ids:
                add(key)
        except IndexError:
            return False
        return True

    def split(self, ids: list[str]) -> tuple[list[str], list[str]]:
        """``(negatives, positives)`` of ``ids``: negatives were surely never added."""
        bf = self._bf
        neg: list[str] = []
        pos: list[str] = []
        for key in ids:
            (pos if key in bf else neg).append(key)
        return neg, pos

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
