"""The rows of the synthetic stream, as a pure function of (seed, row number).

Nothing here imports Spark: tests, the demo and benchmarks compute the
expected output of a run (one copy of each distinct ``event_id``, with the
payload of its first occurrence) from the same code the Spark source runs,
without a SparkSession.

Row ``n`` is either an original (a fresh 128-bit ``event_id``) or, with
probability ``duplicate_rate``, a duplicate of an earlier row: it repeats that
row's ``event_id``, ``key`` and ``event_time``; its ``payload`` and ``seq`` are
its own (the payload starts with the row's position), so a check that compares
payloads with the failure-free output tells which copy was kept. How far
back the original lies is set by ``duplicate_distance``, measured in logical
batches of ``rows_per_batch`` rows (row ``n`` belongs to logical batch
``n // rows_per_batch``; the Spark source plans its micro-batches on the same
boundaries).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from sources.exceptions import SourceConfigError

SCHEMA = "event_id string, key string, payload string, event_time timestamp, seq long"
"""Spark DDL of the synthetic rows (``event_id`` is the record ID)."""

DISTANCES = ("same_batch", "later_batches", "beyond_horizon")
DEFAULT_START_TIME = 1_767_225_600.0  # 2026-01-01T00:00:00Z: fixed so rows replay identically

SyntheticRow = tuple[str, str, str, datetime, int]


@dataclass(frozen=True)
class SyntheticOptions:
    """Knobs of the synthetic stream; all plain values, so it is picklable.

    Parameters
    ----------
    seed:
        Same seed, same rows, in every run and every replay.
    rows_per_batch:
        Rows per micro-batch (and per logical batch for ``duplicate_distance``).
    total_rows:
        Stop offering new offsets after this many rows; 0 means endless.
    rows_per_second:
        Cap on how fast new offsets are offered (0: as fast as Spark asks).
    duplicate_rate:
        Probability in [0, 1) that a row repeats an earlier row.
    duplicate_distance:
        ``same_batch``: the original is earlier in the same logical batch;
        ``later_batches``: 1 to ``duplicate_gap_batches`` batches earlier;
        ``beyond_horizon``: exactly ``duplicate_gap_batches`` batches earlier
        (pick a gap whose wall-clock time exceeds the retention horizon).
        Rows with no eligible earlier row (first batch) are originals.
    duplicate_gap_batches:
        See ``duplicate_distance``; >= 1.
    num_keys, key_skew:
        Keys ``k0 .. k<num_keys-1>`` drawn with weight ``1 / (i+1) ** key_skew``
        (0 = uniform, ~1 = Zipf).
    payload_bytes:
        Length of the ``payload`` string (>= 1).
    start_time, event_time_step_ms:
        ``event_time`` of original row ``n`` is ``start_time + n * step``
        (epoch seconds, UTC). Fixed by default so replays are identical.
    num_partitions:
        Spark input partitions per micro-batch.
    """

    seed: int = 0
    rows_per_batch: int = 1000
    total_rows: int = 0
    rows_per_second: float = 0.0
    duplicate_rate: float = 0.1
    duplicate_distance: str = "later_batches"
    duplicate_gap_batches: int = 2
    num_keys: int = 1000
    key_skew: float = 0.0
    payload_bytes: int = 64
    start_time: float = DEFAULT_START_TIME
    event_time_step_ms: float = 1.0
    num_partitions: int = 2

    def __post_init__(self) -> None:
        checks = [
            (self.rows_per_batch >= 1, "rows_per_batch must be >= 1"),
            (self.total_rows >= 0, "total_rows must be >= 0 (0 = endless)"),
            (self.rows_per_second >= 0, "rows_per_second must be >= 0 (0 = unlimited)"),
            (0.0 <= self.duplicate_rate < 1.0, "duplicate_rate must be in [0, 1)"),
            (self.duplicate_distance in DISTANCES,
             f"duplicate_distance must be one of {', '.join(DISTANCES)}"),
            (self.duplicate_gap_batches >= 1, "duplicate_gap_batches must be >= 1"),
            (self.num_keys >= 1, "num_keys must be >= 1"),
            (self.key_skew >= 0, "key_skew must be >= 0 (0 = uniform)"),
            (self.payload_bytes >= 1, "payload_bytes must be >= 1"),
            (self.event_time_step_ms >= 0, "event_time_step_ms must be >= 0"),
            (self.num_partitions >= 1, "num_partitions must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise SourceConfigError(f"synthetic source: {message}")

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SyntheticOptions:
        """Parse Spark's string options (``.option("seed", "7")``); unknown keys are refused."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for raw_key, raw in options.items():
            key = raw_key.lower()
            if key == "path":
                continue
            if key not in known:
                raise SourceConfigError(
                    f"synthetic source: unknown option {raw_key!r}; known: {', '.join(known)}"
                )
            kind = type(getattr(cls(), key))
            try:
                values[key] = kind(raw) if kind is not int else int(float(raw))
            except (TypeError, ValueError) as exc:
                raise SourceConfigError(
                    f"synthetic source: option {key}={raw!r} is not a valid {kind.__name__}"
                ) from exc
        return cls(**values)

    def as_options(self) -> dict[str, str]:
        """String options for ``spark.readStream.format(...).options(**...)``."""
        return {key: str(value) for key, value in asdict(self).items()}


