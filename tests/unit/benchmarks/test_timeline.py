"""The micro-batch timeline of ``bench_timeline`` from Spark's REST replies (no Spark)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.bench_timeline import PARTS, batch_medians, job_timeline, rest_time, summarize

T0 = rest_time("2026-12-04T22:00:00.000GMT")


def at(ms: float) -> str:
    """A REST time ``ms`` after 22:00:00.000 (whole milliseconds)."""
    seconds, millis = divmod(int(ms), 1000)
    return f"2026-12-04T22:{seconds // 60:02d}:{seconds % 60:02d}.{millis:03d}GMT"


def job(job_id: int, start: float, end: float, stage_ids: list[int]) -> dict[str, Any]:
    return {"jobId": job_id, "submissionTime": at(start), "completionTime": at(end),
            "stageIds": stage_ids}


def stage(stage_id: int, start: float, end: float, cpu_ms: float,
          status: str = "COMPLETE", gc_ms: int = 0) -> dict[str, Any]:
    return {"stageId": stage_id, "submissionTime": at(start), "completionTime": at(end),
            "executorCpuTime": int(cpu_ms * 1e6), "jvmGcTime": gc_ms, "status": status}


def test_rest_time_reads_spark_s_format_as_utc() -> None:
    assert rest_time("2026-12-04T22:00:01.250GMT") - T0 == pytest.approx(1.25)


def test_each_job_splits_into_its_first_stage_later_stages_and_the_gap_before_it() -> None:
    jobs = [job(1, 1000, 1600, [11, 10]), job(2, 1800, 2300, [12, 13, 14])]
    stages = [stage(10, 1000, 1250, 90, gc_ms=12), stage(11, 1250, 1600, 40),
              stage(12, 1800, 1900, 30), stage(13, 1900, 2300, 50),
              stage(14, 1900, 2300, 99, status="SKIPPED")]
    timeline = job_timeline(jobs, stages, T0, T0 + 10)
    assert timeline == [
        {"job_ms": 600.0, "first_stage_ms": 250.0, "later_stages_ms": 350.0,
         "between_jobs_ms": None, "first_stage_cpu_ms": 90.0, "later_stages_cpu_ms": 40.0,
         "first_stage_gc_ms": 12.0, "later_stages_gc_ms": 0.0},
        {"job_ms": 500.0, "first_stage_ms": 100.0, "later_stages_ms": 400.0,
         "between_jobs_ms": 200.0, "first_stage_cpu_ms": 30.0, "later_stages_cpu_ms": 50.0,
         "first_stage_gc_ms": 0.0, "later_stages_gc_ms": 0.0},
    ]
    assert set(timeline[0]) == set(PARTS)


def test_jobs_outside_the_run_or_unfinished_are_left_out() -> None:
    jobs = [job(1, 500, 700, [1]), job(2, 1000, 1100, [2]),
            {"jobId": 3, "submissionTime": at(1200), "stageIds": [3]}]
    stages = [stage(1, 500, 700, 1), stage(2, 1000, 1100, 2)]
    timeline = job_timeline(jobs, stages, T0 + 0.9, T0 + 5)
    assert [t["job_ms"] for t in timeline] == [100.0]
    assert timeline[0]["between_jobs_ms"] is None  # the earlier run's job is not its gap


def test_batch_medians_skip_missing_figures_and_summary_spreads_over_rounds() -> None:
    timeline: list[dict[str, float | None]] = [
        {"job_ms": 600.0, "first_stage_ms": 250.0, "later_stages_ms": 350.0,
         "between_jobs_ms": None, "first_stage_cpu_ms": 90.0, "later_stages_cpu_ms": 40.0},
        {"job_ms": 500.0, "first_stage_ms": 100.0, "later_stages_ms": 400.0,
         "between_jobs_ms": 200.0, "first_stage_cpu_ms": 30.0, "later_stages_cpu_ms": 50.0},
        {"job_ms": 1400.0, "first_stage_ms": 1000.0, "later_stages_ms": 400.0,
         "between_jobs_ms": 100.0, "first_stage_cpu_ms": 30.0, "later_stages_cpu_ms": 50.0}]
    medians = batch_medians(timeline)
    assert medians["job_ms"] == 600.0 and medians["between_jobs_ms"] == 150.0
    runs = [{"variant": "a", "batch_medians": {**medians, "job_ms": value}}
            for value in (600.0, 500.0, 650.0)]
    summary = summarize(runs)["a"]
    assert summary["job_ms"] == 600.0 and summary["job_ms_spread"] == 150.0
    assert summary["job_ms_rounds"] == [600.0, 500.0, 650.0]
