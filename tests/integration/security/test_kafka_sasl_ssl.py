"""``dedup run`` into a Kafka that wants SASL_SSL (SCRAM-SHA-256) over TLS, with the
catalog and checkpoints on a Redis that wants a password over TLS.

The sink's security settings are Spark options under ``[sink.options]``
(``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``); the command's
own Kafka clients (the reachability check, the topic it creates, ``--verify``)
must use them too. No output of the run may show either password.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dedup.local.services import KafkaBroker, RedisServer
from tests.integration.cli.example import example_config
from tests.integration.cli.jars import jar_env
from tests.integration.security.conftest import KAFKA_PASSWORD, PASSWORD

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.slow]


def _secured_pipeline(broker: KafkaBroker, app_id: str, tmp_path: Path) -> Path:
    config = example_config(app_id, tmp_path)
    options = "".join(f'"kafka.{key}" = "{value}"\n'
                      for key, value in broker.client_config.items())
    text = config.read_text()
    assert "[sink.options]" not in text
    config.write_text(text.replace("[run]", f"[sink.options]\n{options}\n[run]", 1))
    return config


def test_run_exact_over_sasl_ssl_and_no_output_shows_a_password(
        secured_kafka: KafkaBroker, secured_redis: RedisServer, app_id: str,
        tmp_path: Path) -> None:
    config = _secured_pipeline(secured_kafka, app_id, tmp_path)
    cache = tmp_path / "cache"
    env = {**os.environ, "DEDUP_CACHE_DIR": str(cache), **jar_env()}
    dedup = Path(sys.executable).with_name("dedup")
    result = subprocess.run(
        [str(dedup), "run", str(config), "--redis-url", secured_redis.url, "--bootstrap",
         secured_kafka.bootstrap_servers, "--verify"],
        capture_output=True, text=True, timeout=500, env=env, check=False)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "lost 0, duplicated 0, phantoms 0, mismatched 0, open transactions 0" \
        in result.stdout, result.stdout
    outputs = {"stdout": result.stdout, "stderr": result.stderr}
    for path in cache.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            outputs[str(path)] = path.read_bytes().decode(errors="replace")
    leaked = [name for name, text in outputs.items()
              if KAFKA_PASSWORD in text or PASSWORD in text]
    assert not leaked, f"a password shows in {leaked}"
