"""Hostile records through Spark end to end: one streaming query of the one-pass form (issue 50).

:mod:`benchmarks.fuzz_records` runs generated partitions through the one-pass task's
code without Spark; here the same generated rows (:func:`benchmarks.fuzz_records.cases`:
string and binary IDs, empty, null, near and past ``MAX_ID_LENGTH``, with a newline,
not UTF-8; null, empty and binary keys and values; odd header names and values; null,
NaN, infinite, far-past and far-future event times; seeded, and the same wherever
they are generated: :func:`generated_rows`) go into a real Kafka topic and
through ONE real streaming query: :func:`sources.kafka.read_kafka` with the record ID
taken from a header (``with_record_id(strategy="header")``: a header value is binary,
so any generated ID gets in as the bytes it is), the event time from another, then
:func:`sinks.deduplicate_to_kafka` with ``trigger(availableNow=True)`` and
``maxOffsetsPerTrigger``, several micro-batches, so that duplicates cross batches.

One run has one invalid-ID policy. Under ``dead_letter`` the invalid IDs (null,
empty, too long, with a newline) go to the dead-letter topic; under ``fail`` they are
kept out of the input. A record whose ID must refuse its batch (not UTF-8; under
``fail`` any invalid ID) can only come last, since the query stops there: one
generated such record is the input's last (the poison: the first, under ``fail`` the
first invalid ID of valid text), the other IDs that are not UTF-8 are made valid text
(``errors="replace"``). The query must then fail with
one line of a :class:`~dedup.exceptions.RecordIdError` at the poison's batch
(:func:`dedup.cli.errors.find_toolkit_error` in what the ``StreamingQueryException``
wraps, as ``dedup run`` prints it; no toolkit error there is a ``traceback``).

The model reads back the input as Kafka holds it, splits it into the batches Spark's
offset log records (with each batch's timestamp, the clock of the late-record
decision), and answers per record: written (the first occurrence of a valid ID that is
not late, over all batches), dead-lettered, dropped (a later copy, or late), or
refused (its batch refused: each partition of that batch commits on its own, so a
partition without the poison may show, with the records the model would have written
had the batch passed). A header ``fuzz-seq`` names each input record in the output,
read back ``read_committed``: a record the model writes and is not there is lost, one
there twice duplicated, one the model does not write (or with other bytes) a phantom.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.fuzz_cases import message_problems
from benchmarks.fuzz_records import BATCH_TIME, HORIZON, Case, cases, problem_code
from dedup.constants import DEFAULT_ID_COLUMN, RECORD_ID_HEADER
from dedup.ids import MAX_ID_LENGTH

ID_HEADER = "fuzz-id"
SEQ_HEADER = "fuzz-seq"
EVENT_HEADER = "fuzz-event"
"""The harness's headers, after the generated ones (whose names are at most 5
characters or one of a fixed list: never one of these)."""
EVENT_COLUMN = "event"
NUM_SHARDS = 4
PARTITIONS = 2
"""The one-pass shuffle's partitions: two sink transactions per batch, so a refused
batch may be partly committed (see the module)."""
PER_TRIGGER = 20
ABSENT_ID_HEADERS = True
"""Whether null IDs include records without the ID header at all (every other one of
them; the rest carry the header with a null value). Until 2026-11-29 such a record
failed the query with Spark's ``INVALID_ARRAY_INDEX_IN_ELEMENT_AT`` (``element_at`` in
ANSI mode, Spark 4's default) instead of getting a null ID, on every restart; the flag
let the slice leave them out while that was so."""

Header = tuple[str, bytes | None]


# ---------------------------------------------------------------- generation
@dataclass(frozen=True)
class Generated:
    """One record to put into the input topic (before Kafka stores it)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    """The generated headers; the harness's come after them."""
    record_id: bytes | None
    id_header: bool
    """Whether a null ``record_id`` is a ``fuzz-id`` header with a null value (else
    there is no such header): both should give a null ID."""
    event: float | None
    """Around :data:`benchmarks.fuzz_records.BATCH_TIME`; moved to the fill time."""


