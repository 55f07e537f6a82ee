"""Run by test_cleanup.py in a child pytest: start the services, record pids, then fail."""

from __future__ import annotations

import os
import time
from pathlib import Path


def test_start_services_then_fail(redis_server, kafka_broker) -> None:  # type: ignore[no-untyped-def]
    Path(os.environ["DEDUP_PROBE_PIDS"]).write_text(f"{redis_server.pid} {kafka_broker.pid}")
    if os.environ.get("DEDUP_PROBE_HANG"):
        time.sleep(600)  # the parent kills this pytest with SIGKILL
    raise AssertionError("deliberate failure: services must still be stopped")
