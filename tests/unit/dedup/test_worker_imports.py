"""``settle_worker`` outside a Spark task: the driver, a script or a test process."""

from __future__ import annotations

import gc

from dedup.worker_imports import FREEZES, settle_worker


def test_outside_a_task_nothing_is_frozen() -> None:
    """The driver, a script or a unit test: settle_worker leaves its collector alone."""
    before = gc.get_freeze_count()
    for _ in range(FREEZES + 1):
        settle_worker()
    assert gc.get_freeze_count() == before
