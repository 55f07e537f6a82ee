"""``dedup run --remote sc://...``: a pipeline file run through a Spark Connect server
(issue 34 item 1), and a checkpoint carried from a classic session to Connect.

The server is the package's local one (:func:`connect_spark`); ``dedup run`` runs
as a child process (its own Connect client; stopping its session in this process
would stop the local server). The first run, in a classic session of its own, is
cut short (after 0.5 s: its checkpoint holds the query, and on this machine no
batch yet); the second resumes the same checkpoint through the server and
verifies the output topic. 4 min on 2026-11-27 (50 s of it the server's start)
on the 2-core machine at load 17-25.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dedup.cli.run import EXIT_INCOMPLETE
from tests.integration.cli.jars import jar_env

pytestmark = [pytest.mark.integration, pytest.mark.connect, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis]

PIPELINE = """\
app_id = "{app_id}"
checkpoint = "{checkpoint}"

[source]
type = "synthetic"
seed = 7
rows_per_batch = 500
total_rows = 2000
duplicate_rate = 0.2
duplicate_distance = "later_batches"
duplicate_gap_batches = 1

[ids]
strategy = "column"
column = "event_id"

[dedup]
num_shards = 2

[redis]
url = "{redis_url}"

[sink]
bootstrap_servers = "{bootstrap}"
topic = "{app_id}-out"
partitions = 2
value_column = "payload"

[run]
shuffle_partitions = 2
stop_after_idle_seconds = 30.0
"""


def _child_env(tmp_path: Path) -> dict[str, str]:
    """This process's environment without its local Connect server's markers (the child
    would take itself for that server's owner), keeping the server's token."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("SPARK_LOCAL_REMOTE", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    return {**env, "DEDUP_CACHE_DIR": str(tmp_path / "cache"), **jar_env()}


def test_a_classic_run_cut_short_resumes_through_connect_exactly(
        connect_spark: Any, connect_url: str, kafka_bootstrap: str, redis_url: str,
        app_id: str, tmp_path: Path) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text(PIPELINE.format(app_id=app_id, checkpoint=tmp_path / "checkpoint",
                                      redis_url=redis_url, bootstrap=kafka_bootstrap))
    dedup = [sys.executable, "-m", "dedup.cli.main", "run", str(config)]
    env = _child_env(tmp_path)
    classic = subprocess.run([*dedup, "--max-seconds", "0.5"], capture_output=True,
                             text=True, timeout=400, env=env, check=False)
    assert classic.returncode == EXIT_INCOMPLETE, f"{classic.stdout}\n{classic.stderr}"

    remote = subprocess.run([*dedup, "--remote", connect_url, "--verify"],
                            capture_output=True, text=True, timeout=400, env=env, check=False)
    out = remote.stdout
    assert remote.returncode == 0, f"stdout:\n{out}\nstderr:\n{remote.stderr}"
    assert f"connecting to the Spark Connect server {connect_url}" in out
    assert "lost 0, duplicated 0, phantoms 0, mismatched 0, open transactions 0" in out, out

