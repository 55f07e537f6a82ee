"""The CI subset of the operator-sequence explorer (benchmarks/chaos/sequences.py).

A few fixed short sequences over different action kinds, each on real Redis, Kafka
and Spark and judged by the explorer's one oracle: the ``read_committed`` output
equals the failure-free output of all input, or the sequence ended refused with a
named error and what is visible is an exact prefix; and no outcome contradicts the
verdicts of docs/operational-changes.md. The full run is
``python -m benchmarks.chaos --sequences``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.chaos.model import ChaosEnv
from benchmarks.chaos.sequences import Action, SequenceSpec, run_sequence

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.slow]

SEQUENCES = [
    # a setting refused at start, its advice followed, then a mid-batch switch of form
    SequenceSpec(index=9001, seed=11, one_pass=True, rows=200, actions=(
        Action("run_batches", {"k": 2}),
        Action("change_name", {"name": "dedup.num_shards", "value": 8}),
        Action("follow_advice"),
        Action("crash", {"how": "held_stop", "point": "sink.after_checkpoint",
                         "partition": 1}),
        Action("switch_form"),
    )),
    # a lost catalog must be refused; its advice (a new checkpoint) lets duplicates of
    # exactly the records emitted before through, as it says, and no others
    SequenceSpec(index=9002, seed=12, one_pass=False, rows=200, actions=(
        Action("crash", {"how": "worker_kill", "point": "dedup.after_claim", "partition": 0}),
        Action("redis_flush"),
        Action("run_batches", {"k": 1}),
        Action("follow_advice"),
    )),
    # a failover to an in-sync replica and a checkpoint reset after a clean stop (two
    # steps: in one pass the stopped query's app id lease is released on the Redis
    # before the failover, a known finding, so the reset waits for the lease to lapse)
    SequenceSpec(index=9003, seed=13, one_pass=False, rows=200, actions=(
        Action("run_batches", {"k": 1}),
        Action("redis_failover"),
        Action("change_name", {"name": "sink.options.lease", "value": 5}),
        Action("reset_checkpoint"),
    )),
    # advice followed right after a flush: no start has met the refusal yet, so
    # follow_advice starts (refused: a lost catalog), then does what the message says
    SequenceSpec(index=9004, seed=14, one_pass=True, rows=200, actions=(
        Action("run_batches", {"k": 2}),
        Action("redis_flush"),
        Action("follow_advice"),
        Action("run_batches", {"k": 1}),
    )),
]


@pytest.fixture(scope="module")
def chaos_env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosEnv]:  # type: ignore[no-untyped-def]
    env = ChaosEnv(Path(tmp_path_factory.mktemp("sequences")), spark=spark).start()
    try:
        yield env
    finally:
        env.stop()


# A sequence that shows a known finding is marked here, not strict when the finding is a
# race (CI must not turn red on that luck); empty while none is open.
KNOWN: dict[int, str] = {}


@pytest.mark.parametrize("spec", [pytest.param(
    s, id=f"seq{s.index}",
    marks=[pytest.mark.xfail(strict=False, reason=KNOWN[s.index])] if s.index in KNOWN else [])
    for s in SEQUENCES])
def test_sequence_is_judged_exact_or_refused_with_an_exact_prefix(
        chaos_env: ChaosEnv, spec: SequenceSpec) -> None:
    result = run_sequence(chaos_env, spec)
    trace = "\n".join(str(step) for step in result.trace)
    assert not result.error, f"{result.error}\n{trace}"
    assert not result.contradictions, f"{result.contradictions}\n{trace}"
    report = result.report
    assert report["ok"], f"{report}\n{trace}"
    assert result.verdict in ("exact", "refused"), trace
    assert report["lost"] == report["phantoms"] == report["mismatched"] == 0, report
    assert report["duplicated_unannounced"] == 0, report
    assert report["observed"] > 0, report
    # every action did something (none was skipped for its state)
    assert sum(result.hits.values()) == len(spec.actions), (result.hits, trace)
