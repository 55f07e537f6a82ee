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
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import redis

from dedup.cli.progress import Progress
from dedup.local.services import KafkaBroker, RedisServer

RESULTS_DIR = Path(os.environ.get("BENCH_RESULTS_DIR")
                   or Path(__file__).resolve().parent / "results")
"""Where results are written and read: ``benchmarks/results`` unless the environment
variable ``BENCH_RESULTS_DIR`` names another folder (smoke runs write to a temp folder)."""
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


def kafka_version() -> str:
    """The Kafka broker release of the fetched jars ('?' when none are)."""
    from dedup.local.paths import kafka_broker_jars

    jars = sorted(kafka_broker_jars().glob("kafka_2.13-*.jar"))
    return jars[0].name.removeprefix("kafka_2.13-").removesuffix(".jar") if jars else "?"


def redis_version() -> str:
    """The release of the ``redis-server`` on PATH ('?' when none answers)."""
    try:
        import subprocess

        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                             check=False).stdout
        return out.split("v=")[1].split()[0]
    except (OSError, IndexError):
        return "?"


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


def output_correct(run: Mapping[str, Any], at_least_once: bool, records: int,
                   distinct: int) -> bool:
    """Whether a Kafka-to-Kafka run's output read back is what its variant must write:
    every record (``at_least_once``, the input's copies included) or each of the
    ``distinct`` IDs once. Pure."""
    return (run["records_out"] == (records if at_least_once else distinct)
            and run["distinct_out"] == distinct)


def refuse_wrong_outputs(runs: Sequence[Mapping[str, Any]]) -> None:
    """Stop the benchmark, naming the variants whose run says ``output_correct`` False:
    figures of a pipeline that wrote the wrong output measure nothing."""
    wrong = [str(run["variant"]) for run in runs if run.get("output_correct") is False]
    if wrong:
        raise SystemExit(f"variants {wrong} produced wrong output: the benchmark is void")


def kafka_rounds_setup(args: argparse.Namespace, distinct: int, input_partitions: int,
                       measured: str) -> dict[str, Any]:
    """The ``setup`` of a result of Kafka-to-Kafka rounds (``bench_args``'s sizes)."""
    return {"records": args.records, "distinct": distinct, "dup_rate": args.dup_rate,
            "per_trigger": args.per_trigger, "value_bytes": args.value_bytes,
            "input_partitions": input_partitions, "shuffle_partitions": args.partitions,
            "rounds": args.repeats, "measured": measured}


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


def empty_redis(redis_url: str) -> None:
    """FLUSHALL the benchmark's own Redis before a measured run.

    Every run starts from an empty Redis, as a new app id's pipeline does: what the
    runs before it left (their own app ids) would otherwise be rewritten by Redis's
    AOF rewrites, forked children whose CPU :class:`CpuSampler` counts with Redis,
    inside whichever run happened to trigger one (3.58 us of Redis CPU per record for
    one pass in ``bench_e2e`` on 2026-12-04, its claims about a quarter of it).
    """
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushall()
    finally:
        client.close()


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
    from dedup.worker_imports import settle_worker

    class NothingDecided:
        """Reads the whole partition as the operator's step does; keeps every row."""

        def _zeros(self, rows: int) -> dict[str, np.ndarray]:
            settle_worker()  # as the operator does
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


# --- Rounds: each variant once per round, ratios per round, median and spread ---


def round_order(variants: Sequence[str], round_index: int, order: str = "rotate") -> list[str]:
    """The variants of round ``round_index`` in the order they run.

    ``"fixed"``: the given order every round. ``"rotate"`` (default): round k starts
    at variant k (mod n), so each variant takes a different slot in each round. A
    fixed order would give every variant the same neighbour and the same slot in
    every round (the same JIT, GC and Redis/Kafka background state left by the
    variant before it): a position effect then repeats identically in each round,
    biases the ratio and never shows in its spread. Rotated, it shows as spread and
    partly cancels in the median.
    """
    if order not in ("rotate", "fixed"):
        raise ValueError(f"order must be 'rotate' or 'fixed', not {order!r}")
    items = list(variants)
    if order == "fixed" or not items:
        return items
    k = round_index % len(items)
    return items[k:] + items[:k]


def median(values: Sequence[float]) -> float | None:
    """The median (mean of the middle two for an even count); None for no values."""
    return float(statistics.median(values)) if values else None


def spread(values: Sequence[float]) -> float | None:
    """max - min; None for no values (0.0 for one)."""
    return float(max(values) - min(values)) if values else None


