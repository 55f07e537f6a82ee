"""Stop Spark's Python workers from re-reading PySpark's own archives on every task.

PySpark puts ``pyspark.zip``, the py4j zip and the ``spark-core`` jar on every
worker's ``sys.path`` and calls ``importlib.invalidate_caches()`` at the start
of every task. On Python 3.10 and 3.11, a zipimporter answers that by
re-reading its archive's whole directory (CPython gh-103200), once per cached
importer: measured here, about 0.1 s of CPU per task and Python worker, more
than the dedup work of a 50k-row partition. Spark fixed its side after the
version we pin (SPARK-54744).

These archives belong to the Spark installation and cannot change while a
worker lives, so their importers may keep their directory. Archives a user
ships with ``--py-files`` live in the SparkFiles directory and are still
invalidated as before.

PySpark's daemon also runs a full ``gc.collect()`` after every task of a reused
worker (``pyspark/daemon.py``). A full collection scans every object the
collector tracks: with pyarrow, pandas (which pyarrow imports on its first array
made from Python or NumPy objects), NumPy, the toolkit, redis-py and
confluent-kafka loaded, about 95,000, 46 ms of CPU per task, measured. The
objects alive when a task starts are the worker's long-lived ones (modules,
clients, Bloom filters: the last task's garbage was collected after it), and
``gc.freeze()`` takes them out of those scans (:func:`settle_worker`).
"""

from __future__ import annotations

import gc
import os
import threading
import zipimport
from typing import Any

_LOCK = threading.Lock()
_PATCHED = False
# At the first task starts of a worker, not only the first: modules a task imports
# (pandas, by pyarrow) are frozen at the next one. A bounded number: an object frozen
# in a reference cycle that turns to garbage later is never collected. Once per task:
# the one-pass writer's task calls settle_worker twice (its front and write_batches),
# and a second freeze mid-task would take that task's data, not long-lived objects.
FREEZES = 3
_FROZEN = 0
_FROZEN_ATTEMPT = -1  # the task attempt of the last freeze


def _static_archive_roots() -> tuple[str, ...]:
    import pyspark

    home = os.path.dirname(os.path.abspath(pyspark.__file__))
    # pyspark may itself be imported from pyspark.zip: use the folder that holds it
    if home.endswith(os.path.join("lib", "pyspark.zip", "pyspark")):
        home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(home))))
    roots = [os.path.join(home, "python", "lib") + os.sep, os.path.join(home, "jars") + os.sep]
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home:
        roots += [os.path.join(spark_home, "python", "lib") + os.sep,
                  os.path.join(spark_home, "jars") + os.sep]
    return tuple(roots)


def keep_static_archive_caches() -> None:
    """Make ``invalidate_caches()`` skip PySpark's installed archives in this process.

    Safe to call many times (the first call patches, later calls return at
    once). Has no effect on imports: only on when an archive's directory is
    re-read.
    """
    global _PATCHED
    if _PATCHED:
        return
    with _LOCK:
        if _PATCHED:
            return
        roots = _static_archive_roots()
        original = zipimport.zipimporter.invalidate_caches

        def invalidate_unless_static(self: Any) -> None:
            if not str(getattr(self, "archive", "")).startswith(roots):
                original(self)

        zipimport.zipimporter.invalidate_caches = invalidate_unless_static  # type: ignore[method-assign]
        _PATCHED = True


def settle_worker() -> None:
    """Cut PySpark's per-task overhead in this Python worker; call as a task starts.

    Keeps PySpark's installed archives' caches (:func:`keep_static_archive_caches`)
    and, at the first call of each of the first :data:`FREEZES` tasks of its process,
    freezes the objects alive out of the collector's scans (``gc.freeze()``). Outside
    a task (the driver, a script, a test) it freezes nothing. Safe to call many
    times; it changes no result, only what each task's collection scans.
    """
    global _FROZEN, _FROZEN_ATTEMPT
    keep_static_archive_caches()
    if _FROZEN >= FREEZES:
        return
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return
    attempt = context.taskAttemptId()
    with _LOCK:
        if _FROZEN < FREEZES and attempt != _FROZEN_ATTEMPT:
            _FROZEN += 1
            _FROZEN_ATTEMPT = attempt
            gc.freeze()
