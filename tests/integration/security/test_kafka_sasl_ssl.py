"""``dedup run`` into a Kafka that wants SASL_SSL (SCRAM-SHA-256) over TLS, with the
catalog and checkpoints on a Redis that wants a password over TLS.

The sink's security settings are Spark options under ``[sink.options]``
(``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``); the command's
own Kafka clients (the reachability check, the topic it creates, ``--verify``)
must use them too. No output of the run may show either password.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.local.services import KafkaBroker, RedisServer
from tests.integration.cli.example import example_config
from tests.integration.security.conftest import (
    KAFKA_PASSWORD,
    PASSWORD,
    assert_no_secret,
    run_dedup,
)

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


SOURCE_RECORDS = 400
SOURCE_KEYS = 300  # records 300..399 repeat keys 0..99, each with its own value


def _java_source_options(broker: KafkaBroker) -> dict[str, str]:
    """What a Spark user writes for a SASL_SSL SCRAM source: Java client settings."""
    client = broker.client_config
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{client["sasl.username"]}" password="{client["sasl.password"]}";')
    return {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": jaas, "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": client["ssl.ca.location"]}


def test_run_reads_a_sasl_ssl_source_and_dedups_it_exactly(
        secured_kafka: KafkaBroker, secured_redis: RedisServer, app_id: str,
        tmp_path: Path) -> None:
    # Source, sink, the command's own clients (reachability, topics) and the catalog all
    # secured, and no output shows a password. The sink's settings reach `dedup run
    # --verify` and `dedup verify --config` by one function (sink_client_settings), tried
    # in the test below; one `dedup run` child here, not two (each costs about 40 s of
    # Spark start before its first batch).
    from confluent_kafka import Producer

    from sinks.kafka_io import ensure_topic
    from sinks.verify import verify_topic

    bootstrap, client = secured_kafka.bootstrap_servers, secured_kafka.client_config
    source, output = f"{app_id}-in", f"{app_id}-out"
    for topic in (source, output):
        ensure_topic(bootstrap, topic, 2, client_config=client)
    producer = Producer({"bootstrap.servers": bootstrap, **client})
    expected: dict[str, bytes] = {}
    for i in range(SOURCE_RECORDS):
        key = f"k{i % SOURCE_KEYS}"
        # a key's copies go to its partition, after the original: the first one is kept
        producer.produce(source, key=key, value=f"v{i}", partition=(i % SOURCE_KEYS) % 2)
        expected.setdefault(key, f"v{i}".encode())
    assert producer.flush(30) == 0
    # TOML literal strings: the JAAS line holds double quotes
    source_options = "".join(f'"{k}" = \'{v}\'\n'
                             for k, v in _java_source_options(secured_kafka).items())
    sink_options = "".join(f'"kafka.{k}" = "{v}"\n' for k, v in client.items())
    config = tmp_path / "pipeline.toml"
    config.write_text(
        f'app_id = "{app_id}"\n'
        f'[source]\ntype = "kafka"\ntopics = ["{source}"]\nmax_offsets_per_trigger = 150\n'
        f"[source.options]\n{source_options}"
        '[ids]\nstrategy = "key"\n'
        f'[sink]\ntype = "kafka"\ntopic = "{output}"\npartitions = 2\n'
        f'key_column = "key"\nvalue_column = "value"\n[sink.options]\n{sink_options}'
        "[run]\nstop_after_idle_seconds = 3.0\n")
    cache = tmp_path / "cache"
    result = run_dedup(["run", str(config), "--redis-url", secured_redis.url, "--bootstrap",
                        bootstrap, "--max-seconds", "300"], cache)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    report = verify_topic(bootstrap, output, expected, client_config=client)
    assert report.ok, report.summary()
    assert (report.lost, report.duplicated, report.phantoms, report.mismatched,
            report.open_transactions) == (0, 0, 0, 0, 0)
    assert_no_secret([result], cache, [KAFKA_PASSWORD, PASSWORD])


def test_verify_and_txn_connect_with_the_pipeline_files_security_settings(
        secured_kafka: KafkaBroker, app_id: str, tmp_path: Path) -> None:
    """``dedup verify`` and ``dedup txn`` take the Kafka security settings of the
    pipeline file that ran (``--config``): an audit of a secured topic must not need
    the password on the command line, and must not report a connection failure as
    anything else."""
    from confluent_kafka import Producer

    from dedup.constants import RECORD_ID_HEADER
    from sinks.kafka_io import ensure_topic

    config = _secured_pipeline(secured_kafka, app_id, tmp_path)
    bootstrap, topic = secured_kafka.bootstrap_servers, f"{app_id}-audited"
    ensure_topic(bootstrap, topic, 1, client_config=secured_kafka.client_config)
    producer = Producer({"bootstrap.servers": bootstrap, **secured_kafka.client_config})
    for rid in ("a", "b", "b"):  # one repeated record ID
        producer.produce(topic, value=f"value-{rid}".encode(),
                         headers=[(RECORD_ID_HEADER, rid.encode())])
    assert producer.flush(30) == 0
    cache = tmp_path / "cache"

    plain = run_dedup(["verify", "--topic", topic, "--bootstrap", bootstrap], cache, 120)
    assert plain.returncode != 0 and "--config" in plain.stderr, plain.stderr

    audit = run_dedup(["verify", "--config", str(config), "--topic", topic,
                       "--bootstrap", bootstrap], cache, 120)
    assert audit.returncode == 1, f"{audit.stdout}\n{audit.stderr}"
    assert "duplicated 1," in audit.stdout and "FAILED" in audit.stdout, audit.stdout

    txn = run_dedup(["txn", "list", "--config", str(config), "--bootstrap", bootstrap],
                    cache, 120)
    assert txn.returncode == 0, f"{txn.stdout}\n{txn.stderr}"
    assert f"no sink transactions found for app id {app_id}" in txn.stdout, txn.stdout
    assert_no_secret([plain, audit, txn], cache, [KAFKA_PASSWORD])
