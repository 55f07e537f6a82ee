"""Helpers every benchmark script shares: the summary file and run metadata, the
services of a run (Redis, Kafka), Redis INFO, timing and statistics.

Every benchmark starts its own ``redis-server`` (and Kafka broker when it
needs one) on a free loopback port through :mod:`dedup.local`, and stops
them on the way out, also after a failure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from dedup.cli.progress import Progress
from dedup.local.services import KafkaBroker, RedisServer

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SUMMARY_PATH = RESULTS_DIR / "summary.json"


def merge_summary(figures: dict[str, Any], path: Path = SUMMARY_PATH) -> dict[str, Any]:
    """Merge named figures into the flat ``summary.json`` (atomic replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    current: dict[str, Any] = {}
    if path.exists():
        current = json.loads(path.read_text())
    current.update(figures)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(current, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)
    return current


def run_metadata() -> dict[str, Any]:
    """Date, machine and versions, stored beside every result."""
    import confluent_kafka
    import pyspark

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"{_mem_gib():.0f} GiB, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        # version() is a (str, int) tuple in some releases and a plain str in others
        "confluent_kafka": getattr(confluent_kafka, "__version__", None)
                           or str(confluent_kafka.version()[0]),
        "librdkafka": confluent_kafka.libversion()[0],
    }


def write_json(name: str, data: dict[str, Any]) -> Path:
    path = RESULTS_DIR / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def _mem_gib() -> float:
    try:
        with open("/proc/meminfo") as handle:
            kib = int(handle.readline().split()[1])
        return kib / 1024 / 1024
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass
class Services:
    """The services of one benchmark run (``broker`` is None without Kafka)."""

    workdir: Path
    redis: RedisServer
    broker: KafkaBroker | None

    @property
    def redis_url(self) -> str:
        return self.redis.url

    @property
    def bootstrap(self) -> str:
        if self.broker is None:
            raise RuntimeError("this benchmark was started without Kafka")
        return self.broker.bootstrap_servers


@contextmanager
def bench_services(prefix: str, kafka: bool = False) -> Iterator[Services]:
    """Start Redis (AOF on, fsync everysec) and optionally Kafka in a temp dir; stop both."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
    redis_server = RedisServer(workdir / "redis", appendonly=True, appendfsync="everysec")
    broker = KafkaBroker(workdir / "kafka", heap_mb=512) if kafka else None
    try:
        redis_server.start()
        if broker is not None:
            broker.start()
        yield Services(workdir, redis_server, broker)
    finally:
        if broker is not None:
            broker.stop()
        redis_server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def redis_cpu_seconds(client: Any) -> float:
    """used_cpu_sys + used_cpu_user of the server (INFO cpu), in seconds."""
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def redis_used_memory(client: Any) -> int:
    """INFO memory ``used_memory`` in bytes."""
    return int(client.info("memory")["used_memory"])


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def poisson_interval(count: int) -> tuple[float, float]:
    """Approximate 95% interval of a Poisson count (Wilson-Hilferty style bounds)."""
    if count == 0:
        return 0.0, 3.69
    lo = count * (1 - 1 / (9 * count) - 1.96 / (3 * math.sqrt(count))) ** 3
    hi = (count + 1) * (1 - 1 / (9 * (count + 1)) + 1.96 / (3 * math.sqrt(count + 1))) ** 3
    return max(0.0, lo), hi


def ratio(numerator: float, denominator: float, digits: int = 3) -> float | None:
    """``numerator / denominator`` rounded, None when the denominator is 0."""
    return round(numerator / denominator, digits) if denominator else None


def bench_args(doc: str | None, argv: Sequence[str] | None, full: dict[str, Any],
               quick: dict[str, Any], helps: dict[str, str] | None = None
               ) -> argparse.Namespace:
    """A benchmark script's options: ``--name-with-dashes`` per key of ``full`` (its
    default; the type follows it), and ``--quick``, whose smoke sizes ``quick`` replace
    the parsed ones (``run_all --quick`` and the tests use it). The description is the
    first line of the script's docstring."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    for key, default in full.items():
        kind = type(default) if isinstance(default, int | float) else str
        parser.add_argument(f"--{key.replace('_', '-')}", dest=key, type=kind, default=default,
                            help=(helps or {}).get(key, f"default {default}"))
    parser.add_argument("--quick", action="store_true", help="small smoke sizes: " + ", ".join(
        f"{key} {value}" for key, value in quick.items()))
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in quick.items():
            setattr(args, key, value)
    return args


