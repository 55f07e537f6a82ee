"""``resume``: continue the process held at a fired ``stop`` fail-point.

A ``stop`` point writes its record (with the pid) and only then stops its own
process; a SIGCONT sent as soon as the record shows the pid can arrive before
that SIGSTOP, which then holds the process for good (a CI failure of the
frozen-broker test: the task never went on into the call). ``resume`` waits
for the process to be stopped before it continues it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from dedup.failpoints import arm, fired, resume

# The child stops itself a while after its record shows the pid: the window of
# a real stop point, widened so that the race is certain, not occasional.
_LATE_STOP = """
import json, os, signal, sys, time
from pathlib import Path
record = Path(sys.argv[1]) / "sink.before_commit.fired-{}-1".format(os.getpid())
record.write_text(json.dumps({"action": "stop", "pid": os.getpid()}))
time.sleep(0.5)
os.kill(os.getpid(), signal.SIGSTOP)
"""

_REAL_STOP = """
import sys
from dedup.failpoints import fail_point
fail_point("sink.before_commit", sys.argv[1], batch=1, partition=0)
"""


def _hit(folder: Path, child: subprocess.Popen[bytes]) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while not any("pid" in f for f in fired(folder)):
        assert child.poll() is None, "the child ended before its fail-point fired"
        assert time.monotonic() < deadline, "the fail-point did not fire within 30 s"
        time.sleep(0.01)
    [record] = fired(folder)
    return record


def _ends(child: subprocess.Popen[bytes]) -> bool:
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return False
    return True


def test_resume_waits_for_the_stop_that_follows_the_record(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", _LATE_STOP, str(tmp_path)])
    record = _hit(tmp_path, child)
    assert resume(record, timeout=10)
    assert _ends(child), "the child stayed stopped: the SIGCONT came before its SIGSTOP"


def test_resume_continues_a_real_stop_point(tmp_path: Path) -> None:
    arm(str(tmp_path), "sink.before_commit", "stop", match={"batch": 1})
    child = subprocess.Popen([sys.executable, "-c", _REAL_STOP, str(tmp_path)],
                             cwd=Path(__file__).resolve().parents[3])
    assert resume(_hit(tmp_path, child), timeout=10)
    assert _ends(child) and child.returncode == 0


def test_resume_of_a_gone_process_says_so(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not resume({"pid": child.pid}, timeout=1)


def test_resume_of_a_record_without_pid_says_so() -> None:
    # the firing process died between the rename and the write
    assert not resume({}, timeout=1)
