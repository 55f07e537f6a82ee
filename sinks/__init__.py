"""Exactly-once sinks: a transactional Kafka sink for Spark Structured Streaming.

Pick :class:`ExactlyOnceKafkaDataSource` (``format("exactly_once_kafka")``,
after :func:`register`) for a one-line switch from Spark's Kafka sink, or
:class:`ExactlyOnceKafkaForeachBatch` inside ``foreachBatch``;
:func:`deduplicate_to_kafka` runs the dedup operator and the sink in one pass
over each micro-batch (the cheapest of the three).
"""

from sinks.acls import KafkaAcl, required_acls
from sinks.admin import (
    SinkTransaction,
    abort_transactions,
    check_transaction_timeout,
    list_transactions,
)
from sinks.checkpoint import CheckpointStore
from sinks.config import DATA_SOURCE_NAME, SinkConfig
from sinks.datasource import (
    ExactlyOnceKafkaDataSource,
    ExactlyOnceKafkaStreamWriter,
    SinkCommitMessage,
    register,
    release_when_stopped,
)
from sinks.dedup_foreach_batch import DedupKafkaForeachBatch, deduplicate_to_kafka
from sinks.exceptions import (
    CheckpointSchemaError,
    CheckpointStateError,
    CheckpointUnavailableError,
    CommitOutcomeUnknownError,
    KafkaDeniedError,
    MarkerLostError,
    OutputChangedError,
    OutputNameInUseError,
    ProducerFencedError,
    ProducerStuckError,
    QueryIdReusedError,
    RecordTooLargeError,
    SinkConfigError,
    SinkError,
    SinkRecordError,
    SinkSchemaError,
    TransactionFailedError,
    UnsafeSinkSettingError,
)
from sinks.foreach_batch import ExactlyOnceKafkaForeachBatch
from sinks.timing import read_phase_timings
from sinks.transactions import close_clients

__all__ = [
    "DATA_SOURCE_NAME",
    "CheckpointSchemaError",
    "CheckpointStateError",
    "CheckpointStore",
    "CheckpointUnavailableError",
    "CommitOutcomeUnknownError",
    "DedupKafkaForeachBatch",
    "ExactlyOnceKafkaDataSource",
    "ExactlyOnceKafkaForeachBatch",
    "ExactlyOnceKafkaStreamWriter",
    "KafkaAcl",
    "KafkaDeniedError",
    "MarkerLostError",
    "OutputChangedError",
    "OutputNameInUseError",
    "ProducerFencedError",
    "ProducerStuckError",
    "QueryIdReusedError",
    "RecordTooLargeError",
    "SinkCommitMessage",
    "SinkConfig",
    "SinkConfigError",
    "SinkError",
    "SinkRecordError",
    "SinkSchemaError",
    "SinkTransaction",
    "TransactionFailedError",
    "UnsafeSinkSettingError",
    "abort_transactions",
    "check_transaction_timeout",
    "close_clients",
    "deduplicate_to_kafka",
    "list_transactions",
    "read_phase_timings",
    "register",
    "release_when_stopped",
    "required_acls",
]
