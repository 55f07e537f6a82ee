"""``python -m benchmarks.fuzz``'s own logic: its figures and its time bound (issue 50)."""

from __future__ import annotations

import time
from collections import Counter

from hypothesis import strategies as st

from benchmarks.fuzz import figures, generate
from benchmarks.fuzz_cases import kind, outcome


def test_the_figures_count_tracebacks_with_multi_line_refusals_and_secrets_apart() -> None:
    kinds = Counter({"traceback": 2, "multi-line": 1, "secret": 3, "lost": 9})
    assert figures(kinds, 100, 4, 5, 6) == {
        "fuzz_cases": 100, "fuzz_tracebacks": 3, "fuzz_records_lost": 4,
        "fuzz_records_duplicated": 5, "fuzz_records_phantom": 6, "fuzz_secrets_printed": 3}


def test_generation_stops_when_the_time_is_up() -> None:
    seen: list[int] = []
    generate(st.integers(), seen.append, 10_000, 1, time.monotonic() - 1)
    assert seen == []
    generate(st.integers(), seen.append, 20, 1, time.monotonic() + 60)
    assert len(seen) == 20


def test_an_outcome_tells_a_refusal_from_a_traceback() -> None:
    from dedup.exceptions import ConfigError

    def refuse() -> None:
        raise ConfigError("one line")

    def crash() -> None:
        raise KeyError("x")

    def two_lines() -> None:
        raise ConfigError("a\nb")

    assert outcome(refuse) == (None, [])
    assert [kind(p) for p in outcome(crash)[1]] == ["traceback"]
    assert [kind(p) for p in outcome(two_lines)[1]] == ["multi-line"]
    assert outcome(lambda: 5) == (5, [])


def test_the_spark_records_are_split_between_the_invalid_id_policies() -> None:
    from benchmarks.fuzz import spark_halves

    assert spark_halves(300) == [("dead_letter", 150), ("fail", 150)]
    assert spark_halves(41) == [("dead_letter", 21), ("fail", 20)]
    assert spark_halves(1) == [("dead_letter", 1)]
    assert spark_halves(0) == []


def test_the_spark_model_claims_across_batches_and_refuses_the_poisons_batch() -> None:
    """First occurrence over all batches; a late record is not claimed (a later copy is
    kept); the batch with an ID that is not UTF-8 is refused, and what it would have
    claimed is not claimed for the batches after it."""
    from benchmarks.fuzz_records import HORIZON
    from benchmarks.fuzz_spark import Batch, Stored, decide

    now = 1_000_000.0

    def record(seq: int, record_id: bytes | None, event: float | None = None) -> Stored:
        return Stored(seq, seq, None, None, (), record_id, event)

    records = [record(0, b"a"), record(1, b"b", now - HORIZON - 5), record(2, b"a"),
               record(3, b""), record(4, b"b"), record(5, b"c"), record(6, b"\xff"),
               record(7, b"d")]
    batches = [Batch(0, 0, 2, now), Batch(1, 2, 5, now), Batch(2, 5, 7, now)]
    decisions, refused = decide(records, batches, "dead_letter")
    assert refused == 2
    assert [decisions[i].outcome for i in range(8)] == [
        "out", "late", "dropped", "dead", "out", "out", "poison", "unread"]
    assert [decisions[i].refused for i in range(8)] == [False] * 5 + [True, True, False]
    _, refused_fail = decide(records, batches, "fail")
    assert refused_fail == 1  # the empty ID, under fail
