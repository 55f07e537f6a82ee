"""Local Redis and Kafka that outlive the command (``dedup services up|down|status``).

Their addresses and pids go to a JSON state file under
``<cache>/services/state.json`` (:func:`dedup.local.paths.cache_dir`), which
``dedup run``, ``dedup verify`` and ``dedup txn`` read when no address is given.
Beside each pid goes the identity of the process started under it (boot id and
start time, :func:`~dedup.local.services.process_identity`): after a reboot or a
pid wrap-around the pid may name an unrelated process, which is then neither
taken for the service nor signalled (:func:`~dedup.local.services.recorded_process`).
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
from dedup.local.paths import cache_dir, kafka_broker_jars
from dedup.local.services import (
    SERVICE_COMMANDS,
    KafkaBroker,
    RedisServer,
    java_binary,
    process_identity,
    recorded_process,
    redis_server_binary,
)

STOP_TIMEOUT = 20.0
# A killed server's connections linger on its port for about a minute (FIN-WAIT-2,
# then TIME-WAIT). port_bindable() binds through those as the servers do, so the
# wait is for a port some other process holds for a while, then it refuses.
PORT_WAIT_SECONDS = 90.0
PORT_PROGRESS_EVERY = 15.0


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


def port_bindable(port: int) -> bool:
    """Whether a server could listen on ``127.0.0.1:port`` now.

    Binds with SO_REUSEADDR, as redis-server and the JVM's listeners do: the
    connections a killed server leaves behind in FIN-WAIT-2 / TIME-WAIT for
    about a minute do not stop them, a live listener on the port does.

    Parameters
    ----------
    port:
        TCP port on the loopback address.

    Returns
    -------
    bool
        True when the bind succeeds (the socket is closed again at once).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _await_ports(name: str, ports: dict[str, int], say: Any, timeout: float) -> None:
    """Wait until every recorded port of ``name`` is bindable, or refuse."""
    deadline = time.monotonic() + timeout
    next_progress = time.monotonic()
    while True:
        taken = [(label, port) for label, port in ports.items() if not port_bindable(port)]
        now = time.monotonic()
        if not taken:
            return
        label, port = taken[0]
        if now >= deadline:
            raise ServiceError(
                f"{name} cannot restart: its recorded {label} {port} on 127.0.0.1 is "
                f"still taken by another process after {timeout:.0f} s; stop that process "
                f"(ss -ltnp names it) and run `dedup services up` again, or run "
                f"`dedup services down --purge` to delete the redis and kafka data and "
                f"start afresh on new ports"
            )
        if now >= next_progress:
            say(f"waiting up to {deadline - now:.0f} s for {name}'s {label} {port} "
                f"to be free (taken, or lingering after a crash)...")
            next_progress = now + PORT_PROGRESS_EVERY
        time.sleep(min(0.5, deadline - now))


def _recorded_ports(name: str, entry: dict[str, Any], labels: dict[str, str]) -> dict[str, int]:
    """``{label: port}`` that ``services up`` recorded for ``name``; ``{}`` if it never did."""
    if not entry:
        return {}
    ports: dict[str, int] = {}
    for key, label in labels.items():
        port = entry.get(key)
        if not isinstance(port, int) or port <= 0:
            raise ServiceError(
                f"{state_path()} records {name} without a valid {label}; its data is bound to "
                f"its ports, so run `dedup services down --purge` to delete it and start afresh"
            )
        ports[label] = port
    return ports


def _running(name: str, entry: Any) -> bool:
    """Whether the process recorded for service ``name`` runs and is the one ``up`` started."""
    if not isinstance(entry, dict):
        return False
    return recorded_process(entry.get("pid"), entry.get("identity"),
                            SERVICE_COMMANDS[name]) == "running"


def _forget_reused_pids(state: dict[str, Any], say: Any) -> set[str]:
    """Drop from ``state`` (and its file) each pid that now names another process.

    After a reboot (or a pid wrap-around) a recorded pid may belong to an
    unrelated process: ``down`` would signal it, ``up`` and ``status`` would take
    it for the service. It is reported, left alone and forgotten; the ports and
    data folder of the record are kept. A record written before identities were
    recorded is checked against the service's command line instead. Returns the
    names of the services so reported.
    """
    reused = set()
    for name, command in SERVICE_COMMANDS.items():
        entry = state.get(name)
        if not isinstance(entry, dict) or "pid" not in entry:
            continue
        if recorded_process(entry["pid"], entry.get("identity"), command) == "reused":
            say(f"{name} already gone (pid reused by another process): pid {entry['pid']} "
                f"left alone, removed from {state_path()}")
            del entry["pid"]
            entry.pop("identity", None)
            reused.add(name)
    if reused:
        _write_state(state)
    return reused


