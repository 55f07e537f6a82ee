"""No redis-server or java process of a test run outlives pytest, even on failure or kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dedup.local.services import process_alive

pytestmark = [pytest.mark.integration, pytest.mark.redis, pytest.mark.kafka]

REPO = Path(__file__).resolve().parents[2]


def _probe(tmp_path: Path, hang: bool) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "KAFKA_BOOTSTRAP"}}
    env["DEDUP_PROBE_PIDS"] = str(tmp_path / "pids")
    if hang:
        env["DEDUP_PROBE_HANG"] = "1"
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-o", "python_files=_cleanup_probe.py", "tests/integration/_cleanup_probe.py"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _wait_for_pids(path: Path, proc: subprocess.Popen[bytes]) -> list[int]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not path.exists():
        assert proc.poll() is None or path.exists(), "probe pytest ended before starting services"
        time.sleep(0.2)
    time.sleep(0.2)
    return [int(p) for p in path.read_text().split()]


def _assert_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(process_alive(p) for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if process_alive(p)], "service processes outlived pytest"


@pytest.mark.slow
def test_services_stop_when_a_test_fails(tmp_path: Path) -> None:
    proc = _probe(tmp_path, hang=False)
    pids = _wait_for_pids(tmp_path / "pids", proc)
    assert proc.wait(180) == 1, "the probe test must fail"
    _assert_gone(pids)


def test_services_die_when_pytest_is_killed(tmp_path: Path) -> None:
    proc = _probe(tmp_path, hang=True)
    pids = _wait_for_pids(tmp_path / "pids", proc)
    assert all(process_alive(p) for p in pids)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    _assert_gone(pids)


def test_service_restarted_from_a_short_lived_thread_keeps_running(tmp_path: Path) -> None:
    # PR_SET_PDEATHSIG follows the forking *thread*: a restart done by a chaos
    # injector thread must not die when that thread returns.
    import threading

    import redis

    from dedup.local.services import RedisServer

    server = RedisServer(tmp_path / "redis").start()
    try:
        def restart() -> None:
            server.kill()
            server.start()

        worker = threading.Thread(target=restart)
        worker.start()
        worker.join()
        time.sleep(1.0)
        assert server.alive()
        assert redis.Redis.from_url(server.url).ping()
    finally:
        server.stop()
