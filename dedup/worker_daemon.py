"""PySpark's Python worker daemon, with the workers' imports done once before it forks.

Spark starts one daemon per executor and Python (``spark.python.daemon.module``,
``pyspark.daemon`` by default) and asks it for a worker process whenever a Python
task finds no idle one. PySpark's daemon imports nothing before it forks, so each new
worker imports ``pyspark.worker`` (compiled from ``pyspark.zip``'s sources), pyarrow,
pandas (pyarrow imports it on its first array of Python or NumPy objects), NumPy and
the toolkit anew: 0.7-0.8 s of CPU per worker, measured. Spark starts new workers
often: it stops every idle worker after a minute without Python tasks, and a task that
fails or is interrupted (a query stopped mid-batch) takes its worker with it. This
daemon imports those modules once and forks workers that have them.

PySpark keeps its daemon free of imports so that no thread runs when it forks (a lock
held by a thread that the child does not get stays held there). This daemon keeps
that rule: of what it imports, only Arrow's jemalloc starts a thread at load (its
background purge thread), and the daemon starts itself again with that thread turned
off (``JE_ARROW_MALLOC_CONF``, the user's own settings kept before it) when its
environment does not already say so; NumPy's OpenBLAS pool stops itself before a fork
(and starts again in a child that uses it), and the daemon has it stop once after its
imports. ``tests/unit/dedup/test_worker_daemon.py`` checks that the daemon holds
pyarrow and runs one thread.

Use it where the workers' Python has the toolkit installed:
``spark.python.daemon.module=dedup.worker_daemon``.
:func:`dedup.local.spark.local_spark_session` sets it for local masters, whose
workers run the driver's own Python. Nothing else changes: the daemon, the workers
and their reuse are PySpark's own (:func:`pyspark.daemon.manager`).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import warnings

DAEMON_MODULE = "dedup.worker_daemon"
"""The value of ``spark.python.daemon.module`` that selects this daemon."""
JEMALLOC_CONF_ENV = "JE_ARROW_MALLOC_CONF"
NO_BACKGROUND_THREAD = "background_thread:false"
PRELOAD = ("pyspark.worker", "pyspark.sql.pandas.serializers", "pyarrow", "pandas",
           "dedup.partition_step", "dedup.claim", "redis")
"""What a worker imports for the toolkit's tasks (``pandas`` only where installed)."""


def _without_background_thread() -> None:
    """Start this daemon again with jemalloc's background thread off, if it is on.

    ``import dedup`` (before this module runs) has loaded pyarrow already, so the
    setting can only take effect in a new process image; ``exec`` keeps the pid and
    the pipes Spark holds, and the thread does not survive it.
    """
    conf = os.environ.get(JEMALLOC_CONF_ENV, "")
    if NO_BACKGROUND_THREAD in conf.split(","):
        return
    os.environ[JEMALLOC_CONF_ENV] = f"{conf},{NO_BACKGROUND_THREAD}" if conf else \
        NO_BACKGROUND_THREAD
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", DAEMON_MODULE, *sys.argv[1:]])


def _preload() -> None:
    """Import what the workers need and take it out of their collector's scans.

    For the daemon, before its first fork. A module that is not installed is left to
    the workers, which import it as before (or fail as they would have).
    """
    from dedup.worker_imports import keep_static_archive_caches

    keep_static_archive_caches()
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    # Every forked worker inherits these objects; frozen, PySpark's per-task
    # collection in the workers does not scan them (dedup.worker_imports).
    gc.collect()
    gc.freeze()
    # NumPy's OpenBLAS starts its thread pool at import and stops it in a handler that
    # runs before each fork (the pool starts again in a child that uses BLAS): one
    # fork of a child that exits at once stops it here for good, as the daemon never
    # calls BLAS, so the daemon waits for Spark, and forks, with one thread.
    # Python 3.12+ warns at a fork with more than one thread running: that thread is
    # the pool this fork stops.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def main() -> None:
    """Run PySpark's daemon with the workers' imports done. Does not return."""
    _without_background_thread()
    _preload()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
