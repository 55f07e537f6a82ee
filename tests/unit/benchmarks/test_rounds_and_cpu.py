"""Rounds, per-round ratios, median and spread, and the CPU sampler (no Spark, no services).

The sampler is checked on a fake ``/proc`` tree (a JVM with a Python daemon whose
worker exits and is waited for, a Python child of the JVM that exits, a non-Python
child, Redis with a forked rewrite) and on this process's own ``/proc`` entry.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_e2e, bench_operators, bench_shape, report
from benchmarks.common import (
    CpuSampler,
    cpu_per_record,
    median,
    output_correct,
    per_round_ratios,
    process_table,
    read_stat,
    refuse_wrong_outputs,
    round_order,
    round_ratio,
    spread,
    subtree_ticks,
    variant_medians,
)

TICK = float(os.sysconf("SC_CLK_TCK"))


# --- rounds ---


def test_round_order_rotates_by_one_per_round_or_stays_fixed() -> None:
    variants = ("a", "b", "c")
    assert [round_order(variants, k) for k in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert round_order(variants, 2, "fixed") == ["a", "b", "c"]
    assert round_order((), 3) == []
    with pytest.raises(ValueError):
        round_order(variants, 0, "random")


def test_an_output_is_checked_by_its_variant_and_a_wrong_one_voids_the_benchmark() -> None:
    copies = {"variant": "a", "records_out": 10, "distinct_out": 8}
    assert output_correct(copies, True, 10, 8)  # at least once: every record, copies too
    assert not output_correct(copies, False, 10, 8)  # exactly once: each ID once
    assert output_correct({**copies, "records_out": 8}, False, 10, 8)
    assert not output_correct({**copies, "records_out": 8, "distinct_out": 7}, False, 10, 8)
    refuse_wrong_outputs([{"variant": "a", "output_correct": True}, {"variant": "b"}])
    with pytest.raises(SystemExit, match=r"\['b'\] produced wrong output"):
        refuse_wrong_outputs([{"variant": "a", "output_correct": True},
                              {"variant": "b", "output_correct": False}])


def test_median_and_spread() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median([]) is None
    assert spread([0.9, 1.1, 1.0]) == pytest.approx(0.2)
    assert spread([1.0]) == 0.0
    assert spread([]) is None


def _runs(rates: dict[str, list[float]]) -> list[dict[str, Any]]:
    return [{"variant": v, "round": k, "records_per_s": r, "seconds": 1.0}
            for v, per_round in rates.items() for k, r in enumerate(per_round)]


def test_ratios_pair_numerator_and_baseline_of_the_same_round() -> None:
    # The baseline is slow in round 1: the per-round ratio follows it; the ratio of the
    # best runs (the old rule: 110 / 200 = 0.55) would pair runs of different rounds.
    runs = _runs({"ours": [100.0, 110.0, 90.0], "base": [200.0, 100.0, 180.0]})
    assert per_round_ratios(runs, "ours", "base") == [0.5, 1.1, 0.5]
    out = round_ratio(runs, "ours_over_base", "ours", "base")
    assert out == {"ours_over_base": 0.5, "ours_over_base_spread": 0.6,
                   "ours_over_base_rounds": [0.5, 1.1, 0.5]}


def test_a_round_missing_a_variant_is_left_out_and_other_figures_work() -> None:
    runs = _runs({"ours": [100.0, 120.0], "base": [200.0]})
    assert per_round_ratios(runs, "ours", "base") == [0.5]
    latency = [{"variant": "ours", "round": 0, "p50_ms": 30.0},
               {"variant": "base", "round": 0, "p50_ms": 10.0},
               {"variant": "base", "round": 1, "p50_ms": 0.0},
               {"variant": "ours", "round": 1, "p50_ms": 5.0}]
    # a zero baseline gives no ratio (not an infinite one)
    assert per_round_ratios(latency, "ours", "base", "p50_ms") == [3.0]
    assert per_round_ratios(latency, "ours", "base", lambda r: r["p50_ms"] + 10) == [2.0, 1.5]
    assert round_ratio([], "x", "ours", "base") == {"x": None, "x_spread": None,
                                                    "x_rounds": []}


def test_a_tuple_of_baselines_divides_by_the_fastest_of_them_in_each_round() -> None:
    # Spark's dedup pipeline on two state stores: the ratio is against whichever was
    # faster in that round; a round missing one of them gives no ratio.
    runs = _runs({"ours": [100.0, 90.0, 80.0], "hdfs": [200.0, 100.0],
                  "rocksdb": [125.0, 180.0]})
    assert per_round_ratios(runs, "ours", ("hdfs", "rocksdb")) == [0.5, 0.5]
    assert round_ratio(runs, "x", "ours", ("hdfs", "rocksdb"))["x_spread"] == 0.0
    assert per_round_ratios(runs, "ours", ("hdfs",)) == per_round_ratios(runs, "ours", "hdfs")


def test_variant_medians_skip_missing_values() -> None:
    runs = [{"variant": "a", "records_per_s": r, "cpu_s_per_record_jvm": c}
            for r, c in ((1.0, 2e-6), (3.0, None), (2.0, 4e-6))]
    assert variant_medians(runs, ("records_per_s", "cpu_s_per_record_jvm", "absent")) == {
        "a": {"records_per_s": 2.0, "cpu_s_per_record_jvm": 3e-6, "absent": None}}


def test_e2e_summary_has_median_spread_and_rounds_of_every_ratio() -> None:
    rates = {"spark_alo": [100.0, 80.0, 100.0], "eos_strong": [50.0, 48.0, 45.0],
             "eos_weak": [60.0] * 3, "eos_foreach_batch": [55.0] * 3,
             "eos_fused": [70.0, 72.0, 60.0], "dedup_spark_sink": [65.0] * 3,
             "python_alo_one_pass": [80.0] * 3, "spark_dedup_hdfs": [70.0, 90.0, 75.0],
             "spark_dedup_rocksdb": [100.0, 60.0, 50.0]}
    runs = _runs(rates)
    for run in runs:
        run.update(cpu_s_per_record_jvm=1e-5, cpu_s_per_record_python=2e-5)
    small = [dict(r, p50_ms=100.0 / r["records_per_s"] * 10, p99_ms=20.0) for r in runs
             if r["variant"] in bench_e2e.SMALL_VARIANTS]
    out = bench_e2e.summarize(runs, small)
    assert out["e2e_eos_over_alo_kafka_rounds"] == [0.5, 0.6, 0.45]
    assert out["e2e_eos_over_alo_kafka"] == 0.5
    assert out["e2e_eos_over_alo_kafka_spread"] == 0.15
    assert out["e2e_eos_fused_over_python_alo_one_pass_rounds"] == [0.875, 0.9, 0.75]
    assert out["batch_latency_p50_eos_over_alo_rounds"] == [2.0, 1.667, 2.222]
    # against the faster of Spark's two dedup pipelines of each round: 70/100, 72/90, 60/75
    assert out["e2e_eos_fused_over_spark_dedup_alo_rounds"] == [0.7, 0.8, 0.8]
    assert out["records_per_s"]["spark_alo"] == 100.0
    assert out["per_variant"]["eos_strong"]["cpu_s_per_record_python"] == 2e-5
    for name, *_ in (*bench_e2e.THROUGHPUT_RATIOS, *bench_e2e.SMALL_RATIOS):
        assert {name, f"{name}_spread", f"{name}_rounds"} <= set(out)


def test_shape_summary_takes_each_part_against_the_shape_of_the_same_round() -> None:
    runs = _runs({"spark_alo": [100.0, 120.0, 110.0], "shape": [80.0, 80.0, 90.0],
                  "shape_no_shuffle": [80.0, 88.0, 90.0], "shape_hidden": [72.0, 76.0, 81.0],
                  "eos_fused": [60.0, 56.0, 63.0]})
    out = bench_shape.summarize(runs)
    assert out["shape_no_shuffle_over_shape_rounds"] == [1.0, 1.1, 1.0]
    assert out["shape_no_shuffle_over_shape"] == 1.0
    assert out["shape_hidden_over_shape_rounds"] == [0.9, 0.95, 0.9]
    assert out["shape_hidden_over_shape_spread"] == 0.05
    assert out["eos_fused_over_shape_hidden_rounds"] == [0.833, 0.737, 0.778]
    assert out["per_variant"]["shape"]["records_per_s"] == 80.0
    for name, numerator, baseline in bench_shape.RATIOS:
        assert {numerator, baseline} <= set(bench_shape.VARIANTS)
        assert {name, f"{name}_spread", f"{name}_rounds"} <= set(out)


def test_operators_summary_and_report_carry_the_spread() -> None:
    variants = bench_operators.VARIANTS
    runs = _runs({v: [100.0 + 10 * i, 110.0 + 10 * i] for i, v in enumerate(variants)})
    runs[0]["round_trips_per_shard_batch"] = 1.5
    out = bench_operators.summarize(runs)
    assert out["dedup_over_passthrough_rounds"] == [1.1, 1.091]
    assert out["dedup_over_passthrough"] == 1.095  # mean of the middle two for 2 rounds
    assert out["dedup_over_passthrough_spread"] == 0.009
    assert out["redis_roundtrips_per_shard_batch"] == 1.5
    assert "dedup_over_dropduplicates_hdfs_spread" in report.HEADLINES["operators"]
    assert "e2e_eos_over_alo_kafka_spread" in report.HEADLINES["e2e"]
    data = {"operators": {**out, "runs": runs, "setup": {
        "records": 10, "dup_rate": 0.05, "files": 2, "max_files_per_trigger": 1,
        "shuffle_partitions": 4}, "metadata": {"date": "2026-01-01 00:00 UTC",
                                               "machine": "test", "python": "3",
                                               "pyspark": "4", "librdkafka": "2"}}}
    figures = report.summary_figures(data)
    assert figures["dedup_over_passthrough_spread"] == 0.009
    text = report.markdown(data, figures)
    assert "| `dedup_over_passthrough` | 1.095 (spread 0.009) | >= 0.5x (issue 13's" in text
    assert "| passthrough | 2 | 1.0 | 110 | - | - |" in text  # rounds counted from 1


def test_cpu_per_record() -> None:
    assert cpu_per_record({"jvm": 2.0, "python": 1.0, "jvm_exited_children": 5.0,
                           "unknown": 1.0}, 1000) == {
        "cpu_s_per_record_jvm": 0.002, "cpu_s_per_record_python": 0.001,
        "cpu_s_per_record_jvm_exited_children": 0.005}
    assert cpu_per_record({"redis": 1.0}, 0) == {"cpu_s_per_record_redis": None}


# --- /proc ---


class FakeProc:
    """A ``/proc`` tree: ``set(pid, ...)`` writes ``<pid>/stat`` and ``<pid>/cmdline``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def set(self, pid: int, comm: str, ppid: int, utime: int, stime: int = 0,
            cutime: int = 0, cstime: int = 0, argv: tuple[str, ...] = ()) -> None:
        folder = self.root / str(pid)
        folder.mkdir(parents=True, exist_ok=True)
        # fields 3..22: state ppid pgrp session tty tpgid flags minflt cminflt majflt
        # cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime
        fields = ["S", ppid, 1, 1, 0, -1, 0, 0, 0, 0, 0, utime, stime, cutime, cstime,
                  20, 0, 1, 0, 1000 + pid, 0, 0]
        (folder / "stat").write_text(f"{pid} ({comm}) " + " ".join(map(str, fields)) + "\n")
        (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in (argv or (comm,))))

    def remove(self, pid: int) -> None:
        for name in ("stat", "cmdline"):
            (self.root / str(pid) / name).unlink()
        (self.root / str(pid)).rmdir()


