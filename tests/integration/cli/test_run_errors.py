"""``dedup run`` tells the person running it why the query failed, in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dedup.cli.main import EXIT_RUNTIME
from dedup.local.services import RedisServer
from tests.integration.cli.jars import jar_env

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.slow]


def _endless_pipeline(app_id: str, tmp_path: Path) -> Path:
    config = tmp_path / "pipeline.toml"
    config.write_text(
        f'app_id = "{app_id}"\n'
        "[source]\ntype = \"synthetic\"\nrows_per_batch = 200\ntotal_rows = 0\n"
        "[ids]\nstrategy = \"column\"\ncolumn = \"event_id\"\n"
        "[dedup]\nnum_shards = 2\n"
        # A claim rides out a failover this long before it gives up (default 20 s): the
        # shortest wait that still goes through it, for a test of the message after it.
        "[redis]\nfailover_wait = 2.0\n"
        f'[sink]\ntopic = "{app_id}-out"\npartitions = 1\n'
        # Weak productions: the sink does not touch Redis, so the first to find
        # it gone is the dedup claim, in a Python worker of a Spark task.
        '[sink.options]\n"strong.productions" = "false"\n'
        "[run]\ntrigger_seconds = 1.0\nstop_after_idle_seconds = 0.0\n"
    )
    return config


def test_redis_dying_mid_run_is_named_on_stderr(kafka_bootstrap: str, app_id: str,
                                                tmp_path: Path) -> None:
    # Our own Redis, so stopping it hurts no other test.
    redis = RedisServer(tmp_path / "redis").start()
    dedup = Path(sys.executable).with_name("dedup")
    env = {**os.environ, "DEDUP_CACHE_DIR": str(tmp_path / "cache"), **jar_env()}
    argv = [str(dedup), "run", str(_endless_pipeline(app_id, tmp_path)), "--redis-url",
            redis.url, "--bootstrap", kafka_bootstrap, "--max-seconds", "300"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:  # progress lines; the first batch proves the run is up
            seen.append(line)
            if " records in" in line and "batch " in line:
                break
        else:
            rest = proc.stderr.read() if proc.stderr else ""
            pytest.fail(f"no batch finished:\n{''.join(seen)}\n{rest}")
        redis.stop()
        stopped = time.monotonic()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        redis.stop()
    print(f"exit {proc.returncode} {time.monotonic() - stopped:.1f} s after Redis stopped")
    assert proc.returncode == EXIT_RUNTIME, f"{out}\n{err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("dedup: error: CatalogUnavailableError: Redis at "), err
    assert f"Redis at {redis.url} is unreachable during " in lines[0], err
    assert "Traceback" not in err and "\tat " not in err and "org.apache" not in err, err
