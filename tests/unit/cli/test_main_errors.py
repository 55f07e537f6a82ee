"""Bad input gets one line naming the problem and the fix, a non-zero exit, no traceback."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from dedup.cli.main import EXIT_CONFIG, EXIT_RUNTIME, main
from dedup.exceptions import ConfigError
from dedup.local.services import process_identity


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return str(path)


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("dedup: error: ")
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No state file from a real `dedup services up` may leak into these tests.
    monkeypatch.setenv("DEDUP_CACHE_DIR", str(tmp_path / "cache"))


def test_unknown_config_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, 'app_id = "a"\n[sink]\ntopic = "t"\nbatch_size = 3\n')
    assert main(["run", path]) == EXIT_CONFIG
    line = _one_line_error(capsys)
    assert "unknown key 'batch_size' in [sink]" in line and "allowed keys:" in line


def test_missing_app_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", _write(tmp_path, '[sink]\ntopic = "t"\n')]) == EXIT_CONFIG
    assert "app_id is required" in _one_line_error(capsys)


def test_unreachable_redis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    assert main(["run", "--example", "--redis-url", url]) == EXIT_RUNTIME
    line = _one_line_error(capsys)
    assert f"cannot reach Redis at {url}" in line and "dedup services up" in line


def test_unreachable_kafka(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = f"127.0.0.1:{_closed_port()}"
    assert main(["verify", "--topic", "t", "--bootstrap", bootstrap]) == EXIT_RUNTIME
    line = _one_line_error(capsys)
    assert f"cannot reach Kafka at {bootstrap}" in line and "dedup services up" in line


def test_no_services_and_no_addresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--example"]) == EXIT_CONFIG
    assert "no Redis address" in _one_line_error(capsys)
    assert main(["txn", "list", "--app-id", "a1"]) == EXIT_CONFIG
    assert "no Kafka address" in _one_line_error(capsys)


def test_txn_needs_app_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["txn", "list", "--bootstrap", "127.0.0.1:1"]) == EXIT_CONFIG
    assert "app_id is required" in _one_line_error(capsys)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        main(["run", "--debug", _write(tmp_path, "app_id = 'a'\nx = 1\n")])


def test_run_needs_a_file_or_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run"]) == EXIT_CONFIG
    assert "--example" in _one_line_error(capsys)


def test_services_status_without_state(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["services", "status"]) == 3
    out = capsys.readouterr().out
    assert "redis" in out and "stopped" in out


def test_services_status_reads_the_state_file(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "cache" / "services" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({
        # A live pid is running only with the identity `up` records beside it
        # (without it, the process must run redis-server: this one does not).
        "redis": {"url": "redis://127.0.0.1:7/0", "pid": os.getpid(),
                  "identity": process_identity(os.getpid())},
        "kafka": {"bootstrap": "127.0.0.1:9", "pid": 2**22 + 12345},
    }))
    assert main(["services", "status"]) == 3
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["redis", "running", "redis://127.0.0.1:7/0"]
    assert out[1].split()[:3] == ["kafka", "stopped", "127.0.0.1:9"]
