"""``dedup run`` with the shipped example pipeline, then ``dedup txn``, on the session services."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dedup.cli.config_file import SYNTHETIC_KEYS, load_pipeline
from dedup.cli.main import main
from dedup.cli.run import EXIT_INCOMPLETE
from sources.synthetic_rows import SyntheticOptions, expected_output
from tests.integration.cli.example import example_config
from tests.integration.cli.jars import jar_env

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.slow]


def _duplicates(config: Path) -> int:
    """Duplicates in the input of the pipeline file ``config`` (a synthetic source)."""
    src = load_pipeline(config).table("source")
    distinct = len(expected_output(SyntheticOptions(**{k: src[k] for k in SYNTHETIC_KEYS})))
    return int(src["total_rows"]) - distinct


def test_example_pipeline_cut_short_then_run_again_runs_exactly_once(
        redis_url: str, kafka_bootstrap: str, app_id: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The shipped example, verbatim except for names unique to this test, run as a user
    # who stops it early: a finite source must not be reported finished when max_seconds
    # stopped it (nor, before the fix, when a slow batch looked idle): exit 3, then the
    # same command resumes from the checkpoint and the output is exact. (One test, not
    # two: each `dedup run` child costs about 40 s of Spark start before its first batch.)
    config = example_config(app_id, tmp_path)
    dedup = Path(sys.executable).with_name("dedup")
    env = {**os.environ, "DEDUP_CACHE_DIR": str(tmp_path / "cache"), **jar_env()}
    work = tmp_path / "work"  # the user's working folder: nothing may land in it
    work.mkdir()
    argv = [str(dedup), "run", str(config), "--redis-url", redis_url, "--bootstrap",
            kafka_bootstrap]
    cut = subprocess.run([*argv, "--quiet", "--max-seconds", "0.5"], capture_output=True,
                         text=True, timeout=400, env=env, check=False, cwd=work)
    assert cut.returncode == EXIT_INCOMPLETE, f"{cut.stdout}\n{cut.stderr}"
    assert "stopped at max_seconds before the source's last row (10000)" in cut.stdout
    result = subprocess.run([*argv, "--verify"], capture_output=True, text=True, timeout=400,
                            env=env, check=False, cwd=work)
    out = result.stdout
    assert result.returncode == 0, f"stdout:\n{out}\nstderr:\n{result.stderr}"
    assert re.search(r"batch \d+: 2000 records in", out), out  # progress lines
    assert "synthetic source -> dedup and kafka sink in one pass" in out  # the default form
    # batch 0, cut before its commit (0.5 s of a start that takes seconds), runs again
    assert f"dedup run {app_id}: 5 batches, 10000 records in" in out, out
    assert "lost 0, duplicated 0, phantoms 0, mismatched 0, open transactions 0" in out
    assert f"10000 records in, {_duplicates(config)} duplicates dropped," in out, out
    assert (tmp_path / "cache" / "runs" / app_id / "checkpoint").is_dir()
    # Spark 4.0.x made an artifacts/ folder in the JVM's working folder (SPARK-52396)
    assert not sorted(str(p.relative_to(work)) for p in work.rglob("*"))

    assert main(["txn", "list", "--app-id", app_id, "--bootstrap", kafka_bootstrap]) == 0
    listed = capsys.readouterr().out
    txn_ids = re.findall(rf"^({re.escape(app_id)}\.p\d+)  partition \d+  next batch 5 ",
                         listed, flags=re.MULTILINE)
    assert txn_ids, listed  # every sink partition with output committed batches 0..4
    assert main(["txn", "abort", "--app-id", app_id, "--bootstrap", kafka_bootstrap]) == 0
    aborted = capsys.readouterr().out
    assert all(txn_id in aborted for txn_id in txn_ids)


def test_example_pipeline_in_two_steps_runs_exactly_once(redis_url: str, kafka_bootstrap: str,
                                                         app_id: str, tmp_path: Path) -> None:
    # sink.one_pass = false: the dedup operator, then the exactly_once_kafka data source
    # (the example, like the default, runs one pass).
    config = example_config(app_id, tmp_path)
    text = config.read_text().replace("one_pass = true", "one_pass = false", 1)
    assert "one_pass = false" in text
    config.write_text(text)
    dedup = Path(sys.executable).with_name("dedup")
    env = {**os.environ, "DEDUP_CACHE_DIR": str(tmp_path / "cache"), **jar_env()}
    result = subprocess.run(
        [str(dedup), "run", str(config), "--redis-url", redis_url, "--bootstrap",
         kafka_bootstrap, "--verify", "--quiet"],
        capture_output=True, text=True, timeout=400, env=env, check=False,
    )
    out = result.stdout
    assert result.returncode == 0, f"stdout:\n{out}\nstderr:\n{result.stderr}"
    assert f"dedup run {app_id}: 5 batches, 10000 records in" in out
    assert "lost 0, duplicated 0, phantoms 0, mismatched 0, open transactions 0" in out
    # the operator's counts reach the run's report as the one-pass step's do
    assert f"10000 records in, {_duplicates(config)} duplicates dropped," in out, out
