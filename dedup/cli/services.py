"""``dedup services up|down|status``: local Redis and Kafka that outlive the command.

Their addresses and pids go to a JSON state file under
``<cache>/services/state.json`` (:func:`dedup.local.paths.cache_dir`), which
``dedup run``, ``dedup verify`` and ``dedup txn`` read when no address is given.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any

from dedup.exceptions import ServiceError
from dedup.local.paths import cache_dir
from dedup.local.services import KafkaBroker, RedisServer, process_alive

STOP_TIMEOUT = 20.0


def services_dir() -> Path:
    return cache_dir() / "services"


def state_path() -> Path:
    return services_dir() / "state.json"


def read_state() -> dict[str, Any]:
    """The last written state, or ``{}`` when services were never started."""
    try:
        data = json.loads(state_path().read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(state: dict[str, Any]) -> None:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)


def _port_free(port: int | None) -> bool:
    if not port:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def service_addresses() -> tuple[str | None, str | None]:
    """``(redis_url, kafka_bootstrap)`` of running services from the state file."""
    state = read_state()
    redis = state.get("redis", {})
    kafka = state.get("kafka", {})
    return (redis.get("url") if process_alive(redis.get("pid")) else None,
            kafka.get("bootstrap") if process_alive(kafka.get("pid")) else None)


def services_up(say: Any = print) -> dict[str, Any]:
    """Start Redis (AOF, fsync always) and Kafka unless they run already. Safe to repeat."""
    state = read_state()
    base = services_dir()
    redis_state = state.get("redis", {})
    if process_alive(redis_state.get("pid")):
        say(f"redis already running: {redis_state['url']} (pid {redis_state['pid']})")
    else:
        port = redis_state.get("port") if _port_free(redis_state.get("port")) else None
        redis = RedisServer(base / "redis", port=port, appendonly=True, appendfsync="always",
                            die_with_parent=False).start()
        redis_state = {"url": redis.url, "port": redis.port, "pid": redis.pid,
                       "data_dir": str(redis.data_dir)}
        say(f"redis started: {redis.url} (pid {redis.pid}, AOF always)")
    state["redis"] = redis_state
    _write_state(state)
    kafka_state = state.get("kafka", {})
    if process_alive(kafka_state.get("pid")):
        say(f"kafka already running: {kafka_state['bootstrap']} (pid {kafka_state['pid']})")
    else:
        ports = (kafka_state.get("port"), kafka_state.get("controller_port"))
        if not all(_port_free(p) for p in ports):
            # The KRaft metadata names the controller's address: new ports, new storage.
            shutil.rmtree(base / "kafka", ignore_errors=True)
            ports = (None, None)
        say("starting kafka (about 10-30 s)...")
        broker = KafkaBroker(base / "kafka", port=ports[0], controller_port=ports[1],
                             die_with_parent=False).start()
        kafka_state = {"bootstrap": broker.bootstrap_servers, "port": broker.port,
                       "controller_port": broker.controller_port, "pid": broker.pid,
                       "data_dir": str(broker.data_dir)}
        say(f"kafka started: {broker.bootstrap_servers} (pid {broker.pid})")
    state["kafka"] = kafka_state
    state["updated_at"] = time.time()
    _write_state(state)
    say(f"state file: {state_path()}")
    return state


def _stop_pid(pid: int, timeout: float = STOP_TIMEOUT) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if process_alive(pid):
        raise ServiceError(f"process {pid} survived SIGKILL; stop it by hand")


def services_down(say: Any = print) -> None:
    """Stop the services of the state file (SIGTERM, then SIGKILL). Safe to repeat."""
    state = read_state()
    if not state:
        say("no services were started (no state file)")
        return
    # Kafka first: it may still write transaction markers while Redis is up.
    for name in ("kafka", "redis"):
        pid = state.get(name, {}).get("pid")
        if process_alive(pid):
            _stop_pid(int(pid))
            say(f"{name} stopped (pid {pid})")
        else:
            say(f"{name} not running")
        state.get(name, {}).pop("pid", None)
    _write_state(state)


def services_status() -> list[tuple[str, str, int | None, bool]]:
    """``(name, address, pid, running)`` per service."""
    state = read_state()
    rows = []
    for name, key in (("redis", "url"), ("kafka", "bootstrap")):
        entry = state.get(name, {})
        rows.append((name, str(entry.get(key, "-")), entry.get("pid"),
                     process_alive(entry.get("pid"))))
    return rows