def test_read_stat_parses_a_comm_with_spaces_and_parentheses(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    proc.set(7, "a (b) c", ppid=3, utime=11, stime=12, cutime=13, cstime=14)
    stat = read_stat(7, tmp_path)
    assert stat is not None
    assert (stat.comm, stat.ppid, stat.own, stat.reaped, stat.starttime) == (
        "a (b) c", 3, 23, 27, 1007)
    assert read_stat(8, tmp_path) is None


def test_subtree_counts_live_descendants_and_waited_for_children(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    proc.set(10, "python3", ppid=1, utime=5, cutime=100)  # 100: its exited workers
    proc.set(11, "python3", ppid=10, utime=7, stime=3)
    proc.set(12, "python3", ppid=11, utime=1)
    table = process_table(tmp_path)
    assert subtree_ticks(10, table) == 5 + 100 + 7 + 3 + 1
    assert subtree_ticks(99, table) == 0


def test_sampler_on_a_fake_proc_tree(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    driver, jvm, daemon, worker, planner, chmod, redis, fork = 5, 20, 30, 31, 40, 41, 50, 51
    proc.set(driver, "python", ppid=1, utime=1000)
    proc.set(jvm, "java", ppid=driver, utime=500, stime=100, cutime=10)
    proc.set(daemon, "python3.11", ppid=jvm, utime=50, argv=("/v/bin/python3.11", "-m",
                                                           "pyspark.daemon"))
    proc.set(worker, "python3.11", ppid=daemon, utime=200)
    proc.set(redis, "redis-server", ppid=driver, utime=300)
    sampler = CpuSampler({"jvm": jvm, "redis": redis, "broker": None}, interval=0,
                         proc=tmp_path, driver_pid=driver)
    sampler.start()
    # in the window: the JVM works, the worker works then exits (the daemon waits for
    # it), a planner (Python, started by the JVM) runs and is sampled, then exits (the
    # JVM waits for it), a chmod child comes and goes unsampled, Redis forks a rewrite
    proc.set(jvm, "java", ppid=driver, utime=800, stime=150, cutime=10)
    proc.set(worker, "python3.11", ppid=daemon, utime=260)
    proc.set(planner, "java", ppid=jvm, utime=30,  # comm aside, its argv says python
             argv=("/usr/bin/python3", "-m", "pyspark.sql.worker.plan_data_source_read"))
    proc.set(chmod, "chmod", ppid=jvm, utime=2)
    proc.set(fork, "redis-rdb-bgsave", ppid=redis, utime=40)
    sampler._sample()
    proc.remove(worker)
    proc.set(daemon, "python3.11", ppid=jvm, utime=55, cutime=270)  # waited for: 270
    proc.set(planner, "java", ppid=jvm, utime=45,
             argv=("/usr/bin/python3", "-m", "pyspark.sql.worker.plan_data_source_read"))
    sampler._sample()
    proc.remove(planner)
    proc.remove(chmod)
    proc.set(jvm, "java", ppid=driver, utime=900, stime=160, cutime=10 + 47 + 3)
    proc.set(redis, "redis-server", ppid=driver, utime=320, cutime=45)
    proc.remove(fork)
    proc.set(driver, "python", ppid=1, utime=1100)
    cpu = sampler.stop()
    assert cpu["jvm"] == pytest.approx((1060 - 600) / TICK, abs=1e-3)
    # daemon 55 + 270 reaped - (50 + 200) at the start, planner 45 at its last sample
    assert cpu["python"] == pytest.approx((75 + 45) / TICK, abs=1e-3)
    assert cpu["jvm_exited_children"] == pytest.approx(50 / TICK, abs=1e-3)
    assert cpu["redis"] == pytest.approx(65 / TICK, abs=1e-3)
    assert cpu["driver"] == pytest.approx(100 / TICK, abs=1e-2)
    assert "broker" not in cpu
    assert sampler.samples == 4


def test_sampler_on_this_process_sees_its_cpu() -> None:
    # This process stands for the JVM and a Python child of it for a worker.
    import subprocess
    import sys

    sampler = CpuSampler({"jvm": os.getpid(), "redis": None}, interval=0.05).start()
    child = subprocess.Popen([sys.executable, "-c", "import time\n"
                              "e = time.process_time() + 0.3\n"
                              "while time.process_time() < e: pass\n"
                              "time.sleep(30)"])
    try:
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # until the child has burnt its 0.3 s
            stat = read_stat(child.pid)
            if stat is not None and stat.own / TICK >= 0.3:
                break
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        cpu = sampler.stop()
        child.kill()
        child.wait()
    assert 0.2 <= cpu["jvm"] <= 1.5
    assert cpu["python"] >= 0.25  # the child's start and its busy 0.3 s
    assert sampler.samples >= 3
    assert set(cpu) == {"jvm", "jvm_exited_children", "python", "driver"}


def test_run_all_passes_repeats_to_the_benchmarks_in_rounds(monkeypatch: Any) -> None:
    from benchmarks import common, run_all

    commands: list[list[str]] = []

    def call(command: list[str]) -> int:
        commands.append(command)
        return 0

    monkeypatch.setattr(run_all.subprocess, "call", call)
    monkeypatch.setattr(report, "main", lambda: {})
    monkeypatch.setattr(common, "write_json", lambda name, data: Path(name))
    monkeypatch.setattr(common, "run_metadata", lambda: {})
    assert run_all.main(["--quick", "--repeats", "2",
                         "--only", "bench_bloom,bench_operators,bench_e2e"]) == 0
    assert [c[2:] for c in commands] == [
        ["benchmarks.bench_bloom", "--quick"],
        ["benchmarks.bench_operators", "--quick", "--repeats", "2"],
        ["benchmarks.bench_e2e", "--quick", "--repeats", "2"]]
    # benchmarks.common is imported here: its RESULTS_DIR could no longer follow
    with pytest.raises(SystemExit):
        run_all.main(["--results-dir", "/tmp/x", "--only", "bench_bloom"])
