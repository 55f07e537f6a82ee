"""How much Kafka input a stopped ``dedup run`` left unread.

The query's read position is the end offsets of its newest committed batch:
from the checkpoint's ``offsets/<batch>`` file when the checkpoint is a local
folder (what a restart resumes from), else from the newest progress report.
The topic's end is its last stable offset (``read_committed``, as the source
reads), so transaction markers at the end do not count as input.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Offsets = dict[str, dict[int, int]]
"""topic -> partition -> next offset to read."""


def _merge(into: Offsets, raw: Any) -> None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return
    if not isinstance(raw, dict):
        return
    for topic, partitions in raw.items():
        if isinstance(partitions, dict):
            for partition, offset in partitions.items():
                into.setdefault(str(topic), {})[int(partition)] = int(offset)


def checkpoint_offsets(checkpoint: str) -> Offsets | None:
    """Kafka end offsets of the newest committed batch; ``{}`` if none; None if unreadable.

    Only a local checkpoint folder (a path or ``file:`` URI) can be read.
    """
    if "://" in checkpoint and not checkpoint.startswith("file://"):
        return None
    folder = Path(checkpoint.removeprefix("file://").removeprefix("file:"))
    commits = folder / "commits"
    if not commits.is_dir():
        return {}  # no batch committed yet
    batches = sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    if not batches:
        return {}
    try:
        lines = (folder / "offsets" / str(batches[-1])).read_text().splitlines()
    except OSError:
        return None
    found: Offsets = {}
    for line in lines[2:]:  # "v1", the batch metadata, then one line per source
        _merge(found, line)
    return found


def progress_offsets(progress: dict[str, Any] | None) -> Offsets | None:
    """Kafka end offsets in a progress report (the newest batch Spark reported), or None."""
    if not progress:
        return None
    found: Offsets = {}
    for source in progress.get("sources") or []:
        _merge(found, source.get("endOffset"))
    return found or None


def topic_ends(bootstrap: str, topics: Sequence[str], client_config: dict[str, Any],
               timeout: float = 10.0) -> dict[str, dict[int, tuple[int, int]]]:
    """topic -> partition -> (first offset, last stable offset), read_committed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dedup-cli-input-left",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         **client_config})
    try:
        metadata = consumer.list_topics(timeout=timeout)
        ends: dict[str, dict[int, tuple[int, int]]] = {}
        for topic in topics:
            if topic not in metadata.topics:
                continue
            for partition in metadata.topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=timeout, cached=False)
                ends.setdefault(topic, {})[partition] = (int(low), int(high))
        return ends
    finally:
        consumer.close()


def unread(ends: dict[str, dict[int, tuple[int, int]]], read: Offsets | None,
           starting_offsets: str) -> int | None:
    """Offsets between the read position and the topic's end; None when it cannot be told.

    Nothing committed yet counts from the start of each partition when the
    source starts at ``earliest``; otherwise the start is unknown.
    """
    if read is None:
        return None
    total = 0
    for topic, partitions in ends.items():
        for partition, (low, high) in partitions.items():
            position = read.get(topic, {}).get(partition)
            if position is None:  # not read from yet (or nothing committed at all)
                if starting_offsets != "earliest":
                    return None
                position = low
            total += max(0, high - max(position, low))
    return total
