"""The soak benchmark's pure parts: the growth slope, the per-100-batch windows, the
batch commit times and the process tree (a fake ``/proc``; no Spark, no services)."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.bench_soak import (
    committed_batches,
    per_worker_slopes,
    rss_mb,
    slope_per_1k,
    spark_processes,
    summarize,
    windows,
)


def test_slope_is_mb_per_thousand_batches_after_the_warm_up() -> None:
    # 2 MB per batch during the warm-up, then 0.004 MB per batch (4 MB per 1,000)
    points = [(b, 2.0 * b) for b in range(0, 300, 10)]
    points += [(b, 600 + 0.004 * (b - 300)) for b in range(300, 2001, 10)]
    assert slope_per_1k(points, after=300) == 4.0
    assert slope_per_1k(points) is not None and slope_per_1k(points) > 100  # type: ignore[operator]
    assert slope_per_1k([(1, 5.0), (2, 5.0), (3, 5.0)]) == 0.0
    assert slope_per_1k([(1, 5.0), (2, 6.0)]) is None  # too few points
    assert slope_per_1k([(4, 5.0), (4, 6.0), (4, 7.0)]) is None  # one batch number


def _samples(batches: range) -> list[dict[str, object]]:
    return [{"t": float(b), "batches": b, "workers_mb": 300.0 + b / 100, "load_1m": 2.0,
             "workers": 2, "exact": True, "worker_rss_mb": {"11": 150.0, "12": 150.0 + b}}
            for b in batches]


def test_windows_take_throughput_from_commit_times_and_average_the_samples() -> None:
    # batch b ends at 10 + b seconds for the first 100, then 2 s per batch
    ends = {b: 10.0 + b if b < 100 else 109.0 + 2 * (b - 99) for b in range(250)}
    out = windows(ends, _samples(range(0, 251, 5)), rows_per_batch=1000)
    assert [(w["first_batch"], w["last_batch"]) for w in out] == [(0, 99), (100, 199),
                                                                 (200, 249)]
    # the first window starts at the end of batch 0: 99 batches in 99 s
    assert out[0]["records_per_s"] == 1000.0 and out[0]["seconds"] == 99.0
    assert out[1]["records_per_s"] == 500.0 and out[2]["records_per_s"] == 500.0
    assert out[0]["load_1m"] == 2.0
    # samples with batches in (0, 100]: 5, 10, ..., 100
    assert out[0]["samples"] == 20
    assert out[0]["workers_mb"] == round(sum(300 + b / 100 for b in range(5, 101, 5)) / 20, 3)
    assert "exact" not in out[0] and "t" not in out[0]


def test_a_window_whose_ends_were_not_seen_is_left_out() -> None:
    ends = {b: float(b) for b in range(300) if not 150 <= b <= 199}
    out = windows(ends, [], rows_per_batch=10)
    # a missed end drops the windows on both sides of it
    assert [w["first_batch"] for w in out] == [0]
    assert windows({}, [], rows_per_batch=10) == []


def test_per_worker_slopes_skip_short_lived_workers() -> None:
    samples = _samples(range(0, 1000, 10))
    samples[-1]["worker_rss_mb"] = {**samples[-1]["worker_rss_mb"], "13": 99.0}  # type: ignore[dict-item]
    slopes = per_worker_slopes(samples, after=300)
    assert slopes == {"11": 0.0, "12": 1000.0}


def test_summary_of_a_flat_run() -> None:
    ends = {b: float(b) for b in range(400)}
    summary = summarize(_samples(range(0, 401, 4)), ends, rows_per_batch=100, warmup=100)
    assert summary["batches"] == 400
    assert summary["worker_rss_growth_mb_per_1k_batches"] == 10.0
    assert summary["throughput_last_over_first"] == 1.0
    assert summary["worker_counts_seen"] == [2]


def test_committed_batches_remembers_commit_files_spark_deleted(tmp_path: Path) -> None:
    commits = tmp_path / "commits"
    commits.mkdir()
    seen: dict[int, float] = {}
    assert committed_batches(tmp_path, seen) == 0
    for batch in range(3):
        (commits / str(batch)).write_text("v1")
        os.utime(commits / str(batch), (100.0 + batch, 100.0 + batch))
    (commits / ".0.crc").write_text("")
    assert committed_batches(tmp_path, seen) == 3
    (commits / "0").unlink()  # Spark keeps only the last commits
    (commits / "3").write_text("v1")
    assert committed_batches(tmp_path, seen) == 4
    assert seen[0] == 100.0 and seen[2] == 102.0 and set(seen) == {0, 1, 2, 3}
    assert committed_batches(tmp_path / "missing", {}) == 0


def _proc(root: Path, pid: int, comm: str, ppid: int, argv: tuple[str, ...],
          rss_kb: int = 1024) -> None:
    folder = root / str(pid)
    folder.mkdir(parents=True)
    fields = ["S", ppid] + [0] * 17 + [1000 + pid, 0, 0]
    (folder / "stat").write_text(f"{pid} ({comm}) " + " ".join(map(str, fields)) + "\n")
    (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (folder / "status").write_text(f"Name:\t{comm}\nVmRSS:\t  {rss_kb} kB\nThreads:\t1\n")


def test_spark_processes_on_a_fake_proc_tree(tmp_path: Path) -> None:
    py = "/venv/bin/python"
    _proc(tmp_path, 10, "python", 1, (py, "-m", "dedup.cli.main", "run", "p.toml"))
    _proc(tmp_path, 20, "java", 10, ("/usr/bin/java", "-cp", "x", "SparkSubmit"))
    _proc(tmp_path, 30, "python", 20, (py, "-m", "pyspark.daemon", "pyspark.worker"))
    _proc(tmp_path, 31, "python", 30, (py, "-m", "pyspark.daemon", "pyspark.worker"), 2048)
    _proc(tmp_path, 32, "python", 30, (py, "-m", "pyspark.daemon", "pyspark.worker"))
    _proc(tmp_path, 40, "python", 20,
          (py, "-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source"))
    _proc(tmp_path, 41, "python", 40,
          (py, "-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source"))
    _proc(tmp_path, 50, "python", 20,
          (py, "-m", "pyspark.sql.streaming.python_streaming_source_runner"))
    _proc(tmp_path, 60, "chmod", 20, ("chmod", "700", "/tmp/x"))
    _proc(tmp_path, 70, "python", 1, (py, "-m", "pyspark.daemon", "pyspark.worker"))
    # a local session's task workers fork from the toolkit's daemon (dedup.worker_daemon)
    _proc(tmp_path, 80, "python", 20, (py, "-m", "dedup.worker_daemon", "pyspark.worker"))
    _proc(tmp_path, 81, "python", 80, (py, "-m", "dedup.worker_daemon", "pyspark.worker"))
    found = spark_processes(10, tmp_path)
    assert found == {"driver": 10, "jvm": 20, "workers": [31, 32, 81],
                     "other_python": [30, 40, 41, 50, 80]}
    assert rss_mb(31, tmp_path) == 2.0
    assert rss_mb(99, tmp_path) is None
    assert spark_processes(99, tmp_path)["jvm"] is None


def _soak_result(growth: float, exact: bool) -> dict[str, object]:
    samples = _samples(range(0, 401, 4))
    ends = {b: float(b) for b in range(400)}
    summary = summarize(samples, ends, rows_per_batch=100, warmup=100)
    return {"metadata": {"date": "2026-11-27 08:00 UTC", "machine": "test", "python": "3",
                         "pyspark": "4", "librdkafka": "2"},
            "variant": "test", "setup": {"rows_per_batch": 100}, "live_ids": 32_000,
            "redis_bytes_per_live_id": 90.5, "exact": exact,
            "verification": {"summary": "expected 1, observed 1: lost 0"},
            **summary, "worker_rss_growth_mb_per_1k_batches": growth, "samples": samples}


def test_report_merges_the_soak_keys_with_their_bars(tmp_path: Path) -> None:
    from benchmarks import report

    data = {"soak": _soak_result(3.2, True), "soak_baseline": _soak_result(7.5, False)}
    data["soak_baseline"]["exact"] = None
    figures = report.summary_figures(data)
    assert figures["soak_batches"] == 400
    assert figures["soak_worker_rss_growth_mb_per_1k_batches"] == 3.2
    assert figures["soak_throughput_last_over_first"] == 1.0
    assert figures["soak_exact"] is True
    assert figures["soak_redis_bytes_per_live_id"] == 90.5
    assert figures["soak_baseline_worker_rss_growth_mb_per_1k_batches"] == 7.5
    assert "soak_baseline_exact" not in figures
    text = report.markdown(data, figures)
    assert "| `soak_batches` | 400 | >= 2,000 | MISSED by 80% |" in text
    assert "| `soak_worker_rss_growth_mb_per_1k_batches` | 3.2 | <= 5 (after the warm-up) " \
        "| met |" in text
    assert "| `soak_exact` | True | true | met |" in text
    assert "| 0-99 | 100 |" in text
    assert report.plots(data, tmp_path) == ["soak.png"]
    assert (tmp_path / "soak.png").stat().st_size > 0
