"""A checkpoint replayed after a code change: its stored schema must match the input's."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import sinks.writer as writer
from sinks import SinkConfig
from sinks.checkpoint import CheckpointStore, encode_batches
from sinks.exceptions import CheckpointStateError, SinkError
from sinks.records import InputLayout, SizeLimit

CONFIG = SinkConfig.from_options({"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out",
                                  "app.id": "app-schema", "redis.url": "redis://127.0.0.1:1/0"})


def _replay(monkeypatch: pytest.MonkeyPatch, stored: list[Any]) -> list[Any]:
    """Make the store return ``stored`` as the first attempt's checkpoint; record emits."""
    emitted: list[Any] = []

    def put_if_absent(self: CheckpointStore, query_id: str, batch: int, partition: int,
                      data: bytes) -> tuple[bytes, bool]:
        return encode_batches(stored), False

    def write_partition(config: SinkConfig, records: list[Any], *args: Any,
                        **kwargs: Any) -> Any:
        emitted.extend(records)
        return None

    monkeypatch.setattr(CheckpointStore, "put_if_absent", put_if_absent)
    monkeypatch.setattr(writer, "write_partition", write_partition)
    # No broker to read the topics' max.message.bytes from: Kafka's defaults.
    monkeypatch.setattr(writer, "topic_limits", lambda config: lambda topic, fresh: SizeLimit(
        topic, 1_048_588, config.max_message_bytes))
    return emitted


def test_a_checkpoint_of_another_schema_fails_the_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first attempt's code had no topic column; the new code routes by topic.
    old = [pa.RecordBatch.from_pylist([{"value": "v1", "_record_id": "id-1"}])]
    emitted = _replay(monkeypatch, old)
    now = [pa.RecordBatch.from_pylist([{"value": "v1", "topic": "orders", "_record_id": "id-1"}])]
    layout = InputLayout(has_topic=True, has_record_id=True)
    with pytest.raises(CheckpointStateError, match=r"batch 5.*partition 2.*topic") as caught:
        writer.write_batches(CONFIG, layout, ["value", "topic", "_record_id"], now, "q", 5, 2)
    assert emitted == [], f"emitted from a foreign checkpoint: {emitted}"
    assert caught.value.fatal() and not caught.value.retriable()
    assert "restore" in str(caught.value)


def test_a_changed_column_type_fails_the_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    old = [pa.RecordBatch.from_pylist([{"value": b"v1", "_record_id": "id-1"}])]
    _replay(monkeypatch, old)
    now = [pa.RecordBatch.from_pylist([{"value": "v1", "_record_id": "id-1"}])]
    with pytest.raises(CheckpointStateError, match=r"value"):
        writer.write_batches(CONFIG, InputLayout(has_record_id=True), ["value", "_record_id"],
                             now, "q", 1, 0)


def test_the_same_schema_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    old = [pa.RecordBatch.from_pylist([{"value": "first", "_record_id": "id-1"}])]
    emitted = _replay(monkeypatch, old)
    now = [pa.RecordBatch.from_pylist([{"value": "second", "_record_id": "id-1"}])]
    writer.write_batches(CONFIG, InputLayout(has_record_id=True), ["value", "_record_id"],
                         now, "q", 1, 0)
    assert [r.value for r in emitted] == [b"first"]


def test_a_missing_column_is_never_read_as_the_last_one() -> None:
    from sinks.records import to_records

    batch = pa.RecordBatch.from_pylist([{"value": "v1", "_record_id": "id-1"}])
    with pytest.raises(SinkError, match="topic"):
        to_records([batch], CONFIG, InputLayout(has_topic=True, has_record_id=True), 0, 0)


@pytest.mark.parametrize("stored_has_it", [True, False], ids=["in-checkpoint", "in-input"])
def test_a_column_the_sink_does_not_read_does_not_fail_the_replay(
        monkeypatch: pytest.MonkeyPatch, stored_has_it: bool) -> None:
    # dedup run in one pass carries the event-time column to the sink, two steps do
    # not: a batch checkpointed by one form is replayed by the other (issue 33).
    plain = {"value": "first", "_record_id": "id-1"}
    carried = {**plain, "event_time": "2026-11-26 08:00:00"}
    emitted = _replay(monkeypatch, [pa.RecordBatch.from_pylist(
        [carried if stored_has_it else plain])])
    now = {**(plain if stored_has_it else carried), "value": "second"}
    writer.write_batches(CONFIG, InputLayout(has_record_id=True), list(now),
                         [pa.RecordBatch.from_pylist([now])], "q", 1, 0)
    assert [(r.value, r.record_id) for r in emitted] == [(b"first", b"id-1")]
