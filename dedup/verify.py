"""The verifier: is an observed output explained by a failure-free run?

Failure transparency (a run with failures outputs what a failure-free run
does) is checked by comparing what a ``read_committed`` consumer sees with
the output a failure-free run must give, computed from the input alone: one
copy of each distinct record ID, carrying the payload of its first
occurrence. Every discrepancy is counted by kind, so a loss can never hide
behind a duplicate:

* **lost**: an expected record ID that nobody observed;
* **duplicated**: each extra copy of an observed ID;
* **phantom**: an observed record that no input explains (unknown ID, or no ID);
* **mismatched**: a known ID whose payload differs from the first occurrence;
* **open transactions**: partitions whose log ends in an undecided transaction.

This module is pure (no Kafka client): reading a topic and its open
transactions is :mod:`sinks.verify`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SAMPLE_SIZE = 10


@dataclass(frozen=True)
class VerificationReport:
    """Counts of every way an observed output can differ from the expected one."""

    expected: int
    observed: int
    lost: int
    duplicated: int
    phantoms: int
    mismatched: int = 0
    open_transactions: int = 0
    samples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the output is exactly the failure-free one."""
        return not (self.lost or self.duplicated or self.phantoms or self.mismatched
                    or self.open_transactions)

    def as_dict(self) -> dict[str, Any]:
        return {
            "expected": self.expected, "observed": self.observed, "lost": self.lost,
            "duplicated": self.duplicated, "phantoms": self.phantoms,
            "mismatched": self.mismatched, "open_transactions": self.open_transactions,
            "ok": self.ok, "samples": {k: list(v) for k, v in self.samples.items()},
        }

    def summary(self) -> str:
        """One line: ``expected 100, observed 100: lost 0, duplicated 0, ...``."""
        return (
            f"expected {self.expected}, observed {self.observed}: lost {self.lost}, "
            f"duplicated {self.duplicated}, phantoms {self.phantoms}, "
            f"mismatched {self.mismatched}, open transactions {self.open_transactions}"
        )


def expected_first_occurrences(
    records: Iterable[tuple[str, Any]],
) -> dict[str, Any]:
    """The failure-free output of dedup: ``{record_id: payload of its first occurrence}``.

    ``records`` is the input in arrival order as ``(record_id, payload)`` pairs.
    """
    expected: dict[str, Any] = {}
    for record_id, payload in records:
        expected.setdefault(record_id, payload)
    return expected


def compare(
    expected: Mapping[str, Any] | Iterable[str],
    observed: Iterable[tuple[str | None, Any]],
    compare_payloads: bool = True,
) -> VerificationReport:
    """Compare observed ``(record_id, payload)`` pairs with the expected output.

    Parameters
    ----------
    expected:
        ``{record_id: payload}`` (payloads are compared when
        ``compare_payloads``), or just the expected IDs.
    observed:
        What a ``read_committed`` consumer saw; a ``None`` ID is a phantom.
    """
    expected_map: Mapping[str, Any] | None = expected if isinstance(expected, Mapping) else None
    expected_ids = set(expected_map) if expected_map is not None else set(expected)
    counts: Counter[str] = Counter()
    phantoms: list[str] = []
    mismatched: list[str] = []
    total = 0
    for record_id, payload in observed:
        total += 1
        if record_id is None or record_id not in expected_ids:
            phantoms.append(str(record_id))
            continue
        counts[record_id] += 1
        if (compare_payloads and expected_map is not None and counts[record_id] == 1
                and expected_map[record_id] != payload):
            mismatched.append(record_id)
    lost = sorted(expected_ids - counts.keys())
    duplicated = sorted(rid for rid, n in counts.items() if n > 1)
    return VerificationReport(
        expected=len(expected_ids), observed=total, lost=len(lost),
        duplicated=sum(n - 1 for n in counts.values() if n > 1),
        phantoms=len(phantoms), mismatched=len(mismatched),
        samples={
            "lost": tuple(lost[:SAMPLE_SIZE]), "duplicated": tuple(duplicated[:SAMPLE_SIZE]),
            "phantoms": tuple(phantoms[:SAMPLE_SIZE]),
            "mismatched": tuple(mismatched[:SAMPLE_SIZE]),
        },
    )


def repeated_ids(observed: Iterable[tuple[str | None, Any]]) -> dict[str, int]:
    """IDs seen more than once, with their counts (the audit without an expected set)."""
    counts = Counter(rid for rid, _ in observed if rid is not None)
    return {rid: n for rid, n in counts.items() if n > 1}
