"""A Spark standalone cluster on this machine: one master and some workers.

Production runs on a cluster, where an executor is a process of its own on a
worker that can die with its whole node. ``local[*]`` has no executor process
and ``local-cluster`` has no worker daemon, so neither can lose a worker. This
cluster is started from PySpark's own jars with its ``bin/spark-class``
(``org.apache.spark.deploy.master.Master`` and ``...worker.Worker``), every
process on a free loopback port with its own work and log folders, and every
process killed by the kernel when the Python process that started it dies.

Executors launched by a worker inherit the worker's environment, by default
this process's: on one machine the venv's Python and the toolkit's code are
where the driver has them (:func:`dedup.local.spark.local_spark_session`
forwards the rest, such as the fail-point folder, with ``spark.executorEnv.*``).
``environ`` gives the daemons another environment instead, e.g. one without
the checkout on ``PYTHONPATH`` (tests/integration/cluster/test_cluster_deploy.py:
the toolkit reaches executors only as Spark ships it). Every daemon runs in its
own folder, never in the caller's working directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dedup.exceptions import ServiceError
from dedup.local.paths import require_program
from dedup.local.services import _Process, _wait_until, free_ports, process_alive

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_class() -> Path:
    """``bin/spark-class`` of the installed PySpark (the launcher of Spark's daemons).

    Raises
    ------
    MissingToolError
        No ``java`` on PATH (spark-class needs it).
    ServiceError
        The PySpark installation has no ``bin/spark-class``.
    """
    import pyspark

    require_program("java", "install a JDK 17: apt-get install openjdk-17-jdk-headless")
    path = Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"
    if not path.exists():
        raise ServiceError(f"{path} not found: reinstall pyspark (pip install --force-reinstall "
                           f"pyspark) to get Spark's launcher scripts")
    return path


@dataclass
class _Worker:
    folder: Path
    port: int = 0
    proc: _Process | None = None

    def alive(self) -> bool:
        return bool(self.proc and self.proc.alive())


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (children first), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(children.get(child, []))
    return out


class SparkStandaloneCluster:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1.

    Parameters
    ----------
    base_dir:
        Folder for the master's and each worker's log, work and scratch
        folders (``master/``, ``worker-<i>/``). Reused across restarts.
    workers:
        Number of workers; each offers ``worker_cores`` cores and
        ``worker_memory`` to executors, so an application gets one executor
        per worker (the default 1 core, 1g fits a 2-core machine and Spark's
        default ``spark.executor.memory`` of 1g).
    daemon_memory:
        Heap of the master and worker daemons themselves (``SPARK_DAEMON_MEMORY``).
    die_with_parent:
        Kill the daemons when the starting Python process dies (tests), or
        let them outlive it.
    environ:
        The environment the daemons, and so their executors, start from
        (default: this process's). Spark's own settings (``SPARK_HOME``,
        ``SPARK_CONF_DIR``, ...) are added to it.

    Examples
    --------
    >>> with SparkStandaloneCluster(tmp / "spark") as cluster:  # doctest: +SKIP
    ...     spark = local_spark_session(master=cluster.master_url)
    """

    def __init__(self, base_dir: Path, workers: int = 2, worker_cores: int = 1,
                 worker_memory: str = "1g", daemon_memory: str = "256m",
                 die_with_parent: bool = True,
                 environ: Mapping[str, str] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.base_dir = Path(base_dir)
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.die_with_parent = die_with_parent
        # None: this process's environment as it is at each start (read then, not now)
        self.environ = None if environ is None else dict(environ)
        # one call: two free_port() calls may hand out one port twice
        self.port, self.webui_port = free_ports(2)
        self._master: _Process | None = None
        self._workers = [_Worker(self.base_dir / f"worker-{i}") for i in range(workers)]

    # -- addresses -------------------------------------------------------------
    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, the ``--master`` of applications."""
        return f"spark://127.0.0.1:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    @property
    def master_pid(self) -> int | None:
        return self._master.pid if self._master else None

    def worker_pid(self, index: int) -> int | None:
        """Process id of worker ``index``'s JVM; None when it is not running."""
        worker = self._workers[index]
        return worker.proc.pid if worker.alive() and worker.proc else None

    def worker_index(self, pid: int) -> int | None:
        """Index of the running worker whose JVM is ``pid``; None for no worker."""
        for index, worker in enumerate(self._workers):
            if worker.alive() and worker.proc and worker.proc.pid == pid:
                return index
        return None

    # -- life cycle ------------------------------------------------------------
    def _env(self, local_dirs: Path) -> dict[str, str]:
        launcher = spark_class()
        home = launcher.parent.parent
        conf_dir = self.base_dir / "conf"  # empty: no stray spark-defaults.conf applies
        conf_dir.mkdir(parents=True, exist_ok=True)
        local_dirs.mkdir(parents=True, exist_ok=True)
        return {
            **(os.environ if self.environ is None else self.environ),
            "SPARK_HOME": str(home),
            "SPARK_CONF_DIR": str(conf_dir),
            # bind to loopback (else Spark picks the host name's address and warns)
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(local_dirs),
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
        }

    def start(self, timeout: float = 120.0) -> SparkStandaloneCluster:
        """Start the master and every worker; return once all workers are ALIVE.

        Safe to call again: running daemons are kept, missing ones started.

        Raises
        ------
        ServiceError
            A daemon exited while starting or the workers did not register
            within ``timeout`` seconds (the message names the log to read).
        """
        if not (self._master and self._master.alive()):
            folder = self.base_dir / "master"
            argv = [str(spark_class()), _MASTER_CLASS, "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.webui_port)]
            self._master = _Process(argv, folder / "master.log", self.die_with_parent,
                                    env=self._env(folder / "local"), cwd=folder)
            _wait_until(lambda: self.state().get("status") == "ALIVE", timeout,
                        f"Spark master on port {self.port}", self._master)
        # All workers at once: each JVM takes seconds to start on 2 cores.
        launched = [i for i in range(len(self._workers)) if self._launch_worker(i)]
        for index in launched:
            self._wait_worker(index, timeout)
        return self

    def start_worker(self, index: int, timeout: float = 120.0) -> None:
        """Start worker ``index`` (again, on a fresh port) and wait until it is ALIVE.

        Safe to call when it runs (nothing happens). A fresh port because the
        master refuses a worker at the address of one it still lists.

        Raises
        ------
        ServiceError
            The worker exited while starting or did not register in time.
        """
        if self._launch_worker(index):
            self._wait_worker(index, timeout)

    def _launch_worker(self, index: int) -> bool:
        worker = self._workers[index]
        if worker.alive():
            return False
        if not (self._master and self._master.alive()):
            raise ServiceError("the Spark master is not running: call start() first")
        worker.port, webui_port = free_ports(2)
        argv = [str(spark_class()), _WORKER_CLASS, "--host", "127.0.0.1",
                "--port", str(worker.port), "--webui-port", str(webui_port),
                "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                "--work-dir", str(worker.folder / "work"), self.master_url]
        worker.proc = _Process(argv, worker.folder / "worker.log", self.die_with_parent,
                               env=self._env(worker.folder / "local"), cwd=worker.folder)
        return True

    def _wait_worker(self, index: int, timeout: float) -> None:
        worker = self._workers[index]
        assert worker.proc is not None
        _wait_until(lambda: self._registered(worker.port), timeout,
                    f"Spark worker {index} on port {worker.port}", worker.proc)

    def _registered(self, port: int) -> bool:
        return any(w.get("port") == port and w.get("state") == "ALIVE"
                   for w in self.state().get("workers", []))

    def state(self) -> dict[str, Any]:
        """The master's JSON status (``/json/``): status, workers, active apps."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=2) as response:
            data: dict[str, Any] = json.loads(response.read())
        return data

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE."""
        return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")

    def kill_worker(self, index: int) -> list[int]:
        """kill -9 of worker ``index``'s JVM and everything under it, as a lost node.

        Its executors (and their Python workers) go with it: on a real node
        loss they do too, and an orphaned executor would only notice its
        worker's loss later. ``start_worker(index)`` brings a new one up.
        Safe to repeat (a dead worker is left alone).

        Returns
        -------
        list[int]
            The killed process ids, the worker JVM's first; empty when the
            worker was not running.
        """
        worker = self._workers[index]
        if not (worker.alive() and worker.proc):
            return []
        pid = worker.proc.pid
        below = _descendants(pid)
        # The worker first, so it cannot launch a replacement executor meanwhile.
        worker.proc.kill()
        for child in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        return [pid, *below]

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the workers (they stop their executors), then the master.

        SIGTERM, then SIGKILL after ``timeout``. Safe to repeat.
        """
        for worker in self._workers:
            if worker.proc:
                below = _descendants(worker.proc.pid)
                worker.proc.stop(timeout)
                for child in below:  # executors a worker failed to stop in time
                    if process_alive(child):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(child, signal.SIGKILL)
        if self._master:
            self._master.stop(timeout)

    def __enter__(self) -> SparkStandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
