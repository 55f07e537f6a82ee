"""One partition of one micro-batch, written to Kafka at most once.

``docs/design.md``, invariant 6.

Per (app, partition) there is one transactional producer, ``transactional.id
= <app_id>.p<partition>``, kept per Python worker process across batches.
The batch marker is the committed offset of the one-partition marker topic
for the group ``<app_id>.sink.p<partition>``: offset = ``batch + 1``,
metadata = the Spark query id. It is written with
``send_offsets_to_transaction`` inside the same transaction as the records,
so the records and the marker become visible together or not at all.

Attempt of a partition::

    producer (cached, or new: init_transactions fences older producers and
              aborts or completes their open transaction; one pass makes a new
              one ahead, in a thread while the task decides: producer_ahead)
    read marker (read_committed: waits for pending transactional offsets)
    marker says this batch is in -> skip
    begin; send marker; produce records (+ record ID header); commit

Spark moves partitions between Python workers, so a cached producer may have
been fenced by a newer one elsewhere. The marker goes first in the
transaction: its round trip to the coordinator reports the fence before any
record is produced, and the attempt is redone once with a new producer. A
newer writer that crashed with its transaction open blocks the marker read
(pending offsets); a cached producer waits only briefly for it, then is
replaced, since only a new ``init_transactions()`` aborts that transaction.

Abortable errors abort the transaction and retry the attempt (bounded).
Fenced twice means another live writer, and the task fails. Fatal errors and
an unknown commit outcome drop the producer and fail the task: Spark's retry
re-inits the producer, which settles the outcome, and the marker says
whether to produce again. Delivery failures need no per-record callback:
``commit_transaction`` returns an abortable error if any record failed.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from dedup.constants import RECORD_ID_HEADER, STOP_HANDLING_WAIT_S
from dedup.failpoints import fail_point
from sinks.acls import KafkaAcl, authorization_error, denied, sink_needs
from sinks.checkpoint import CheckpointStore
from sinks.config import SinkConfig
from sinks.exceptions import (
    CommitOutcomeUnknownError,
    KafkaDeniedError,
    MarkerLostError,
    MarkerPendingError,
    ProducerFencedError,
    ProducerStuckError,
    QueryIdReusedError,
    TransactionFailedError,
)
from sinks.kafka_io import CLIENT_LOG, admin_client
from sinks.records import OutRecord, SizeLimit, TopicLimits
from sinks.timing import PhaseClock

log = logging.getLogger(__name__)


# Bound of the three: one entry per transactional id (output and partition) this process
# writes, never per batch; a fenced or failed producer is dropped (drop_producer), and
# its marker with it.
_PRODUCERS: dict[str, Producer] = {}
_CONSUMERS: dict[str, Consumer] = {}  # per marker group, the same bound
_MARKERS: dict[str, tuple[str | None, int]] = {}
"""The batch marker of a transactional id as its cached producer last saw or committed it.

