"""The dedup operator: keep the first occurrence of each record ID.

Works on streaming and batch DataFrames. Rows are shuffled by shard
(``pmod(xxhash64(id), num_shards)``), each shard to partition ``shard mod P``
(:mod:`dedup.placement`); each partition runs
:class:`dedup.partition_step.PartitionStep` in a UDF that sees only
the IDs (one atomic Redis claim per batch and shard), Spark ``observe``\\ s
the per-batch metrics, and only kept rows go on.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dedup.catalog import KAFKA_TOPIC_FIELD, RedisCatalog
from dedup.config import DedupConfig, InvalidIdPolicy
from dedup.exceptions import ConfigError, RecordIdError, SettingChangedError
from dedup.ids import canonical_tag, kafka_topic_ids, record_id_strategy
from dedup.metrics import (
    INVALID_ID,
    KEPT,
    RESULT_COLUMN,
    STATUS,
    DedupMetrics,
    observed_columns,
)
from dedup.partition_step import (
    PartitionStep,
    batch_time_column,
    id_problem_column,
    partition_udf,
)
from dedup.placement import PLACEMENT_SCHEME, placement_column, shard_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

# metric name -> the app id that uses it in this process
_METRIC_NAMES: dict[str, str] = {}
_METRIC_NAMES_LOCK = threading.Lock()
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecisionPlan:
    """What the partition step of one app id needs, from :meth:`Deduplicator.plan`.

    ``partitions``: the pinned partition count of the shuffle by shard;
    ``shard``: the Spark column of each row's shard; ``inputs``: the step's
    input columns (ID, shard, ID problem code, batch timestamp[, event
    seconds]); ``step_config``: the config the executors run with.
    """

    partitions: int
    shard: Any
    inputs: list[Any]
    step_config: DedupConfig


def metric_name(app_id: str) -> str:
    """Name of the operator's observed metrics in ``lastProgress['observedMetrics']``."""
    return "dedup_" + re.sub(r"[^A-Za-z0-9_]", "_", app_id)


