"""``dedup services up|status|down``: services outlive the command and are stopped by pid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dedup.local.services import process_alive
from tests.integration.cli.jars import jar_env

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def _dedup(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    dedup = Path(sys.executable).with_name("dedup")
    return subprocess.run([str(dedup), *args], capture_output=True, text=True, timeout=180,
                          env=env, check=False)


def test_up_status_verify_down(tmp_path: Path) -> None:
    env = {**os.environ, "DEDUP_CACHE_DIR": str(tmp_path / "cache"), **jar_env()}
    state_file = tmp_path / "cache" / "services" / "state.json"
    try:
        up = _dedup(["services", "up"], env)
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads(state_file.read_text())
        pids = [state["redis"]["pid"], state["kafka"]["pid"]]
        # They outlive the command that started them.
        assert all(process_alive(pid) for pid in pids)
        status = _dedup(["services", "status"], env)
        assert status.returncode == 0 and status.stdout.count("running") == 2
        again = _dedup(["services", "up"], env)
        assert "already running" in again.stdout
        # Other commands find Kafka through the state file.
        audit = _dedup(["verify", "--topic", "nothing-here"], env)
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert "observed 0" in audit.stdout
        down = _dedup(["services", "down"], env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(process_alive(pid) for pid in pids)
        assert _dedup(["services", "status"], env).returncode == 3
    finally:
        if state_file.exists():
            for entry in json.loads(state_file.read_text()).values():
                pid = entry.get("pid") if isinstance(entry, dict) else None
                if process_alive(pid):
                    os.kill(pid, 9)
