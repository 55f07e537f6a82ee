"""Spark's Java Kafka source settings -> the librdkafka settings of the toolkit's own clients."""

from __future__ import annotations

import pytest

from dedup.cli.config_file import parse_pipeline
from sources.kafka import client_settings

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="alice" password="p\\"w";')


def test_plaintext_needs_nothing() -> None:
    assert client_settings({}) == {}
    assert client_settings({"kafka.security.protocol": "PLAINTEXT", "minPartitions": "4"}) == {}


def test_scram_over_tls_with_a_pem_trust_store() -> None:
    settings = client_settings({
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": JAAS, "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ca.pem"})
    assert settings == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                        "sasl.username": "alice", "sasl.password": 'p"w',
                        "ssl.ca.location": "/etc/ca.pem"}


def test_tls_only_and_no_host_name_check() -> None:
    assert client_settings({"kafka.security.protocol": "ssl",
                            "kafka.ssl.endpoint.identification.algorithm": ""}) == \
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"}


@pytest.mark.parametrize("options", [
    {"kafka.security.protocol": "SASL_PLAINTEXT"},  # GSSAPI (Kerberos) by default
    {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
     "kafka.sasl.jaas.config": "no fields here"},
    {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/etc/store.jks"},
])
def test_settings_it_cannot_translate_give_none(options: dict[str, str]) -> None:
    assert client_settings(options) is None


def test_pipeline_file_takes_spark_source_options_dotted_or_quoted() -> None:
    pipeline = parse_pipeline(
        'app_id = "unit-source-options"\n'
        '[source]\ntype = "kafka"\ntopics = ["in"]\n'
        "[source.options]\nkafka.security.protocol = \"SSL\"\n"
        "\"kafka.ssl.truststore.type\" = \"PEM\"\nminPartitions = 4\n"
        '[sink]\ntype = "console"\n')
    assert pipeline.table("source")["options"] == {
        "kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "PEM",
        "minPartitions": "4"}


def test_topic_ids_of_a_source_with_no_python_client_counterpart_are_unknown(
        caplog: pytest.LogCaptureFixture) -> None:
    """A JKS trust store has no librdkafka counterpart: no ids, a warning, no contact."""
    from sources.kafka import topic_ids

    jks = {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/t.jks"}
    assert topic_ids("127.0.0.1:1", ["t"], jks) == {}
    assert "not detected" in caplog.text
