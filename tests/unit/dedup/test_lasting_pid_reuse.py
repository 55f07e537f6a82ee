"""``dedup.local.lasting`` trusts and signals a recorded pid only while it names its service.

The same check as ``dedup services`` (tests/unit/cli/test_services_pid_reuse.py),
called without the CLI: ``dedup run``, ``verify`` and ``txn`` read the
addresses through :func:`~dedup.local.lasting.service_addresses`, and the stop
of a service that ignores SIGTERM must not SIGKILL a pid that was reused during
the wait.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dedup.local import lasting
from dedup.local import services as local_services
from tests.unit.services_state import REUSED, alive, identity, record, sleeper


def test_service_addresses_does_not_take_a_reused_pid_for_the_service(
    service_cache: Path, children: list[subprocess.Popen[bytes]],
) -> None:
    # redis: an old record (pid only) whose pid now runs sleep, not redis-server;
    # kafka: a record whose start time is not the process's.
    redis, kafka = sleeper(children), sleeper(children)
    record(redis={"pid": redis}, kafka={"pid": kafka, "identity": identity(kafka, -1)})
    assert lasting.service_addresses() == (None, None)
    # The very same processes, recorded with their identity, are the services.
    record(redis={"pid": redis, "identity": identity(redis)},
            kafka={"pid": kafka, "identity": identity(kafka)})
    assert lasting.service_addresses() == ("redis://127.0.0.1:6390/0", "127.0.0.1:9092")


@pytest.mark.parametrize("action", ["down", "status"])
def test_down_and_status_leave_a_reused_pid_alone_and_forget_it(
    service_cache: Path, children: list[subprocess.Popen[bytes]], action: str,
) -> None:
    redis, kafka = sleeper(children), sleeper(children)
    record(redis={"pid": redis}, kafka={"pid": kafka, "identity": identity(kafka, -1)})
    said: list[str] = []
    if action == "down":
        lasting.services_down(said.append)
    else:
        rows = lasting.services_status(said.append)
        assert [(name, pid, running) for name, _, pid, running in rows] == [
            ("redis", None, False), ("kafka", None, False)]
    assert alive(redis, children) and alive(kafka, children), f"{action} signalled a reused pid"
    assert any(f"redis {REUSED}" in line for line in said), said
    assert any(f"kafka {REUSED}" in line for line in said), said
    state = lasting.read_state()
    for name in ("redis", "kafka"):
        assert "pid" not in state[name] and "identity" not in state[name], state
        assert state[name]["port"]  # the data's ports are kept


def test_stop_does_not_sigkill_a_pid_reused_while_waiting_for_sigterm(
    service_cache: Path, children: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The recorded kafka ignores SIGTERM; while down waits for it to exit, the
    # pid comes to name another process (emulated: the identity check answers
    # "reused" from the SIGTERM on). The SIGKILL after the wait must not go out.
    kafka = sleeper(children, ignore_term=True)
    record(redis={}, kafka={"pid": kafka, "identity": identity(kafka)})
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
    assert alive(kafka, children)
