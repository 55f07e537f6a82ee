"""``dedup services down --purge`` deletes the recorded service folders and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from dedup.exceptions import ServiceError
from dedup.local import lasting as services
from tests.unit.services_state import write_state


def test_down_keeps_the_data_and_the_ports(service_cache: Path) -> None:
    data = services.services_dir() / "redis"
    data.mkdir(parents=True)
    (data / "appendonly.aof").write_text("kept")
    write_state({"redis": {"port": 6390, "data_dir": str(data)}})
    said: list[str] = []
    services.services_down(said.append)
    assert (data / "appendonly.aof").read_text() == "kept"
    assert services.read_state()["redis"]["port"] == 6390


def test_purge_deletes_the_recorded_folders_and_forgets_their_ports(service_cache: Path) -> None:
    base = services.services_dir()
    for name in ("redis", "kafka", "someone-elses"):
        (base / name).mkdir(parents=True)
        (base / name / "data").write_text(name)
    write_state({"redis": {"port": 6390, "data_dir": str(base / "redis")},
                  "kafka": {"port": 9092, "controller_port": 9093,
                            "data_dir": str(base / "kafka")}})
    said: list[str] = []
    services.services_down(said.append, purge=True)
    assert not (base / "redis").exists() and not (base / "kafka").exists()
    # Not recorded as a service folder: not ours to delete.
    assert (base / "someone-elses" / "data").read_text() == "someone-elses"
    state = services.read_state()
    assert "redis" not in state and "kafka" not in state
    assert any("deleted" in line and str(base / "kafka") in line for line in said), said


def test_purge_refuses_a_recorded_folder_outside_the_services_folder(
    service_cache: Path, tmp_path: Path,
) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data").write_text("keep me")
    write_state({"redis": {"port": 6390, "data_dir": str(precious)}})
    with pytest.raises(ServiceError, match="precious"):
        services.services_down(lambda _: None, purge=True)
    assert (precious / "data").read_text() == "keep me"
    assert services.read_state()["redis"]["data_dir"] == str(precious)
