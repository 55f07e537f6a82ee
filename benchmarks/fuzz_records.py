"""Hostile records through the dedup decision and the sink's writer, without Spark (issue 50).

One generated case is one partition of one micro-batch: rows with string or binary IDs
(empty, null, near and past :data:`dedup.ids.MAX_ID_LENGTH`, with a newline, not
UTF-8), keys and values (null, empty, binary), odd header names and values, and event
times (null, NaN, far past, far future). :class:`RecordFuzz` runs a case the way the
one-pass form's task does (``sinks.dedup_foreach_batch.keep_rows``, then
``sinks.writer.write_batches``) against a real Redis and Kafka, and keeps the model's
answer: the first occurrence of each valid ID that is not late, once; under the
invalid-ID policy ``fail`` a case with an invalid ID is refused in one line and writes
nothing, under ``dead_letter`` its invalid rows reach the dead-letter topic once.

Cases stay independent cheaply: each has its own dedup app id (a fresh catalog, a few
Redis keys) and is the next batch of one sink query (one output topic per
:class:`RecordFuzz`); a header ``fuzz-case`` tells its records apart when the output is
read back ``read_committed`` (:meth:`RecordFuzz.check`, one read for many cases).
"""

from __future__ import annotations

import math
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from benchmarks.fuzz_cases import outcome
from dedup.constants import DEFAULT_ID_COLUMN, RECORD_ID_HEADER
from dedup.ids import MAX_ID_LENGTH

CASE_HEADER = "fuzz-case"
NUM_SHARDS = 4
HORIZON = 3600
BATCH_TIME = 1_800_000_000.0
"""The batch clock of every case (2027-01-15): event times are generated around it."""

Row = tuple[Any, Any, Any, Any, Any]
"""(id, key, value, headers, event seconds)."""


@dataclass
class Case:
    """One partition of one batch, and how it is configured."""

    rows: list[Row]
    binary_ids: bool
    binary_payload: bool
    policy: str  # "fail" or "dead_letter"
    event_times: bool
    not_utf8: bool = False
    """A string ID column whose IDs are the UTF-8 bytes of ``rows``' IDs with 0xFF
    appended to the first (Spark's strings may hold any bytes): refused in one line."""


# ---------------------------------------------------------------- generation
def record_ids(binary: bool) -> st.SearchStrategy[Any]:
    # A small pool makes duplicates likely; the rest are the hostile ones.
    pool = ["a", "b", "id-1", "é", "\U0001f4a5"]
    texts = st.one_of(
        st.sampled_from(pool), st.sampled_from(pool), st.none(),
        st.sampled_from(["", "x\ny", "\n", " ", "\r", "\x00", "tab\t"]),
        st.sampled_from([n * "L" for n in (MAX_ID_LENGTH - 1, MAX_ID_LENGTH,
                                           MAX_ID_LENGTH + 1, 5000)]),
        # 1024 characters of two bytes each: within the limit as characters (Spark's
        # length), not as bytes
        st.just("é" * MAX_ID_LENGTH), st.text(max_size=8))
    if not binary:
        return texts
    return st.one_of(texts.map(lambda t: None if t is None else t.encode()),
                     st.sampled_from([b"\xff\xfe", b"\x80", b"\xc3", b"ok\xff", b"\n\xff"]),
                     st.binary(max_size=6))


def _payloads(binary: bool) -> st.SearchStrategy[Any]:
    texts = st.one_of(st.none(), st.sampled_from(["", "v", "é", "\x00", "a\nb"]),
                      st.text(max_size=6), st.just("V" * 20_000))
    if not binary:
        return texts
    return st.one_of(texts.map(lambda t: None if t is None else t.encode()),
                     st.binary(max_size=6), st.just(b"\xff\x00\xfe"))


def _headers() -> st.SearchStrategy[Any]:
    names = st.one_of(st.sampled_from(["", " ", "a\nb", "é", "\x00", "dedup-record-id",
                                       "dedup-sink-error", "h" * 300]), st.text(max_size=5))
    values = st.one_of(st.none(), st.binary(max_size=5), st.just(b"\xff"))
    return st.one_of(st.none(), st.lists(st.fixed_dictionaries({"key": names, "value": values}),
                                         max_size=3))


def _event_times() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.just(math.nan), st.just(math.inf), st.just(-math.inf),
                     st.sampled_from([BATCH_TIME, BATCH_TIME - 10, BATCH_TIME - HORIZON - 1,
                                      0.0, -1e12, 1e12, 253402300800.0, 1e300]),
                     st.floats(BATCH_TIME - 2 * HORIZON, BATCH_TIME + HORIZON))


