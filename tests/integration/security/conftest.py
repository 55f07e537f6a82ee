"""A redis-server that wants a password and speaks only TLS, with certificates made
by openssl for this session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dedup.local.services import RedisServer
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
