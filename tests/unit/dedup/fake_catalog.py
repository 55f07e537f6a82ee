"""A pure-Python model of OUR catalog interface (dedup.claim.Catalog), for logic tests.

It follows claim.lua step by step (replay, tag check, journal catch-up, full
check, claim, version bump), so unit tests exercise ShardClaimer's filter
upkeep without Redis. The real script is tested against real Redis in
tests/integration/dedup.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dedup.catalog import ClaimReply, Snapshot


@dataclass
class FakeShard:
    epoch: str = "e1"
    version: int = 0
    ids: set[str] = field(default_factory=set)
    journal: dict[int, list[str]] = field(default_factory=dict)
    decisions: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class FakeCatalog:
    journal_versions: int = 4
    shards: dict[int, FakeShard] = field(default_factory=dict)
    calls: int = 0

    def shard(self, shard: int) -> FakeShard:
        return self.shards.setdefault(shard, FakeShard())

    def claim(self, shard: int, decision: str, tag: tuple[str, int, str] | None,
              negatives: list[str], positives: list[str], lease_owner: str,
              now: float, strict: bool = False, catch_up_first: bool = False) -> ClaimReply:
        self.calls += 1
        st = self.shard(shard)
        if decision in st.decisions:
            return ClaimReply.replayed(list(st.decisions[decision]))
        mode, journal, catch = "full", set(), []
        if tag is not None and tag[0] == st.epoch:
            if tag[1] == st.version:
                mode = "trust"
            elif (0 <= tag[1] < st.version and st.version - tag[1] <= self.journal_versions
                  and all(v in st.journal for v in range(tag[1] + 1, st.version + 1))):
                mode = "journal"
                for v in range(tag[1] + 1, st.version + 1):
                    catch.extend(st.journal[v])
                if catch_up_first:  # nothing claimed: the caller catches up, claims again
                    return ClaimReply(None, False, st.epoch, st.version, catch, "catch_up", 0)
                journal = set(catch)
        kept, keep, lookups = [], [], 0
        for i, key in enumerate(negatives + positives):
            negative = i < len(negatives)
            if negative and mode == "trust":
                new = True
            elif negative and mode == "journal":
                new = key not in journal
            else:
                lookups += 1
                new = key not in st.ids
            keep.append(new)
            if new:
                kept.append(key)
        if kept:
            st.ids.update(kept)
            st.version += 1
            st.journal[st.version] = list(kept)
            st.journal.pop(st.version - self.journal_versions, None)
        st.decisions[decision] = kept
        return ClaimReply(np.array(keep, dtype=bool), False, st.epoch, st.version, catch, mode,
                          lookups)

    def snapshot(self, shard: int, now: float) -> Snapshot:
        self.calls += 1
        st = self.shard(shard)
        return Snapshot(st.epoch, st.version, sorted(st.ids))