@dataclass
class Input:
    """The run's input: the records in order, the poison last (if any)."""

    records: list[Generated]
    cases: int
    """Generated records (one a case)."""
    poison: bool
    repaired: int = 0
    """IDs that were not UTF-8 made valid text (errors="replace") to keep them in."""
    left_out: int = 0
    """Invalid IDs kept out under policy ``fail`` (all but the poison)."""


class _Enough(Exception):  # noqa: N818 - the event, not an error
    """Enough rows were generated."""


@contextlib.contextmanager
def _no_local_constants() -> Iterator[None]:
    """Hypothesis without the constants it mines from the project's modules.

    Hypothesis (6.131 and later) also draws literals of every loaded module of the
    project (not tests, not site-packages), so the same seed generates other records
    when other modules are loaded: the test alone, in a whole tier, or the benchmark.
    Without them a seed generates the same records wherever it runs. Hypothesis keeps
    them in private names: when those are gone, generation goes on with them.
    """
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants

        cache, mined = providers.CONSTANTS_CACHE, providers._get_local_constants
    except (ImportError, AttributeError):
        yield
        return
    empty = Constants()
    cache.cache.clear()  # pools made with the mined constants
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = mined
        cache.cache.clear()


def generated_rows(count: int, seed: int) -> list[tuple[Case, Any]]:
    """The first ``count`` rows of the cases :func:`benchmarks.fuzz_records.cases`
    generates under ``seed``, each with its case (which says whether IDs and payloads
    are binary and whether there are event times). Reproducible: the same ``count`` and
    ``seed`` give the same rows with the same Hypothesis, whatever else is loaded."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed
    from hypothesis.errors import HypothesisWarning

    rows: list[tuple[Case, Any]] = []

    @with_seed(seed)
    @settings(max_examples=max(100, 20 * count), deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(cases())
    def draw(case: Case) -> None:
        if case.not_utf8:
            # as fuzz_records does for a string ID column: 0xFF after the first ID
            first = next(i for i, row in enumerate(case.rows) if row[0] is not None)
            row = case.rows[first]
            case.rows[first] = (row[0].encode() + b"\xff", *row[1:])
        rows.extend((case, row) for row in case.rows)
        if len(rows) >= count:
            raise _Enough

    with _no_local_constants(), warnings.catch_warnings(), contextlib.suppress(_Enough):
        # _Enough ends the run as a failing example would: Hypothesis then warns that
        # the example's repr is large (the 20,000-character values)
        warnings.simplefilter("ignore", HypothesisWarning)
        draw()
    return rows[:count]


def _as_bytes(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def id_text(record_id: bytes | None) -> str | None:
    """The ID the query sees (``cast(header value as string)``), None when it is not
    UTF-8 (refused in one line, whatever the policy)."""
    if record_id is None:
        return None
    try:
        return record_id.decode()
    except UnicodeDecodeError:
        return None


def refuses(record_id: bytes | None, policy: str) -> bool:
    """Whether a record with ``record_id`` makes its batch refused."""
    if record_id is not None and id_text(record_id) is None:
        return True
    return policy == "fail" and problem_code(id_text(record_id)) != 0


def plan_input(rows: Sequence[tuple[Case, Any]], policy: str,
               absent_id_headers: bool = False) -> Input:
    """The input of one run under ``policy`` from generated rows (see the module:
    one poison at most, last); with ``absent_id_headers``, every other null ID is a
    record without the ID header rather than one with a null value (see
    :data:`ABSENT_ID_HEADERS`). Pure."""
    records: list[Generated] = []
    for n, (case, row) in enumerate(rows):
        record_id, key, value, headers, seconds = row
        records.append(Generated(_as_bytes(key), _as_bytes(value),
                                 tuple((str(h["key"]), h["value"]) for h in headers or []),
                                 _as_bytes(record_id), not absent_id_headers or n % 2 == 0,
                                 seconds if case.event_times else None))
    refusing = [n for n, r in enumerate(records) if refuses(r.record_id, policy)]
    # Under fail the poison is an invalid ID of valid text when there is one: the
    # refusal that policy adds (text that is not UTF-8 is refused under both).
    text = [n for n in refusing if id_text(records[n].record_id) is not None]
    chosen = (text or refusing)[0] if policy == "fail" and refusing else \
        (refusing[0] if refusing else None)
    kept: list[Generated] = []
    repaired = left_out = 0
    for n, record in enumerate(records):
        if n == chosen:
            continue
        if n not in refusing:
            kept.append(record)
            continue
        raw = record.record_id
        fixed = raw is not None and id_text(raw) is None
        if fixed:
            assert raw is not None
            raw = raw.decode(errors="replace").encode()
            record = Generated(record.key, record.value, record.headers, raw,
                               record.id_header, record.event)
        if refuses(raw, policy):
            left_out += 1
            continue
        repaired += fixed
        kept.append(record)
    if chosen is not None:  # last: the query stops at its batch
        kept.append(records[chosen])
    return Input(kept, len(rows), chosen is not None, repaired, left_out)


def event_seconds(generated: float, anchor: float) -> float:
    """A generated event time moved from :data:`BATCH_TIME` to ``anchor`` (the fill
    time): the ones near the batch clock (late or not by a few seconds) stay near it;
    the far ones (0, +-1e12, year 10000, 1e300, infinities, NaN) stay as they are."""
    if math.isfinite(generated) and abs(generated - BATCH_TIME) <= 10 * HORIZON:
        return generated - BATCH_TIME + anchor
    return generated


def event_text(seconds: float) -> str:
    """``seconds`` as text Spark casts to the same double (NaN and infinities by the
    names its cast reads)."""
    if math.isnan(seconds):
        return "NaN"
    if math.isinf(seconds):
        return "Infinity" if seconds > 0 else "-Infinity"
    return repr(seconds)


def fill(bootstrap: str, topic: str, records: Sequence[Generated], anchor: float) -> None:
    """Write ``records`` in order to partition 0 of ``topic`` (one partition: one
    order, which the model follows)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for seq, record in enumerate(records):
        headers: list[tuple[str, str | bytes | None]] = [*record.headers,
                                                   (SEQ_HEADER, str(seq).encode())]
        if record.record_id is not None or record.id_header:
            headers.append((ID_HEADER, record.record_id))
        if record.event is not None:
            headers.append((EVENT_HEADER,
                            event_text(event_seconds(record.event, anchor)).encode()))
        producer.produce(topic, key=record.key, value=record.value, headers=headers,
                         partition=0)
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} input records not delivered to {topic!r}")


