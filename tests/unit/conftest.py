"""Fixtures shared by the unit tests of the local services' state."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def service_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of the test's own (``DEDUP_CACHE_DIR``), so no real state is read."""
    monkeypatch.setenv("DEDUP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Long-lived children of the test; killed and reaped whatever the test did."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for child in started:
            if child.poll() is None:
                child.kill()
            child.wait(10)
