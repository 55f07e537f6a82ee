"""Helpers of the tests of ``dedup services`` state: a recorded state file and stand-in processes.

The pid-reuse tests (``tests/unit/cli/test_services_pid_reuse.py`` through the
CLI, ``tests/unit/dedup/test_lasting_pid_reuse.py`` through
:mod:`dedup.local.lasting`) record pids of unrelated ``sleep`` processes and
check that nothing signals them; the fixtures ``service_cache`` and
``children`` live in ``tests/unit/conftest.py``.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from dedup.local import lasting

REUSED = "already gone (pid reused by another process)"


def sleeper(children: list[subprocess.Popen[bytes]], argv0: str = "sleep",
            ignore_term: bool = False) -> int:
    """An unrelated ``sleep 60`` whose command line starts with ``argv0``; returns its pid.

    With ``ignore_term`` it ignores SIGTERM (a service slow to stop). Returns once
    ``/proc`` shows the sleep itself: until exec it shows the forked Python.
    """
    if ignore_term:
        if argv0 != "sleep":
            raise ValueError("ignore_term runs through sh, whose exec keeps argv0 'sleep'")
        child = subprocess.Popen(["sh", "-c", 'trap "" TERM; exec sleep 60'],
                                 stdin=subprocess.DEVNULL)
    else:
        child = subprocess.Popen([argv0, "60"], executable="sleep", stdin=subprocess.DEVNULL)
    children.append(child)
    cmdline = Path(f"/proc/{child.pid}/cmdline")
    deadline = time.monotonic() + 10
    while cmdline.read_bytes().split(b"\0")[:2] != [argv0.encode(), b"60"]:
        assert time.monotonic() < deadline, "the child did not exec sleep within 10 s"
        time.sleep(0.01)
    return child.pid


def start_ticks(pid: int) -> int:
    """Field 22 of ``/proc/<pid>/stat``: start time in clock ticks after boot."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def identity(pid: int, start_ticks_offset: int = 0) -> dict[str, Any]:
    """The identity ``dedup services up`` records for ``pid`` (shifted to fake another process)."""
    return {"boot_id": boot_id(), "start_ticks": start_ticks(pid) + start_ticks_offset}


def record(redis: dict[str, Any] | None = None, kafka: dict[str, Any] | None = None) -> None:
    """Write a services state file as ``dedup services up`` would, with these entries merged in."""
    base = lasting.services_dir()
    state = {"redis": {"url": "redis://127.0.0.1:6390/0", "port": 6390,
                       "data_dir": str(base / "redis"), **(redis or {})},
             "kafka": {"bootstrap": "127.0.0.1:9092", "port": 9092, "controller_port": 9093,
                       "data_dir": str(base / "kafka"), **(kafka or {})}}
    write_state(state)


def write_state(state: dict[str, Any]) -> None:
    lasting.state_path().parent.mkdir(parents=True, exist_ok=True)
    lasting.state_path().write_text(json.dumps(state))


def alive(pid: int, children: list[subprocess.Popen[bytes]]) -> bool:
    (child,) = [c for c in children if c.pid == pid]
    return child.poll() is None
