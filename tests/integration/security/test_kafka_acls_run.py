"""``dedup run`` end to end (Spark's Kafka source, the dedup operator, the exactly-once
sink) on a broker with an authorizer, as a principal holding exactly the ACLs of
:func:`sinks.acls.required_acls` for its source and sink: the ``read_committed``
output is exact. The source's ACLs (Spark's consumer, its groups
``spark-kafka-source-*``) are tested only here."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.local.services import KafkaBroker
from sinks.acls import required_acls
from tests.integration.security.conftest import (
    PIPELINE_PASSWORD,
    PIPELINE_USER,
    run_dedup,
)
from tests.integration.security.test_kafka_acls import _set_acls

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.redis, pytest.mark.slow]

RECORDS = 300
KEYS = 220  # records 220..299 repeat keys 0..79, each with its own value


@pytest.mark.parametrize("source_read", [True, False], ids=["all", "without-source-read"])
def test_run_is_exact_with_exactly_the_documented_acls(
        locked_kafka: KafkaBroker, redis_url: str, app_id: str, tmp_path: Path,
        source_read: bool) -> None:
    """All the ACLs: exact. Without READ on the source topic: ``dedup run`` stops
    within its bound, in one line naming the READ and the topic, no traceback, and
    nothing reaches the output."""
    from confluent_kafka import Producer

    from sinks.kafka_io import ensure_topic
    from sinks.verify import verify_topic

    bootstrap, admin = locked_kafka.bootstrap_servers, locked_kafka.client_config
    source, output = f"{app_id}-in", f"{app_id}-out"
    for topic in (source, output):  # created by the admin: the pipeline may not
        ensure_topic(bootstrap, topic, 2, client_config=admin)
    producer = Producer({"bootstrap.servers": bootstrap, **admin})
    expected: dict[str, bytes] = {}
    for i in range(RECORDS):
        key = f"k{i % KEYS}"
        producer.produce(source, key=key, value=f"v{i}", partition=(i % KEYS) % 2)
        expected.setdefault(key, f"v{i}".encode())
    assert producer.flush(30) == 0
    acls = required_acls(app_id, output, source_topics=[source])
    _set_acls(locked_kafka, acls if source_read else [
        acl for acl in acls if not (acl.name == source and acl.operation == "READ")])
    pipeline = locked_kafka.user_config(PIPELINE_USER)
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{PIPELINE_USER}" password="{PIPELINE_PASSWORD}";')
    source_options = {"kafka.security.protocol": "SASL_SSL",
                      "kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.jaas.config": jaas,
                      "kafka.ssl.truststore.type": "PEM",
                      "kafka.ssl.truststore.location": pipeline["ssl.ca.location"]}
    # TOML literal strings: the JAAS line holds double quotes
    source_text = "".join(f'"{k}" = \'{v}\'\n' for k, v in source_options.items())
    sink_text = "".join(f'"kafka.{k}" = "{v}"\n' for k, v in pipeline.items())
    config = tmp_path / "pipeline.toml"
    config.write_text(
        f'app_id = "{app_id}"\n'
        f'[source]\ntype = "kafka"\ntopics = ["{source}"]\nmax_offsets_per_trigger = 120\n'
        f"[source.options]\n{source_text}"
        '[ids]\nstrategy = "key"\n'
        f'[sink]\ntype = "kafka"\ntopic = "{output}"\npartitions = 2\n'
        f'key_column = "key"\nvalue_column = "value"\n[sink.options]\n{sink_text}'
        "[run]\nstop_after_idle_seconds = 3.0\n")
    try:
        result = run_dedup(["run", str(config), "--redis-url", redis_url, "--bootstrap",
                            bootstrap, "--max-seconds", "300"], tmp_path / "cache")
        if not source_read:
            assert result.returncode not in (0, None), f"{result.stdout}\n{result.stderr}"
            assert "Traceback" not in result.stderr, result.stderr
            named = [text for text in result.stderr.splitlines() if "READ" in text]
            assert len(named) == 1, f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
            assert f"topic '{source}'" in named[0] and "docs/operations.md" in named[0], named
            report = verify_topic(bootstrap, output, {}, client_config=admin)
            assert (report.observed, report.open_transactions) == (0, 0), report.summary()
            return
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
        report = verify_topic(bootstrap, output, expected, client_config=admin)
        assert (report.lost, report.duplicated, report.phantoms, report.mismatched,
                report.open_transactions) == (0, 0, 0, 0, 0), report.summary()
    finally:
        _set_acls(locked_kafka, [])
