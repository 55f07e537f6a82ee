"""Reading a Spark checkpoint's query id and last committed batch (dedup.cli.pipeline)."""

from __future__ import annotations

from pathlib import Path

from dedup.cli.pipeline import checkpoint_history


def test_a_local_checkpoint_with_commits_gives_its_query_and_last_batch(tmp_path: Path) -> None:
    (tmp_path / "commits").mkdir()
    (tmp_path / "metadata").write_text('{"id":"q-1"}\n')
    assert checkpoint_history(str(tmp_path)) is None  # no committed batch yet
    for name in ("0", "1", "7", ".7.crc", "x"):
        (tmp_path / "commits" / name).write_text("v1\n")
    assert checkpoint_history(str(tmp_path)) == ("q-1", 7)
    assert checkpoint_history(f"file://{tmp_path}") == ("q-1", 7)


def test_no_checkpoint_or_a_remote_one_gives_nothing(tmp_path: Path) -> None:
    assert checkpoint_history(str(tmp_path / "absent")) is None
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "0").write_text("v1\n")
    assert checkpoint_history(str(tmp_path)) is None  # no metadata: not Spark's
    assert checkpoint_history("s3a://bucket/chk") is None
