"""A redis-server that wants a password and speaks only TLS, with certificates made
by openssl for this session."""

from __future__ import annotations

import os
import subprocess
import sys
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
    yield from _running(KafkaBroker(services_dir / "kafka-secured", heap_mb=320,
                                    scram=(KAFKA_USER, KAFKA_PASSWORD), tls=certs))


def _running(broker: KafkaBroker) -> Iterator[KafkaBroker]:
    """``broker`` started, then stopped after the sink's cached clients are closed."""
    broker.start()
    try:
        yield broker
    finally:
        from sinks.transactions import close_clients

        close_clients()
        broker.stop()


def run_dedup(argv: list[str], cache: Path,
              timeout: float = 500) -> subprocess.CompletedProcess[str]:
    """``dedup <argv>`` in a child process whose cache (logs, checkpoints) is ``cache``."""
    from tests.integration.cli.jars import jar_env

    env = {**os.environ, "DEDUP_CACHE_DIR": str(cache), **jar_env()}
    dedup = Path(sys.executable).with_name("dedup")
    return subprocess.run([str(dedup), *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def assert_no_secret(results: list[subprocess.CompletedProcess[str]], cache: Path,
                     secrets: list[str]) -> None:
    """No stdout, stderr or file under ``cache`` (Spark's logs, the checkpoint) of the
    runs shows any of ``secrets``."""
    outputs = {"stdout": "".join(r.stdout for r in results),
               "stderr": "".join(r.stderr for r in results)}
    for path in cache.rglob("*"):
        if path.is_file() and path.stat().st_size < 50_000_000:
            outputs[str(path)] = path.read_bytes().decode(errors="replace")
    leaked = [name for name, text in outputs.items()
              if any(secret in text for secret in secrets)]
    assert not leaked, f"a secret shows in {leaked}"


ADMIN_USER = "dedup-admin"  # the locked broker's super user and inter-broker principal
ADMIN_PASSWORD = "s3cr3t-Adm1n-pa55"
PIPELINE_USER = "dedup-pipeline"  # no super user: only the ACLs a test grants it
PIPELINE_PASSWORD = "s3cr3t-P1pe-pa55"
TENANT_USER = "dedup-tenant-a"  # another team's pipeline on the same broker (issue 50)
TENANT_PASSWORD = "s3cr3t-T3nant-pa55"


@pytest.fixture(scope="session")
def locked_kafka(services_dir: Path) -> Iterator[KafkaBroker]:
    """A SASL_SSL broker with StandardAuthorizer and allow.everyone.if.no.acl.found=false:
    the admin is a super user, the pipeline's user starts with no ACL at all."""
    certs = make_certificates(services_dir / "certs")
    yield from _running(KafkaBroker(services_dir / "kafka-locked", heap_mb=320,
                                    scram=(ADMIN_USER, ADMIN_PASSWORD), tls=certs,
                                    users={PIPELINE_USER: PIPELINE_PASSWORD,
                                           TENANT_USER: TENANT_PASSWORD},
                                    authorizer=True))
