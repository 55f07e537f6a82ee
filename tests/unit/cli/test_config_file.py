"""Pipeline files: defaults, strict keys, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.cli.config_file import SCHEMA, example_path, load_pipeline, parse_pipeline
from dedup.exceptions import ConfigError

MINIMAL = 'app_id = "p1"\n[sink]\ntopic = "out"\n'


def test_defaults_are_filled_in() -> None:
    pipeline = parse_pipeline(MINIMAL)
    assert pipeline.app_id == "p1"
    assert pipeline.table("source")["type"] == "synthetic"
    assert pipeline.table("dedup")["num_shards"] == SCHEMA["dedup"]["num_shards"]
    assert pipeline.table("sink")["topic"] == "out"


def test_example_config_parses() -> None:
    pipeline = load_pipeline(example_path())
    assert pipeline.app_id == "dedup-example"
    assert pipeline.table("source")["total_rows"] > 0
    assert pipeline.table("sink")["one_pass"] is True  # the example shows the default


@pytest.mark.parametrize(("text", "message"), [
    (MINIMAL + "[dedup]\nnum_shard = 3\n", "unknown key 'num_shard' in [dedup]; allowed keys:"),
    (MINIMAL + "colour = 1\n", "unknown key 'colour'"),
    (MINIMAL + "[sinc]\ntopic = 'x'\n", "unknown table [sinc]"),
    ('[sink]\ntopic = "out"\n', "app_id is required"),
    ('app_id = "bad id!"\n[sink]\ntopic = "o"\n', "app_id 'bad id!' is invalid"),
    (MINIMAL + "[dedup]\nnum_shards = 'four'\n", "dedup.num_shards must be a int"),
    (MINIMAL + "[source]\ntype = 'socket'\n", "source.type must be one of"),
    ('app_id = "p"\n', "sink.topic is required"),
    ("app_id = \n", "not valid TOML"),
])
def test_bad_files_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_pipeline(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_pipeline(tmp_path / "nope.toml")


def test_allowed_keys_listed_in_error() -> None:
    with pytest.raises(ConfigError) as info:
        parse_pipeline(MINIMAL + "[redis]\nurll = 'x'\n")
    assert "require_persistence" in str(info.value) and "url" in str(info.value)


def test_pipeline_file_wait_replicas_maps_to_the_redis_config() -> None:
    from dedup.cli.pipeline import dedup_config

    text = 'app_id = "w"\n[sink]\ntopic = "t"\n[redis]\nwait_replicas = {}\n'
    auto = dedup_config(parse_pipeline(text.format(-1)), "redis://127.0.0.1:1/0")
    told = dedup_config(parse_pipeline(text.format(2)), "redis://127.0.0.1:1/0")
    assert (auto.redis.wait_replicas, told.redis.wait_replicas) == (None, 2)


def test_pipeline_file_failover_wait_maps_to_the_redis_config() -> None:
    from dedup.cli.pipeline import dedup_config

    text = 'app_id = "w"\n[sink]\ntopic = "t"\n[redis]\n'
    default = dedup_config(parse_pipeline(text), "redis://127.0.0.1:1/0")
    off = dedup_config(parse_pipeline(text + "failover_wait = 0\n"),
                       "redis://127.0.0.1:1/0")
    assert (default.redis.failover_wait, off.redis.failover_wait) == (20.0, 0.0)


def test_dotted_sink_options_may_be_written_unquoted() -> None:
    # TOML reads an unquoted dotted key as nested tables; the sink's options are
    # dotted names, so the file must hand them on as the names written.
    pipeline = parse_pipeline(MINIMAL + '[sink.options]\nstrong.productions = "false"\n'
                              '"kafka.transaction.timeout.ms" = "90000"\n'
                              'kafka.acks = "all"\nkafka.linger.ms = 7\n')
    assert pipeline.table("sink")["options"] == {
        "strong.productions": "false", "kafka.transaction.timeout.ms": "90000",
        "kafka.acks": "all", "kafka.linger.ms": 7}


@pytest.mark.parametrize(("extra", "one_pass"), [
    ("", True),                                             # dedup on, a Kafka sink
    ("[dedup]\nenabled = false\n", False),                  # nothing to fuse
    ('app_id = "p1"\n[sink]\ntype = "console"\n', False),   # no Kafka write to run it in
])
def test_one_pass_is_the_default_wherever_it_can_run(extra: str, one_pass: bool) -> None:
    text = extra if extra.startswith("app_id") else MINIMAL + extra
    assert parse_pipeline(text).table("sink")["one_pass"] is one_pass


def test_a_file_that_sets_one_pass_keeps_its_choice() -> None:
    two_step = parse_pipeline('app_id = "p1"\n[sink]\ntopic = "out"\none_pass = false\n')
    assert two_step.table("sink")["one_pass"] is False
    one = parse_pipeline('app_id = "p1"\n[sink]\ntopic = "out"\none_pass = true\n')
    assert one.table("sink")["one_pass"] is True


@pytest.mark.parametrize("text", [
    'app_id = "p1"\n[sink]\ntype = "console"\none_pass = true\n',
    'app_id = "p1"\n[dedup]\nenabled = false\n[sink]\ntopic = "o"\none_pass = true\n',
])
def test_one_pass_asked_for_where_it_cannot_run_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match=r"sink\.one_pass = true needs dedup\.enabled = true"):
        parse_pipeline(text)


def test_dedup_and_redis_keys_are_the_config_field_names() -> None:
    """``[dedup]`` and ``[redis]`` say what ``DedupConfig`` says, dotted for nested
    configs, as dotted keys or as tables; the flat names of before are unknown keys."""
    from dedup.cli.pipeline import dedup_config

    base = 'app_id = "w"\n[sink]\ntopic = "t"\n'
    dotted = dedup_config(parse_pipeline(
        base + '[dedup]\nbloom.capacity = 20\nretention.bucket_seconds = 3600\n'
        'retention.late_policy = "pass"\n[redis]\nfailover_wait = 2.5\n'),
        "redis://127.0.0.1:1/0")
    tables = dedup_config(parse_pipeline(
        base + '[dedup.bloom]\ncapacity = 20\n[dedup.retention]\nbucket_seconds = 3600\n'
        'late_policy = "pass"\n[redis]\nfailover_wait = 2.5\n'), "redis://127.0.0.1:1/0")
    for cfg in (dotted, tables):
        assert (cfg.bloom.capacity, cfg.retention.bucket_seconds, cfg.retention.late_policy,
                cfg.redis.failover_wait) == (20, 3600, "pass", 2.5)
    for old in ("bloom_capacity = 20", "retention_bucket_seconds = 3600",
                'late_policy = "pass"'):
        with pytest.raises(ConfigError, match=r"unknown key .* in \[dedup\].*bloom\.capacity"):
            parse_pipeline(base + f"[dedup]\n{old}\n")
    with pytest.raises(ConfigError, match=r"unknown key 'failover_wait_seconds'.*failover_wait"):
        parse_pipeline(base + "[redis]\nfailover_wait_seconds = 1\n")