def per_round_ratios(runs: Sequence[Mapping[str, Any]], numerator: str,
                     denominator: str | tuple[str, ...],
                     value: str | Callable[[Mapping[str, Any]], float] = "records_per_s",
                     digits: int = 3) -> list[float]:
    """``value(numerator) / value(denominator)`` for each round (``run["round"]``) in
    which both variants ran, in round order; numerator and baseline always come from
    the same round. Rounds with a zero baseline are left out. A tuple of baselines
    divides by the largest of their values in that round (the faster of two pipelines
    a user could pick instead, for throughput); a round needs all of them."""
    get = value if callable(value) else (lambda run: float(run[value]))
    baselines = (denominator,) if isinstance(denominator, str) else denominator
    by_round: dict[int, dict[str, Mapping[str, Any]]] = {}
    for run in runs:
        by_round.setdefault(int(run.get("round", 0)), {})[str(run["variant"])] = run
    out: list[float] = []
    for index in sorted(by_round):
        pair = by_round[index]
        if numerator in pair and all(name in pair for name in baselines):
            best = max(get(pair[name]) for name in baselines)
            value_r = ratio(get(pair[numerator]), best, digits)
            if value_r is not None:
                out.append(value_r)
    return out


def round_ratio(runs: Sequence[Mapping[str, Any]], name: str, numerator: str,
                denominator: str | tuple[str, ...],
                value: str | Callable[[Mapping[str, Any]], float] = "records_per_s",
                digits: int = 3) -> dict[str, Any]:
    """``{name: median, name_spread: max - min, name_rounds: per-round values}`` of the
    ratio ``numerator / denominator`` over the rounds (see :func:`per_round_ratios`)."""
    rounds = per_round_ratios(runs, numerator, denominator, value, digits)
    mid, width = median(rounds), spread(rounds)
    return {name: None if mid is None else round(mid, digits),
            f"{name}_spread": None if width is None else round(width, digits),
            f"{name}_rounds": rounds}


def variant_medians(runs: Sequence[Mapping[str, Any]], keys: Sequence[str],
                    digits: int = 9) -> dict[str, dict[str, float | None]]:
    """Per variant, the median over its runs of each of ``keys`` (runs without a key,
    or with None, are left out of that key's median)."""
    variants = list(dict.fromkeys(str(run["variant"]) for run in runs))
    out: dict[str, dict[str, float | None]] = {}
    for variant in variants:
        mine = [run for run in runs if run["variant"] == variant]
        row: dict[str, float | None] = {}
        for key in keys:
            values = [float(run[key]) for run in mine if run.get(key) is not None]
            mid = median(values)
            row[key] = None if mid is None else round(mid, digits)
        out[variant] = row
    return out


# --- CPU seconds per process class, from /proc ---

CPU_CLASSES = ("jvm", "python", "broker", "redis", "driver", "jvm_exited_children")
"""Process classes of :class:`CpuSampler`; ``driver`` is the benchmark's own process,
``jvm_exited_children`` what the JVM's children that exited in the window used: without
the native Hadoop library these are mostly ``chmod`` and ``readlink`` forked for every
checkpoint file (the JVM's work, kept apart), plus any Python child of the JVM that
exited (also in ``python``; PySpark 4 keeps its Python in long-lived daemons)."""


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the sampler needs (times in clock ticks)."""

    pid: int
    comm: str
    ppid: int
    utime: int
    stime: int
    cutime: int
    cstime: int
    starttime: int

    @property
    def own(self) -> int:
        """Ticks of the process itself (all its threads)."""
        return self.utime + self.stime

    @property
    def reaped(self) -> int:
        """Ticks of its children that exited and were waited for (and theirs)."""
        return self.cutime + self.cstime


def read_stat(pid: int, proc: Path = Path("/proc")) -> ProcStat | None:
    """``/proc/<pid>/stat`` parsed; None when the process is gone or unreadable."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    try:
        # comm may hold spaces and parentheses: it ends at the last ')'
        comm = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        # fields[0] is field 3 (state): field n is fields[n - 3]
        return ProcStat(pid=pid, comm=comm, ppid=int(fields[1]), utime=int(fields[11]),
                        stime=int(fields[12]), cutime=int(fields[13]), cstime=int(fields[14]),
                        starttime=int(fields[19]))
    except (ValueError, IndexError):
        return None


def process_table(proc: Path = Path("/proc")) -> dict[int, ProcStat]:
    """Every readable process of ``proc``, by pid."""
    table: dict[int, ProcStat] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            stat = read_stat(int(name), proc)
            if stat is not None:
                table[stat.pid] = stat
    return table


def subtree_ticks(pid: int, table: Mapping[int, ProcStat],
                  children: Mapping[int, Sequence[int]] | None = None) -> int:
    """CPU ticks of ``pid`` and its descendants: its own, its waited-for children's
    (``cutime``/``cstime``, which hold their own waited-for children) and, for each
    child still alive, that child's subtree. A descendant orphaned to init when its
    parent died is not counted."""
    if children is None:
        children = children_map(table)
    stat = table.get(pid)
    if stat is None:
        return 0
    return stat.own + stat.reaped + sum(subtree_ticks(c, table, children)
                                        for c in children.get(pid, ()))


def children_map(table: Mapping[int, ProcStat]) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for stat in table.values():
        kids.setdefault(stat.ppid, []).append(stat.pid)
    return kids


