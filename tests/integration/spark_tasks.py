"""What Spark's tasks failed with, read from the driver's status store (for evidence)."""

from __future__ import annotations

from typing import Any


def failed_task_errors(spark: Any, containing: str = "") -> list[str]:
    """Error messages of the failed task attempts Spark still keeps (every job of the
    session, streaming queries' too), those that contain ``containing``. Read-only;
    safe to repeat."""
    sc = spark.sparkContext
    store = sc._jsc.sc().statusStore()
    tracker = sc.statusTracker()
    errors: list[str] = []
    jobs = store.jobsList(None).iterator()  # None: jobs of every status and job group
    while jobs.hasNext():
        job = jobs.next()
        if not job.numFailedTasks():
            continue
        stages = job.stageIds()
        for stage in (stages.apply(i) for i in range(stages.length())):
            info = tracker.getStageInfo(stage)
            for attempt in range(info.currentAttemptId + 1 if info is not None else 0):
                tasks = store.taskList(stage, attempt, 100_000).iterator()
                while tasks.hasNext():
                    message = tasks.next().errorMessage()
                    if message.isDefined() and containing in message.get():
                        errors.append(str(message.get()))
    return errors


def kill_if_still_stopped(records: list[dict[str, Any]]) -> None:
    """SIGKILL the processes of fired ``stop`` fail-points that are still stopped.

    For a test's ``finally``: a Python worker left stopped (the test failed
    before it let the worker go) would make ``query.stop()`` wait on it.
    """
    import contextlib
    import os
    import signal
    from pathlib import Path

    for record in records:
        pid = int(record.get("pid") or 0)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if pid and stat.rsplit(")", 1)[1].split()[0] == "T":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
