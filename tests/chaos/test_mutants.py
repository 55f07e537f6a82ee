"""The mutants are wired: one broken variant of the toolkit is caught by the chaos checks.

CI's proof for the mutant matrix (``python -m benchmarks.chaos --mutants``,
benchmarks/chaos/mutants.py): the cheapest mutant, ``marker_ignored`` (the sink
re-commits a batch its marker says is in), runs through the chaos runner with
its planned fault (a worker killed after the Kafka commit) and must be
reported failed with the catching check named; the same run without the
mutant must be exact. The mutant is not in the toolkit: it is patched into the
Spark workers from benchmarks/chaos/mutant_patches.py (tests/chaos/conftest.py
puts its hook on their PYTHONPATH), and the run shows that it acted there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.chaos.model import ChaosEnv
from benchmarks.chaos.mutants import PLANS, caught_by, schedule
from benchmarks.chaos.runner import run_one

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.slow]

SPEC = next(s for s in schedule(seed=7, names=["marker_ignored"]) if s.mutant)


@pytest.fixture(scope="module")
def chaos_env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosEnv]:  # type: ignore[no-untyped-def]
    env = ChaosEnv(Path(tmp_path_factory.mktemp("mutants")), spark=spark).start()
    try:
        yield env
    finally:
        env.stop()


def test_marker_ignored_mutant_is_caught(chaos_env: ChaosEnv) -> None:
    result = run_one(chaos_env, SPEC)
    assert result.fault.confirmed, f"the planned fault did not hit: {result.fault}"
    assert result.outcome == "failed", result
    found = caught_by(result)
    assert PLANS["marker_ignored"].expect in found, found  # named, with its number
    assert found["duplicated"] > 0 and result.report["duplicated"] == found["duplicated"]
    # it acted in a Spark Python worker (the sink's write runs there), not in pytest
    hits = result.fault.evidence["mutant_hits"]
    assert hits and os.getpid() not in hits, hits


def test_the_same_run_without_the_mutant_is_exact(chaos_env: ChaosEnv) -> None:
    result = run_one(chaos_env, replace(SPEC, mutant="", index=SPEC.index + 1))
    assert result.fault.confirmed, f"the planned fault did not hit: {result.fault}"
    assert not result.error, result.error
    assert result.outcome == "exact", result
    assert caught_by(result) == {}
    assert result.report["observed"] == result.report["expected"] > 0
