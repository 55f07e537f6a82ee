"""A replayable synthetic streaming source (a PySpark Python data source).

Register it once per session with :func:`register_synthetic` (or
``sources.register``), then::

    spark.readStream.format("dedup_synthetic").option("seed", 7)
        .option("rows_per_batch", 1000).option("total_rows", 20000)
        .option("duplicate_rate", 0.2).load()

Offsets are row counts (``{"row": n}``). Each micro-batch covers at most
``rows_per_batch`` rows, starting on a multiple of it, and every row is a pure
function of (seed, row number) (see :mod:`sources.synthetic_rows`), so Spark
can replay any batch after a crash and get the same rows: a valid source for
recovery tests and benchmarks. With ``total_rows`` set it stops offering new
offsets once all rows were planned.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from dedup.spark_session import make_active
from dedup.worker_imports import settle_worker
from sources.synthetic_rows import SCHEMA, SyntheticOptions, SyntheticRow, synthetic_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

FORMAT = "dedup_synthetic"
"""Name to pass to ``spark.readStream.format``."""


class SyntheticSource(DataSource):
    """Spark data source ``dedup_synthetic``; options are :class:`SyntheticOptions` fields."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SyntheticStreamReader(SyntheticOptions.from_options(dict(self.options)))


class _RowRange(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


class SyntheticStreamReader(DataSourceStreamReader):
    """Plans batches of ``rows_per_batch`` rows and reads any range deterministically."""

    def __init__(self, options: SyntheticOptions) -> None:
        self.options = options
        # None until Spark tells us where the query stands: after a restart it
        # replans or commits the last batch of the offset log before asking for
        # a new one, and that end offset is where new batches must start.
        self.current: int | None = None
        self.started_at = time.monotonic()
        self.started_from: int | None = None

    def initialOffset(self) -> dict[str, int]:
        return {"row": 0}

    def _advance_to(self, row: int) -> None:
        self.current = row if self.current is None else max(self.current, row)

    # PySpark 4.2 types latestOffset(start, limit) (admission control); it still
    # calls this zero-argument form, which 4.0 and 4.1 require. Taking the two
    # arguments would switch on admission control, where a ReadAllAvailable limit
    # (availableNow) means all rows at once instead of rows_per_batch per batch.
    def latestOffset(self) -> dict[str, int]:  # type: ignore[override, unused-ignore]
        if self.current is None:
            self.current = 0
        if self.started_from is None:
            self.started_from = self.current
            self.started_at = time.monotonic()
        # Batches start on multiples of rows_per_batch so that the logical
        # batches of synthetic_rows (duplicate distances) match Spark's.
        per = self.options.rows_per_batch
        target = (self.current // per + 1) * per
        if self.options.total_rows:
            target = min(target, self.options.total_rows)
        if self.options.rows_per_second > 0:
            elapsed = time.monotonic() - self.started_at
            target = min(target, self.started_from + int(elapsed * self.options.rows_per_second))
        self._advance_to(target)
        return {"row": self.current}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        first, last = int(start["row"]), int(end["row"])
        self._advance_to(last)
        count = max(1, min(self.options.num_partitions, last - first))
        bounds = [first + (last - first) * i // count for i in range(count + 1)]
        return [_RowRange(bounds[i], bounds[i + 1]) for i in range(count)]

    def read(self, partition: InputPartition) -> Iterator[SyntheticRow]:
        assert isinstance(partition, _RowRange)
        settle_worker()  # a Python worker's task: PySpark's per-task overhead, see the module
        return synthetic_rows(self.options, partition.start, partition.end)

    def commit(self, end: dict[str, int]) -> None:
        self._advance_to(int(end["row"]))


def register_synthetic(spark: SparkSession) -> None:
    """Register ``dedup_synthetic`` with ``spark`` and make it the thread's active session.

    Safe to repeat; see :func:`dedup.spark_session.make_active`.
    """
    spark.dataSource.register(SyntheticSource)
    make_active(spark)


def synthetic_stream(spark: SparkSession, options: SyntheticOptions | None = None,
                     **overrides: Any) -> Any:
    """A streaming DataFrame of synthetic rows (registers the source if needed)."""
    register_synthetic(spark)
    opts = options or SyntheticOptions()
    if overrides:
        opts = SyntheticOptions(**{**opts.__dict__, **overrides})
    return spark.readStream.format(FORMAT).options(**opts.as_options()).load()
