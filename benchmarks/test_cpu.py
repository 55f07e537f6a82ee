"""Where the suite's CPU goes: each test's CPU seconds, its child processes' included.

Issue 52. On the 2-core machine the slow and long tiers keep both cores 92-95% busy,
so a tier's wall time is its CPU work over two cores: a wait taken out of a test only
lends its core to the other worker, and only less CPU work makes a tier shorter. The
junit seconds of ``benchmarks.test_times`` cannot tell the two apart; this can::

    python -m benchmarks.test_cpu --out cpu_slow.json -- \\
        -m "(slow or chaos or cluster) and not connect" -n 2 --dist loadfile

runs pytest with the given arguments and, once a second, reads every process's CPU
from ``/proc`` and gives its growth to a test: the test that the pytest process
(an xdist worker) it descends from runs at that moment (so a worker's SparkSession,
Kafka broker and Redis count for whichever test they serve), else, for a process that
outlived its parent (a ``dedup run`` child's JVM), the test whose environment
(``DEDUP_CPU_TEST``) it was started in; anything else counts as ``other:<command>``
(the kernel's threads, processes of no test). Processes that live under a second are
missed. It writes per test and per file the CPU seconds and prints the files that
cost most. Linux only; safe to repeat (it overwrites ``--out``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.common import ProcStat, process_table

ENV_TEST = "DEDUP_CPU_TEST"
ENV_DIR = "DEDUP_CPU_DIR"
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# -- the pytest plugin (``-p benchmarks.test_cpu``): says which test each worker runs

def _say(text: str) -> None:
    folder = os.environ.get(ENV_DIR)
    if folder:
        Path(folder, f"current.{os.getpid()}").write_text(text)


def pytest_runtest_setup(item: Any) -> None:
    os.environ[ENV_TEST] = item.nodeid
    _say(item.nodeid)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    # between tests (the next one's module fixtures): still this test's file
    os.environ[ENV_TEST] = nodeid
    _say(nodeid)


# -- the sampler (the process table is benchmarks.common's)


def _env_test(pid: int) -> str | None:
    try:
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(ENV_TEST.encode() + b"="):
                return item.split(b"=", 1)[1].decode(errors="replace")
    except OSError:
        pass
    return None


def attribute(procs: Mapping[int, ProcStat], current: Mapping[int, str], pid: int,
              env_test: str | None) -> str:
    """The test a process's CPU counts for: its nearest pytest ancestor's current test,
    else the test its environment names, else ``other:<command>``."""
    seen, hops = pid, 0
    while seen in procs and hops < 64:
        if seen in current:
            return current[seen]
        seen, hops = procs[seen].ppid, hops + 1
    return env_test or f"other:{procs[pid].comm}"


class Sampler:
    """CPU growth per test between calls of :meth:`sample`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.last: dict[int, tuple[int, int]] = {pid: (p.starttime, p.own)
                                                 for pid, p in process_table().items()}
        self.env: dict[tuple[int, int], str | None] = {}
        self.seconds: dict[str, float] = collections.defaultdict(float)

    def _current(self) -> dict[int, str]:
        current = {}
        for path in self.folder.glob("current.*"):
            try:
                current[int(path.suffix[1:])] = path.read_text()
            except (OSError, ValueError):
                continue
        return current

    def sample(self) -> None:
        procs, current = process_table(), self._current()
        for pid, stat in procs.items():
            ticks, start = stat.own, stat.starttime
            before = self.last.get(pid)
            grown = ticks - before[1] if before and before[0] == start else ticks
            self.last[pid] = (start, ticks)
            if grown <= 0:
                continue
            key = (pid, start)
            if key not in self.env:
                self.env[key] = _env_test(pid)
            self.seconds[attribute(procs, current, pid, self.env[key])] += grown / TICK


def by_file(seconds: Mapping[str, float]) -> dict[str, float]:
    files: dict[str, float] = collections.defaultdict(float)
    for test, cpu in seconds.items():
        files[test.split("::")[0]] += cpu
    return {name: round(cpu, 1) for name, cpu in sorted(files.items(), key=lambda x: -x[1])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    pytest_args = [a for a in args.pytest_args if a != "--"]
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, ENV_DIR: folder}
        started = time.monotonic()
        sampler = Sampler(Path(folder))
        run = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "benchmarks.test_cpu",
                                *pytest_args], env=env)
        while run.poll() is None:
            time.sleep(1.0)
            sampler.sample()
        wall = time.monotonic() - started
    tests = {k: round(v, 1) for k, v in sorted(sampler.seconds.items(), key=lambda x: -x[1])}
    files = by_file({k: v for k, v in tests.items() if not k.startswith("other:")})
    data: dict[str, Any] = {"wall_seconds": round(wall, 1), "pytest_args": pytest_args,
            "exit_code": run.returncode,
            "test_cpu_seconds": round(sum(v for k, v in tests.items()
                                          if not k.startswith("other:")), 1),
            "by_file": files,
            "by_test": tests}
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wall {wall:.0f} s, tests' CPU {data['test_cpu_seconds']:.0f} s; costliest files:")
    for name, cpu in list(files.items())[:15]:
        print(f"  {cpu:8.1f}  {name}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