# ---------------------------------------------------------------- the model
@dataclass(frozen=True)
class Stored:
    """An input record as Kafka holds it (read back: the model's input)."""

    seq: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    record_id: bytes | None
    event: float | None


def stored(record: Any) -> Stored:
    """A read-back input record (:class:`sinks.kafka_io.ConsumedRecord`)."""
    seq = record.header(SEQ_HEADER)
    event = record.header(EVENT_HEADER)
    return Stored(int(seq), record.offset, record.key, record.value, tuple(record.headers),
                  record.header(ID_HEADER), None if event is None else float(event.decode()))


@dataclass(frozen=True)
class Batch:
    """One micro-batch as Spark's offset log records it."""

    number: int
    start: int
    end: int
    """Offsets [start, end) of the input's one partition."""
    seconds: float
    """The batch timestamp: the ``now`` of its late-record decisions."""


def offset_log(checkpoint: str, topic: str) -> tuple[list[Batch], set[int]]:
    """The planned batches and the committed batch numbers of the query's checkpoint."""
    import json

    root = Path(checkpoint)
    batches: list[Batch] = []
    start = 0
    names = (root / "offsets").iterdir() if (root / "offsets").is_dir() else iter(())
    for number in sorted(int(p.name) for p in names if p.name.isdigit()):
        lines = (root / "offsets" / str(number)).read_text().splitlines()
        meta = json.loads(lines[1])
        end = int(json.loads(lines[2])[topic]["0"])
        batches.append(Batch(number, start, end, meta["batchTimestampMs"] / 1000.0))
        start = end
    commits = root / "commits"
    done = {int(p.name) for p in commits.iterdir() if p.name.isdigit()} if commits.is_dir() \
        else set()
    return batches, done


