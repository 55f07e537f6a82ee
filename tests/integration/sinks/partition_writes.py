"""Helpers of the tests that drive ``sinks.transactions.write_partition`` directly (this
test process is the Python worker): a batch's records, the IDs a reader sees, a sink
configuration on a prepared output topic."""

from __future__ import annotations

from dedup.constants import RECORD_ID_HEADER
from sinks import SinkConfig
from sinks.admin import prepare
from sinks.kafka_io import consume_all, ensure_topic
from sinks.records import OutRecord


def batch_records(topic: str, batch: int, n: int = 20) -> list[OutRecord]:
    """``n`` records of ``batch`` for ``topic``, each with its own record ID."""
    return [OutRecord(topic, None, f"k{batch}-{i}".encode(), f"v{batch}-{i}".encode(), (),
                      f"id-{batch}-{i}".encode()) for i in range(n)]


def output_ids(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[str]:
    """The record IDs in ``topic`` as a reader of ``isolation`` sees them, in order."""
    return [(r.header(RECORD_ID_HEADER) or b"").decode()
            for r in consume_all(bootstrap, topic, isolation)]


def prepared_config(bootstrap: str, app_id: str, topic: str) -> SinkConfig:
    """A sink of ``app_id`` (weak productions: Kafka alone) on a one-partition ``topic``."""
    config = SinkConfig(app_id=app_id, bootstrap_servers=bootstrap, topic=topic,
                        strong_productions=False)
    prepare(config)
    ensure_topic(bootstrap, topic, 1)
    return config
