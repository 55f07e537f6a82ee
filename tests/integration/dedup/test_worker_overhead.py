"""PySpark's per-task overhead in a Python worker, cut by ``settle_worker``.

PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker;
it scans every object the collector tracks, and a worker with pyarrow, pandas,
NumPy and the toolkit loaded holds about 95,000 of them. The toolkit's task entry
points freeze the worker's long-lived objects out of those scans: a worker that has
run tasks through them leaves most of its objects frozen.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _task(batches: Iterator[Any]) -> Iterator[Any]:
    import os

    import pyarrow as pa

    from dedup.worker_imports import settle_worker

    for _ in batches:
        pass
    settle_worker()
    yield pa.RecordBatch.from_pydict({
        "pid": [os.getpid()], "frozen": [gc.get_freeze_count()],
        "scanned": [len(gc.get_objects())]})


def test_a_worker_leaves_its_long_lived_objects_out_of_the_collectors_scans(spark: Any) -> None:
    rows = (spark.range(0, 12, numPartitions=12)
            .mapInArrow(_task, "pid long, frozen long, scanned long").collect())
    last: dict[int, Any] = {}
    for row in rows:  # a worker's later tasks see what its earlier ones froze
        if row.pid not in last or row.frozen > last[row.pid].frozen:
            last[row.pid] = row
    for row in last.values():
        assert row.frozen > 0, rows
        assert row.scanned < row.frozen / 2, \
            f"worker {row.pid}: the collector still scans {row.scanned} of " \
            f"{row.scanned + row.frozen} objects"


def _daemon_of_this_worker(batches: Iterator[Any]) -> Iterator[Any]:
    import os
    from pathlib import Path

    import pyarrow as pa

    for _ in batches:
        pass
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ")
    yield pa.RecordBatch.from_pydict({"daemon": [parent.decode(errors="replace")]})


def test_a_local_session_forks_its_workers_from_the_toolkits_daemon(spark: Any) -> None:
    """A new worker starts with its imports done (``dedup.worker_daemon``): Spark
    forks one whenever no idle worker is free, and stops the idle ones after a
    minute without Python tasks."""
    rows = (spark.range(0, 4, numPartitions=4)
            .mapInArrow(_daemon_of_this_worker, "daemon string").collect())
    assert rows and all(" -m dedup.worker_daemon " in row.daemon for row in rows), rows
