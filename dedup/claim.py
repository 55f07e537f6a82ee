"""Shard-level claim: Bloom filter split, one catalog call, filter upkeep.

This is the part of the operator that runs per (batch, shard) inside a
Python worker, without Spark, so it can be driven directly by tests. It
talks to any object with the :class:`Catalog` interface
(:class:`dedup.catalog.RedisCatalog` in production).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dedup.bloom import WORKER_FILTERS, FilterCache, ShardFilter
from dedup.catalog import ClaimReply, RedisCatalog, Snapshot, id_digests
from dedup.config import DedupConfig


class Catalog(Protocol):
    """What the claim logic needs from the catalog (one round trip per call)."""

    def claim(self, shard: int, decision: str, tag: tuple[str, int, str] | None,
              negatives: list[bytes], positives: list[bytes], lease_owner: str,
              now: float, strict: bool = False, catch_up_first: bool = False) -> ClaimReply: ...

    def snapshot(self, shard: int, now: float) -> Snapshot: ...


CATCH_UP_FIRST_MIN = 2_000
"""Candidate IDs from which a claim from a filter behind the shard catches up first:
below it, the journal path's work per ID costs less than another round trip."""


@dataclass(frozen=True)
class _Split:
    """Candidates split by a filter: ``sent`` maps the catalog's order (negatives,
    then positives) back to the candidates; ``hit``/``positions`` are None without one."""

    hit: np.ndarray | None
    positions: np.ndarray | None
    sent: np.ndarray
    negatives: list[bytes]
    positives: list[bytes]


@dataclass(frozen=True)
class ShardOutcome:
    """Result of one (batch, shard) claim.

    ``keep`` is aligned with the claimed IDs: True for the IDs this batch
    keeps (first occurrence); every other candidate is a duplicate seen by
    the catalog. ``round_trips`` counts the catalog calls made (1 in steady
    state, 2 when the filter was (re)built or caught up first).
    """

    ids: Sequence[str] | np.ndarray
    keep: np.ndarray
    replay: bool
    bloom_positives: int
    false_positives: int
    round_trips: int
    lookups: int
    mode: str

    @property
    def kept(self) -> frozenset[str]:
        """The kept IDs as a set (for callers that want names, not positions)."""
        return frozenset(key for key, k in zip(self.ids, self.keep.tolist(), strict=True) if k)


