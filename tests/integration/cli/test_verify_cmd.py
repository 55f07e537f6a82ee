"""``dedup verify`` on topics with planted duplicates, losses and unknown IDs."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from dedup.cli.main import main
from dedup.constants import RECORD_ID_HEADER
from sinks.kafka_io import ensure_topic

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def _produce(bootstrap: str, topic: str, ids: list[str | None]) -> None:
    ensure_topic(bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for n, rid in enumerate(ids):
        headers = [(RECORD_ID_HEADER, rid.encode())] if rid is not None else []
        producer.produce(topic, value=f"v{n}".encode(), key=str(n).encode(), headers=headers)
    assert producer.flush(30) == 0


def test_audit_finds_planted_duplicates(kafka_bootstrap: str, app_id: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"{app_id}-dups"
    _produce(kafka_bootstrap, topic, ["a", "b", "c", "a", "b", "a", "d"])
    assert main(["verify", "--topic", topic, "--bootstrap", kafka_bootstrap]) == 1
    out = capsys.readouterr().out
    assert "observed 7" in out and "duplicated 3" in out and "lost 0" in out
    assert "FAILED" in out


def test_clean_topic_passes_the_audit(kafka_bootstrap: str, app_id: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"{app_id}-clean"
    _produce(kafka_bootstrap, topic, [f"id{n}" for n in range(50)])
    assert main(["verify", "--topic", topic, "--bootstrap", kafka_bootstrap]) == 0
    out = capsys.readouterr().out
    assert "expected 50, observed 50: lost 0, duplicated 0, phantoms 0" in out
    assert out.strip().endswith("OK")


def test_against_expected_ids(kafka_bootstrap: str, app_id: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"{app_id}-expected"
    _produce(kafka_bootstrap, topic, ["a", "b", "b", "zz", None])
    expected = tmp_path / "ids.txt"
    expected.write_text("# expected\na\nb\nc\n\n")
    code = main(["verify", "--topic", topic, "--bootstrap", kafka_bootstrap,
                 "--expected", str(expected), "--json"])
    assert code == 1
    import json

    report = json.loads(capsys.readouterr().out)
    assert (report["expected"], report["observed"]) == (3, 5)
    assert (report["lost"], report["duplicated"], report["phantoms"]) == (1, 1, 2)
    assert report["samples"]["lost"] == ["c"]
