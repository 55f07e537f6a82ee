"""``dedup run --remote`` and ``[run] remote``: which Spark a pipeline runs on (issue 34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.cli.config_file import parse_pipeline
from dedup.cli.main import build_parser, main
from dedup.cli.run import spark_target
from dedup.exceptions import ConfigError

BASE = 'app_id = "p"\n[sink]\ntopic = "out"\n'


def _run(extra: str = "") -> dict[str, object]:
    return parse_pipeline(BASE + ("[run]\n" + extra if extra else "")).table("run")


def test_remote_flag_is_parsed_and_optional() -> None:
    parser = build_parser()
    args = parser.parse_args(["run", "p.toml", "--remote", "sc://127.0.0.1:15002"])
    assert args.remote == "sc://127.0.0.1:15002"
    assert parser.parse_args(["run", "p.toml"]).remote is None


def test_the_file_s_remote_key_runs_through_connect() -> None:
    run = _run('remote = "sc://127.0.0.1:15002"\n')
    assert spark_target(run) == ("remote", "sc://127.0.0.1:15002")
    assert spark_target(_run()) == ("master", "local[2]")  # the default: classic


def test_the_options_override_the_file() -> None:
    run = _run('remote = "sc://127.0.0.1:15002"\n')
    assert spark_target(run, remote="sc://h:1") == ("remote", "sc://h:1")
    assert spark_target(run, master="local[1]") == ("master", "local[1]")
    assert spark_target(_run('master = "local[1]"\n'), remote="sc://h:1") == \
        ("remote", "sc://h:1")


def test_master_and_remote_in_the_file_are_refused_in_one_line_naming_both() -> None:
    with pytest.raises(ConfigError) as caught:
        _run('master = "local[2]"\nremote = "sc://127.0.0.1:15002"\n')
    message = str(caught.value)
    assert "\n" not in message and "run.master" in message and "run.remote" in message


def test_both_options_are_refused_in_one_line_naming_both() -> None:
    with pytest.raises(ConfigError) as caught:
        spark_target(_run(), master="local[2]", remote="sc://h:1")
    message = str(caught.value)
    assert "\n" not in message and "--master" in message and "--remote" in message


@pytest.mark.parametrize("url", ["local[2]", "http://h:15002", "127.0.0.1:15002"])
def test_a_remote_that_is_not_an_sc_url_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="sc://"):
        _run(f'remote = "{url}"\n')
    with pytest.raises(ConfigError, match="--remote must be a Spark Connect URL"):
        spark_target(_run(), remote=url)


def test_the_command_refuses_the_pair_before_reaching_any_service(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "p.toml"
    config.write_text(BASE + '[run]\nmaster = "local[2]"\nremote = "sc://h:1"\n')
    assert main(["run", str(config)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "run.master" in err and "run.remote" in err, err