class ShardClaimer:
    """Claims candidate IDs of one shard, keeping this worker's Bloom filter current.

    Parameters
    ----------
    config:
        The operator's :class:`DedupConfig`.
    catalog:
        Defaults to a :class:`RedisCatalog` of ``config``.
    filters:
        Filter cache; defaults to this worker's :data:`dedup.bloom.WORKER_FILTERS`.
    """

    def __init__(self, config: DedupConfig, catalog: Catalog | None = None,
                 filters: FilterCache | None = None) -> None:
        self.config = config
        self.catalog: Catalog = catalog if catalog is not None else RedisCatalog(config)
        self.filters = filters if filters is not None else WORKER_FILTERS

    def claim(self, query_id: str, batch_id: str | int, shard: int,
              ids: Sequence[str] | np.ndarray,
              lease_owner: str = "", now: float | None = None,
              strict: bool = False) -> ShardOutcome:
        """Claim ``ids`` (unique, all of ``shard``) for batch ``batch_id`` of ``query_id``.

        ``strict`` (the streaming forms) refuses a query past its first batch that
        the catalog has no record of (:meth:`dedup.catalog.RedisCatalog.join_query`).

        Safe to repeat: a repeat of the same (query, batch, shard) returns the
        recorded decision. Raises what the catalog raises (the batch fails).
        The catalog and the filters see the IDs' digests (:func:`dedup.catalog.id_digests`).
        """
        now = time.time() if now is None else now
        round_trips = 0
        bf: ShardFilter | None = None
        if self.config.bloom.enabled:
            bf = self.filters.get(self.config.app_id, shard)
            if bf is None:
                bf = self._rebuild(shard, now)
                round_trips += 1
        keys = np.empty(len(ids), dtype=object)
        keys[:] = id_digests(ids.tolist() if isinstance(ids, np.ndarray) else ids)
        decision = f"{query_id}:{batch_id}"
        split = self._split(bf, keys)
        # A large claim from a filter behind the shard asks for the catch-up first
        # (CATCH_UP_FIRST_MIN): one more round trip, then the trust path.
        reply = self.catalog.claim(shard, decision, bf.tag if bf is not None else None,
                                   split.negatives, split.positives, lease_owner, now, strict,
                                   catch_up_first=bf is not None
                                   and len(keys) >= CATCH_UP_FIRST_MIN)
        round_trips += 1
        if reply.mode == "catch_up" and bf is not None:
            caught, trips = self._catch_up(bf, shard, reply, now, len(keys))
            round_trips += trips
            # the same filter keeps the positions it gave; a rebuilt one hashes anew
            split = self._split(caught, keys, split.positions if caught is bf else None)
            bf = caught
            reply = self.catalog.claim(shard, decision, bf.tag, split.negatives,
                                       split.positives, lease_owner, now, strict)
            round_trips += 1
        hit, positions, sent = split.hit, split.positions, split.sent
        if reply.keep is None:
            # A replay: the recorded decision names its kept IDs (rare: retries only).
            kept_ids = set(reply.replay_kept)
            keep = np.fromiter((key in kept_ids for key in keys.tolist()), dtype=bool,
                               count=len(keys))
        else:
            keep = np.zeros(len(keys), dtype=bool)  # IDs never sent stay dropped
            keep[sent[:len(reply.keep)]] = reply.keep
        if bf is not None and not reply.replay:
            kept_positions = positions[keep] if positions is not None else None
            round_trips += self._update_filter(bf, shard, reply, now, keys[keep].tolist(),
                                               kept_positions)
        bloom_positives = false_positives = 0
        if hit is not None and not reply.replay:
            # on a replay the filter already holds this batch's claims: hits say nothing
            bloom_positives = int(hit.sum())
            false_positives = int(np.count_nonzero(keep & hit))
        return ShardOutcome(ids, keep, reply.replay, bloom_positives, false_positives,
                            round_trips, reply.lookups, reply.mode)

    def _split(self, bf: ShardFilter | None, keys: np.ndarray,
               positions: np.ndarray | None = None) -> _Split:
        """Probe ``keys`` (digests) in ``bf``; the catalog sees negatives, then positives."""
        if bf is None:
            return _Split(None, None, np.arange(len(keys)), keys.tolist(), [])
        hit, positions = bf.probe(keys.tolist(), positions)
        sent = np.concatenate([np.flatnonzero(~hit), np.flatnonzero(hit)])
        n_negatives = len(keys) - int(hit.sum())
        positives = keys[sent[n_negatives:]].tolist()
        return _Split(hit, positions, sent, keys[sent[:n_negatives]].tolist(), positives)

    def _catch_up(self, bf: ShardFilter, shard: int, reply: ClaimReply, now: float,
                  claiming: int) -> tuple[ShardFilter, int]:
        """Bring ``bf`` to the version of a ``catch_up`` reply (nothing was claimed);
        returns the filter and the extra round trips (1 when it was rebuilt bigger)."""
        if bf.has_room(len(reply.catch_up) + claiming):
            bf.add_all(reply.catch_up)
            bf.retag(reply.epoch, reply.version, reply.token)
            return bf, 0
        return self._rebuild(shard, now, extra=claiming), 1

    def _update_filter(self, bf: ShardFilter, shard: int, reply: ClaimReply,
                       now: float, kept: list[bytes], kept_positions: np.ndarray | None) -> int:
        """Bring ``bf`` to the reply's version; returns extra round trips (0 or 1)."""
        if reply.mode in ("trust", "journal") and reply.epoch == bf.epoch:
            if bf.has_room(len(reply.catch_up) + len(kept)):
                bf.add_all(reply.catch_up)
                if kept_positions is not None:
                    bf.add_positions(kept_positions)  # hashed once, in probe()
                else:
                    bf.add_all(kept)
                bf.retag(reply.epoch, reply.version, reply.token)
                return 0
            self._rebuild(shard, now)
            return 1
        # The filter missed claims it can no longer catch up with (other epoch,
        # journal trimmed): it is stale, rebuild it from the catalog.
        self._rebuild(shard, now)
        return 1

    def _rebuild(self, shard: int, now: float, extra: int = 0) -> ShardFilter:
        """A new filter of ``shard`` from the catalog's snapshot, with room for as many
        IDs again as the catalog holds (and ``extra`` about to be claimed), never
        below the configured capacity. Sized by what the catalog still holds, not by
        the full filter: past the retention horizon the catalog stays flat while a
        filter doubled on every fill would grow with every ID ever claimed
        (``tests/integration/dedup/test_filter_growth.py``). Amortised: a rebuild
        reads the live IDs, and the next one comes after as many new IDs."""
        snap = self.catalog.snapshot(shard, now)
        capacity = max(self.config.bloom.capacity, 2 * (len(snap.ids) + extra), 1)
        bf = ShardFilter(capacity, self.config.bloom.error_rate, snap.epoch, snap.version,
                         snap.token)
        bf.add_all(snap.ids)
        self.filters.put(self.config.app_id, shard, bf)
        return bf
