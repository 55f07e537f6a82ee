"""``dedup services`` signals a recorded pid only while it still names the process it started.

After a reboot (or a long enough uptime) the pid that ``dedup services up``
recorded for Redis or Kafka may belong to some unrelated process. ``down`` must
leave that process alone, say so and drop the stale pid from the state file.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dedup.cli.main import main
from dedup.local import lasting as services
from dedup.local import services as local_services

REUSED = "already gone (pid reused by another process)"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DEDUP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Long-lived children of the test; killed and reaped whatever the test did."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for child in started:
            if child.poll() is None:
                child.kill()
            child.wait(10)


def _sleeper(children: list[subprocess.Popen[bytes]], argv0: str = "sleep") -> int:
    """A ``sleep 60`` whose command line starts with ``argv0``; returns its pid."""
    child = subprocess.Popen([argv0, "60"], executable="sleep", stdin=subprocess.DEVNULL)
    children.append(child)
    cmdline = Path(f"/proc/{child.pid}/cmdline")
    deadline = time.monotonic() + 10
    # Until exec, /proc shows the forked Python: wait for the sleep itself.
    while cmdline.read_bytes().split(b"\0")[:2] != [argv0.encode(), b"60"]:
        assert time.monotonic() < deadline, "the child did not exec sleep within 10 s"
        time.sleep(0.01)
    return child.pid


def _start_ticks(pid: int) -> int:
    """Field 22 of ``/proc/<pid>/stat``: start time in clock ticks after boot."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _record(redis: dict[str, Any] | None = None, kafka: dict[str, Any] | None = None) -> None:
    base = services.services_dir()
    state = {"redis": {"url": "redis://127.0.0.1:6390/0", "port": 6390,
                       "data_dir": str(base / "redis"), **(redis or {})},
             "kafka": {"bootstrap": "127.0.0.1:9092", "port": 9092, "controller_port": 9093,
                       "data_dir": str(base / "kafka"), **(kafka or {})}}
    services.state_path().parent.mkdir(parents=True, exist_ok=True)
    services.state_path().write_text(json.dumps(state))


def _alive(child_pid: int, children: list[subprocess.Popen[bytes]]) -> bool:
    (child,) = [c for c in children if c.pid == child_pid]
    return child.poll() is None


def test_down_leaves_alone_a_process_that_reused_a_pid_of_an_old_record(
    cache: Path, children: list[subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str],
) -> None:
    # A record as an earlier `services up` wrote it (pid only), left over by a
    # reboot: the pid now names an unrelated `sleep 60`, nothing like redis-server.
    pid = _sleeper(children)
    _record(redis={"pid": pid})
    assert main(["services", "down"]) == 0
    out = capsys.readouterr().out
    assert _alive(pid, children), "down signalled an unrelated process"
    assert f"redis {REUSED}" in out, out
    assert "pid" not in services.read_state()["redis"]
    assert services.read_state()["redis"]["port"] == 6390  # the data's ports are kept


@pytest.mark.parametrize("mismatch", ["start time", "boot id"])
def test_down_leaves_alone_a_process_whose_identity_differs_from_the_record(
    cache: Path, children: list[subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str],
    mismatch: str,
) -> None:
    # Named like the service, so only the recorded start time / boot id tell it apart.
    pid = _sleeper(children, argv0="redis-server")
    identity = {"boot_id": _boot_id(), "start_ticks": _start_ticks(pid)}
    if mismatch == "start time":
        identity["start_ticks"] = _start_ticks(pid) - 1
    else:
        identity["boot_id"] = "00000000-0000-0000-0000-000000000000"
    _record(redis={"pid": pid, "identity": identity})
    assert main(["services", "down"]) == 0
    out = capsys.readouterr().out
    assert _alive(pid, children), f"down signalled a process of another {mismatch}"
    assert f"redis {REUSED}" in out, out
    assert "pid" not in services.read_state()["redis"]
    assert "identity" not in services.read_state()["redis"]


def test_down_stops_the_processes_the_record_names(
    cache: Path, children: list[subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str],
) -> None:
    # kafka: a current record (boot id and start time match); redis: an old record
    # (pid only) whose command line is the service's.
    kafka = _sleeper(children, argv0="kafka.Kafka")
    redis = _sleeper(children, argv0="redis-server")
    _record(redis={"pid": redis},
            kafka={"pid": kafka,
                   "identity": {"boot_id": _boot_id(), "start_ticks": _start_ticks(kafka)}})
    assert main(["services", "down"]) == 0
    out = capsys.readouterr().out
    for pid in (kafka, redis):
        (child,) = [c for c in children if c.pid == pid]
        assert child.wait(30) == -signal.SIGTERM
    assert f"kafka stopped (pid {kafka})" in out and f"redis stopped (pid {redis})" in out, out
    assert REUSED not in out
    state = services.read_state()
    assert "pid" not in state["kafka"] and "identity" not in state["kafka"]


def test_status_calls_a_reused_pid_stopped(
    cache: Path, children: list[subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str],
) -> None:
    pid = _sleeper(children)
    _record(redis={"pid": pid}, kafka={"pid": pid})
    assert main(["services", "status"]) == 3
    out = capsys.readouterr().out
    assert "running" not in out, out
    assert _alive(pid, children)


def test_up_records_who_it_started_and_restarts_over_a_reused_pid(
    cache: Path, children: list[subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reused pid must not pass for a running redis (up would then start none
    # and take the stranger for it); what up starts gets its identity recorded.
    # The servers are stand-ins: a `redis-server 60` sleep is what up "starts".
    stranger = _sleeper(children)
    kafka = _sleeper(children, argv0="kafka.Kafka")
    _record(redis={"pid": stranger},
            kafka={"pid": kafka,
                   "identity": {"boot_id": _boot_id(), "start_ticks": _start_ticks(kafka)}})
    started: list[int] = []

    class FakeRedis:
        def __init__(self, data_dir: Path, port: int | None = None, **_: Any) -> None:
            self.data_dir, self.port = data_dir, port
            self.pid: int | None = None
            self.url = f"redis://127.0.0.1:{port}/0"

        def start(self) -> FakeRedis:
            pid = _sleeper(children, argv0="redis-server")
            started.append(pid)
            self.pid = pid
            return self

    monkeypatch.setattr(services, "redis_server_binary", lambda: "redis-server")
    monkeypatch.setattr(services, "port_bindable", lambda port: True)
    monkeypatch.setattr(services, "RedisServer", FakeRedis)
    assert main(["services", "up"]) == 0
    out = capsys.readouterr().out
    assert f"redis {REUSED}" in out, out
    assert f"kafka already running: 127.0.0.1:9092 (pid {kafka})" in out, out
    (pid,) = started
    entry = services.read_state()["redis"]
    assert entry["pid"] == pid and entry["port"] == 6390
    assert entry["identity"] == {"boot_id": _boot_id(), "start_ticks": _start_ticks(pid)}
    assert _alive(stranger, children)


def test_a_reaped_child_is_not_signalled_again(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    # Once the child is reaped its pid is free for anyone: kill() must not send to it.
    proc = local_services._Process(["true"], tmp_path / "true.log", die_with_parent=False)
    proc.popen.wait(10)
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(local_services.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    proc.kill()
    proc.signal(signal.SIGSTOP)
    assert sent == []