@dataclass(frozen=True)
class Decision:
    """The model's answer for one input record."""

    outcome: str
    """``out``, ``dead``, ``dropped`` (a later copy) or ``late`` (dropped too); for a
    record of a refused batch, what it would have been had the batch passed
    (``poison`` for the one that refuses it); ``unread`` past the planned batches."""
    batch: int | None
    """Its batch; None when the query never planned it."""
    refused: bool = False


def decide(records: Sequence[Stored], batches: Sequence[Batch], policy: str,
           ) -> tuple[dict[int, Decision], int | None]:
    """Each record's decision (by ``seq``) and the first batch the model refuses (None
    if none): batches run in order, one claim per valid ID over all of them. Pure."""
    seen: set[str] = set()
    decisions: dict[int, Decision] = {}
    refused_batch: int | None = None
    by_offset = sorted(records, key=lambda r: r.offset)
    for batch in batches:
        rows = [r for r in by_offset if batch.start <= r.offset < batch.end]
        refused = refused_batch is None and any(refuses(r.record_id, policy) for r in rows)
        if refused:
            refused_batch = batch.number
        claimed: set[str] = set()  # what the batch would claim: kept apart when refused
        for row in rows:
            text = id_text(row.record_id)
            if refuses(row.record_id, policy):
                outcome = "poison"
            elif problem_code(text) != 0:
                outcome = "dead"
            elif (row.event is not None and not math.isnan(row.event)
                  and row.event < batch.seconds - HORIZON):
                outcome = "late"  # dropped, and not claimed (a later copy may be kept)
            elif text in seen or text in claimed:
                outcome = "dropped"
            else:
                assert text is not None
                claimed.add(text)
                outcome = "out"
            decisions[row.seq] = Decision(outcome, batch.number, refused)
        if not refused:
            seen |= claimed
    for row in by_offset:
        decisions.setdefault(row.seq, Decision("unread", None))
    return decisions, refused_batch


# ---------------------------------------------------------------- the check
@dataclass
class Result:
    """What one run showed (:func:`run_spark_cases` returns it as a dict)."""

    cases: int = 0
    records: int = 0
    batches: int = 0
    written: int = 0
    dead_lettered: int = 0
    dropped: int = 0
    """Later copies and late records (the model drops them)."""
    late: int = 0
    refused: int = 0
    """Records of the refused batch that are not visible (rightly so)."""
    refusal: str = ""
    """The one line the query failed with."""
    lost: int = 0
    duplicated: int = 0
    phantom: int = 0
    tracebacks: int = 0
    multi_line: int = 0
    repaired: int = 0
    left_out: int = 0
    seconds: float = 0.0
    kinds: dict[str, int] = field(default_factory=dict)
    """The input's records by hostile kind (:func:`input_kinds`)."""
    problems: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def note(self, problem: str) -> None:
        kind = problem.split(":", 1)[0]
        self.problems[kind] += 1
        self.examples.setdefault(kind, problem[:1000])

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["problems"] = dict(self.problems)
        return out


def same_record(record: Stored, seen: Any, outcome: str) -> bool:
    """Whether the output record ``seen`` carries ``record``'s bytes: key, value, its
    headers in order, then (``out``) the sink's record ID header with the ID, or
    (``dead``) the sink's error header and a record ID header."""
    from sinks.records import ERROR_HEADER

    mine = len(record.headers)
    if (seen.key, seen.value, tuple(seen.headers[:mine])) != (record.key, record.value,
                                                              record.headers):
        return False
    tail = list(seen.headers[mine:])
    if outcome == "out":
        return tail == [(RECORD_ID_HEADER, record.record_id)]
    return len(tail) == 2 and tail[0][0] == ERROR_HEADER and tail[1][0] == RECORD_ID_HEADER


