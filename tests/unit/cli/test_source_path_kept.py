"""A files source's path against the files its checkpoint's last batch read
(dedup.cli.pipeline.check_source_path_kept): Spark reads those files again at every
start, so a path that no longer holds them is refused, naming the old folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dedup.cli.config_file import PipelineFile, parse_pipeline
from dedup.cli.pipeline import check_source_path_kept
from dedup.exceptions import SettingChangedError


def _files(path: str) -> PipelineFile:
    return parse_pipeline(f'app_id = "a"\n[source]\ntype = "files"\npath = "{path}"\n'
                          'schema = "id string"\n[sink]\ntopic = "out"\n')


def _log(checkpoint: Path, name: str, files: list[Path]) -> None:
    log = checkpoint / "sources" / "0"
    log.mkdir(parents=True, exist_ok=True)
    (log / name).write_text("v1\n" + "\n".join(
        json.dumps({"path": f"file://{f}", "timestamp": 1, "batchId": 0}) for f in files))


def test_a_path_that_no_longer_holds_the_last_batchs_files_is_refused(tmp_path: Path) -> None:
    checkpoint, old = tmp_path / "chk", tmp_path / "in"
    _log(checkpoint, "0", [tmp_path / "gone" / "a.json"])
    _log(checkpoint, "19.compact", [old / "b.json"])  # the last batch: a compacted log
    with pytest.raises(SettingChangedError, match=f"restore source.path {str(old)!r}"):
        check_source_path_kept(_files(str(tmp_path / "moved")), str(checkpoint))
    for kept in (old, tmp_path):  # the path, or a folder that holds it
        check_source_path_kept(_files(str(kept)), str(checkpoint))
        check_source_path_kept(_files(f"file://{kept}"), f"file:{checkpoint}")


def test_no_log_a_glob_or_another_source_is_not_checked(tmp_path: Path) -> None:
    checkpoint = tmp_path / "chk"
    check_source_path_kept(_files(str(tmp_path / "x")), str(checkpoint))
    _log(checkpoint, "0", [tmp_path / "in" / "a.json"])
    check_source_path_kept(_files(str(tmp_path / "*" / "x")), str(checkpoint))
    kafka = parse_pipeline('app_id = "a"\n[source]\ntype = "kafka"\ntopics = ["t"]\n'
                           '[sink]\ntopic = "out"\n')
    check_source_path_kept(kafka, str(checkpoint))