@st.composite
def cases(draw: st.DrawFn, max_rows: int = 12) -> Case:
    binary_ids, binary_payload = draw(st.booleans()), draw(st.booleans())
    event_times = draw(st.booleans())
    rows = draw(st.lists(st.tuples(record_ids(binary_ids), _payloads(binary_payload),
                                   _payloads(binary_payload), _headers(),
                                   _event_times() if event_times else st.none()),
                         max_size=max_rows))
    policy = draw(st.sampled_from(["fail", "dead_letter"]))
    not_utf8 = (not binary_ids and any(isinstance(row[0], str) for row in rows)
                and draw(st.integers(0, 9)) == 0)
    return Case(rows, binary_ids, binary_payload, policy, event_times, not_utf8)


# ---------------------------------------------------------------- the model
ID_OK, ID_NULL, ID_EMPTY, ID_TOO_LONG, ID_NEWLINE = range(5)


def problem_code(record_id: Any) -> int:
    """What the JVM's ``id_problem_column`` computes: Spark's ``length`` counts a
    string's characters and a binary's bytes."""
    if record_id is None:
        return ID_NULL
    if len(record_id) == 0:
        return ID_EMPTY
    if len(record_id) > MAX_ID_LENGTH:
        return ID_TOO_LONG
    newline = b"\n" if isinstance(record_id, bytes) else "\n"
    return ID_NEWLINE if newline in record_id else ID_OK