Only transactions of that id move the marker, and any other writer of the id
fences the cached producer first, which the first call of its next transaction
(the marker's ``send_offsets_to_transaction``) reports before anything is
produced. So while the producer is live this is the marker, and a stale entry
can only lead to a fenced attempt, which drops both and reads the marker again
(docs/design.md, invariant 6). Saves a coordinator round trip per write, and
the wait for the previous commit's offsets to turn stable (about 90 ms).
"""
# Not TRANSACTIONAL_ID_AUTHORIZATION_FAILED: a missing ACL, which no new producer fixes
# (sinks.acls).
_FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                 KafkaError.INVALID_PRODUCER_EPOCH}
CALL_TIMEOUT_S = 30.0
STALE_PRODUCER_PATIENCE_S = 2.0
"""How long a cached producer waits on pending offsets before it is replaced."""
OFFSETS_TIMEOUT_S = 10.0
"""Timeout given to ``send_offsets_to_transaction``; it is also enforced from outside."""
STUCK_GRACE_S = 5.0
LEASE_PATIENCE_S = STOP_HANDLING_WAIT_S
"""How long a partition write waits for an output lease another query holds: a query
that stopped holds it until the session's listener hears the stop (asynchronously),
and a new query on the output may write first."""
_COORDINATOR_CODES = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                      KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._TIMED_OUT,
                      KafkaError._WAIT_COORD, KafkaError.UNSTABLE_OFFSET_COMMIT}


@dataclass(frozen=True)
class PartitionResult:
    """What one partition write did (the writer's commit message payload)."""

    partition: int
    batch: int
    produced: int
    skipped: bool
    replayed: bool
    attempts: int
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds per phase of the write (:mod:`sinks.timing`)."""


def close_clients() -> None:
    """Close every cached producer and consumer of this process. Safe to repeat."""
    for producer in list(_PRODUCERS.values()):
        with contextlib.suppress(Exception):  # best effort at shutdown
            producer.flush(5)
    _PRODUCERS.clear()
    _MARKERS.clear()
    for consumer in list(_CONSUMERS.values()):
        with contextlib.suppress(Exception):
            consumer.close()
    _CONSUMERS.clear()


atexit.register(close_clients)


_T = TypeVar("_T")


def unhandled(call: Callable[[], _T]) -> _T:
    """``call()`` (a Kafka client call), run where no exception is being handled.

    confluent-kafka (2.16.1) keeps a reference to the exception being handled
    whenever one of its calls raises inside an ``except`` block, for the life of
    the process; through that exception's traceback it keeps the failed attempt's
    frames, with the partition's records and the producer. Spark moves sink
    partitions between Python workers, so a cached producer is fenced and dropped
    (its ``flush`` raises) at about every batch: a worker grew by each batch it
    wrote (issue 38). Outside a handler the call runs here; inside one, in a thread
    of its own, which handles nothing, and what it raises is raised here.
    """
    if sys.exc_info()[1] is None:
        return call()
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # raised in the caller's thread below
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name="dedup-kafka-call", daemon=True)
    thread.start()
    thread.join()
    done, value = outcome.pop()
    if not done:
        raise value
    return value


def drop_producer(transactional_id: str) -> None:
    """Forget (and close) the cached producer of ``transactional_id``. Callable from an
    ``except`` block (see :func:`unhandled`)."""
    producer = _PRODUCERS.pop(transactional_id, None)
    _MARKERS.pop(transactional_id, None)
    if producer is not None:
        with contextlib.suppress(Exception):  # the producer is already broken
            unhandled(producer.purge)
            unhandled(functools.partial(producer.flush, 0))


class _Ahead:
    """A producer being made in a thread of its own (:func:`producer_ahead`)."""

    def __init__(self, config: SinkConfig, partition: int) -> None:
        self.producer: Producer | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(
            target=self._make, args=(config, partition),
            name=f"dedup-producer-{config.transactional_id(partition)}", daemon=True)
        self.thread.start()

    def _make(self, config: SinkConfig, partition: int) -> None:
        try:
            self.producer = _new_producer(config, partition)
        except BaseException as exc:  # raised by result() in the task's thread
            self.error = exc

    def result(self) -> Producer:
        """Wait for the thread: the producer, or raise what making it raised."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.producer is not None
        return self.producer


_AHEAD: dict[str, _Ahead] = {}  # at most one per transactional id, only within producer_ahead


def _new_producer(config: SinkConfig, partition: int) -> Producer:
    txn_id = config.transactional_id(partition)
    producer = Producer({**config.producer_settings(partition), "logger": CLIENT_LOG})
    try:
        # Two metadata round trips first: librdkafka sends its first coordinator
        # query on the bootstrap connection, which it drops once metadata names
        # the real brokers; a query lost that way waits out a fixed 500 ms timer.
        # Measured on one broker: 1 start in 3 without the warm-up, about 1 in 10
        # with one round trip, 0 in 100 with two (the second costs ~1 ms). They stay
        # right before init_transactions: made earlier, the bootstrap connections
        # are gone when it runs, and its query waits out the timer (519 ms p50 on
        # three brokers).
        for _ in range(2):
            producer.list_topics(config.marker_topic, timeout=CALL_TIMEOUT_S)
        producer.init_transactions(CALL_TIMEOUT_S)
    except KafkaException as exc:
        raise _classify(exc, f"init_transactions of {txn_id}", config) from exc
    return producer


def get_producer(config: SinkConfig, partition: int) -> tuple[Producer, bool]:
    """This process's initialised transactional producer of ``partition``, and whether it
    was created (and ``init_transactions()`` called) in this task just now.

    Waits for the producer :func:`producer_ahead` is making, which replaces a cached
    one, and raises what making it raised; makes one if there is none.
    """
    txn_id = config.transactional_id(partition)
    ahead = _AHEAD.pop(txn_id, None)
    if ahead is not None:
        made = ahead.result()
        _adopt(txn_id, made)
        return made, True
    producer = _PRODUCERS.get(txn_id)
    if producer is not None:
        return producer, False
    producer = _new_producer(config, partition)
    _PRODUCERS[txn_id] = producer
    return producer, True


def _adopt(txn_id: str, producer: Producer) -> None:
    """Make ``producer`` (just initialised) the process's producer of ``txn_id``; the one
    it replaces is fenced by its ``init_transactions`` and has no open transaction (a
    task that leaves one drops its producer)."""
    if txn_id in _PRODUCERS:
        drop_producer(txn_id)
    _PRODUCERS[txn_id] = producer


@contextlib.contextmanager
def producer_ahead(config: SinkConfig, partition: int, query_id: str,
                   batch: int) -> Iterator[None]:
    """Make ``partition``'s new producer in a thread while the block runs, if this process
    needs one for ``batch``: the block's :func:`get_producer` then waits only for what
    is left of it.

    Spark moves a partition between Python workers at about every batch, and a new
    producer costs two metadata round trips and ``init_transactions`` (about 15 ms).
    This process needs one when it has none, and when its producer's batch marker is
    not at ``batch`` (it did not commit the previous batch of this partition for
    ``query_id``: another worker did, which fenced it, or the batches between had no
    rows, and the new one costs a round trip in the thread). Made ahead, it overlaps
    the work before the write (the one-pass decision, the rows' checkpoint). The
    order of docs/design.md invariant 6 is kept: the marker is read after ``get_producer``
    returns, so after this ``init_transactions``. The thread never outlives the block
    (it is joined on every exit: no ``init_transactions`` of a finished attempt can
    fence its retry); a producer the block did not use becomes this process's
    producer of the partition, as if ``get_producer`` had made it. What making it
    raised is raised by ``get_producer`` only: an unused producer's failure is the
    next write's to meet. Not re-entrant per partition.
    """
    txn_id = config.transactional_id(partition)
    if txn_id in _AHEAD or (txn_id in _PRODUCERS
                            and _MARKERS.get(txn_id) == (query_id, batch)):
        yield
        return
    ahead = _AHEAD[txn_id] = _Ahead(config, partition)
    try:
        yield
    finally:
        if _AHEAD.get(txn_id) is ahead:
            del _AHEAD[txn_id]
            ahead.thread.join()
            if ahead.producer is not None:
                _adopt(txn_id, ahead.producer)
            else:
                log.debug("a producer made ahead for %s failed, unused: %s", txn_id,
                          ahead.error)


def call_with_deadline(call: Callable[[], None], seconds: float, what: str) -> None:
    """Run a Kafka client call that may ignore its own timeout, bounded from outside.

    librdkafka's ``send_offsets_to_transaction`` can block forever when the
    group coordinator goes away mid-call (librdkafka issues #5456 and #5511,
    open; seen here when the broker was killed during the call). A stuck call
    raises :class:`ProducerStuckError` after ``seconds``; its thread is left
    behind, blocked on the abandoned producer, which the caller must drop.
    """
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)

    thread = threading.Thread(target=run, name=f"dedup-{what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise ProducerStuckError(
            f"{what} did not return within {seconds:g} s (a known librdkafka hang when the "
            "group coordinator goes away, librdkafka #5456/#5511): the producer is "
            "discarded, the task fails and Spark retries it with a new producer"
        )
    if outcome[0] is not None:
        raise outcome[0]


_CLUSTER_IDS: dict[str, str] = {}  # bound: one entry per bootstrap servers list


def cluster_id(config: SinkConfig) -> str:
    """The id of the Kafka cluster ``config`` writes to ('' if the broker reports none),
    read once per process and bootstrap servers. The query's record of outputs keeps
    it: a batch replayed against another cluster is refused. Raises a retriable
    :class:`TransactionFailedError` when the cluster cannot be reached."""
    known = _CLUSTER_IDS.get(config.bootstrap_servers)
    if known is None:
        try:
            metadata = admin_client(config.client_config()).list_topics(
                config.marker_topic, timeout=CALL_TIMEOUT_S)
        except KafkaException as exc:
            raise _classify(exc, "reading the id of the Kafka cluster", config) from exc
        known = _CLUSTER_IDS[config.bootstrap_servers] = str(metadata.cluster_id or "")
    return known


_TOPIC_LIMITS: dict[tuple[str, str], int | None] = {}
"""Topics' ``max.message.bytes`` per (bootstrap servers, topic), as this process last
read them (None: not readable)."""


def topic_max_message_bytes(config: SinkConfig, topic: str, fresh: bool = False) -> int | None:
    """``topic``'s ``max.message.bytes`` (one admin round trip, then kept per process
    until ``fresh`` or :func:`forget_topic_limits`); None when it cannot be read (no
    such topic yet, no DescribeConfigs permission, Kafka unreachable): the broker
    still enforces it, and its refusal makes the retry read it again."""
    key = (config.bootstrap_servers, topic)
    if not fresh and key in _TOPIC_LIMITS:
        return _TOPIC_LIMITS[key]
    from confluent_kafka.admin import ConfigResource, ResourceType

    limit: int | None = None
    admin = admin_client(config.client_config())
    try:
        [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
        entry = future.result(CALL_TIMEOUT_S).get("max.message.bytes")
        if entry is not None and entry.value is not None:
            limit = int(entry.value)
    except KafkaException as exc:
        if exc.args and isinstance(exc.args[0], KafkaError) and \
                exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            # Not created yet (the driver announced it): the broker creates it at this
            # write with its message.max.bytes, the topics' default. Not kept: the next
            # use reads the topic's own.
            return _broker_message_max_bytes(admin)
        refused = authorization_error(exc)
        if refused is not None:
            # Tolerated: the broker still enforces the limit; only the routing of a
            # record above it to dead.letter.topic is lost, which the warning says.
            log.warning("%s: records larger than its max.message.bytes are refused by the "
                        "broker, not sent to dead.letter.topic", denied(
                            f"DescribeConfigs of topic {topic!r}", refused,
                            [KafkaAcl("TOPIC", topic, "LITERAL", "DESCRIBE_CONFIGS", "sink")]))
        else:
            log.warning("could not read max.message.bytes of topic %r (%s): records larger "
                        "than it are refused by the broker, not sent to dead.letter.topic",
                        topic, exc)
    except (ValueError, TimeoutError) as exc:
        log.warning("could not read max.message.bytes of topic %r (%s): records larger than "
                    "it are refused by the broker, not sent to dead.letter.topic", topic, exc)
    _TOPIC_LIMITS[key] = limit
    return limit


def _broker_message_max_bytes(admin: Any) -> int | None:
    """The broker's ``message.max.bytes`` (what a topic it creates gets), None when it
    cannot be read (the broker still enforces it)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    try:
        brokers = sorted(admin.list_topics(timeout=CALL_TIMEOUT_S).brokers)
        if not brokers:
            return None
        [future] = admin.describe_configs(
            [ConfigResource(ResourceType.BROKER, str(brokers[0]))]).values()
        entry = future.result(CALL_TIMEOUT_S).get("message.max.bytes")
        return int(entry.value) if entry is not None and entry.value is not None else None
    except (KafkaException, ValueError, TimeoutError) as exc:
        log.debug("could not read the broker's message.max.bytes: %s", exc)
        return None


def forget_topic_limits(config: SinkConfig) -> None:
    """Read every topic's limit again at its next use (the broker refused a record)."""
    for key in [k for k in _TOPIC_LIMITS if k[0] == config.bootstrap_servers]:
        del _TOPIC_LIMITS[key]


def topic_limits(config: SinkConfig) -> TopicLimits:
    """The :class:`~sinks.records.SizeLimit` of each topic ``config`` writes to: its
    ``max.message.bytes`` and the producer's ``message.max.bytes``. With a compressing
    producer the topic's limit bounds compressed batches, which only the broker
    measures: only the producer's is checked before sending."""

    def limits(topic: str, fresh: bool) -> SizeLimit:
        topic_bytes = (None if config.compresses
                       else topic_max_message_bytes(config, topic, fresh))
        return SizeLimit(topic, topic_bytes, config.max_message_bytes)

    return limits


def _marker_consumer(config: SinkConfig, partition: int) -> Consumer:
    group = config.marker_group(partition)
    consumer = _CONSUMERS.get(group)
    if consumer is None:
        consumer = Consumer({
            "reconnect.backoff.ms": 10,  # a faster first connection, as for producers
            **config.client_config(), "group.id": group, "enable.auto.commit": False,
            "isolation.level": "read_committed",
        })
        with contextlib.suppress(KafkaException):  # a warm-up only (see get_producer)
            consumer.list_topics(config.marker_topic, timeout=CALL_TIMEOUT_S)
        _CONSUMERS[group] = consumer
    return consumer


def read_marker(config: SinkConfig, partition: int,
                patience: float | None = None) -> tuple[str | None, int]:
    """``(query id, next batch)`` committed for ``partition``; ``(None, -1)`` if none.

    Waits while the group coordinator loads and while another writer's
    transaction holds pending offsets, up to :data:`CALL_TIMEOUT_S`; with
    ``patience``, raises :class:`MarkerPendingError` after that many seconds
    instead. Read-only: safe to repeat.
    """
    consumer = _marker_consumer(config, partition)
    wait = CALL_TIMEOUT_S if patience is None else patience
    deadline = time.monotonic() + wait
    while True:
        try:
            # In slices: a group the principal may not describe makes committed() wait
            # its whole timeout for a coordinator, and the refusal reaches only poll().
            [tp] = consumer.committed([TopicPartition(config.marker_topic, 0)],
                                      timeout=max(0.1, min(MARKER_SLICE_S,
                                                           deadline - time.monotonic())))
            break
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            _raise_if_denied(consumer, config, partition)
            # The group coordinator moves or loads (a fresh broker, a restart): wait.
            retriable = error.code() in _COORDINATOR_CODES or error.retriable()
            if retriable and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            if retriable and patience is not None:
                raise MarkerPendingError(
                    f"the batch marker of {config.marker_group(partition)} stayed "
                    f"unreadable for {patience:g} s ({error.name()})"
                ) from exc
            raise TransactionFailedError(
                f"could not read the batch marker of {config.marker_group(partition)}: {exc}"
            ) from exc
    if tp.error is not None:
        refused = authorization_error(tp.error)
        if refused is not None:
            raise denied(f"the read of the batch marker of {config.marker_group(partition)} "
                         f"on topic {config.marker_topic!r}", refused,
                         sink_needs(config, refused, "marker"))
        # Not "no marker": the batch may be committed, and producing it again
        # would duplicate it. Fail the attempt; Spark's retry reads again.
        raise TransactionFailedError(
            f"the batch marker of {config.marker_group(partition)} could not be read: "
            f"{tp.error}; the task fails and Spark retries it"
        )
    if tp.offset < 0:
        return None, -1
    return tp.metadata, tp.offset


MARKER_SLICE_S = 1.0
"""Longest single wait of the marker read (:func:`read_marker`)."""


def _raise_if_denied(consumer: Consumer, config: SinkConfig, partition: int) -> None:
    """Raise the refusal of the marker group's coordinator lookup, if librdkafka queued
    one (it does so only on the consumer's queue, which ``poll`` serves; the marker
    consumer reads nothing, so a poll takes no record)."""
    message = consumer.poll(0)
    error = message.error() if message is not None else None
    refused = authorization_error(error) if error is not None else None
    if refused is not None:
        raise denied(f"the read of the batch marker of {config.marker_group(partition)}",
                     refused, sink_needs(config, refused, "marker"))


def _is_fenced(error: KafkaError) -> bool:
    """Fenced, or any fatal producer state (librdkafka reports a fence as a fatal
    error, and produce() on such a producer fails with ``_FATAL``): the producer
    is unusable and must be replaced."""
    return error.code() in _FENCED_CODES or error.code() == KafkaError._FATAL or error.fatal()


def _classify(exc: KafkaException, what: str, config: SinkConfig | None = None,
              stage: str = "marker", topics: tuple[str, ...] = ()
              ) -> TransactionFailedError | KafkaDeniedError:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    refused = authorization_error(error)
    if refused is not None and config is not None:
        # Before the fence: a refusal is fatal at once, no new producer or retry helps.
        return denied(what, refused, sink_needs(config, refused, stage, topics))
    if error is not None and _is_fenced(error):
        return ProducerFencedError(f"{what}: producer fenced by a newer one ({error.name()})")
    return TransactionFailedError(f"{what} failed: {exc}")


class _Abortable(Exception):  # noqa: N818 - internal control flow
    pass


class _Fenced(Exception):  # noqa: N818 - internal control flow
    pass


class _Denied(Exception):  # noqa: N818 - internal control flow
    """A call of the transaction was refused (a missing ACL): abort it, then raise."""

    def __init__(self, error: KafkaDeniedError) -> None:
        super().__init__(str(error))
        self.error = error


def _produce_all(producer: Producer, records: list[OutRecord], config: SinkConfig,
                 batch: int, partition: int, attempt: int) -> None:
    half = len(records) // 2
    produce = producer.produce
    # The record's fields unpacked and a header list built only when it has headers of
    # its own: 0.14 us of CPU per record less than through attributes (1.14 -> 1.0,
    # benchmarks/results/NOTES.md, 2026-12-05), most of it the client's produce().
    for index, (topic, part, key, value, own, record_id) in enumerate(records):
        if index == half and half:
            # The flush only when the point fires: a read_uncommitted reader then
            # sees the half that was produced.
            fail_point("sink.mid_produce", config.fail_points.directory,
                       before=lambda: producer.flush(CALL_TIMEOUT_S), batch=batch,
                       partition=partition, attempt=attempt, rows=len(records))
        headers: list[tuple[str, str | bytes | None]] = (
            [*own, (RECORD_ID_HEADER, record_id)] if own else [(RECORD_ID_HEADER, record_id)])
        while True:
            try:
                if part is None:
                    produce(topic, value, key, headers=headers)
                else:
                    produce(topic, value, key, part, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)  # queue full: let deliveries drain


def _fenced_or_abortable(exc: KafkaException) -> KafkaError:
    """Raise the control-flow signal of a fenced producer or an abortable transaction;
    otherwise return the error for the caller to classify."""
    error: KafkaError = exc.args[0]
    if authorization_error(error) is not None:
        raise exc  # neither: the caller names the refused permission (_attempt)
    if _is_fenced(error):
        raise _Fenced() from exc
    if error.txn_requires_abort():
        raise _Abortable(str(error)) from exc
    return error


def _commit(producer: Producer, what: str) -> None:
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while True:
        try:
            producer.commit_transaction(CALL_TIMEOUT_S)
            return
        except KafkaException as exc:
            error = _fenced_or_abortable(exc)
            if error.retriable() and not error.fatal() and time.monotonic() < deadline:
                continue
            raise CommitOutcomeUnknownError(
                f"{what}: commit_transaction ended with {error.name()}; the outcome is unknown. "
                "The task fails; Spark's retry settles it via init_transactions and the marker"
            ) from exc


def _attempt(config: SinkConfig, records: list[OutRecord], query_id: str, batch: int,
             partition: int, attempt: int, clock: PhaseClock) -> tuple[bool, int]:
    """One transaction; returns ``(skipped, produced)``. Raises _Abortable / _Fenced."""
    txn_id = config.transactional_id(partition)
    what = f"sink batch {batch} partition {partition} ({txn_id})"
    with clock("producer"):
        producer, fresh = get_producer(config, partition)
    known = None if fresh else _MARKERS.get(txn_id)
    if known is not None:
        marker_qid, next_batch = known
    else:
        pending = False
        try:
            with clock("marker"):
                marker_qid, next_batch = read_marker(
                    config, partition, patience=None if fresh else STALE_PRODUCER_PATIENCE_S)
        except MarkerPendingError:
            pending = True  # the client calls below out of the handler (see unhandled)
        if pending:
            # Another writer's open transaction holds the marker; only a new
            # producer's init_transactions() aborts it.
            drop_producer(txn_id)
            with clock("producer"):
                producer, _ = get_producer(config, partition)
            with clock("marker"):
                marker_qid, next_batch = read_marker(config, partition)
        _MARKERS[txn_id] = (marker_qid, next_batch)
    if marker_qid == query_id and next_batch > batch + 1:
        # Spark re-runs at most its last batch (whose Kafka commit may have
        # preceded Spark's own commit); batch + 1 is started only after batch
        # is in Spark's commit log. A marker further ahead was written by
        # another life of this query id, and skipping would drop this batch.
        raise _reused(config, query_id, batch, partition, next_batch - 1)
    if marker_qid == query_id and next_batch == batch + 1:
        return True, 0
    # The marker copy lives beside the checkpoints: strong productions only (weak
    # productions promise not to touch Redis).
    store = (CheckpointStore.for_config(config)
             if config.strong_productions and config.redis is not None else None)
    # Not the usual "previous batch done": Kafka's marker may have expired.
    if store is not None and not (marker_qid == query_id and next_batch == batch):
        with clock("marker_copy"):
            done = _committed_per_redis(store, query_id, batch, partition, config, records,
                                        marker_qid)
        if done:
            return True, 0
    if store is not None and config.lease_seconds:
        # After get_producer: a query that takes the lease over later must
        # init_transactions after it, which fences this producer, so a write
        # checked here cannot commit after a takeover.
        with clock("lease"):
            store.take_lease(query_id, config.lease_seconds, patience=LEASE_PATIENCE_S)
    stage = "marker"
    try:
        with clock("begin"):
            producer.begin_transaction()
            group = _marker_consumer(config, partition).consumer_group_metadata()
        # The marker first: a fenced (stale cached) producer fails here, before
        # any record is produced.
        marker = [TopicPartition(config.marker_topic, 0, batch + 1, metadata=query_id)]
        fail_point("sink.before_send_offsets", config.fail_points.directory, batch=batch,
                   partition=partition, attempt=attempt)
        with clock("send_offsets"):
            call_with_deadline(
                lambda: producer.send_offsets_to_transaction(marker, group, OFFSETS_TIMEOUT_S),
                OFFSETS_TIMEOUT_S + STUCK_GRACE_S, f"send_offsets_to_transaction of {what}")
        stage = "produce"
        with clock("produce"):
            _produce_all(producer, records, config, batch, partition, attempt)
        fail_point("sink.before_commit", config.fail_points.directory,
                   before=lambda: producer.flush(CALL_TIMEOUT_S), batch=batch,
                   partition=partition, attempt=attempt, rows=len(records),
                   # the transaction's first and last record IDs: a chaos run finds
                   # them aborted after a timeout (the point never sees empty records)
                   first_id=records[0].record_id.decode(errors="replace"),
                   last_id=records[-1].record_id.decode(errors="replace"))
        if store is not None:
            with clock("intent"):
                store.record_intent(query_id, batch, partition)
        with clock("commit"):
            _commit(producer, what)
            _MARKERS[txn_id] = (query_id, batch + 1)
            if store is not None:
                store.record_committed(query_id, batch, partition)
    except KafkaException as exc:
        if authorization_error(exc) is not None:
            topics = tuple(sorted({r.topic for r in records}))
            raise _Denied(denied(
                f"{what}: the marker commit" if stage == "marker"
                else f"{what}: the write to " + ", ".join(repr(t) for t in topics),
                str(authorization_error(exc)),
                sink_needs(config, str(authorization_error(exc)), stage, topics))) from exc
        _fenced_or_abortable(exc)
        raise _classify(exc, what) from exc
    return False, len(records)


def _reused(config: SinkConfig, query_id: str, batch: int, partition: int,
            committed: int) -> QueryIdReusedError:
    return QueryIdReusedError(
        f"sink batch {batch} partition {partition}: the batch marker of "
        f"{config.marker_group(partition)} says query id {query_id!r} already committed "
        f"batch {committed}, more than one batch ahead: the query id was reused (a "
        "reset or new checkpoint location, or two queries with one id). Give this query "
        "a new option query.id (it then writes every batch it reads, including input an "
        "earlier query wrote), or restore the old checkpoint location; `dedup txn list "
        "--app-id` shows the markers"
    )


def _committed_per_redis(store: CheckpointStore, query_id: str, batch: int, partition: int,
                         config: SinkConfig, records: list[OutRecord],
                         marker_qid: str | None) -> bool:
    """Whether the Redis copy of the marker (or the output) says ``batch`` is committed.

    Kafka's marker holds only the partition's last commit, of whichever query
    (``marker_qid``): after another query on this output wrote (a checkpoint
    reset once this one's lease lapsed), only the copy's per-query entries
    still know what this query did. And Kafka deletes a marker group
    ``offsets.retention.minutes`` after its last commit. The copy says
    ``committed`` after each Kafka commit and ``intent`` just before it; an
    intent for this batch with no commit recorded is ambiguous when Kafka's
    marker names another query, or none and the intent is older than the
    retention (a newer commit would still have its marker). Then the output
    decides: this producer's ``init_transactions()`` has settled the
    transactional id's last transaction, and a transaction is all or nothing,
    so the batch is in if its records are visible to ``read_committed``
    readers and out if none is. Refused only when the output cannot tell.
    """
    committed, intent = store.read_marker_copy(partition, query_id)
    if committed is not None and committed[0] == query_id and committed[1] >= batch:
        if committed[1] > batch:  # as with Kafka's marker (see _attempt)
            raise _reused(config, query_id, batch, partition, committed[1])
        log.warning("sink batch %d partition %d: Kafka's batch marker no longer names this "
                    "query (expired, or another query wrote since) but the Redis copy says "
                    "the batch is committed: skipped", batch, partition)
        return True
    if intent is not None and intent[:2] == (query_id, batch):
        age_ms = time.time() * 1000 - intent[2]
        if (marker_qid is not None and marker_qid != query_id) or \
                age_ms >= store.marker_retention_ms():
            found = _in_output(config, records,
                               intent[2] - int(config.max_batch_duration_seconds * 1000))
            if found is not None:
                log.warning("sink batch %d partition %d: Kafka's batch marker is gone and the "
                            "Redis copy has only the commit intent; the output shows the batch "
                            "%s", batch, partition, "in: skipped" if found else "out: written")
                return found
            gone = (f"replaced by query {marker_qid}'s" if marker_qid is not None else
                    "expired (the commit began longer ago than the broker's "
                    "offsets.retention.minutes)")
            raise MarkerLostError(
                f"sink batch {batch} partition {partition}: its commit to Kafka began "
                f"{age_ms / 3_600_000:.1f} h ago, its Kafka batch marker is {gone}, and "
                "its records "
                "carry no record IDs to look for in the output, so whether it was committed "
                "cannot be told; check the output topic for records of this batch, then "
                "resume with a new query id or raise offsets.retention.minutes above the "
                "longest stop"
            )
    return False


def _in_output(config: SinkConfig, records: list[OutRecord], since_ms: int) -> bool | None:
    """Whether ``records`` are in the output (``read_committed``, from ``since_ms`` on).

    True when every record ID is found, False when none is, None when it cannot
    be told (no record has an ID, or only some are found: an earlier batch may
    have written some of the same IDs). Reads each output topic's partitions
    from the first offset at ``since_ms`` to their end; for a rare path only.
    """
    import uuid

    wanted: dict[str, set[bytes]] = {}
    for record in records:
        if record.record_id:
            wanted.setdefault(record.topic, set()).add(record.record_id)
    if not wanted:
        return None
    total = sum(len(ids) for ids in wanted.values())
    found = 0
    consumer = Consumer({**config.client_config(),
                         "group.id": f"{config.identity}.sink.check-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    try:
        for topic, ids in wanted.items():
            found += len(_ids_found(consumer, topic, ids, max(0, since_ms)))
    except KafkaException as exc:
        raise _classify(exc, f"reading {sorted(wanted)} for a batch whose marker expired",
                        config, "read", tuple(sorted(wanted))) from exc
    finally:
        consumer.close()
    if found == total:
        return True
    return False if found == 0 else None


def _ids_found(consumer: Consumer, topic: str, ids: set[bytes], since_ms: int) -> set[bytes]:
    metadata = consumer.list_topics(topic, timeout=CALL_TIMEOUT_S)
    partitions = sorted(metadata.topics[topic].partitions) if topic in metadata.topics else []
    starts = consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in partitions],
                                        timeout=CALL_TIMEOUT_S)
    assigned = [tp for tp in starts if tp.offset >= 0]  # -1: nothing at or after since_ms
    found: set[bytes] = set()
    if not assigned:
        return found
    consumer.assign(assigned)
    open_partitions = {tp.partition for tp in assigned}
    deadline = time.monotonic() + 4 * CALL_TIMEOUT_S
    while open_partitions and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                open_partitions.discard(message.partition())
                continue
            raise KafkaException(error)
        headers: list[tuple[str, bytes]] = list(message.headers() or [])  # type: ignore[arg-type]
        found.update(value for name, value in headers
                     if name == RECORD_ID_HEADER and value in ids)
    if open_partitions:
        raise TransactionFailedError(
            f"could not read {topic} to its end within {4 * CALL_TIMEOUT_S:.0f} s to look for a "
            "batch whose marker expired; the task fails and Spark retries it"
        )
    consumer.unassign()
    return found


def write_partition(config: SinkConfig, records: list[OutRecord], query_id: str,
                    batch: int, partition: int, replayed: bool = False,
                    clock: PhaseClock | None = None) -> PartitionResult:
    """Commit ``records`` as batch ``batch`` of ``partition`` exactly once.

    Safe to repeat with the same arguments (a repeat after success is a
    no-op skip). Raises a retriable :class:`TransactionFailedError` when the
    task must fail and be retried by Spark; nothing is then visible to
    ``read_committed`` readers.
    """
    txn_id = config.transactional_id(partition)
    clock = clock or PhaseClock()
    if not records:
        # Nothing to make visible, and nothing a retry could emit twice.
        fail_point("sink.after_commit", config.fail_points.directory, batch=batch,
                   partition=partition, attempt=0, rows=0)
        return PartitionResult(partition, batch, 0, False, replayed, 0, clock.finish())
    redo_after_fence = True
    attempt = 0
    while True:
        attempt += 1
        try:
            skipped, produced = _attempt(config, records, query_id, batch, partition, attempt,
                                         clock)
            result = PartitionResult(partition, batch, produced, skipped, replayed, attempt,
                                     clock.finish())
            break
        except _Abortable as exc:
            producer = _PRODUCERS.get(txn_id)
            try:
                if producer is not None:
                    unhandled(functools.partial(producer.abort_transaction, CALL_TIMEOUT_S))
            except KafkaException as abort_exc:
                drop_producer(txn_id)
                raise _classify(abort_exc, f"abort of {txn_id}") from abort_exc
            too_large = "MSG_SIZE_TOO_LARGE" in str(exc)
            if too_large:
                # The sink's own check passed: a lowered limit, or compressed batches.
                forget_topic_limits(config)
            if attempt >= config.transaction_retries:
                # every topic of the partition's records: the client's text names the
                # refused one, but only in its own words
                topics = sorted({r.topic for r in records})
                named = ("topic " if len(topics) == 1 else "topics ") + ", ".join(
                    f"'{t}'" for t in topics)
                raise TransactionFailedError(
                    f"batch {batch} partition {partition}: transaction aborted "
                    f"{attempt} times ({exc}); the task fails and Spark retries it"
                    + ("; the broker refused a record as larger than its topic's "
                       "max.message.bytes (a limit lowered since the sink read it, which "
                       "the retry reads again, or with kafka.compression.type set, which "
                       "bounds compressed batches only the broker measures): raise "
                       f"max.message.bytes of {named}" if too_large else "")
                ) from exc
            log.warning("aborted transaction of %s (attempt %d): %s", txn_id, attempt, exc)
        except _Denied as exc:
            # Aborted, not left open: a retry is refused the same way, so no
            # init_transactions would come to abort it, and an open transaction
            # holds read_committed readers of its partitions until it times out.
            producer = _PRODUCERS.get(txn_id)
            if producer is not None:
                with contextlib.suppress(Exception):
                    unhandled(functools.partial(producer.abort_transaction, CALL_TIMEOUT_S))
            drop_producer(txn_id)
            raise exc.error from exc.__cause__
        except _Fenced as exc:
            drop_producer(txn_id)
            if not redo_after_fence:
                raise ProducerFencedError(
                    f"{txn_id} was fenced twice while writing batch {batch}: another live "
                    "writer uses this app_id and partition (two pipelines on one app_id, or a "
                    "speculative task); the task fails and Spark retries it"
                ) from exc
            redo_after_fence = False
        except BaseException:
            # Anything else (an injected fault, a fatal error, a worker
            # shutdown) may leave a transaction open in this producer: drop it,
            # and let the retry's init_transactions abort what it left.
            drop_producer(txn_id)
            raise
    fail_point("sink.after_commit", config.fail_points.directory, batch=batch, partition=partition,
               attempt=attempt, rows=len(records))
    return result