def compare(result: Result, records: Sequence[Stored], decisions: dict[int, Decision],
            refused_batch: int | None, out: Sequence[Any], dead: Sequence[Any]) -> None:
    """Count into ``result`` the output (``out``, ``dead``: read-back records) against
    the model's ``decisions``. ``refused_batch``: the batch the query was rightly
    refused at (None if it was not): its records may show, partition by partition."""
    by_seq = {r.seq: r for r in records}
    for topic, outcome, seen_records in (("output", "out", out),
                                         ("dead letters", "dead", dead)):
        counts: Counter[int] = Counter()
        for seen in seen_records:
            tag = seen.header(SEQ_HEADER)
            seq = int(tag) if tag is not None and tag.isdigit() else -1
            decision = decisions.get(seq)
            record = by_seq.get(seq)
            wanted = (decision is not None and decision.outcome == outcome
                      and (not decision.refused or decision.batch == refused_batch))
            if not wanted or record is None or not same_record(record, seen, outcome):
                result.phantom += 1
                result.note(f"phantom: {topic}: record seq {seq} ({decision}): "
                            f"key {seen.key!r:.80} value {seen.value!r:.80} "
                            f"headers {seen.headers!r:.400}")
                continue
            counts[seq] += 1
            if counts[seq] > 1:
                result.duplicated += 1
                result.note(f"duplicated: {topic}: record seq {seq}, ID "
                            f"{record.record_id!r:.100}")
        for seq, decision in sorted(decisions.items()):
            if decision.outcome != outcome or counts[seq]:
                continue
            if decision.refused and decision.batch == refused_batch:
                result.refused += 1  # its partition refused: rightly not there
                continue
            result.lost += 1
            result.note(f"lost: {topic}: record seq {seq} of batch {decision.batch}, ID "
                        f"{by_seq[seq].record_id!r:.100}")
        if outcome == "out":
            result.written += len(counts)
        else:
            result.dead_lettered += len(counts)
    for seq, decision in sorted(decisions.items()):
        if decision.outcome in ("out", "dead"):
            continue
        if decision.refused and decision.batch == refused_batch:
            result.refused += 1  # the poison, and the copies and late ones beside it
        elif decision.outcome in ("dropped", "late"):
            result.dropped += 1
            result.late += decision.outcome == "late"
        elif decision.outcome == "unread":  # the query ended before it
            result.lost += 1
            result.note(f"lost: record seq {seq} {decision.outcome} (batch "
                        f"{decision.batch}), ID {by_seq[seq].record_id!r:.100}")


def input_kinds(records: Sequence[Stored]) -> dict[str, int]:
    """How many records of an input are of each hostile kind (for the report). Pure."""
    kinds: Counter[str] = Counter()
    names = {1: "null", 2: "empty", 3: "too long", 4: "newline"}
    for record in records:
        text = id_text(record.record_id)
        if record.record_id is not None and text is None:
            kinds["id not UTF-8"] += 1
        elif problem_code(text):
            kinds[f"id {names[problem_code(text)]}"] += 1
        elif text is not None and len(text) >= MAX_ID_LENGTH - 1:
            kinds["id near the limit"] += 1
        elif text is not None and not text.isascii():
            kinds["id not ASCII"] += 1
        else:
            kinds["id plain"] += 1
        for name, value in (("key", record.key), ("value", record.value)):
            if value is None:
                kinds[f"{name} null"] += 1
            elif not value:
                kinds[f"{name} empty"] += 1
            elif len(value) >= 10_000:
                kinds[f"{name} large"] += 1
        mine = [h for h in record.headers if h[0] not in (SEQ_HEADER, ID_HEADER, EVENT_HEADER)]
        if mine:
            kinds["with generated headers"] += 1
        if any(not name.isprintable() or not name.strip() for name, _ in mine):
            kinds["header name blank or unprintable"] += 1
        if record.event is not None:
            kinds["event " + ("NaN" if math.isnan(record.event) else "infinite"
                              if math.isinf(record.event) else "finite")] += 1
    return dict(sorted(kinds.items()))


