"""Recovery is timed to the commit of the output the fault interrupted, not to the
first commit of any partition (another partition's commit in flight at the kill
landed 0.3 s later and was counted as the driver's recovery: p50 0.4 s)."""

from __future__ import annotations

import time

from benchmarks.chaos.model import _RecoveryClock


class _Clock(_RecoveryClock):
    """The topic's end grows 0.2 s after the fault (another partition's commit that was
    in flight); the interrupted partition's marker reaches its next batch after 1.0 s."""

    def __init__(self, start: float) -> None:
        super().__init__("127.0.0.1:1", "unused")
        self.start = start

    def committed_end(self) -> int | None:
        return 10 if time.monotonic() - self.start < 0.2 else 20

    def marker(self, partition: int) -> int | None:
        assert partition == 1
        return 2 if time.monotonic() - self.start < 1.0 else 3


def test_recovery_waits_for_the_interrupted_partition() -> None:
    start = time.monotonic()
    clock = _Clock(start)
    clock.target = (1, 3)  # partition 1 was killed in batch 2: done when its marker is 3
    recovery = clock.measure(start, clock.committed_end(), lambda: time.monotonic() - start > 3)
    assert recovery is not None and 0.9 <= recovery <= 1.6, recovery


def test_without_a_target_the_first_growth_counts() -> None:
    start = time.monotonic()
    clock = _Clock(start)
    recovery = clock.measure(start, clock.committed_end(), lambda: time.monotonic() - start > 3)
    assert recovery is not None and recovery < 0.9, recovery


def test_the_target_is_the_killed_partitions_next_uncommitted_batch() -> None:
    from benchmarks.chaos.model import recovery_target

    context = {"batch": "2", "partition": "1", "rows": "40"}
    assert recovery_target("sink.mid_produce", context) == (1, 3)
    assert recovery_target("dedup.after_claim", context) == (1, 3)
    # killed after its commit: the output it delays is the partition's next batch
    assert recovery_target("sink.after_commit", context) == (1, 4)
    assert recovery_target("sink.mid_produce", {"batch": "static", "partition": "1"}) is None
    assert recovery_target("sink.mid_produce", {"batch": "2"}) is None


def test_a_kinds_recovery_counts_only_runs_timed_to_the_killed_partition() -> None:
    from benchmarks.chaos.faults import FaultOutcome
    from benchmarks.chaos.model import RunResult, RunSpec
    from benchmarks.chaos.report import timed_recoveries

    def run(index: int, seconds: float, of: str) -> RunResult:
        return RunResult(RunSpec(index, "driver_kill", 1, 2, "sink.after_checkpoint"),
                         FaultOutcome(kind="driver_kill"), recovery_s=seconds, recovery_of=of)

    older = [run(0, 0.4, ""), run(1, 21.0, "")]  # before 2026-11-26: timed to the topic
    assert timed_recoveries(older) == [0.4, 21.0]
    assert timed_recoveries([*older, run(2, 24.0, "partition")]) == [24.0]
