"""The catalog and the sink's checkpoints on a Redis with a password, over TLS only.

The URL is ``rediss://:<password>@host:port/0?ssl_ca_certs=<ca.pem>``: the
password and the CA travel in the one string every entry point takes (the
dedup config, the sink's ``redis.url``, the pipeline file, ``--redis-url``).
No output of a run may show the password: not a ``repr``, not an error, not a
progress line, not Spark's logs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dedup import CatalogUnavailableError, DedupConfig, RedisCatalog, RedisConfig
from dedup.local.services import RedisServer
from sinks.config import SinkConfig
from tests.integration.cli.example import example_config
from tests.integration.security.conftest import PASSWORD, assert_no_secret, run_dedup
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


@pytest.mark.slow
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
    result = run_dedup(["run", str(config), "--redis-url", secured_redis.url, "--bootstrap",
                        kafka_bootstrap, "--verify"], cache, timeout=400)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "lost 0, duplicated 0, phantoms 0" in result.stdout
    # a run that fails (the wrong password) prints its error, and no secret either
    wrong = secured_redis.url.replace(PASSWORD, PASSWORD[::-1])
    failed = run_dedup(["run", str(config), "--redis-url", wrong, "--bootstrap",
                        kafka_bootstrap], cache, timeout=400)
    assert failed.returncode != 0
    assert_no_secret([result, failed], cache, [PASSWORD, PASSWORD[::-1]])
