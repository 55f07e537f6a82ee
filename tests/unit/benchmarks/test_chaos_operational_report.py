"""The figures of the operational chaos kinds: outcomes counted apart, totals over matrices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chaos.faults import FaultOutcome
from benchmarks.chaos.model import RunResult, RunSpec
from benchmarks.chaos.operational import committed_batches
from benchmarks.chaos.report import figures, markdown, other_matrices, summary_figures

METADATA = {"date": "d", "machine": "m", "pyspark": "4", "confluent_kafka": "2",
            "librdkafka": "2"}


def _result(index: int, kind: str, outcome: str, lost: int = 0) -> RunResult:
    spec = RunSpec(index=index, kind=kind, seed=index + 1, batch=1, point="dedup.after_claim")
    return RunResult(spec=spec, fault=FaultOutcome(kind=kind, confirmed=True),
                     report={"lost": lost, "duplicated": 0, "phantoms": 0, "mismatched": 0,
                             "expected": 10, "ok": lost == 0},
                     outcome=outcome)


def test_a_progress_line_from_before_outcomes_reads_back() -> None:
    data = _result(0, "worker_kill", "exact").as_dict()
    del data["outcome"]
    assert RunResult.from_dict(json.loads(json.dumps(data))).outcome == ""


def test_exact_and_refused_are_counted_apart_and_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmarks.chaos.report as report

    monkeypatch.setitem(report.KNOWN_FAILING, "checkpoint_reset", "a finding under work")
    results = [_result(0, "restart_shard_count", "refused"),
               _result(1, "restart_shard_count", "refused"),
               _result(2, "restart_shuffle_partitions", "exact"),
               _result(3, "checkpoint_reset", "failed", lost=39),
               _result(4, "worker_kill", "exact")]
    data = figures(results, 7, METADATA)
    row = data["per_kind"]["restart_shard_count"]
    assert (row["exact"], row["refused"], row["failed_runs"]) == (0, 2, 0)
    assert data["per_kind"]["restart_shuffle_partitions"]["exact"] == 1
    assert data["per_kind"]["checkpoint_reset"]["failed_runs"] == 1
    assert data["operational_kinds_hit"] == 3
    assert (data["fault_kinds_hit"], data["fault_kinds_total"]) == (4, 4)
    table = markdown(data)
    assert "0 exact, 2 refused | 2 |" in table
    assert "(known failing)" in table  # a known finding's loss is reported as such
    assert "| **total** | **5** | **4/4 kinds** | **39** |" in table


def test_summary_covers_every_matrix(tmp_path: Path) -> None:
    crash = figures([_result(i, "worker_kill", "exact") for i in range(3)], 7, METADATA)
    (tmp_path / "chaos.json").write_text(json.dumps(crash))
    cluster = figures([_result(0, "redis_primary_kill", "exact")], 9, METADATA)
    (tmp_path / "chaos_cluster.json").write_text(json.dumps(cluster))
    operational = figures([_result(0, "restart_shard_count", "refused"),
                           _result(1, "checkpoint_reset", "failed", lost=5)], 8, METADATA)
    others = other_matrices(tmp_path, "chaos_operational")
    assert [m["runs"] for m in others] == [3, 1]
    summary = summary_figures(operational, others)
    assert summary == {"chaos_runs": 6, "chaos_fault_kinds_hit": 4,
                       "chaos_operational_kinds_hit": 2, "chaos_cluster_kinds_hit": 1,
                       "chaos_losses": 5, "chaos_duplicates": 0, "chaos_phantoms": 0,
                       "chaos_open_transactions": 0, "chaos_failed_runs": 1}
    assert [m["runs"] for m in other_matrices(tmp_path, "chaos")] == [1]


def test_committed_batches_reads_sparks_commit_log(tmp_path: Path) -> None:
    assert committed_batches(str(tmp_path)) == 0
    commits = tmp_path / "commits"
    commits.mkdir()
    for name in ("0", "1", "2", ".2.crc"):
        (commits / name).write_text("v1")
    assert committed_batches(str(tmp_path)) == 3
