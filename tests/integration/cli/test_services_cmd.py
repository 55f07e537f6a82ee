"""``dedup services up|status|down``: services outlive the command and are stopped by pid."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Producer

from dedup.exceptions import ServiceError
from dedup.local import lasting as services
from dedup.local.services import process_alive
from sinks.kafka_io import consume_all, ensure_topic
from tests.integration.cli.jars import jar_env

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def _dedup(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    dedup = Path(sys.executable).with_name("dedup")
    return subprocess.run([str(dedup), *args], capture_output=True, text=True, timeout=240,
                          env=env, check=False)


@pytest.fixture
def services_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Environment of a private ``DEDUP_CACHE_DIR``, for the CLI and in-process calls.

    The service pids of the state file are SIGKILLed at teardown: the services
    are started to outlive their command, so nothing else would stop them.
    """
    env = {"DEDUP_CACHE_DIR": str(tmp_path / "cache"), **jar_env()}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        yield {**os.environ, **env}
    finally:
        for pid in _recorded_pids():
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)


def _state() -> dict[str, Any]:
    return json.loads(services.state_path().read_text())


def _recorded_pids() -> set[int]:
    with contextlib.suppress(FileNotFoundError, ValueError):
        return {int(entry["pid"]) for entry in _state().values()
                if isinstance(entry, dict) and entry.get("pid")}
    return set()


