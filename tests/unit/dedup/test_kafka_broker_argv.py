"""The broker's JVM command line, without starting Kafka."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.local import services
from dedup.local.services import KafkaBroker


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KafkaBroker:
    monkeypatch.setattr(services, "java_binary", lambda: "/usr/bin/java")
    monkeypatch.setattr(services, "kafka_broker_jars", lambda: tmp_path / "jars")
    return KafkaBroker(tmp_path / "kafka", port=9092, controller_port=9093)


def _options(argv: list[str]) -> list[str]:
    """The JVM options: what comes between ``java`` and the class path."""
    return argv[1:argv.index("-cp")]


def test_kafka_opts_come_after_the_brokers_own_jvm_options(
        broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    plain = _options(broker._java("kafka.Kafka", "server.properties"))
    assert "-Xmx384m" in plain and not any(o.startswith("-XX:Tiered") for o in plain)
    # read at each start, split as a shell would, after ours: a repeated -Xmx wins
    monkeypatch.setenv("KAFKA_OPTS", "-XX:TieredStopAtLevel=1 -Xmx512m '-Dnote=a b'")
    argv = broker._java("kafka.Kafka", "server.properties")
    assert _options(argv) == [*plain, "-XX:TieredStopAtLevel=1", "-Xmx512m", "-Dnote=a b"]
    assert argv[-2:] == ["kafka.Kafka", "server.properties"]
