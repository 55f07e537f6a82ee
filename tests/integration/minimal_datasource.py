"""A minimal Python streaming source and writer (``pyspark.sql.datasource``).

Kept in an importable module because Spark pickles data source classes by
reference: the Python workers import them by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

ROWS_PER_BATCH = 10


class CountingSource(DataSource):
    """Emits 0, 1, 2, ... ten per micro-batch, up to ``batches`` batches."""

    @classmethod
    def name(cls) -> str:
        return "counting_source"

    def schema(self) -> str:
        return "n long"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _CountingReader(int(self.options.get("batches", "3")))


class _CountingReader(DataSourceStreamReader):
    def __init__(self, batches: int) -> None:
        self.batches = batches
        self.current = 0

    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def latestOffset(self) -> dict[str, int]:
        if self.current < self.batches * ROWS_PER_BATCH:
            self.current += ROWS_PER_BATCH
        return {"n": self.current}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition((start["n"], end["n"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        first, last = partition.value  # type: ignore[attr-defined]
        for n in range(first, last):
            yield (n,)


@dataclass
class _Written(WriterCommitMessage):
    path: str


class FileRowsSink(DataSource):
    """Writes each partition to ``part-<batch>-<partition>`` and marks commits."""

    @classmethod
    def name(cls) -> str:
        return "file_rows_sink"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return _FileRowsWriter(self.options["path"])


class _FileRowsWriter(DataSourceStreamWriter):
    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, iterator: Iterator[Any]) -> _Written:
        context = TaskContext.get()
        assert context is not None
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        target = Path(self.path) / f"part-{batch_id}-{context.partitionId()}"
        target.write_text("".join(f"{row.n}\n" for row in iterator))
        return _Written(str(target))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        (Path(self.path) / f"commit-{batchId}").write_text("ok")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        (Path(self.path) / f"abort-{batchId}").write_text("aborted")
