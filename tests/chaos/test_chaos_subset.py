"""The CI subset of the chaos matrix: every fault kind once, each confirmed, output exact.

The full matrix (200+ runs) is ``python -m benchmarks.chaos``; this runs the
same code for one run per fault kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.chaos.faults import FAULT_KINDS
from benchmarks.chaos.report import figures, markdown
from benchmarks.chaos.runner import ChaosEnv, RunResult, run_one, schedule

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.slow]

SPECS = schedule(len(FAULT_KINDS), seed=7)
RESULTS: list[RunResult] = []


@pytest.fixture(scope="module")
def chaos_env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosEnv]:  # type: ignore[no-untyped-def]
    env = ChaosEnv(Path(tmp_path_factory.mktemp("chaos")), spark=spark).start()
    try:
        yield env
    finally:
        env.stop()


@pytest.mark.parametrize("spec", SPECS, ids=[s.kind for s in SPECS])
def test_fault_is_hit_and_output_is_exact(chaos_env: ChaosEnv, spec) -> None:  # type: ignore[no-untyped-def]
    result = run_one(chaos_env, spec)
    RESULTS.append(result)
    report = result.report
    assert not result.error, result.error
    assert result.fault.confirmed, f"fault {spec.kind} was not confirmed: {result.fault}"
    assert report["lost"] == 0, report
    assert report["duplicated"] == 0, report
    assert report["phantoms"] == 0 and report["mismatched"] == 0, report
    assert report["open_transactions"] == 0, report
    assert report["expected"] > 0 and report["observed"] == report["expected"]


def test_figures_cover_every_kind() -> None:
    if len(RESULTS) != len(FAULT_KINDS):
        pytest.skip("needs every fault-kind run of this module")
    data = figures(RESULTS, seed=7, metadata={
        "date": "test", "machine": "test", "pyspark": "x", "confluent_kafka": "x",
        "librdkafka": "x"})
    assert data["fault_kinds_hit"] == len(FAULT_KINDS)
    assert (data["losses"], data["duplicates"], data["phantoms"]) == (0, 0, 0)
    assert "| **total** |" in markdown(data)
