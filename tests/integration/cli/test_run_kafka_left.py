"""``dedup run`` over a Kafka topic, cut short by ``--max-seconds``, says input is left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dedup.cli.run import EXIT_INCOMPLETE
from sinks.kafka_io import ensure_topic
from tests.integration.cli.jars import jar_env

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

# 100 records a trigger, a trigger a second: 9 s of input, more than the first run's
# --max-seconds 5 (from the query's start) reads; the second reads the rest.
RECORDS = 900


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, key=f"k{i % 7}", value=f"v{i}", partition=i % 2)
    assert producer.flush(30) == 0


def test_max_seconds_with_unread_kafka_input_exits_3(kafka_bootstrap: str, app_id: str,
                                                     tmp_path: Path) -> None:
    topic = f"{app_id}-in"
    ensure_topic(kafka_bootstrap, topic, 2)
    _produce(kafka_bootstrap, topic, RECORDS)
    config = tmp_path / "pipeline.toml"
    config.write_text(
        f'app_id = "{app_id}"\n'
        f'[source]\ntype = "kafka"\ntopics = ["{topic}"]\nmax_offsets_per_trigger = 100\n'
        '[dedup]\nenabled = false\n[sink]\ntype = "console"\n'
        "[run]\ntrigger_seconds = 1.0\nstop_after_idle_seconds = 3.0\n"
    )
    dedup = Path(sys.executable).with_name("dedup")
    env = {**os.environ, "DEDUP_CACHE_DIR": str(tmp_path / "cache"), **jar_env()}
    argv = [str(dedup), "run", str(config), "--bootstrap", kafka_bootstrap, "--quiet"]
    cut = subprocess.run([*argv, "--max-seconds", "5"], capture_output=True, text=True,
                         timeout=400, env=env, check=False)
    assert cut.returncode == EXIT_INCOMPLETE, f"{cut.stdout}\n{cut.stderr}"
    assert f"stopped at max_seconds with input left in {topic}" in cut.stdout, cut.stdout
    assert "run the same command again to resume from the checkpoint" in cut.stdout

    # Run again until idle: it resumes, reads the rest and has nothing to say.
    rest = subprocess.run(argv, capture_output=True, text=True, timeout=400, env=env,
                          check=False)
    assert rest.returncode == 0, f"{rest.stdout}\n{rest.stderr}"
    assert "input left" not in rest.stdout, rest.stdout
