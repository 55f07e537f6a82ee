"""Reading a checkpoint's committed Kafka offsets and counting what is left."""

from __future__ import annotations

import json
from pathlib import Path

from dedup.cli.input_left import checkpoint_offsets, progress_offsets, unread


def _checkpoint(tmp_path: Path, batches: dict[int, dict[str, dict[str, int]]],
                committed: list[int]) -> str:
    folder = tmp_path / "chk"
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    for batch, offsets in batches.items():
        (folder / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":1}}\n{json.dumps(offsets)}')
    for batch in committed:
        (folder / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return str(folder)


def test_the_newest_committed_batch_counts(tmp_path: Path) -> None:
    # Batch 2 was planned but not committed: a restart redoes it.
    chk = _checkpoint(tmp_path, {1: {"t": {"0": 5, "1": 7}}, 2: {"t": {"0": 9, "1": 9}}},
                      [0, 1])
    assert checkpoint_offsets(chk) == {"t": {0: 5, 1: 7}}
    assert checkpoint_offsets("file://" + chk) == {"t": {0: 5, 1: 7}}
    assert checkpoint_offsets(str(tmp_path / "none")) == {}
    assert checkpoint_offsets("s3a://bucket/chk") is None


def test_unread_counts_from_the_read_position() -> None:
    ends = {"t": {0: (0, 10), 1: (3, 7)}}
    assert unread(ends, {"t": {0: 10, 1: 7}}, "earliest") == 0
    assert unread(ends, {"t": {0: 4, 1: 7}}, "earliest") == 6
    assert unread(ends, {"t": {0: 10}}, "earliest") == 4  # partition 1 not read yet
    assert unread(ends, {}, "earliest") == 14  # nothing committed
    assert unread(ends, {}, "latest") is None  # where it starts is not known
    assert unread(ends, None, "earliest") is None


def test_progress_offsets() -> None:
    progress = {"sources": [{"endOffset": json.dumps({"t": {"0": 3}})}]}
    assert progress_offsets(progress) == {"t": {0: 3}}
    assert progress_offsets({"sources": [{"endOffset": {"row": 4}}]}) is None
    assert progress_offsets(None) is None
