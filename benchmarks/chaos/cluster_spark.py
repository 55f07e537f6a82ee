"""The chaos kind that needs a Spark standalone cluster: ``spark_worker_kill``.

The pipeline runs as a child ``dedup run --master spark://...`` (like the
driver and executor kills) against one :class:`SparkStandaloneCluster` of two
workers, started the first time such a run is prepared and kept for the rest
of the matrix. One task of batch ``k`` is held at ``dedup.after_claim``; the
injector finds the executor JVM above the held Python worker and the worker
JVM above that executor, kills that worker and everything under it with
kill -9 (a lost node), and starts a new worker in its place.

Confirmed only on evidence: the held process descends from an executor whose
parent is one of the cluster's workers, and that worker and executor were
among the killed processes. ``dedup.after_claim`` fires after a claim of at
least one row (the hold's match requires rows > 0 in its context), so the held
partition of the batch was not empty; and the kill began and ended inside the
hold while the held process was alive.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.chaos.faults import ancestor_with, arm_sync, held_alive, hold_evidence
from dedup.exceptions import ServiceError
from dedup.local.spark_cluster import SparkStandaloneCluster

if TYPE_CHECKING:
    from collections.abc import Callable

    from benchmarks.chaos.model import Run

HOLD_SECONDS = 8.0  # long enough to find and kill the worker on a loaded machine
_LOCK = threading.Lock()
_CLUSTER: SparkStandaloneCluster | None = None


def cluster(workdir: Path | None = None) -> SparkStandaloneCluster:
    """The matrix's cluster, started on first use (in ``workdir``, else a temp folder).

    Safe to call many times: later calls return the running cluster and
    restart any worker that is down.
    """
    global _CLUSTER
    with _LOCK:
        if _CLUSTER is None:
            base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="dedup-chaos-"))
            _CLUSTER = SparkStandaloneCluster(base / "spark-standalone")
        return _CLUSTER.start()


def stop_cluster() -> None:
    """Stop the cluster if one was started. Safe to repeat."""
    global _CLUSTER
    with _LOCK:
        if _CLUSTER is not None:
            _CLUSTER.stop()
            _CLUSTER = None


def master_url(run: Run) -> str:
    """The ``--master`` of the run's child ``dedup run``."""
    return cluster(run.env.workdir).master_url


def prepare(run: Run) -> Callable[[], None]:
    """Arm the hold of batch ``k`` and return the injector (run in a thread)."""
    cluster(run.env.workdir)
    arm_sync(run.fp_dir, "dedup.after_claim", run.spec.batch, HOLD_SECONDS)
    run.fault.detail = f"held at dedup.after_claim, batch {run.spec.batch}: no worker killed"
    return lambda: _kill_worker(run)


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _kill_worker(run: Run) -> None:
    hit = run._wait_sync("dedup.after_claim")
    if hit is None or "pid" not in hit:  # no pid: the firing process is gone
        return
    spark = cluster(run.env.workdir)
    executor = ancestor_with(int(hit["pid"]), "CoarseGrainedExecutorBackend")
    worker_jvm = _parent(executor) if executor is not None else None
    index = spark.worker_index(worker_jvm) if worker_jvm is not None else None
    run.fault.evidence.update(executor=executor, worker_jvm=worker_jvm, worker=index)
    if index is None:
        return
    alive, started = held_alive(hit), time.time()
    killed = spark.kill_worker(index)
    hold = hold_evidence(hit, started, time.time(), alive)
    run.fault.evidence.update(hold, killed_pids=killed)
    run.fault.confirmed = (bool(killed) and killed[0] == worker_jvm and executor in killed
                           and hold["in_hold"])
    run.fault.detail = (f"kill -9 of worker {index} (pid {worker_jvm}) and its executor "
                        f"(pid {executor}) holding partition "
                        f"{hit.get('context', {}).get('partition', '?')} of batch "
                        f"{run.spec.batch}")
    try:
        spark.start_worker(index)
        run.fault.evidence["worker_restarted"] = spark.worker_pid(index)
    except ServiceError as exc:  # the run goes on with one worker; say so
        run.fault.evidence["worker_restart_error"] = str(exc).splitlines()[0]
    run._start_clock()
