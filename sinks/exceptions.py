"""Errors of the sinks package.

Each error says whether a retry of the Spark task may help
(:meth:`~dedup.exceptions.DedupError.retriable`) and whether the Kafka client
that raised it must be thrown away (:meth:`~dedup.exceptions.DedupError.fatal`).
"""

from __future__ import annotations

from dedup.exceptions import ConfigError, DedupError, UnsafeSettingError


class SinkError(DedupError):
    """A sink could not be built or could not write a partition."""


class KafkaUnavailableError(SinkError, ConnectionError):
    """The Kafka cluster could not be reached or refused an admin call."""

    _retriable = True


class KafkaDeniedError(SinkError, PermissionError):
    """Kafka's authorizer refused a call of the pipeline's principal (a missing ACL).

    Fatal and not retriable: every retry is refused the same way until the ACL
    is granted. The message names the missing permission and its resource
    (:mod:`sinks.acls`); the transaction the write began is aborted, so nothing
    of it is visible to ``read_committed`` readers.
    """

    _fatal = True


class SinkConfigError(SinkError, ConfigError):
    """A sink option is missing, malformed or contradicts another one."""


class SinkSchemaError(SinkConfigError):
    """The input DataFrame has a column the sink cannot accept (named in the message)."""


class UnsafeSinkSettingError(SinkConfigError, UnsafeSettingError):
    """A sink setting would break exactly-once output; refused unless overridden."""


class OutputNameInUseError(SinkConfigError):
    """Two sinks of one (app_id, output.name) in one process: they would share every marker.

    A retry cannot fix it (fatal): give each output its own ``output.name``.
    """

    _fatal = True


class OutputChangedError(SinkConfigError):
    """A query replays a batch its sink began before the restart, and the output changed
    in between: renamed (``app.id`` / ``output.name``: the new name would write the
    batch again) or moved to another ``topic`` (the partitions committed to the old
    one would never reach the new one).

    Fatal: restart once with the old settings until that batch is committed.
    """

    _fatal = True


class QueryIdReusedError(SinkError, RuntimeError):
    """The batch marker of this query id is more than one batch ahead: the id was reused.

    In a healthy run Spark re-runs at most the last batch, so a marker further
    ahead means a reset checkpoint or two queries with one id. Fatal: a retry
    sees the same marker.
    """

    _fatal = True


class MarkerLostError(SinkError, RuntimeError):
    """A batch's Kafka marker is gone (``offsets.retention.minutes`` passed) and the
    sink cannot tell whether that batch was committed. Fatal: a retry cannot tell
    either."""

    _fatal = True


class SinkRecordError(SinkError, ValueError):
    """A record cannot be written (null record ID, no topic) and no dead-letter topic is set."""


class RecordTooLargeError(SinkRecordError):
    """A record is larger than its topic (``max.message.bytes``) or the producer
    (``message.max.bytes``) takes, and no dead-letter topic takes it either.

    Fatal: every attempt of the batch decides the same; the message names the limits
    to raise, or the option ``dead.letter.topic``.
    """

    _fatal = True


class CheckpointUnavailableError(SinkError, ConnectionError):
    """The checkpoint store (Redis) could not be reached; the task fails and Spark retries it."""

    _retriable = True


class CheckpointStateError(SinkError, RuntimeError):
    """A stored checkpoint could not be decoded (corruption or a foreign key)."""


class CheckpointSchemaError(CheckpointStateError):
    """A checkpoint's columns differ from the input's (the code changed before a replay).

    Fatal: every retry replays the same checkpoint.
    """

    _fatal = True


class MarkerPendingError(SinkError, RuntimeError):
    """The marker read waited its patience on another writer's open transaction (internal:
    the sink then replaces its producer, whose ``init_transactions`` aborts it)."""

    _retriable = True


class TransactionFailedError(SinkError, RuntimeError):
    """A Kafka transaction failed; nothing of it is visible. The task fails and is retried."""

    _retriable = True


class ProducerFencedError(TransactionFailedError):
    """A newer producer with the same transactional id took over; this one was discarded."""

    _fatal = True


class CommitOutcomeUnknownError(TransactionFailedError):
    """``commit_transaction`` did not answer in time; the retry's marker read decides."""

    _fatal = True


class ProducerStuckError(TransactionFailedError):
    """A Kafka client call did not return by its deadline; the producer was discarded."""

    _fatal = True
