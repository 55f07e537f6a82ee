"""``dedup services`` signals a recorded pid only while it still names the process it started.

After a reboot (or a long enough uptime) the pid that ``dedup services up``
recorded for Redis or Kafka may belong to some unrelated process. ``down`` must
leave that process alone, say so and drop the stale pid from the state file.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dedup.cli.main import main
from dedup.local import lasting as services
from dedup.local import services as local_services
from tests.unit.services_state import REUSED, alive, boot_id, record, sleeper, start_ticks


def test_down_leaves_alone_a_process_that_reused_a_pid_of_an_old_record(
    service_cache: Path, children: list[subprocess.Popen[bytes]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A record as an earlier `services up` wrote it (pid only), left over by a
    # reboot: the pid now names an unrelated `sleep 60`, nothing like redis-server.
    pid = sleeper(children)
    record(redis={"pid": pid})
    assert main(["services", "down"]) == 0
    out = capsys.readouterr().out
    assert alive(pid, children), "down signalled an unrelated process"
    assert f"redis {REUSED}" in out, out
    assert "pid" not in services.read_state()["redis"]
    assert services.read_state()["redis"]["port"] == 6390  # the data's ports are kept


@pytest.mark.parametrize("mismatch", ["start time", "boot id"])
def test_down_leaves_alone_a_process_whose_identity_differs_from_the_record(
    service_cache: Path, children: list[subprocess.Popen[bytes]],
    capsys: pytest.CaptureFixture[str],
    mismatch: str,
) -> None:
    # Named like the service, so only the recorded start time / boot id tell it apart.
    pid = sleeper(children, argv0="redis-server")
    identity = {"boot_id": boot_id(), "start_ticks": start_ticks(pid)}
    if mismatch == "start time":
        identity["start_ticks"] = start_ticks(pid) - 1
    else:
        identity["boot_id"] = "00000000-0000-0000-0000-000000000000"
    record(redis={"pid": pid, "identity": identity})
    assert main(["services", "down"]) == 0
    out = capsys.readouterr().out
    assert alive(pid, children), f"down signalled a process of another {mismatch}"
    assert f"redis {REUSED}" in out, out
    assert "pid" not in services.read_state()["redis"]
    assert "identity" not in services.read_state()["redis"]


def test_down_stops_the_processes_the_record_names(
    service_cache: Path, children: list[subprocess.Popen[bytes]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # kafka: a current record (boot id and start time match); redis: an old record
    # (pid only) whose command line is the service's.
    kafka = sleeper(children, argv0="kafka.Kafka")
    redis = sleeper(children, argv0="redis-server")
    record(redis={"pid": redis},
            kafka={"pid": kafka,
                   "identity": {"boot_id": boot_id(), "start_ticks": start_ticks(kafka)}})
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
    service_cache: Path, children: list[subprocess.Popen[bytes]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    pid = sleeper(children)
    record(redis={"pid": pid}, kafka={"pid": pid})
    assert main(["services", "status"]) == 3
    out = capsys.readouterr().out
    assert "running" not in out, out
    assert alive(pid, children)


def test_up_records_who_it_started_and_restarts_over_a_reused_pid(
    service_cache: Path, children: list[subprocess.Popen[bytes]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The reused pid must not pass for a running redis (up would then start none
    # and take the stranger for it); what up starts gets its identity recorded.
    # The servers are stand-ins: a `redis-server 60` sleep is what up "starts".
    stranger = sleeper(children)
    kafka = sleeper(children, argv0="kafka.Kafka")
    record(redis={"pid": stranger},
            kafka={"pid": kafka,
                   "identity": {"boot_id": boot_id(), "start_ticks": start_ticks(kafka)}})
    started: list[int] = []

    class FakeRedis:
        def __init__(self, data_dir: Path, port: int | None = None, **_: Any) -> None:
            self.data_dir, self.port = data_dir, port
            self.pid: int | None = None
            self.url = f"redis://127.0.0.1:{port}/0"

        def start(self) -> FakeRedis:
            pid = sleeper(children, argv0="redis-server")
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
    assert entry["identity"] == {"boot_id": boot_id(), "start_ticks": start_ticks(pid)}
    assert alive(stranger, children)


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
