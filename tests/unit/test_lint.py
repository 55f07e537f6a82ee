"""ruff and mypy stay clean on the packages (the suite fails otherwise)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("command", [
    [str(BIN / "ruff"), "check", "dedup", "sinks", "sources", "tests", "benchmarks"],
    [str(BIN / "mypy")],
], ids=["ruff", "mypy"])
def test_static_checks_are_clean(command: list[str]) -> None:
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
