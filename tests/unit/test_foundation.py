"""Config validation, fail-points and paths: the core skeleton, without processes."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import dedup
from dedup.config import (
    BloomConfig,
    DedupConfig,
    FailPointConfig,
    LatePolicy,
    RedisConfig,
    RetentionConfig,
    redact_url,
)
from dedup.exceptions import ConfigError, DedupError, InjectedFault
from dedup.failpoints import arm, fail_point, fired
from dedup.local.paths import _artifact


def test_version_is_single_source() -> None:
    from dedup._version import __version__

    assert dedup.__version__ == __version__


@pytest.mark.parametrize("bad", ["", None, "has space", "-lead", "x" * 101, "ü"])
def test_bad_app_id_is_refused_with_fix(bad: object) -> None:
    with pytest.raises(ConfigError, match="app_id"):
        DedupConfig(app_id=bad)  # type: ignore[arg-type]


def test_config_errors_are_value_errors_and_dedup_errors() -> None:
    with pytest.raises(ValueError):
        BloomConfig(error_rate=1.5)
    with pytest.raises(DedupError):
        RetentionConfig(horizon_seconds=10, bucket_seconds=60)
    with pytest.raises(ConfigError, match="num_shards"):
        DedupConfig(app_id="a", num_shards=0)
    with pytest.raises(ConfigError, match="late_policy"):
        RetentionConfig(late_policy="keep")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="redis url"):
        RedisConfig(url="http://localhost")


def test_configs_are_frozen_and_picklable() -> None:
    config = DedupConfig(app_id="orders", redis=RedisConfig(url="redis://:pw@h:1/0"))
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(AttributeError):
        config.app_id = "other"  # type: ignore[misc]
    assert RetentionConfig(late_policy="pass").late_policy is LatePolicy.PASS  # type: ignore[arg-type]


def test_secrets_are_not_shown() -> None:
    config = RedisConfig(url="rediss://user:s3cret@host:6380/0")
    assert "s3cret" not in repr(config)
    assert "s3cret" not in repr(DedupConfig(app_id="a", redis=config))
    assert redact_url("redis://u:p@h:1/0") == "redis://u:***@h:1/0"


def test_live_bucket_count() -> None:
    assert RetentionConfig(horizon_seconds=3600, bucket_seconds=600).live_buckets == 7


def test_fail_point_off_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEDUP_FAILPOINT_DIR", raising=False)
    monkeypatch.delenv("DEDUP_FAIL_POINT_DIR", raising=False)
    fail_point("sink.before_commit", None, batch=1)
    assert FailPointConfig().directory is None


def test_fail_point_folder_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("DEDUP_FAIL_POINT_DIR", str(tmp_path))
    arm(tmp_path, "sink.before_commit", "raise")
    with pytest.raises(InjectedFault):
        fail_point("sink.before_commit", None, batch=1)


def test_the_old_fail_point_variable_is_gone(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.delenv("DEDUP_FAIL_POINT_DIR", raising=False)
    monkeypatch.setenv("DEDUP_FAILPOINT_DIR", str(tmp_path))
    arm(tmp_path, "sink.before_commit", "raise")
    fail_point("sink.before_commit", None, batch=1)  # not read: nothing fires
    assert not fired(tmp_path, "sink.before_commit")


def test_fail_point_fires_once_and_only_on_match(tmp_path: Path) -> None:
    arm(tmp_path, "sink.before_commit", "raise", match={"batch": 2})
    fail_point("sink.before_commit", str(tmp_path), batch=1)  # no match: nothing
    with pytest.raises(InjectedFault):
        fail_point("sink.before_commit", str(tmp_path), batch=2)
    fail_point("sink.before_commit", str(tmp_path), batch=2)  # already fired
    hits = fired(tmp_path, "sink.before_commit")
    assert len(hits) == 1
    assert hits[0]["context"] == {"batch": "2"}


def test_fail_point_min_match_needs_a_context_at_least_that_big(tmp_path: Path) -> None:
    # "<key>_min": the context's <key> must be a number >= the value (an empty
    # partition, rows=0, must not fire a kill meant for one with rows)
    arm(tmp_path, "sink.before_commit", "raise", match={"batch": 2, "rows_min": 1})
    fail_point("sink.before_commit", str(tmp_path), batch=2, rows=0)
    fail_point("sink.before_commit", str(tmp_path), batch=2)  # no rows in the context
    fail_point("sink.before_commit", str(tmp_path), batch=2, rows="x")
    assert fired(tmp_path) == []
    with pytest.raises(InjectedFault):
        fail_point("sink.before_commit", str(tmp_path), batch=2, rows=3)
    assert fired(tmp_path, "sink.before_commit")[0]["context"] == {"batch": "2", "rows": "3"}


def test_clock_skew_min_match(tmp_path: Path) -> None:
    from dedup.failpoints import clock_offset

    arm(tmp_path, "dedup.batch_clock", "skew", match={"rows_min": 5}, seconds=-60)
    assert clock_offset("dedup.batch_clock", str(tmp_path), batch="1", rows=4) == 0.0
    assert clock_offset("dedup.batch_clock", str(tmp_path), batch="1", rows=5) == -60.0


def test_before_runs_only_when_the_point_fires(tmp_path: Path) -> None:
    calls: list[int] = []
    fail_point("sink.mid_produce", str(tmp_path), before=lambda: calls.append(1), batch=1)
    arm(tmp_path, "sink.mid_produce", "raise", match={"batch": 2})
    fail_point("sink.mid_produce", str(tmp_path), before=lambda: calls.append(2), batch=1)
    assert calls == []  # unarmed, or armed for another batch: the caller's path is unchanged
    with pytest.raises(InjectedFault):
        fail_point("sink.mid_produce", str(tmp_path), before=lambda: calls.append(3), batch=2)
    assert calls == [3]


def test_clock_skew_fail_point_stays_armed_from_its_batch_on(tmp_path: Path) -> None:
    from dedup.failpoints import clock_offset

    arm(tmp_path, "dedup.batch_clock", "skew", match={"partition": 1}, seconds=-60,
        from_batch=3)
    assert clock_offset("dedup.batch_clock", str(tmp_path), batch="2", partition=1) == 0.0
    assert clock_offset("dedup.batch_clock", str(tmp_path), batch="3", partition=0) == 0.0
    assert clock_offset("dedup.batch_clock", str(tmp_path), batch="3", partition=1) == -60.0
    assert clock_offset("dedup.batch_clock", str(tmp_path), batch="9", partition=1) == -60.0
    assert clock_offset("dedup.batch_clock", str(tmp_path), batch="ab12", partition=1) == 0.0
    assert [h["context"]["batch"] for h in fired(tmp_path, "dedup.batch_clock")] == ["3", "9"]


def test_unknown_fail_point_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown fail-point"):
        arm(tmp_path, "nowhere")


def test_jar_artifact_names() -> None:
    assert _artifact("kafka-clients-3.9.0.jar") == "kafka-clients"
    assert _artifact("hadoop-client-api-3.4.1.jar") == "hadoop-client-api"


def test_both_dedup_paths_read_the_batch_clock_with_its_skew(tmp_path: Path) -> None:
    # The operator's step and the one-pass writer both call batch_clock: Spark's
    # batch time, moved by an armed dedup.batch_clock skew for the batch's partition.
    from dedup.config import DedupConfig, FailPointConfig
    from dedup.partition_step import batch_clock

    config = DedupConfig(app_id="clock", fail_points=FailPointConfig(str(tmp_path)))
    assert batch_clock(config, 1000.0, "3", 1) == 1000.0
    arm(tmp_path, "dedup.batch_clock", "skew", match={"partition": 1}, seconds=-60,
        from_batch=3)
    assert batch_clock(config, 1000.0, "2", 1) == 1000.0
    assert batch_clock(config, 1000.0, "3", 0) == 1000.0
    assert batch_clock(config, 1000.0, "3", 1) == 940.0
