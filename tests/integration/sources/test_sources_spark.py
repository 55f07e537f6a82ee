"""The sources under Spark: replayable synthetic stream, read_committed Kafka, files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from dedup.constants import RECORD_ID_HEADER
from sinks.kafka_io import ensure_topic
from sources import SyntheticOptions, read_files, read_kafka, synthetic_rows, synthetic_stream

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _run_until(query: Any, done: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done():
        if not query.isActive:
            raise AssertionError(f"query stopped: {query.exception()}")
        time.sleep(0.3)
    assert done(), "timed out"


def _end_row(query: Any) -> int:
    progress = query.lastProgress
    if not progress:
        return -1
    end = progress["sources"][0]["endOffset"]
    if isinstance(end, str):  # JSON on PySpark 4.2, the dict's Python text on 4.1
        end = json.loads(end.replace("'", '"'))
    return int(end["row"])


@pytest.mark.slow
def test_synthetic_stream_resumes_after_a_stop_without_gaps_or_repeats(
        spark: Any, tmp_path: Path) -> None:
    opts = SyntheticOptions(seed=21, rows_per_batch=150, total_rows=900, duplicate_rate=0.3,
                            num_partitions=3)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start() -> Any:
        return (synthetic_stream(spark, opts).writeStream.format("parquet")
                .option("path", out).option("checkpointLocation", checkpoint)
                .trigger(processingTime="0 seconds").start())

    first = start()
    _run_until(first, lambda: _end_row(first) >= 300)
    first.stop()
    second = start()
    _run_until(second, lambda: _end_row(second) >= 900)
    second.stop()
    got = spark.read.parquet(out).collect()
    expected = {row[4]: row for row in synthetic_rows(opts, 0, 900)}
    seqs = sorted(r["seq"] for r in got)
    assert seqs == list(range(900)), "every row exactly once across the restart"
    for r in got:
        want = expected[r["seq"]]
        assert (r["event_id"], r["key"], r["payload"]) == want[:3]
        assert r["event_time"].timestamp() == pytest.approx(want[3].timestamp())


def _produce(bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic, partitions=1)
    plain = Producer({"bootstrap.servers": bootstrap})
    for n in range(3):
        plain.produce(topic, key=f"key{n}".encode(), value=f"plain{n}".encode(),
                      headers=[(RECORD_ID_HEADER, f"hid{n}".encode())])
    plain.flush(30)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-writer"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, key=b"gone", value=b"aborted", headers=[(RECORD_ID_HEADER, b"x")])
    txn.flush(30)
    txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, key=b"key9", value=b"committed",
                headers=[(RECORD_ID_HEADER, b"hid9")])
    txn.commit_transaction(30)


@pytest.mark.kafka
def test_read_kafka_is_read_committed_and_attaches_ids(spark: Any, kafka_bootstrap: str,
                                                       app_id: str) -> None:
    topic = f"{app_id}-in"
    _produce(kafka_bootstrap, topic)
    results = {}
    for strategy in ("header", "key", "kafka"):
        frame = read_kafka(spark, kafka_bootstrap, topic, id_strategy=strategy)
        name = f"src_{strategy}_{app_id.replace('-', '_')}"
        query = (frame.writeStream.format("memory").queryName(name)
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        results[strategy] = {r["value"].decode(): r for r in spark.table(name).collect()}
    values = set(results["header"])
    assert values == {"plain0", "plain1", "plain2", "committed"}, "aborted record must not show"
    assert {v: r["_record_id"] for v, r in results["header"].items()} == {
        "plain0": "hid0", "plain1": "hid1", "plain2": "hid2", "committed": "hid9"}
    assert results["key"]["plain1"]["_record_id"] == "key1"
    row = results["kafka"]["committed"]
    assert row["_record_id"] == f"{topic}/{row['partition']}/{row['offset']}"
    none = read_kafka(spark, kafka_bootstrap, topic, id_strategy=None)
    assert "_record_id" not in none.columns


def test_read_files_hashes_columns_into_stable_ids(spark: Any, tmp_path: Path,
                                                   app_id: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.json").write_text('{"id": "e1", "n": 1}\n{"id": "e2", "n": 2}\n')
    (folder / "b.json").write_text('{"id": "e1", "n": 1}\n{"id": "e3", "n": 1}\n')
    name = f"files_{app_id.replace('-', '_')}"
    frame = read_files(spark, str(folder), format="json", schema="id string, n long",
                       id_strategy="hash", columns=["id", "n"], max_files_per_trigger=1)
    query = frame.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    query.awaitTermination(120)
    rows = spark.table(name).collect()
    ids = {(r["id"], r["n"]): r["_record_id"] for r in rows}
    assert len(rows) == 4 and len(ids) == 3
    assert len({r["_record_id"] for r in rows}) == 3  # the repeated record shares its ID
    assert all(len(rid) == 32 for rid in ids.values())
