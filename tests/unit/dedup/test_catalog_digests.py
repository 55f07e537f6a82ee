"""The catalog's stored form of an ID (format 2): pinned, since a change would make
every catalog miss the IDs it holds."""

from __future__ import annotations

from dedup.catalog import CATALOG_FORMAT, candidates_digest, id_digests, split_digests


def test_an_id_digest_is_blake2b_128_of_its_utf8_text() -> None:
    assert CATALOG_FORMAT == "2"
    assert id_digests(["abc", "", "é"]) == [
        bytes.fromhex("cf4ab791c62b8d2b2109c90275287816"),
        bytes.fromhex("cae66941d9efbd404e4d88758ea67670"),
        bytes.fromhex("d4b1b0202b21bb84e60a3d272ecab0db"),
    ]


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
