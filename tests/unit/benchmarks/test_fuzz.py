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