def _with_pid(entry: dict[str, Any], pid: int | None) -> dict[str, Any]:
    """``entry`` recording ``pid`` and, when ``/proc`` tells it, that process's identity."""
    identity = process_identity(pid)
    # Without an identity (the process is already gone, or /proc is unreadable)
    # the record is checked against the service's command line, as an old one.
    return {**entry, "pid": pid, **({"identity": identity} if identity else {})}


def _start(service: Any) -> Any:
    """``service.start()``; a service that fails to get ready is stopped, not left behind."""
    try:
        return service.start()
    except BaseException:
        # Started to outlive this command, nobody else would ever stop it.
        service.stop()
        raise


def service_addresses() -> tuple[str | None, str | None]:
    """``(redis_url, kafka_bootstrap)`` of running services from the state file."""
    state = read_state()
    redis = state.get("redis", {})
    kafka = state.get("kafka", {})
    return (redis.get("url") if _running("redis", redis) else None,
            kafka.get("bootstrap") if _running("kafka", kafka) else None)


def services_up(say: Any = print) -> dict[str, Any]:
    """Start Redis (AOF, fsync always) and Kafka unless they run already. Safe to repeat.

    A service recorded in the state file comes back on its recorded ports with
    its data: after a crash those ports may linger for about a minute, so it
    waits up to :data:`PORT_WAIT_SECONDS` for them. Never picks new ports for a
    recorded service and never deletes its data (only ``services_down(purge=True)``
    does). A recorded pid that now names another process is reported, left alone
    and forgotten (the service is started again); each pid started is recorded
    with its process's identity.

    Parameters
    ----------
    say:
        Receives one progress line at a time.

    Returns
    -------
    dict
        The state written to :func:`state_path`.

    Raises
    ------
    ServiceError
        A recorded port is still taken by another process after the wait, or a
        service did not start (it is stopped again).
    """
    state = read_state()
    _forget_reused_pids(state, say)
    base = services_dir()
    # What each service to start needs, checked before either starts: a machine
    # without set-up is refused with nothing left running.
    if not _running("redis", state.get("redis")):
        redis_server_binary()
    if not _running("kafka", state.get("kafka")):
        java_binary()
        kafka_broker_jars()
    redis_state = state.get("redis", {})
    if _running("redis", redis_state):
        say(f"redis already running: {redis_state['url']} (pid {redis_state['pid']})")
        if "identity" not in redis_state:  # recorded before identities were
            redis_state = _with_pid(redis_state, redis_state["pid"])
    else:
        ports = _recorded_ports("redis", redis_state, {"port": "port"})
        _await_ports("redis", ports, say, PORT_WAIT_SECONDS)
        redis = RedisServer(base / "redis", port=ports.get("port"), appendonly=True,
                            appendfsync="always", die_with_parent=False)
        # Ports and folder are recorded before the start: a start that fails
        # half way leaves data that belongs to these ports, never unrecorded.
        state["redis"] = {"url": redis.url, "port": redis.port, "data_dir": str(redis.data_dir)}
        _write_state(state)
        _start(redis)
        redis_state = _with_pid(state["redis"], redis.pid)
        say(f"redis started: {redis.url} (pid {redis.pid}, AOF always)")
    state["redis"] = redis_state
    _write_state(state)
    kafka_state = state.get("kafka", {})
    if _running("kafka", kafka_state):
        say(f"kafka already running: {kafka_state['bootstrap']} (pid {kafka_state['pid']})")
        if "identity" not in kafka_state:
            kafka_state = _with_pid(kafka_state, kafka_state["pid"])
    else:
        ports = _recorded_ports("kafka", kafka_state, {"port": "listener port",
                                                       "controller_port": "controller port"})
        if not ports and (base / "kafka" / "logs" / "meta.properties").exists():
            # Not ours to delete, and its KRaft metadata belongs to ports we do not know.
            raise ServiceError(
                f"{base / 'kafka'} holds a Kafka broker's data but {state_path()} records no "
                f"ports for it; move or delete that folder to start afresh"
            )
        _await_ports("kafka", ports, say, PORT_WAIT_SECONDS)
        broker = KafkaBroker(base / "kafka", port=ports.get("listener port"),
                             controller_port=ports.get("controller port"), die_with_parent=False)
        state["kafka"] = {"bootstrap": broker.bootstrap_servers, "port": broker.port,
                          "controller_port": broker.controller_port,
                          "data_dir": str(broker.data_dir)}
        _write_state(state)
        say("starting kafka (about 10-30 s)...")
        _start(broker)
        kafka_state = _with_pid(state["kafka"], broker.pid)
        say(f"kafka started: {broker.bootstrap_servers} (pid {broker.pid})")
    state["kafka"] = kafka_state
    state["updated_at"] = time.time()
    _write_state(state)
    say(f"state file: {state_path()}")
    return state