def _kill_9(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(process_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"{pids} still alive 30 s after SIGKILL"
        time.sleep(0.1)


def _bindable_without_reuse(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _listening(port: int) -> Iterator[socket.socket]:
    """Another live process's server on ``port`` (this test process's, not the service's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR: the killed service's connections may still linger on the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # The services' ports come from the kernel's ephemeral range, so a client's
        # outgoing connection may hold the port for a moment after the service died
        # (CI, 2026-11-27: EADDRINUSE here): try again for a while.
        deadline = time.monotonic() + 20
        while True:
            try:
                sock.bind(("127.0.0.1", port))
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        sock.listen()
        yield sock


def _write_survivors(state: dict[str, Any]) -> tuple[redis.Redis, Producer]:
    """A Redis key and a Kafka record that a restart must keep; the clients stay connected."""
    client = redis.Redis.from_url(state["redis"]["url"])
    client.set("survivor", b"kept")
    bootstrap = state["kafka"]["bootstrap"]
    ensure_topic(bootstrap, "survivor")
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    producer.produce("survivor", value=b"kept")
    assert producer.flush(30) == 0
    return client, producer


def _assert_survivors(state: dict[str, Any]) -> None:
    assert redis.Redis.from_url(state["redis"]["url"]).get("survivor") == b"kept"
    records = consume_all(state["kafka"]["bootstrap"], "survivor")
    assert [r.value for r in records] == [b"kept"]


def _ports(state: dict[str, Any]) -> tuple[int, int, int]:
    return (state["redis"]["port"], state["kafka"]["port"], state["kafka"]["controller_port"])


def test_up_status_verify_down(services_env: dict[str, str]) -> None:
    env = services_env
    up = _dedup(["services", "up"], env)
    assert up.returncode == 0, up.stdout + up.stderr
    state = _state()
    pids = [state["redis"]["pid"], state["kafka"]["pid"]]
    # They outlive the command that started them.
    assert all(process_alive(pid) for pid in pids)
    status = _dedup(["services", "status"], env)
    assert status.returncode == 0 and status.stdout.count("running") == 2
    again = _dedup(["services", "up"], env)
    assert "already running" in again.stdout
    # Other commands find Kafka through the state file.
    audit = _dedup(["verify", "--topic", "nothing-here"], env)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "observed 0" in audit.stdout
    down = _dedup(["services", "down"], env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(process_alive(pid) for pid in pids)
    assert _dedup(["services", "status"], env).returncode == 3
    # down keeps the data and the ports, so the next up comes back with both.
    data_dirs = [Path(state[name]["data_dir"]) for name in ("redis", "kafka")]
    assert (data_dirs[1] / "logs" / "meta.properties").is_file()
    assert _ports(_state()) == _ports(state)
    purge = _dedup(["services", "down", "--purge"], env)
    assert purge.returncode == 0, purge.stdout + purge.stderr
    assert not any(path.exists() for path in data_dirs)
    assert not {"redis", "kafka"} & set(_state())


def test_up_after_kill_9_restarts_on_the_recorded_ports_and_keeps_the_data(
    services_env: dict[str, str],
) -> None:
    up = _dedup(["services", "up"], services_env)
    assert up.returncode == 0, up.stdout + up.stderr
    before = _state()
    client, producer = _write_survivors(before)
    # kill -9 while clients are connected: the servers' ends of those
    # connections linger on the listening ports (FIN-WAIT-2, then TIME-WAIT).
    _kill_9([before["redis"]["pid"], before["kafka"]["pid"]])
    lingering = [p for p in _ports(before)[:2] if _bindable_without_reuse(p)]
    assert not lingering, f"precondition: ports {lingering} did not linger after the kill"
    client.close()
    del producer

    again = _dedup(["services", "up"], services_env)
    assert again.returncode == 0, again.stdout + again.stderr
    after = _state()
    assert _ports(after) == _ports(before), again.stdout
    assert {after["redis"]["pid"], after["kafka"]["pid"]}.isdisjoint(
        {before["redis"]["pid"], before["kafka"]["pid"]})
    assert process_alive(after["redis"]["pid"]) and process_alive(after["kafka"]["pid"])
    _assert_survivors(after)


def test_up_refuses_a_recorded_port_held_by_another_process_and_keeps_the_data(
    services_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    up = _dedup(["services", "up"], services_env)
    assert up.returncode == 0, up.stdout + up.stderr
    before = _state()
    client, producer = _write_survivors(before)
    client.close()
    del producer
    _kill_9([before["redis"]["pid"], before["kafka"]["pid"]])
    redis_port, kafka_port, controller_port = _ports(before)
    kafka_data = Path(before["kafka"]["data_dir"])
    # Wait 2 s, not the default minute and a half, for a port that stays taken.
    monkeypatch.setattr(services, "PORT_WAIT_SECONDS", 2.0)
    said: list[str] = []

    with _listening(redis_port), pytest.raises(ServiceError) as refused:
        services.services_up(said.append)
    message = str(refused.value)
    assert "\n" not in message
    assert "redis" in message and str(redis_port) in message
    assert "dedup services down --purge" in message
    assert any("waiting" in line and str(redis_port) in line for line in said), said
    assert _ports(_state()) == _ports(before)

    with _listening(controller_port), pytest.raises(ServiceError) as refused:
        services.services_up(said.append)
    message = str(refused.value)
    assert "kafka" in message and str(controller_port) in message
    # Redis came back on its port; Kafka's data (KRaft metadata, the topic) is untouched.
    assert _ports(_state()) == _ports(before)
    assert process_alive(_state()["redis"]["pid"])
    assert (kafka_data / "logs" / "meta.properties").is_file()
    assert (kafka_data / "logs" / "survivor-0").is_dir()

    services.services_up(said.append)
    after = _state()
    assert _ports(after) == (redis_port, kafka_port, controller_port)
    _assert_survivors(after)


def test_up_without_the_broker_jars_starts_nothing(services_env: dict[str, str],
                                                   tmp_path: Path) -> None:
    # A machine without set-up: refused before any service starts, so no Redis is
    # left running (until 2026-11-26 Redis started first and stayed up after the error).
    env = {**services_env, "DEDUP_KAFKA_JARS": str(tmp_path / "no-jars")}
    result = _dedup(["services", "up"], env)
    assert result.returncode != 0, result.stdout
    assert "Kafka broker jars not found" in result.stderr, result.stderr
    assert "redis started" not in result.stdout, result.stdout
    assert not [pid for pid in _recorded_pids() if process_alive(pid)], _state()