# ---------------------------------------------------------------- the run
def _query(spark: Any, bootstrap: str, redis_url: str, app_id: str, policy: str,
           topics: tuple[str, str, str], per_trigger: int) -> Any:
    """The one-pass query's ``DataStreamWriter`` (not started)."""
    from pyspark.sql import functions as sf

    from dedup.config import DedupConfig, InvalidIdPolicy, RedisConfig, RetentionConfig
    from sinks import deduplicate_to_kafka
    from sources.kafka import read_kafka

    source, out, dead = topics
    frame = read_kafka(spark, bootstrap, source, id_strategy="header", header=ID_HEADER,
                       max_offsets_per_trigger=per_trigger)
    # The event time is text in a header (NaN and the infinities by name); a record
    # without that header has a null event time, never late (try_element_at: under
    # ANSI mode element_at fails on it, see ABSENT_ID_HEADERS).
    event = sf.try_element_at(sf.filter(sf.col("headers"),
                                        lambda h: h["key"] == sf.lit(EVENT_HEADER)),
                              sf.lit(1))["value"]
    frame = frame.select("key", "value", "headers", DEFAULT_ID_COLUMN,
                         event.cast("string").cast("double").alias(EVENT_COLUMN))
    config = DedupConfig(
        app_id=app_id, redis=RedisConfig(url=redis_url), num_shards=NUM_SHARDS,
        invalid_ids=InvalidIdPolicy(policy),
        retention=RetentionConfig(horizon_seconds=HORIZON, bucket_seconds=600,
                                  event_time_column=EVENT_COLUMN))
    options = {"kafka.bootstrap.servers": bootstrap, "topic": out,
               "dead.letter.topic": dead}
    return deduplicate_to_kafka(frame, config, options, num_partitions=PARTITIONS)


def _refusal(result: Result, error: BaseException | None) -> str | None:
    """Note how the query ended; the class name of the toolkit error it was refused
    with (its one line in ``result.refusal``), None when it did not fail or failed
    with something else (a ``traceback``)."""
    from dedup.cli.errors import exception_texts, find_toolkit_error
    from dedup.exceptions import DedupError

    if error is None:
        return None
    if isinstance(error, DedupError):  # raised here, when the query was built
        name, line = type(error).__name__, f"{type(error).__name__}: {error}"
    else:  # what Spark wraps: find the toolkit's error as ``dedup run`` does
        texts = exception_texts(error)
        found = find_toolkit_error(texts)
        if found is None:
            first = next((text.strip().splitlines()[0] for text in texts if text.strip()),
                         type(error).__name__)
            result.tracebacks += 1
            result.note(f"traceback: {first[:300]}")
            return None
        name, line = found.cls.__name__, found.line
    result.refusal = line[:1000]
    for problem in message_problems(line):
        result.multi_line += problem.startswith("multi-line")
        result.note(problem)
    return name


