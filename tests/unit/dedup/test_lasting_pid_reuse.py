"""``dedup.local.lasting`` trusts and signals a recorded pid only while it names its service.

The same check as ``dedup services`` (tests/unit/cli/test_services_pid_reuse.py),
called without the CLI: ``dedup run``, ``verify`` and ``txn`` read the
addresses through :func:`~dedup.local.lasting.service_addresses`, and the stop
of a service that ignores SIGTERM must not SIGKILL a pid that was reused during
the wait.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dedup.local import lasting
from dedup.local import services as local_services

REUSED = "already gone (pid reused by another process)"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DEDUP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Children of the test; killed and reaped whatever the test did."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for child in started:
            if child.poll() is None:
                child.kill()
            child.wait(10)


def _sleeper(children: list[subprocess.Popen[bytes]], ignore_term: bool = False) -> int:
    """An unrelated ``sleep 60`` (SIGTERM ignored if asked); returns its pid once it runs sleep."""
    trap = 'trap "" TERM; ' if ignore_term else ""
    child = subprocess.Popen(["sh", "-c", f"{trap}exec sleep 60"], stdin=subprocess.DEVNULL)
    children.append(child)
    cmdline = Path(f"/proc/{child.pid}/cmdline")
    deadline = time.monotonic() + 10
    while cmdline.read_bytes().split(b"\0")[:2] != [b"sleep", b"60"]:
        assert time.monotonic() < deadline, "the child did not exec sleep within 10 s"
        time.sleep(0.01)
    return child.pid


def _identity(pid: int, start_ticks_offset: int = 0) -> dict[str, Any]:
    start_ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    return {"boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
            "start_ticks": start_ticks + start_ticks_offset}


def _record(redis: dict[str, Any], kafka: dict[str, Any]) -> None:
    base = lasting.services_dir()
    state = {"redis": {"url": "redis://127.0.0.1:6390/0", "port": 6390,
                       "data_dir": str(base / "redis"), **redis},
             "kafka": {"bootstrap": "127.0.0.1:9092", "port": 9092, "controller_port": 9093,
                       "data_dir": str(base / "kafka"), **kafka}}
    lasting.state_path().parent.mkdir(parents=True, exist_ok=True)
    lasting.state_path().write_text(json.dumps(state))


def _alive(pid: int, children: list[subprocess.Popen[bytes]]) -> bool:
    (child,) = [c for c in children if c.pid == pid]
    return child.poll() is None


def test_service_addresses_does_not_take_a_reused_pid_for_the_service(
    cache: Path, children: list[subprocess.Popen[bytes]],
) -> None:
    # redis: an old record (pid only) whose pid now runs sleep, not redis-server;
    # kafka: a record whose start time is not the process's.
    redis, kafka = _sleeper(children), _sleeper(children)
    _record(redis={"pid": redis}, kafka={"pid": kafka, "identity": _identity(kafka, -1)})
    assert lasting.service_addresses() == (None, None)
    # The very same processes, recorded with their identity, are the services.
    _record(redis={"pid": redis, "identity": _identity(redis)},
            kafka={"pid": kafka, "identity": _identity(kafka)})
    assert lasting.service_addresses() == ("redis://127.0.0.1:6390/0", "127.0.0.1:9092")


@pytest.mark.parametrize("action", ["down", "status"])
def test_down_and_status_leave_a_reused_pid_alone_and_forget_it(
    cache: Path, children: list[subprocess.Popen[bytes]], action: str,
) -> None:
    redis, kafka = _sleeper(children), _sleeper(children)
    _record(redis={"pid": redis}, kafka={"pid": kafka, "identity": _identity(kafka, -1)})
    said: list[str] = []
    if action == "down":
        lasting.services_down(said.append)
    else:
        rows = lasting.services_status(said.append)
        assert [(name, pid, running) for name, _, pid, running in rows] == [
            ("redis", None, False), ("kafka", None, False)]
    assert _alive(redis, children) and _alive(kafka, children), f"{action} signalled a reused pid"
    assert any(f"redis {REUSED}" in line for line in said), said
    assert any(f"kafka {REUSED}" in line for line in said), said
    state = lasting.read_state()
    for name in ("redis", "kafka"):
        assert "pid" not in state[name] and "identity" not in state[name], state
        assert state[name]["port"]  # the data's ports are kept


def test_stop_does_not_sigkill_a_pid_reused_while_waiting_for_sigterm(
    cache: Path, children: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The recorded kafka ignores SIGTERM; while down waits for it to exit, the
    # pid comes to name another process (emulated: the identity check answers
    # "reused" from the SIGTERM on). The SIGKILL after the wait must not go out.
    kafka = _sleeper(children, ignore_term=True)
    _record(redis={}, kafka={"pid": kafka, "identity": _identity(kafka)})
    sent: list[tuple[int, int]] = []
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:
        if pid == kafka and sig:  # not process_alive's signal 0
            sent.append((pid, sig))
        real_kill(pid, sig)

    def recorded_process(pid: Any, identity: Any, command: str) -> str:
        if (kafka, signal.SIGTERM) in sent:
            return "reused"
        return local_services.recorded_process(pid, identity, command)

    monkeypatch.setattr(lasting.os, "kill", kill)
    monkeypatch.setattr(lasting, "recorded_process", recorded_process, raising=False)
    monkeypatch.setattr(lasting, "STOP_TIMEOUT", 0.5)
    lasting.services_down(lambda line: None)
    assert sent == [(kafka, signal.SIGTERM)]
    assert _alive(kafka, children)
