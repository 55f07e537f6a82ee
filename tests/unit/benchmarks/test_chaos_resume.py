"""A chaos matrix interrupted half way resumes from its progress file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.chaos.faults import FaultOutcome
from benchmarks.chaos.model import RunResult, finished_runs, schedule


def _result(spec_index: int, seed: int = 7) -> RunResult:
    spec = schedule(4, seed)[spec_index]
    return RunResult(spec=spec, fault=FaultOutcome(kind=spec.kind, confirmed=True,
                                                   evidence={"pid": 12}),
                     report={"lost": 0, "duplicated": 0, "ok": True}, restarts=1,
                     recovery_s=2.5, duration_s=30.0)


def test_run_result_round_trips_through_json() -> None:
    original = _result(1)
    assert RunResult.from_dict(json.loads(json.dumps(original.as_dict()))) == original


def test_finished_runs_are_read_back(tmp_path: Path) -> None:
    progress = tmp_path / "chaos.progress.jsonl"
    progress.write_text("".join(json.dumps(_result(i).as_dict()) + "\n" for i in (0, 2)))
    finished = finished_runs(progress, schedule(4, 7))
    assert [r.spec.index for r in finished] == [0, 2]


def test_runs_of_another_schedule_are_refused(tmp_path: Path) -> None:
    progress = tmp_path / "chaos.progress.jsonl"
    progress.write_text(json.dumps(_result(0, seed=8).as_dict()) + "\n")
    with pytest.raises(SystemExit, match="another schedule"):
        finished_runs(progress, schedule(4, 7))


def test_an_interrupted_matrix_says_so_in_its_table() -> None:
    from benchmarks.chaos.report import figures, markdown

    metadata = {"date": "d", "machine": "m", "pyspark": "4", "confluent_kafka": "2",
                "librdkafka": "2", "runs_scheduled": 4}
    data = figures([_result(0), _result(1)], 7, metadata)
    assert "interrupted: 2 of 4 scheduled runs done" in markdown(data)
    data = figures([_result(i) for i in range(4)], 7, metadata)
    assert "interrupted" not in markdown(data)


def test_a_run_names_its_commit_clean_when_only_results_changed(tmp_path: Path) -> None:
    """The matrix writes its own progress file while it runs (``benchmarks/results``):
    that is no change to the code under test, so the commit must not read ``+dirty``;
    a change to any other tracked file must."""
    import subprocess

    from benchmarks.chaos.model import _commit

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    progress = tmp_path / "benchmarks" / "results" / "chaos_full.progress.jsonl"
    progress.write_text("{}\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "c")
    clean = _commit(tmp_path)
    assert clean and not clean.endswith("+dirty")
    progress.write_text("{}\n{}\n")
    assert _commit(tmp_path) == clean
    (tmp_path / "code.py").write_text("x = 2\n")
    assert _commit(tmp_path) == clean + "+dirty"
