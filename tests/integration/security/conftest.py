"""A redis-server that wants a password and speaks only TLS, with certificates made
by openssl for this session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dedup.local.services import KafkaBroker, RedisServer
from dedup.local.tls import make_certificates

PASSWORD = "s3cr3t-R3dis-pa55"  # grep-able: no output of a run may contain it


@pytest.fixture(scope="session")
def secured_redis(services_dir: Path) -> Iterator[RedisServer]:
    certs = make_certificates(services_dir / "certs")
    server = RedisServer(services_dir / "redis-secured", password=PASSWORD, tls=certs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


KAFKA_USER = "dedup-user"
KAFKA_PASSWORD = "s3cr3t-K4fka-pa55"  # grep-able too


@pytest.fixture(scope="session")
def secured_kafka(services_dir: Path) -> Iterator[KafkaBroker]:
    """A broker whose one client listener is SASL_SSL (SCRAM-SHA-256) with TLS."""
    certs = make_certificates(services_dir / "certs")
    broker = KafkaBroker(services_dir / "kafka-secured", heap_mb=320,
                         scram=(KAFKA_USER, KAFKA_PASSWORD), tls=certs)
    broker.start()
    try:
        yield broker
    finally:
        from sinks.transactions import close_clients

        close_clients()
        broker.stop()
