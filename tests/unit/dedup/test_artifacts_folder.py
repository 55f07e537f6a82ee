"""``no_artifacts_folder_left``: what Spark 4.0.x leaves in the working folder goes, nothing
else (the integration proof: tests/integration/cli/test_run_cmd.py and test_demo.py under
Spark 4.0.0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.local.spark import no_artifacts_folder_left


def _spark_makes_its_root(folder: Path) -> Path:
    made = folder / "artifacts" / "spark-0c459e33-eb58-4eab-baa1-f62fe06fb27d"
    made.mkdir(parents=True)
    (made / "classes").mkdir()
    return made


def test_the_folder_spark_made_is_removed(tmp_path: Path) -> None:
    with no_artifacts_folder_left(tmp_path):
        _spark_makes_its_root(tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_users_own_artifacts_folder_keeps_all_but_the_sessions_root(tmp_path: Path) -> None:
    mine = tmp_path / "artifacts"
    mine.mkdir()
    (mine / "model.bin").write_bytes(b"x")
    (mine / "spark-mine").mkdir()  # was there before: not the session's
    with no_artifacts_folder_left(tmp_path):
        made = _spark_makes_its_root(tmp_path)
    assert not made.exists()
    assert sorted(p.name for p in mine.iterdir()) == ["model.bin", "spark-mine"]


def test_anything_else_written_there_meanwhile_stays(tmp_path: Path) -> None:
    with no_artifacts_folder_left(tmp_path):
        _spark_makes_its_root(tmp_path)
        (tmp_path / "artifacts" / "report.txt").write_text("kept")
    assert [p.name for p in (tmp_path / "artifacts").iterdir()] == ["report.txt"]


def test_removed_on_an_error_too_and_nothing_made_nothing_done(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), no_artifacts_folder_left(tmp_path):
        _spark_makes_its_root(tmp_path)
        raise RuntimeError("the query failed")
    assert not list(tmp_path.iterdir())
    with no_artifacts_folder_left(tmp_path):
        pass
    assert not list(tmp_path.iterdir())