def _is_python(pid: int, stat: ProcStat, proc: Path) -> bool:
    if stat.comm.startswith("python"):
        return True
    try:
        argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and (os.path.basename(argv[0]).startswith(b"python")
                           or any(b"pyspark" in a for a in argv[1:3]))


class CpuSampler:
    """CPU seconds (user + system, from ``/proc/<pid>/stat``) per process class over a
    measured window: ``start()`` at its beginning, ``stop()`` at its end.

    Classes (a class whose pid is None is not reported):

    * ``jvm``: the Spark JVM (driver and, in ``local[*]``, the executor), its own
      utime + stime (every thread);
    * ``python``: the Python processes the JVM started (``pyspark.daemon`` and any
      worker it runs directly, e.g. a Python data source's planner) with all their
      descendants (the daemon's forked workers): own time + waited-for children's
      time + live descendants'. A background thread samples every ``interval``
      seconds, so a Python child of the JVM that exits inside the window counts
      with its last sample (the time after it, or all of a child that lives less than
      ``interval``, is missed); workers that exit under the daemon are counted
      exactly (the daemon waits for them: its cutime). What the JVM's exited
      children used in all (Python or not, e.g. a forked ``chmod``) is reported as
      ``jvm_exited_children`` for comparison;
    * ``broker`` / ``redis``: the process and its descendants (a Redis AOF rewrite
      fork counts once it is waited for, or while alive);
    * ``driver``: this process (the benchmark's Python driver: py4j,
      ``foreachBatch`` functions), its own time less the sampler thread's own.
    """

    def __init__(self, pids: Mapping[str, int | None], interval: float = 0.5,
                 proc: Path = Path("/proc"), driver_pid: int | None = None) -> None:
        self.pids = {k: v for k, v in pids.items() if v}
        self.interval = interval
        self.proc = proc
        self.driver_pid = os.getpid() if driver_pid is None else driver_pid
        self.tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._python_last: dict[tuple[int, int], int] = {}
        self._python_base: dict[tuple[int, int], int] = {}
        self._start: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sampler_cpu = 0.0
        self.samples = 0

    def _python_children(self, table: Mapping[int, ProcStat],
                         children: Mapping[int, Sequence[int]]) -> dict[tuple[int, int], int]:
        jvm = self.pids.get("jvm")
        if jvm is None:
            return {}
        return {(pid, table[pid].starttime): subtree_ticks(pid, table, children)
                for pid in children.get(jvm, ()) if _is_python(pid, table[pid], self.proc)}

    def _sample(self) -> tuple[dict[int, ProcStat], dict[int, list[int]]]:
        table = process_table(self.proc)
        children = children_map(table)
        seen = self._python_children(table, children)
        with self._lock:
            self._python_last.update(seen)
            self.samples += 1
        return table, children

    def _totals(self, table: Mapping[int, ProcStat],
                children: Mapping[int, Sequence[int]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, pid in self.pids.items():
            if name == "jvm":
                stat = table.get(pid)
                out["jvm"] = stat.own if stat else 0
                out["jvm_exited_children"] = stat.reaped if stat else 0
            elif name in ("broker", "redis"):
                out[name] = subtree_ticks(pid, table, children)
        driver = table.get(self.driver_pid)
        out["driver"] = driver.own if driver else 0
        return out

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            before = time.thread_time()
            self._sample()
            self._sampler_cpu += time.thread_time() - before

    def start(self) -> CpuSampler:
        table, children = self._sample()
        with self._lock:
            self._python_base = dict(self._python_children(table, children))
            self._python_last = dict(self._python_base)
        self._start = self._totals(table, children)
        self._stop.clear()
        self._sampler_cpu = 0.0
        if self.interval > 0 and "jvm" in self.pids:
            self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        """CPU seconds per class since :meth:`start` (``python`` only with a ``jvm``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        table, children = self._sample()
        end = self._totals(table, children)
        out = {name: max(0, end[name] - self._start.get(name, 0)) / self.tick for name in end}
        if "driver" in out:
            out["driver"] = max(0.0, out["driver"] - self._sampler_cpu)
        if "jvm" in self.pids:
            with self._lock:
                ticks = sum(max(0, last - self._python_base.get(key, 0))
                            for key, last in self._python_last.items())
            out["python"] = ticks / self.tick
        return {name: round(value, 3) for name, value in out.items()}


def cpu_per_record(cpu_s: Mapping[str, float], records: int) -> dict[str, float | None]:
    """``cpu_s_per_record_<class>`` for each class of :data:`CPU_CLASSES` in ``cpu_s``."""
    return {f"cpu_s_per_record_{name}": (round(cpu_s[name] / records, 9) if records else None)
            for name in CPU_CLASSES if name in cpu_s}


def spark_jvm_pid(spark: Any) -> int | None:
    """The pid of the JVM behind a local Spark session (the py4j gateway's process, or
    else a ``java`` child of this process)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if proc is not None and getattr(proc, "pid", None):
        return int(proc.pid)
    table = process_table()
    return next((pid for pid, stat in table.items()
                 if stat.ppid == os.getpid() and stat.comm == "java"), None)