def run_spark_cases(spark: Any, bootstrap: str, redis_url: str, app_id: str, cases: int,
                    seed: int, *, policy: str = "dead_letter", per_trigger: int = PER_TRIGGER,
                    checkpoint: str | None = None, timeout: float = 300.0,
                    absent_id_headers: bool = ABSENT_ID_HEADERS) -> dict[str, Any]:
    """Generate ``cases`` hostile records under ``seed``, run them through one
    streaming query of the one-pass form under ``policy`` (``dead_letter`` or
    ``fail``), and compare the output with the model.

    Parameters
    ----------
    spark:
        A classic local session with Spark's Kafka connector.
    bootstrap, redis_url:
        The Kafka and the Redis the query uses.
    app_id:
        The dedup app id; the topics are ``{app_id}-in``, ``-out`` and ``-dead``.
    cases:
        How many generated records (one a case; the input holds them but the invalid
        IDs left out under ``fail``).
    seed:
        Hypothesis's seed: the same seed generates the same records.
    per_trigger:
        ``maxOffsetsPerTrigger``: about ``cases / per_trigger`` micro-batches.
    checkpoint:
        The query's checkpoint location (a temporary folder when None).
    timeout:
        Seconds the query may take; a query still running then is stopped (its
        records not written count as lost).
    absent_id_headers:
        Whether half the null IDs are records without the ID header (see
        :data:`ABSENT_ID_HEADERS`).

    Returns
    -------
    dict
        The fields of :class:`Result`: ``cases``, ``records``, ``batches``,
        ``written``, ``dead_lettered``, ``dropped``, ``refused``, ``lost``,
        ``duplicated``, ``phantom``, ``tracebacks``, the ``refusal`` line, the input's
        ``kinds``, ``problems`` by kind and the first example of each. Every problem
        is a failure of the toolkit (or of the model).
    """
    from dedup.exceptions import DedupError
    from sinks.kafka_io import consume_all, ensure_topic
    from sinks.transactions import close_clients

    started = time.monotonic()
    result = Result()
    plan = plan_input(generated_rows(cases, seed), policy, absent_id_headers)
    result.cases, result.repaired, result.left_out = plan.cases, plan.repaired, plan.left_out
    topics = (f"{app_id}-in", f"{app_id}-out", f"{app_id}-dead")
    for topic in topics:
        ensure_topic(bootstrap, topic, 1)
    fill(bootstrap, topics[0], plan.records, time.time())
    # The model's input is what Kafka holds (a client may change a record on the way,
    # e.g. cut a header name at a NUL), read as the query reads it.
    records = [stored(r) for r in consume_all(bootstrap, topics[0], "read_committed")]
    result.records, result.kinds = len(records), input_kinds(records)
    with tempfile.TemporaryDirectory(prefix="fuzz-spark-") as folder:
        location = checkpoint or str(Path(folder) / "checkpoint")
        error: BaseException | None = None
        query = None
        try:
            query = (_query(spark, bootstrap, redis_url, app_id, policy, topics, per_trigger)
                     .option("checkpointLocation", location)
                     .trigger(availableNow=True).start())
        except DedupError as exc:  # refused when built: nothing runs
            error = exc
        except Exception as exc:
            error = exc
            result.tracebacks += 1
            result.note(f"traceback: at start: {type(exc).__name__}: {exc}"[:300])
        if query is not None:
            try:
                finished = bool(query.awaitTermination(timeout))
            except Exception:
                finished = True  # the query's error, read below
            finally:
                if query.isActive:
                    query.stop()
            error = query.exception()
            if not finished:
                result.note(f"lost: the query did not finish within {timeout:g} s")
        refused_with = _refusal(result, error) if query is not None or \
            isinstance(error, DedupError) else None
        batches, committed = offset_log(location, topics[0])
    close_clients()
    decisions, refused_batch = decide(records, batches, policy)
    result.batches = len(batches)
    unfinished = [b.number for b in batches if b.number not in committed]
    # Rightly refused: at the model's batch, in one line of the error the poison gets.
    rightly = (refused_batch is not None and refused_with == "RecordIdError"
               and unfinished == [refused_batch])
    if refused_batch is not None and not rightly:
        result.note(f"phantom: batch {refused_batch} was not refused as the model says "
                    f"(unfinished batches {unfinished}, {result.refusal or 'no refusal'})")
    elif refused_with is not None and not rightly:
        result.note(f"lost: refused where the model refuses nothing: {result.refusal}")
    compare(result, records, decisions, refused_batch if rightly else None,
            consume_all(bootstrap, topics[1], "read_committed"),
            consume_all(bootstrap, topics[2], "read_committed"))
    result.seconds = round(time.monotonic() - started, 1)
    return result.as_dict()