class Deduplicator:
    """Exactly-once dedup of one app id, with its metrics and garbage collection.

    Parameters
    ----------
    config:
        :class:`DedupConfig`; ``config.app_id`` names the catalog.
    num_partitions:
        Partitions of the shuffle by shard; default ``spark.sql.shuffle.partitions``.
    gc_listener:
        Register a listener that deletes decisions once Spark committed their
        batch and releases the app-id lease when a query stops.
    """

    def __init__(self, config: DedupConfig, num_partitions: int | None = None,
                 gc_listener: bool = True) -> None:
        if not isinstance(config, DedupConfig):
            raise ConfigError("Deduplicator needs a DedupConfig")
        if num_partitions is not None and num_partitions < 1:
            raise ConfigError(f"num_partitions must be >= 1, not {num_partitions}")
        self.config = config
        self.num_partitions = num_partitions
        self.gc_listener = gc_listener
        self.catalog = RedisCatalog(config)
        self.metric_name = metric_name(config.app_id)
        with _METRIC_NAMES_LOCK:
            other = _METRIC_NAMES.setdefault(self.metric_name, config.app_id)
        if other != config.app_id:
            # Metrics and decision GC are keyed by this name: the two would mix.
            raise ConfigError(
                f"app ids {other!r} and {config.app_id!r} have the same metric name "
                f"{self.metric_name!r} in this process; rename one (letters, digits and '_' "
                "are kept, every other character becomes '_')"
            )
        self._observation: Any = None
        self._replicas = 0  # resolved by the start-up check of apply()

    def apply(self, df: DataFrame) -> DataFrame:
        """Return ``df`` without duplicate record IDs (first occurrence kept).

        Checks on the driver first: the ID (and event time) column exists,
        Redis is reachable and persistent (unless allowed), and the shard count
        matches the one recorded for the app id. Applying it twice to the same
        DataFrame is safe; a batch DataFrame replays its decisions when
        re-executed.

        Raises
        ------
        RecordIdError
            The ID column is missing (the message lists the available columns) or is
            not a string.
        UnsafeSettingError, ShardCountMismatchError, CatalogUnavailableError
            From the start-up checks; the message names the fix.
        """
        from pyspark.sql import functions as sf

        cfg = self.config
        plan = self.plan(df)
        spark = df.sparkSession
        partitions, shard = plan.partitions, plan.shard
        sharded = df.repartition(partitions, placement_column(shard, cfg.num_shards, partitions))
        decide = partition_udf(PartitionStep(plan.step_config, uuid.uuid4().hex,
                                             streaming=df.isStreaming))
        marked = sharded.withColumn(RESULT_COLUMN, decide(*plan.inputs))
        if df.isStreaming:
            observed = marked.observe(self.metric_name, *observed_columns())
            if self.gc_listener:
                self._install_listener(spark)
        else:
            from pyspark.sql import Observation

            self._observation = Observation(self.metric_name)
            observed = marked.observe(self._observation, *observed_columns())
        status = sf.col(f"{RESULT_COLUMN}.{STATUS}")
        if cfg.invalid_ids == InvalidIdPolicy.DEAD_LETTER:
            # Null, so the exactly-once sink routes the record to its dead letter.
            invalid = status == INVALID_ID
            return (observed.filter((status == KEPT) | invalid)
                    .withColumn(cfg.id_column, sf.when(invalid, sf.lit(None).cast("string"))
                                .otherwise(sf.col(cfg.id_column)))
                    .drop(RESULT_COLUMN))
        return observed.filter(status == KEPT).drop(RESULT_COLUMN)

    def plan(self, df: DataFrame) -> DecisionPlan:
        """Check ``df`` and the app id as :meth:`apply` does; return what the step needs.

        For front ends that run the partition step themselves (the fused dedup
        and exactly-once Kafka writer of :mod:`sinks`). Safe to repeat; raises
        what :meth:`apply` raises.
        """
        from pyspark.sql import functions as sf
        from pyspark.sql.types import NumericType, StringType, TimestampType

        cfg = self.config
        if cfg.id_column not in df.columns:
            raise RecordIdError(
                f"record id column {cfg.id_column!r} is missing; available columns: "
                f"{df.columns}. Add it with dedup.with_record_id(df, ...) or set "
                "DedupConfig(id_column=...)"
            )
        id_type = df.schema[cfg.id_column].dataType
        if not isinstance(id_type, StringType):
            raise RecordIdError(
                f"record id column {cfg.id_column!r} has type {id_type.simpleString()}: it "
                "must be a string; cast it or use with_record_id(strategy='column' or 'hash')"
            )
        event_time = cfg.retention.event_time_column
        if event_time is not None:
            if event_time not in df.columns:
                raise ConfigError(
                    f"retention event_time_column {event_time!r} is missing; available "
                    f"columns: {df.columns}"
                )
            event_type = df.schema[event_time].dataType
            if not isinstance(event_type, TimestampType | NumericType):
                raise ConfigError(
                    f"retention event_time_column {event_time!r} has type "
                    f"{event_type.simpleString()}: it must be a timestamp or epoch seconds"
                )
        if RESULT_COLUMN in df.columns:
            raise ConfigError(f"column {RESULT_COLUMN!r} is reserved by the dedup operator; "
                              "rename it")
        partitions = self._pinned_layout(df, df.sparkSession)
        record_id = sf.col(cfg.id_column)
        shard = shard_column(record_id, cfg.num_shards)
        # The batch's own timestamp (Spark keeps it in the offset log, so every
        # attempt and every executor of a batch sees the same one) decides late
        # records and time buckets: a retry decides what the first attempt did.
        batch_time = batch_time_column()
        inputs = [record_id, shard, id_problem_column(record_id), batch_time]
        if event_time is not None:
            inputs.append(sf.col(event_time).cast("double"))
        # Executors wait for the replica count the start-up check resolved.
        step_config = replace(cfg, redis=replace(cfg.redis, wait_replicas=self._replicas))
        return DecisionPlan(partitions, shard, inputs, step_config)

    def _pinned_layout(self, df: DataFrame, spark: SparkSession) -> int:
        """Record the layout on first use, refuse a changed one; return the partition count.

        The partition count of the operator's shuffle is also the partition
        count of a sink that follows it, which keys its transactions and
        checkpoints by partition: a batch retried with another count would lose
        or repeat records. Like Spark for its own stateful operators, a count
        taken from ``spark.sql.shuffle.partitions`` is replaced by the recorded
        one; an explicit ``num_partitions`` that differs is refused.
        """
        cfg = self.config
        explicit = self.num_partitions
        wanted_partitions = explicit or int(spark.conf.get("spark.sql.shuffle.partitions")
                                            or 200)
        strategy = record_id_strategy(df, cfg.id_column)
        topics = kafka_topic_ids(df, cfg.id_column) if canonical_tag(strategy) == "kafka" \
            else {}
        recorded = self.catalog.check_setup({
            "num_partitions": str(wanted_partitions),
            "placement": PLACEMENT_SCHEME,
            "bucket_seconds": str(cfg.retention.bucket_seconds),
            "id_strategy": strategy,
            **{KAFKA_TOPIC_FIELD + name: topic_id for name, topic_id in topics.items()},
        })
        app = cfg.app_id
        self._replicas = int(recorded.get("replicas", 0))

        def changed(setting: str, new: str, why: str, fix: str,
                    label: str = "") -> SettingChangedError:
            return SettingChangedError(
                f"app id {app!r}: {label or setting} changed: recorded {recorded.get(setting)}, "
                f"now {new}; {why}: {fix}, or use a new app id (an empty catalog: duplicates of "
                "the records emitted before then pass)"
            )

        if recorded.get("placement", PLACEMENT_SCHEME) != PLACEMENT_SCHEME:
            raise changed("placement", PLACEMENT_SCHEME,
                          "this release maps IDs to shards and partitions differently",
                          "run the release that created the app id")
        if recorded.get("bucket_seconds", str(cfg.retention.bucket_seconds)) != str(
                cfg.retention.bucket_seconds):
            raise changed(
                "bucket_seconds", str(cfg.retention.bucket_seconds),
                "IDs claimed in the old buckets would never be looked up again and their "
                "duplicates would pass",
                f"set RetentionConfig(bucket_seconds={recorded['bucket_seconds']})")
        # Compared in today's vocabulary: an app id recorded by an earlier
        # release (e.g. "kafka-key") keeps working under the strategy's new name.
        before = canonical_tag(recorded.get("id_strategy", strategy))
        if strategy and before != canonical_tag(strategy):
            raise changed(
                "id_strategy", strategy,
                "the same records would get other IDs and pass as new",
                f"derive IDs as before ({before})", label="record id strategy")
        for name, topic_id in sorted(topics.items()):
            before_id = recorded.get(KAFKA_TOPIC_FIELD + name, topic_id)
            if before_id != topic_id:
                raise SettingChangedError(
                    f"app id {app!r}: input topic {name!r} is not the topic this app id read "
                    f"(topic id {before_id} recorded, now {topic_id}: deleted and created "
                    "again, or another Kafka cluster's); its record IDs are coordinates "
                    "(topic/partition/offset) that repeat the old topic's, so its records "
                    "would be dropped as their duplicates: read the old topic again, or "
                    "use a new app id with a new checkpoint (starting offsets where the new "
                    "topic is to be read from; an empty catalog: duplicates of the records "
                    "emitted before then pass)")
        pinned = int(recorded.get("num_partitions", wanted_partitions))
        if pinned != wanted_partitions:
            if explicit is not None:
                raise SettingChangedError(
                    f"app id {app!r}: num_partitions changed: recorded {pinned}, now "
                    f"{explicit}; a sink after the operator keys transactions by partition, "
                    "so a batch retried with another count would lose or repeat records: pass "
                    f"num_partitions={pinned} (or leave it unset to reuse it), or use a new "
                    "app id (an empty catalog: duplicates of the records emitted before then "
                    "pass)"
                )
            log.warning("dedup app id %r: using its recorded %d shuffle partitions, not "
                        "spark.sql.shuffle.partitions=%d", app, pinned, wanted_partitions)
        return pinned

    def _install_listener(self, spark: SparkSession) -> None:
        from dedup.gc import await_stopped_queries, session_listener

        session_listener(spark).watch(self.metric_name, self.catalog)
        # a query of this app id stopped just before holds its lease until the listener
        # hears its end: this query's first claim would be refused
        await_stopped_queries(spark)

    def metrics(self, query: StreamingQuery | None = None,
                with_catalog_size: bool = False) -> DedupMetrics | None:
        """Metrics of the last batch of ``query`` (streaming) or of the last run (batch).

        Returns None when no batch ran yet. For a batch DataFrame, call after
        an action ran (it blocks until then). Safe to repeat.
        """
        size = self.catalog_size() if with_catalog_size else None
        if query is not None:
            progress = query.lastProgress
            if not progress:
                return None
            row = (progress.get("observedMetrics") or {}).get(self.metric_name)
            return DedupMetrics.from_observed(row, size) if row is not None else None
        if self._observation is None:
            return None
        return DedupMetrics.from_observed(self._observation.get, size)

    def catalog_size(self) -> int:
        """IDs the catalog currently remembers (one pipelined read)."""
        return self.catalog.catalog_size(time.time())

    def collect_garbage(self, query_id: str, committed_batch_id: int) -> int:
        """Delete decisions of ``query_id`` for batches before ``committed_batch_id``.

        Call only with a batch id in Spark's commit log (docs/design.md,
        invariant 7); safe to repeat. Returns the number of decisions deleted.
        """
        return self.catalog.collect_garbage(query_id, committed_batch_id)


def deduplicate(df: DataFrame, config: DedupConfig, num_partitions: int | None = None
                ) -> DataFrame:
    """Shortcut for ``Deduplicator(config, num_partitions).apply(df)``; see there."""
    return Deduplicator(config, num_partitions).apply(df)
