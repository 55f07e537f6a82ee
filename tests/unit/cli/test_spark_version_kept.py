"""The newest Spark version that ran a ``dedup run`` checkpoint, against the one that
resumes it (dedup.cli.pipeline.check_spark_version_kept): Spark does not promise
that an older release resumes a newer one's checkpoint, so it is refused in one line
naming the version to use."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dedup.cli.pipeline import SPARK_STAMP, check_spark_version_kept, record_spark_version
from dedup.exceptions import SettingChangedError


def test_an_older_spark_is_refused_and_a_newer_one_moves_the_stamp(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "chk")
    check_spark_version_kept("4.0.0", checkpoint)  # no checkpoint yet: nothing to compare
    record_spark_version("4.1.1", checkpoint)  # no folder here (another machine's)
    assert not (tmp_path / "chk").exists()
    (tmp_path / "chk").mkdir()  # as Spark makes it at the query's start
    record_spark_version("4.1.1", checkpoint)
    check_spark_version_kept("4.1.1", checkpoint)
    check_spark_version_kept("4.2.0", checkpoint)  # an upgrade passes
    record_spark_version("4.2.0", checkpoint)
    record_spark_version("4.1.1", checkpoint)  # never moves back
    assert (tmp_path / "chk" / SPARK_STAMP).read_text().strip() == "4.2.0"
    with pytest.raises(SettingChangedError,
                       match=re.escape("Run this checkpoint with Spark 4.2.0 or later")
                       ) as caught:
        check_spark_version_kept("4.1.1", f"file:{checkpoint}")
    assert "\n" not in str(caught.value)
    check_spark_version_kept("4.10.0", checkpoint)  # compared as numbers, not text


def test_a_checkpoint_off_the_local_file_system_is_not_stamped(tmp_path: Path) -> None:
    record_spark_version("4.2.0", "hdfs://nn/chk")
    check_spark_version_kept("4.0.0", "hdfs://nn/chk")
    assert not list(tmp_path.iterdir())