def _bytes(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _late(seconds: Any) -> bool:
    return seconds is not None and not math.isnan(seconds) and seconds < BATCH_TIME - HORIZON


def _user_headers(headers: Any) -> tuple[tuple[str, bytes | None], ...]:
    return tuple((str(h["key"]), h["value"]) for h in headers) if headers else ()


Out = tuple[bytes | None, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
"""(record ID header, key, value, the case's own headers) of one output record."""


def _nul_name(headers: Any) -> bool:
    """Whether a header name holds a NUL: the Kafka client would cut it off there, so
    the sink dead-letters the record (or refuses it without a dead-letter topic)."""
    return any("\x00" in str(h["key"]) for h in headers or [])


def _escaped(headers: Any) -> tuple[tuple[str, bytes | None], ...]:
    return tuple((name.replace("\x00", "\\x00"), value)
                 for name, value in _user_headers(headers))


def expected(case: Case) -> tuple[bool, Counter[Out], Counter[Out]]:
    """(refused, output records, dead letters) the model answers for ``case``."""
    codes = [problem_code(row[0]) for row in case.rows]
    if case.not_utf8 or (case.policy == "fail" and any(codes)):
        return True, Counter(), Counter()
    out: Counter[Out] = Counter()
    dead: Counter[Out] = Counter()
    seen: set[Any] = set()
    for row, code in zip(case.rows, codes, strict=True):
        record_id, key, value, headers, seconds = row
        if code:
            dead[(None, _bytes(key), _bytes(value), _escaped(headers))] += 1
            continue
        if case.event_times and _late(seconds):
            continue  # late_policy drop
        if record_id in seen:
            continue
        seen.add(record_id)
        if _nul_name(headers):
            if case.policy == "fail":  # that output has no dead-letter topic
                return True, Counter(), Counter()
            dead[(None, _bytes(key), _bytes(value), _escaped(headers))] += 1
            continue
        out[(_bytes(record_id), _bytes(key), _bytes(value), _user_headers(headers))] += 1
    return False, out, dead


def _id_array(case: Case) -> Any:
    import pyarrow as pa

    ids = [row[0] for row in case.rows]
    if case.binary_ids:
        return pa.array(ids, pa.binary())
    if not case.not_utf8:
        return pa.array(ids, pa.string())
    first = next(i for i, value in enumerate(ids) if value is not None)
    raw = [None if value is None else value.encode() + (b"\xff" if i == first else b"")
           for i, value in enumerate(ids)]
    return pa.array(raw, pa.binary()).view(pa.string())


# ---------------------------------------------------------------- the harness
@dataclass
class Tally:
    """What the cases of one run showed."""

    cases: int = 0
    refused: int = 0
    written: int = 0
    lost: int = 0
    duplicated: int = 0
    phantoms: int = 0
    problems: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    slowest_seconds: float = 0.0
    """The longest one case took (decision and write): a hang would show here."""

    def add(self, problems: list[str]) -> None:
        for problem in problems:
            kind = problem.split(":", 1)[0]
            self.problems[kind] += 1
            self.examples.setdefault(kind, problem[:500])


class RecordFuzz:
    """Runs generated cases through ``keep_rows`` and ``write_batches`` (the one-pass
    form's task) into one output topic and one dead-letter topic."""

    def __init__(self, bootstrap: str, redis_url: str, app_id: str) -> None:
        from pyspark.sql.types import (
            ArrayType,
            BinaryType,
            StringType,
            StructField,
            StructType,
        )

        from sinks.admin import prepare
        from sinks.config import SinkConfig
        from sinks.kafka_io import ensure_topic
        from sinks.records import check_schema

        self.bootstrap, self.redis_url, self.app_id = bootstrap, redis_url, app_id
        self.out, self.dead = f"{app_id}-out", f"{app_id}-dead"
        ensure_topic(bootstrap, self.out, 1)
        ensure_topic(bootstrap, self.dead, 1)
        base = {"kafka.bootstrap.servers": bootstrap, "topic": self.out, "app.id": app_id,
                "redis.url": redis_url, "redis.require.persistence": "false",
                "lease.seconds": "0"}
        # One output per policy: a sink's dead-letter option must not change between
        # batches of one output.
        self.sinks = {"fail": SinkConfig.from_options({**base, "output.name": "fail"}),
                      "dead_letter": SinkConfig.from_options(
                          {**base, "output.name": "dl", "dead.letter.topic": self.dead})}
        for config in self.sinks.values():
            prepare(config)
        self.layouts: dict[tuple[str, bool, bool], Any] = {}
        self.schema = {
            (ids, payload): StructType([
                StructField("key", BinaryType() if payload else StringType()),
                StructField("value", BinaryType() if payload else StringType()),
                StructField("headers", ArrayType(StructType([
                    StructField("key", StringType()), StructField("value", BinaryType())]))),
                StructField(DEFAULT_ID_COLUMN, BinaryType() if ids else StringType())])
            for ids in (False, True) for payload in (False, True)}
        self.check_schema = check_schema
        self.batches = {"fail": 0, "dead_letter": 0}
        self.pending: dict[int, tuple[Counter[Out], Counter[Out]]] = {}
        self.cases: dict[int, Case] = {}  # the pending ones, for the report of a problem
        self.number = 0
        self.tally = Tally()

    def dedup_config(self, case: Case, number: int) -> Any:
        from dedup.config import DedupConfig, InvalidIdPolicy, RedisConfig, RetentionConfig

        return DedupConfig(
            app_id=f"{self.app_id}-c{number}",
            redis=RedisConfig(url=self.redis_url, require_persistence=False, wait_replicas=0),
            num_shards=NUM_SHARDS, invalid_ids=InvalidIdPolicy(case.policy),
            retention=RetentionConfig(horizon_seconds=HORIZON, bucket_seconds=600,
                                      event_time_column="event" if case.event_times else None))

    def arrow_input(self, case: Case, number: int) -> list[Any]:
        """The partition as the one-pass task receives it: the sink's columns and the
        hidden ones the plan adds (shard, batch time, event seconds); the task finds
        the ID problems itself."""
        import pyarrow as pa

        from sinks.dedup_foreach_batch import BATCH_TIME as BATCH_TIME_COLUMN
        from sinks.dedup_foreach_batch import EVENT_SECONDS, SHARD

        if not case.rows:
            return []
        payload = pa.binary() if case.binary_payload else pa.string()
        header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        ids = [row[0] for row in case.rows]
        data: dict[str, Any] = {
            "key": pa.array([row[1] for row in case.rows], payload),
            "value": pa.array([row[2] for row in case.rows], payload),
            "headers": pa.array([[*(row[3] or []), {"key": CASE_HEADER,
                                                    "value": str(number).encode()}]
                                 for row in case.rows], header_type),
            DEFAULT_ID_COLUMN: _id_array(case),
            SHARD: pa.array([zlib.crc32(_bytes(i) or b"") % NUM_SHARDS for i in ids],
                            pa.int32()),
            BATCH_TIME_COLUMN: pa.array([BATCH_TIME] * len(ids), pa.float64())}
        if case.event_times:
            data[EVENT_SECONDS] = pa.array(
                [math.nan if row[4] is None else row[4] for row in case.rows], pa.float64())
        return [pa.RecordBatch.from_pydict(data)]

    def run(self, case: Case) -> list[str]:
        """Run one case; the problems of how it ended (its output is checked by
        :meth:`check`)."""
        from dedup.partition_step import arrow_problem_codes, id_problem_codes
        from sinks.dedup_foreach_batch import keep_rows
        from sinks.writer import write_batches

        number = self.number
        refused, out, dead = expected(case)
        problems: list[str] = []
        # The Python twin of the JVM's ID check agrees with it (or refuses in one line).
        codes, found = outcome(lambda: id_problem_codes([row[0] for row in case.rows]))
        problems += found
        if codes is not None and list(codes) != [problem_code(r[0]) for r in case.rows]:
            problems.append(f"phantom: id_problem_codes {list(codes)} for {case.rows!r:.200}")
        # ... and so does the one-pass task's, from the Arrow IDs (text that is not
        # UTF-8 is refused before the codes count)
        if not case.not_utf8:
            arrow_codes = list(arrow_problem_codes(_id_array(case)))
            if arrow_codes != [problem_code(r[0]) for r in case.rows]:
                problems.append(f"phantom: arrow_problem_codes {arrow_codes} for "
                                f"{case.rows!r:.200}")
        sink = self.sinks[case.policy]
        columns = ["key", "value", "headers", DEFAULT_ID_COLUMN]
        key = (case.policy, case.binary_ids, case.binary_payload)
        if key not in self.layouts:
            self.layouts[key] = self.check_schema(
                self.schema[(case.binary_ids, case.binary_payload)], sink)

        def task() -> Any:
            config = self.dedup_config(case, number)
            kept, _ = keep_rows(config, self.arrow_input(case, number), columns,
                                f"fz-{number}", 0, 0)
            batch = self.batches[case.policy]
            self.batches[case.policy] += 1  # a refused batch is not retried: skip its number
            return write_batches(sink, self.layouts[key], columns, kept, "fz-sink", batch, 0)

        self.number += 1
        self.tally.cases += 1
        started = time.monotonic()
        written, found = outcome(task)
        self.tally.slowest_seconds = max(self.tally.slowest_seconds,
                                         time.monotonic() - started)
        if written is None and not found:
            # refused in one line: right only where the model refuses too
            self.tally.refused += 1
            if not refused:
                problems.append(f"lost: case {number} refused, the model writes "
                                f"{sum(out.values())} + {sum(dead.values())}: {case!r:.300}")
        problems += found
        if written is not None and refused:
            problems.append(f"phantom: case {number} written, the model refuses it: "
                            f"{case!r:.300}")
        self.pending[number] = (out, dead)
        self.cases[number] = case
        self.tally.add(problems)
        return problems

    def check(self) -> list[str]:
        """Read both topics ``read_committed``; compare each pending case's records with
        the model (lost, duplicated, phantom), then forget them."""
        from sinks.kafka_io import consume_all

        observed: dict[int, tuple[Counter[Out], Counter[Out]]] = {}
        for topic, index in ((self.out, 0), (self.dead, 1)):
            for record in consume_all(self.bootstrap, topic, "read_committed",
                                      idle_timeout=30.0, max_wait=300.0):
                tag = record.header(CASE_HEADER)
                number = int(tag) if tag is not None else -1
                # the sink's record ID header is the last one (a generated header may
                # have its name)
                last = record.headers[-1] if record.headers else ("", None)
                record_id = last[1] if index == 0 and last[0] == RECORD_ID_HEADER else None
                observed.setdefault(number, (Counter(), Counter()))[index][
                    (record_id, record.key, record.value,
                     _strip_sink_headers(record.headers, index == 1))] += 1
        problems: list[str] = []
        for number, (out, dead) in sorted(self.pending.items()):
            seen_out, seen_dead = observed.pop(number, (Counter(), Counter()))
            for name, want, got in (("output", out, seen_out), ("dead letters", dead, seen_dead)):
                lost = want - got
                extra = got - want
                duplicated = Counter({k: n for k, n in extra.items() if k in want})
                phantoms = Counter({k: n for k, n in extra.items() if k not in want})
                self.tally.lost += sum(lost.values())
                self.tally.duplicated += sum(duplicated.values())
                self.tally.phantoms += sum(phantoms.values())
                self.tally.written += sum(min(n, got[k]) for k, n in want.items())
                for kind, counter in (("lost", lost), ("duplicated", duplicated),
                                      ("phantom", phantoms)):
                    if counter:
                        problems.append(f"{kind}: case {number} {name}: "
                                        f"{sorted(counter.items(), key=repr)!r:.300} "
                                        f"of {self.cases[number]!r:.2000}")
        problems += [f"phantom: records of case {number}, checked before or unknown"
                     for number in observed]
        self.pending.clear()
        self.cases.clear()
        self.tally.add(problems)
        return problems


def _strip_sink_headers(headers: tuple[tuple[str, bytes | None], ...], dead: bool,
                        ) -> tuple[tuple[str, bytes | None], ...]:
    """The generated headers of a written record: after them come the harness's case
    number, on a dead letter the sink's error, and the sink's record ID (by position: a
    generated header may have any of their names)."""
    return tuple(headers[:-3] if dead else headers[:-2])