@lru_cache(maxsize=16)
def _key_cdf(num_keys: int, skew: float) -> tuple[float, ...]:
    total = 0.0
    cdf = []
    for i in range(num_keys):
        total += 1.0 / (i + 1) ** skew
        cdf.append(total)
    return tuple(c / total for c in cdf)


def _digest(seed: int, n: int) -> bytes:
    return hashlib.blake2b(f"{seed}:{n}".encode(), digest_size=40).digest()


def _uniform(digest: bytes, slot: int) -> float:
    """A float in [0, 1) from 8 bytes of the digest (slots 2..4)."""
    return int.from_bytes(digest[8 * slot: 8 * slot + 8], "big") / 2.0**64


def duplicate_of(options: SyntheticOptions, n: int) -> int | None:
    """The earlier row that row ``n`` repeats, or None if ``n`` is an original."""
    digest = _digest(options.seed, n)
    if _uniform(digest, 2) >= options.duplicate_rate:
        return None
    per = options.rows_per_batch
    batch = n // per
    batch_start = batch * per
    if options.duplicate_distance == "same_batch":
        # Within the row's own input partition of the batch (the source splits a
        # batch into num_partitions contiguous ranges): across partitions the
        # operator's shuffle defines no first copy, within one it keeps the order.
        count = max(1, min(options.num_partitions, per))
        part = ((n - batch_start + 1) * count - 1) // per  # as the source's bounds split
        low, high = batch_start + part * per // count, n
    elif options.duplicate_distance == "later_batches":
        low, high = max(0, (batch - options.duplicate_gap_batches) * per), batch_start
    else:
        if batch < options.duplicate_gap_batches:
            return None
        low = (batch - options.duplicate_gap_batches) * per
        high = low + per
    if high <= low:
        return None
    return low + int(_uniform(digest, 3) * (high - low))


def original_of(options: SyntheticOptions, n: int) -> int:
    """The original row whose content row ``n`` carries (``n`` itself for originals)."""
    while (earlier := duplicate_of(options, n)) is not None:
        n = earlier
    return n


def _content(options: SyntheticOptions, n: int) -> tuple[str, str, datetime]:
    digest = _digest(options.seed, n)
    event_id = digest[:16].hex()
    cdf = _key_cdf(options.num_keys, options.key_skew)
    key_index = min(bisect.bisect_right(cdf, _uniform(digest, 4)), options.num_keys - 1)
    seconds = options.start_time + n * options.event_time_step_ms / 1000.0
    return event_id, f"k{key_index}", datetime.fromtimestamp(seconds, tz=UTC)


def _payload(options: SyntheticOptions, event_id: str, n: int) -> str:
    # The row's own position first: copies of one ID differ (given payload_bytes
    # above the position's digits), the original's payload is the expected one.
    unit = f"{n}|{event_id}|"
    return (unit * -(-options.payload_bytes // len(unit)))[: options.payload_bytes]


def synthetic_rows(options: SyntheticOptions, start: int, end: int) -> Iterator[SyntheticRow]:
    """Rows ``start .. end-1`` as ``(event_id, key, payload, event_time, seq)`` tuples.

    Pure: the same (options, range) gives the same rows, so a replayed batch
    is identical to its first run.
    """
    for n in range(start, end):
        event_id, key, event_time = _content(options, original_of(options, n))
        yield event_id, key, _payload(options, event_id, n), event_time, n


def expected_output(options: SyntheticOptions, total_rows: int | None = None,
                    ) -> dict[str, str]:
    """The failure-free dedup output of rows ``0 .. total-1``: ``{event_id: payload}``."""
    from dedup.verify import expected_first_occurrences

    total = options.total_rows if total_rows is None else total_rows
    if total <= 0:
        raise SourceConfigError("expected_output needs a finite total_rows")
    return expected_first_occurrences(
        (row[0], row[2]) for row in synthetic_rows(options, 0, total)
    )