def progress(name: str) -> Progress:
    """Timestamped progress lines of a benchmark (a full run takes many minutes)."""
    return Progress(name=name)


def streaming_batches(query: Any) -> list[dict[str, Any]]:
    """``recentProgress`` of a finished query, without empty batches."""
    return [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]


def phase_durations(batches: list[dict[str, Any]]) -> dict[str, int]:
    """``durationMs`` of the batches summed per phase (addBatch, latestOffset, ...)."""
    phases: dict[str, int] = {}
    for progress in batches:
        for key, value in (progress.get("durationMs") or {}).items():
            phases[key] = phases.get(key, 0) + int(value)
    return phases


def run_to_end(writer: Any) -> tuple[float, Any]:
    """Start ``writer`` with ``availableNow``, wait for the end; return (seconds, query)."""
    start = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"benchmark query {query.name or query.id} failed: "
                           f"{query.exception()}")
    return seconds, query


def operator_skeleton(df: Any, id_column: str, num_shards: int, partitions: int) -> Any:
    """The dedup operator's Spark shape with none of its work: the floor of its design.

    The same shuffle (shard placement), the same narrow UDF (Arrow, or pandas
    before PySpark 4.1) over (ID, shard, ID problem code) reading the whole
    partition, the same result struct, observe-free filter; nothing is decided
    (every row kept).
    """
    from pyspark.sql import functions as sf

    from dedup.metrics import LATE, RESULT_COLUMN, RESULT_FIELDS, STATUS
    from dedup.partition_step import id_problem_column, result_type, scalar_iter_udf
    from dedup.placement import placement_column, shard_column
    from dedup.worker_imports import keep_static_archive_caches

    class NothingDecided:
        """Reads the whole partition as the operator's step does; keeps every row."""

        def _zeros(self, rows: int) -> dict[str, np.ndarray]:
            keep_static_archive_caches()  # as the operator does
            return {name: np.zeros(rows, dtype=np.int8 if name in (STATUS, LATE) else np.int32)
                    for name in RESULT_FIELDS}

        def __call__(self, batches: Iterator[tuple[pd.Series, ...]]) -> Iterator[pd.DataFrame]:
            for batch in list(batches):
                yield pd.DataFrame(self._zeros(len(batch[0])))

        def arrow(self, batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
            for batch in list(batches):
                zeros = self._zeros(len(batch[0]))
                yield pa.StructArray.from_arrays([pa.array(v) for v in zeros.values()],
                                                 names=list(zeros))

    decide = scalar_iter_udf(NothingDecided(), result_type())
    record_id = sf.col(id_column)
    shard = shard_column(record_id, num_shards)
    return (df.repartition(partitions, placement_column(shard, num_shards, partitions))
            .withColumn(RESULT_COLUMN, decide(record_id, shard, id_problem_column(record_id)))
            .filter(sf.col(f"{RESULT_COLUMN}.{STATUS}") == 0).drop(RESULT_COLUMN))


def best_runs(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per variant, its fastest run (``records_per_s``) with every run's rate beside it."""
    return {variant: {**max(vr, key=lambda r: r["records_per_s"]),
                      "all_records_per_s": [r["records_per_s"] for r in vr]}
            for variant, vr in runs.items()}


def publish(file_name: str, setup: dict[str, Any], results: dict[str, Any],
            figures: dict[str, float | None]) -> Path:
    """Write ``results/<file_name>`` (metadata, setup, results, figures), merge the
    figures that exist into ``summary.json`` and say so; the written path."""
    path = write_json(file_name, {"metadata": run_metadata(), "setup": setup,
                                  "results": results, **figures})
    merge_summary({k: v for k, v in figures.items() if v is not None})
    print(f"wrote {path}: {figures}")
    return path
