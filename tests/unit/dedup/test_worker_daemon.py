"""The toolkit's Python worker daemon (``dedup.worker_daemon``) as Spark starts it.

Spark runs ``python -m <spark.python.daemon.module> pyspark.worker`` with the
factory's secret in the environment and reads the daemon's port from its stdout;
closing the daemon's stdin stops it. The daemon must hold the workers' imports
(pyarrow's native library among them) before it forks, and still fork from a single
thread, the rule PySpark's own daemon keeps by importing nothing.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")


def _start(env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "dedup.worker_daemon", "pyspark.worker"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            env={**env, "PYTHON_WORKER_FACTORY_SECRET": "test-secret"})
    assert proc.stdout is not None
    port = proc.stdout.read(4)
    assert len(port) == 4, f"the daemon wrote no port (exit code {proc.poll()})"
    assert 0 < struct.unpack("!i", port)[0] < 65536
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> bytes:
    """Stop the daemon; what it printed to stderr (Spark shows it to the user)."""
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.close()  # how Spark stops its daemon
    proc.wait(20)  # it ends (with code 1, as PySpark's own daemon does)
    return proc.stderr.read()


@pytest.mark.parametrize("jemalloc_conf", [None, "narenas:2"], ids=["unset", "set-by-the-user"])
def test_the_daemon_holds_the_workers_imports_and_forks_from_one_thread(
        jemalloc_conf: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JE_ARROW_MALLOC_CONF"}
    if jemalloc_conf is not None:
        env["JE_ARROW_MALLOC_CONF"] = jemalloc_conf
    proc = _start(env)
    try:
        threads = [Path(f"/proc/{proc.pid}/task/{t}/comm").read_text().strip()
                   for t in os.listdir(f"/proc/{proc.pid}/task")]
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
    finally:
        printed = _stop(proc)
    assert threads == ["python"] or len(threads) == 1, f"threads before a fork: {threads}"
    assert "libarrow" in maps, "pyarrow is not loaded in the daemon"
    conf = next(v for v in environ if v.startswith(b"JE_ARROW_MALLOC_CONF="))
    if jemalloc_conf is not None:  # the user's settings kept, the thread turned off
        assert conf.startswith(f"JE_ARROW_MALLOC_CONF={jemalloc_conf},".encode()), conf
    assert conf.endswith(b"background_thread:false"), conf
    assert printed == b"", printed.decode(errors="replace")  # no warning, no traceback


def test_a_local_session_uses_the_daemon_only_where_its_workers_run_this_python() -> None:
    from dedup.local.spark import worker_daemon_conf

    daemon = {"spark.python.daemon.module": "dedup.worker_daemon"}
    assert worker_daemon_conf("local[2]", {}) == daemon
    assert worker_daemon_conf("local[2,4]", {"spark.pyspark.python": sys.executable}) == daemon
    # a worker Python of the caller's choosing may lack the toolkit; a cluster's too
    assert worker_daemon_conf("local[2]", {"spark.pyspark.python": "/usr/bin/python3"}) == {}
    assert worker_daemon_conf("spark://127.0.0.1:7077", {}) == {}
