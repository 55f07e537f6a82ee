"""The catalog's stored form of an ID (formats 2 and 3): pinned, since a change would make
every catalog miss the IDs it holds."""

from __future__ import annotations

import numpy as np

from dedup.catalog import (
    CATALOG_FORMAT,
    candidates_digest,
    id_digests,
    split_digests,
    spread_order,
)


def test_an_id_digest_is_blake2b_128_of_its_utf8_text() -> None:
    assert CATALOG_FORMAT == "3"
    assert id_digests(["abc", "", "é"]) == [
        bytes.fromhex("cf4ab791c62b8d2b2109c90275287816"),
        bytes.fromhex("cae66941d9efbd404e4d88758ea67670"),
        bytes.fromhex("d4b1b0202b21bb84e60a3d272ecab0db"),
    ]


def test_ids_given_as_text_bytes_or_both_in_any_container_get_the_same_digests() -> None:
    import hashlib

    ids = [f"id-{i}-é" for i in range(300)]
    pinned = [hashlib.blake2b(i.encode(), digest_size=16).digest() for i in ids]
    assert id_digests(ids) == pinned
    assert id_digests(np.array(ids, dtype=object)) == pinned
    assert id_digests([i.encode() for i in ids]) == pinned
    # a bytes ID after text ones: the digests of the text ones are not kept twice
    mixed = [*ids[:150], *(i.encode() for i in ids[150:])]
    assert id_digests(mixed) == pinned
    assert id_digests([]) == []


def test_digests_split_back_from_a_reply() -> None:
    digests = id_digests([f"id{i}" for i in range(50)])
    assert split_digests(b"".join(digests)) == digests
    assert split_digests(b"") == []


def test_the_candidates_digest_ignores_order_and_tells_sets_apart() -> None:
    a, b, c = id_digests(["a", "b", "c"])
    assert candidates_digest([a, b], [c]) == candidates_digest([c], [b, a])
    assert candidates_digest([a, b], []) != candidates_digest([a, c], [])
    assert candidates_digest([a], []) != candidates_digest([a, a], [])
    assert candidates_digest([], []) == "0:0"


def _sub_bucket(digest: bytes, level: int, split: int) -> int:
    """idstore.lua's addr_of: linear hashing over the big-endian first four bytes."""
    head = int.from_bytes(digest[:4], "big")
    a = head % 2 ** level
    return head % 2 ** (level + 1) if a < split else a


def test_in_spread_order_every_sub_bucket_is_one_run_at_every_level() -> None:
    # what claim.lua's append_sorted relies on: it appends each run whole
    digests = id_digests([f"spread-{i}" for i in range(5_000)])
    order = spread_order(b"".join(digests))
    assert sorted(order.tolist()) == list(range(len(digests)))
    ordered = [digests[i] for i in order]
    for level in range(0, 12):
        for split in sorted({0, 1, 2 ** level // 3, 2 ** level - 1}):
            runs = [_sub_bucket(d, level, split) for d in ordered]
            starts = [a for i, a in enumerate(runs) if i == 0 or runs[i - 1] != a]
            assert len(starts) == len(set(starts)), (level, split)


def test_spread_order_of_nothing_and_of_one() -> None:
    assert spread_order(b"").tolist() == []
    assert spread_order(id_digests(["x"])[0]).tolist() == [0]
    assert isinstance(spread_order(b"".join(id_digests(["a", "b"]))), np.ndarray)