def _stop_pid(name: str, entry: dict[str, Any], timeout: float | None = None) -> None:
    """Stop the process recorded for ``name``: SIGTERM, then SIGKILL after ``timeout``.

    Each signal goes out only while the pid still names the recorded process:
    one that exited during the wait may have left its pid to another process.
    ``timeout`` defaults to :data:`STOP_TIMEOUT`.
    """
    pid = int(entry["pid"])

    def running() -> bool:
        return _running(name, entry)

    if not running():
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + (STOP_TIMEOUT if timeout is None else timeout)
    while time.monotonic() < deadline:
        if not running():
            return
        time.sleep(0.2)
    if not running():
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    if running():
        raise ServiceError(f"process {pid} survived SIGKILL; stop it by hand")


def services_down(say: Any = print, purge: bool = False) -> None:
    """Stop the services of the state file (SIGTERM, then SIGKILL). Safe to repeat.

    Parameters
    ----------
    say:
        Receives one progress line at a time.
    purge:
        Also delete the data folders the state file records (every topic, key
        and offset in them) and forget their ports, so the next ``up`` starts
        afresh on new ports. Without it, data and ports are kept for the next
        ``up``.

    A recorded pid that now names another process is reported, left alone and
    forgotten.

    Raises
    ------
    ServiceError
        A process survived SIGKILL, or ``purge`` was asked for a recorded data
        folder outside :func:`services_dir` (nothing is deleted then).
    """
    state = read_state()
    if not state:
        say("no services were started (no state file)")
        return
    reused = _forget_reused_pids(state, say)
    # Kafka first: it may still write transaction markers while Redis is up.
    for name in ("kafka", "redis"):
        entry = state.get(name, {})
        if _running(name, entry):
            _stop_pid(name, entry)
            say(f"{name} stopped (pid {entry['pid']})")
        elif name not in reused:
            say(f"{name} not running")
        entry.pop("pid", None)
        entry.pop("identity", None)
    _write_state(state)
    folders = {name: state[name].get("data_dir") for name in ("kafka", "redis")
               if isinstance(state.get(name), dict)}
    if not purge:
        for name, folder in folders.items():
            if folder:
                say(f"{name} data kept in {folder} (`dedup services down --purge` deletes it)")
        return
    base = services_dir().resolve()
    doomed = []
    # Check every folder before deleting any: all or nothing.
    for name, folder in folders.items():
        if not folder:
            continue
        path = Path(folder).resolve()
        if base not in path.parents:
            raise ServiceError(
                f"refusing to purge {name}: its recorded data folder {folder} is not inside "
                f"{base}, so `dedup services up` did not create it; delete it by hand if it is "
                f"yours"
            )
        doomed.append((name, path))
    for name, path in doomed:
        if path.exists():
            shutil.rmtree(path)
        say(f"{name} data deleted: {path}")
    for name in folders:
        del state[name]
    _write_state(state)


def services_status(say: Any = print) -> list[tuple[str, str, int | None, bool]]:
    """``(name, address, pid, running)`` per service.

    A recorded pid that now names another process is reported to ``say``, left
    alone and forgotten (its row has no pid and is not running).
    """
    state = read_state()
    _forget_reused_pids(state, say)
    rows = []
    for name, key in (("redis", "url"), ("kafka", "bootstrap")):
        entry = state.get(name, {})
        rows.append((name, str(entry.get(key, "-")), entry.get("pid"), _running(name, entry)))
    return rows
