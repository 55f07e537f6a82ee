"""Phase timings of a partition write: measured per phase, appended to a file, read back."""

from __future__ import annotations

import time
from pathlib import Path

from sinks.timing import PhaseClock, append_phase_timings, read_phase_timings


def test_clock_sums_repeated_phases_and_total_covers_them() -> None:
    clock = PhaseClock()
    with clock("produce"):
        time.sleep(0.01)
    with clock("produce"):
        time.sleep(0.01)
    phases = clock.finish()
    assert 0.02 <= phases["produce"] < 0.5
    assert phases["total"] >= phases["produce"]
    assert set(phases) == {"produce", "total"}


def test_clock_counts_a_phase_that_raised() -> None:
    clock = PhaseClock()
    try:
        with clock("commit"):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert "commit" in clock.finish()


def test_timings_are_appended_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "timings.jsonl"
    assert read_phase_timings(path) == []
    append_phase_timings(None, [(0, 0, {"total": 1.0})])  # no path: nothing written
    assert not path.exists()
    append_phase_timings(str(path), [(3, 1, {"produce": 0.5, "total": 1.0})])
    append_phase_timings(str(path), [(3, 2, {"total": 0.25}), (4, 0, {"total": 0.125})])
    assert read_phase_timings(path) == [
        {"batch": 3, "partition": 1, "produce": 0.5, "total": 1.0},
        {"batch": 3, "partition": 2, "total": 0.25},
        {"batch": 4, "partition": 0, "total": 0.125},
    ]
