"""``process_alive``: the one liveness check of the local services and ``dedup services``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dedup.local import services as local_services
from dedup.local.services import process_alive


def _zombie(name: bytes) -> subprocess.Popen[bytes]:
    """A child named ``name`` that exited and is not reaped yet (state ``Z``)."""
    # PR_SET_NAME (15) sets the comm shown between the parentheses of /proc/<pid>/stat.
    code = f"import ctypes; ctypes.CDLL('libc.so.6').prctl(15, {name!r}, 0, 0, 0)"
    child = subprocess.Popen([sys.executable, "-c", code])
    stat = Path(f"/proc/{child.pid}/stat")
    deadline = time.monotonic() + 30
    # Read /proc, never poll(): poll() would reap the child.
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child did not exit within 30 s"
        time.sleep(0.05)
    assert name.decode() in stat.read_text()
    return child


def test_a_running_process_is_alive() -> None:
    assert process_alive(os.getpid())


@pytest.mark.parametrize("pid", [None, 0, -1])
def test_no_pid_is_not_alive(pid: int | None) -> None:
    # kill(0, 0) and kill(-1, 0) signal process groups, which always "exist".
    assert not process_alive(pid)


def test_a_zombie_is_not_alive_even_with_a_space_in_its_name() -> None:
    child = _zombie(b"dedup zombie")
    try:
        assert not process_alive(child.pid)
    finally:
        child.wait(10)


def test_a_process_of_another_user_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    # kill(pid, 0) on a process this user may not signal raises PermissionError:
    # the process exists, so it is alive (dedup services status must not call it stopped).
    def not_permitted(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(local_services.os, "kill", not_permitted)
    assert process_alive(os.getpid())
