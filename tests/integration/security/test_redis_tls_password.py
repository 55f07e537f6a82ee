"""The catalog and the sink's checkpoints on a Redis with a password, over TLS only.

The URL is ``rediss://:<password>@host:port/0?ssl_ca_certs=<ca.pem>``: the
password and the CA travel in the one string every entry point takes (the
dedup config, the sink's ``redis.url``, the pipeline file, ``--redis-url``).
No output of a run may show the password: not a ``repr``, not an error, not a
progress line, not Spark's logs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dedup import CatalogUnavailableError, DedupConfig, RedisCatalog, RedisConfig
from dedup.local.services import RedisServer
from sinks.config import SinkConfig
from tests.integration.cli.example import example_config
from tests.integration.cli.jars import jar_env
from tests.integration.security.conftest import PASSWORD
from tests.integration.sinks.pipeline import assert_pipeline_exact

pytestmark = [pytest.mark.integration, pytest.mark.redis]


def test_plain_connection_and_wrong_password_fail_closed_without_the_secret(
        secured_redis: RedisServer, app_id: str) -> None:
    url = secured_redis.url
    assert url.startswith("rediss://") and PASSWORD in url
    assert RedisCatalog(DedupConfig(app_id, RedisConfig(url))).check_setup()["num_shards"]
    wrong = url.replace(PASSWORD, "not-the-password")
    with pytest.raises(CatalogUnavailableError) as caught:
        RedisCatalog(DedupConfig(app_id, RedisConfig(wrong))).check_setup()
    assert "not-the-password" not in str(caught.value)
    plain = f"redis://127.0.0.1:{secured_redis.port}/0"  # no TLS: refused by the server
    with pytest.raises(CatalogUnavailableError):
        RedisCatalog(DedupConfig(app_id, RedisConfig(plain, socket_timeout=2,
                                                     replica_timeout=1))).check_setup()
    shown = [repr(RedisConfig(url)), repr(DedupConfig(app_id, RedisConfig(url))),
             repr(SinkConfig.from_options({"app.id": app_id, "redis.url": url,
                                           "kafka.bootstrap.servers": "127.0.0.1:9",
                                           "topic": "t"}))]
    assert all(PASSWORD not in text for text in shown), shown


@pytest.mark.spark
@pytest.mark.kafka
def test_pipeline_exact_over_tls_with_a_password(spark: Any, kafka_bootstrap: str,
                                                 secured_redis: RedisServer, app_id: str,
                                                 tmp_checkpoint: str) -> None:
    assert_pipeline_exact(spark, kafka_bootstrap, app_id, secured_redis.url, tmp_checkpoint)


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow
def test_no_output_of_a_run_shows_the_password(secured_redis: RedisServer,
                                               kafka_bootstrap: str, app_id: str,
                                               tmp_path: Path) -> None:
    config = example_config(app_id, tmp_path)
    cache = tmp_path / "cache"
    env = {**os.environ, "DEDUP_CACHE_DIR": str(cache), **jar_env()}
    dedup = Path(sys.executable).with_name("dedup")
    result = subprocess.run(
        [str(dedup), "run", str(config), "--redis-url", secured_redis.url, "--bootstrap",
         kafka_bootstrap, "--verify"],
        capture_output=True, text=True, timeout=400, env=env, check=False)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "lost 0, duplicated 0, phantoms 0" in result.stdout
    # a run that fails (the wrong password) prints its error, and no secret either
    wrong = secured_redis.url.replace(PASSWORD, PASSWORD[::-1])
    failed = subprocess.run(
        [str(dedup), "run", str(config), "--redis-url", wrong, "--bootstrap",
         kafka_bootstrap], capture_output=True, text=True, timeout=400, env=env, check=False)
    assert failed.returncode != 0
    outputs = {"stdout": result.stdout + failed.stdout,
               "stderr": result.stderr + failed.stderr}
    for path in cache.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            outputs[str(path)] = path.read_bytes().decode(errors="replace")
    leaked = [name for name, text in outputs.items()
              if PASSWORD in text or PASSWORD[::-1] in text]
    assert not leaked, f"the password shows in {leaked}"
