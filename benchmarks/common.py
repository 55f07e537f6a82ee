"""Helpers every benchmark script shares: the summary file and run metadata."""

from __future__ import annotations

import json
import os
import platform
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SUMMARY_PATH = RESULTS_DIR / "summary.json"


def merge_summary(figures: dict[str, Any], path: Path = SUMMARY_PATH) -> dict[str, Any]:
    """Merge named figures into the flat ``summary.json`` (atomic replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    current: dict[str, Any] = {}
    if path.exists():
        current = json.loads(path.read_text())
    current.update(figures)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(current, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)
    return current


def run_metadata() -> dict[str, Any]:
    """Date, machine and versions, stored beside every result."""
    import confluent_kafka
    import pyspark

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"{_mem_gib():.0f} GiB, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        # version() is a (str, int) tuple in some releases and a plain str in others
        "confluent_kafka": getattr(confluent_kafka, "__version__", None)
                           or str(confluent_kafka.version()[0]),
        "librdkafka": confluent_kafka.libversion()[0],
    }


def write_json(name: str, data: dict[str, Any]) -> Path:
    path = RESULTS_DIR / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def _mem_gib() -> float:
    try:
        with open("/proc/meminfo") as handle:
            kib = int(handle.readline().split()[1])
        return kib / 1024 / 1024
    except (OSError, ValueError, IndexError):
        return 0.0
