"""Where a partition write spends its time, phase by phase.

Every partition write measures its phases (a handful of ``perf_counter``
calls, negligible next to one Kafka round trip) and sends them to the driver
with its commit message. With the sink option ``timings.path`` the driver
side appends them to that file, one JSON line per partition write, and
:func:`read_phase_timings` reads them back (a Python data source's ``commit``
runs in a Python process of its own, so a file is what both sides share).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

PHASES = ("receive", "dedup", "input", "checkpoint", "convert", "producer", "marker",
          "marker_copy", "lease", "begin", "send_offsets", "produce", "intent", "commit",
          "total")
"""Phase names, in the order a write goes through them (``total`` is the whole write;
``receive`` and ``dedup`` only in :func:`sinks.deduplicate_to_kafka`)."""


class PhaseClock:
    """Seconds spent per phase of one partition write; ``with clock("produce"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._started = time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start

    def finish(self) -> dict[str, float]:
        """The phases measured so far plus ``total`` (seconds since the clock was made)."""
        return {**self.seconds, "total": time.perf_counter() - self._started}


def append_phase_timings(path: str | None,
                         writes: Iterable[tuple[int, int, Mapping[str, float]]]) -> None:
    """Append ``(batch, partition, phases)`` of partition writes to ``path`` (no-op when
    ``path`` is None). One ``write`` of whole lines in append mode, so concurrent
    writers do not interleave within a line. Safe to repeat (lines are added again).
    """
    if not path:
        return
    lines = "".join(
        json.dumps({"batch": int(batch), "partition": int(partition),
                    **{name: round(float(value), 6) for name, value in phases.items()}}) + "\n"
        for batch, partition, phases in writes)
    if not lines:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, lines.encode())
    finally:
        os.close(fd)


def read_phase_timings(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The phase timings appended to ``path`` by the sink (option ``timings.path``), oldest
    first: ``{"batch", "partition", <phase>: seconds, ...}``; ``[]`` if the file does not
    exist. A phase a write did not go through is absent (a skipped batch has no
    ``produce``). Read-only; safe to repeat.
    """
    file = Path(path)
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
