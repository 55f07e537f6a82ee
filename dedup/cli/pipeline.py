"""Compose source -> record IDs -> dedup -> exactly-once sink from a pipeline file.

This is the one place that imports the core, the sources and the sinks
together (the CLI composes; the packages never import each other upward).
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dedup.cli.checks import check_kafka, check_redis
from dedup.cli.config_file import SYNTHETIC_KEYS, PipelineFile
from dedup.config import BloomConfig, DedupConfig, RedisConfig, RetentionConfig
from dedup.constants import DEFAULT_ID_COLUMN
from dedup.exceptions import ConfigError
from dedup.spark_session import is_connect

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from dedup.cli.progress import QueryWatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Addresses:
    """Resolved service addresses (flags > pipeline file > services state file)."""

    redis_url: str
    source_bootstrap: str
    sink_bootstrap: str


def resolve_addresses(pipeline: PipelineFile, redis_url: str | None = None,
                      bootstrap: str | None = None) -> Addresses:
    """Fill empty addresses from flags, then from ``dedup services up``'s state file."""
    from dedup.local.lasting import service_addresses

    state_redis, state_kafka = service_addresses()
    redis = redis_url or pipeline.table("redis")["url"] or state_redis or ""
    source_kafka = bootstrap or pipeline.table("source")["bootstrap_servers"] or state_kafka or ""
    sink_kafka = bootstrap or pipeline.table("sink")["bootstrap_servers"] or state_kafka or ""
    return Addresses(redis, source_kafka, sink_kafka)


def resolve_bootstrap(flag: str | None) -> str:
    """``--bootstrap``, else the local services' Kafka; refused when neither is there."""
    from dedup.local.lasting import service_addresses

    bootstrap = flag or service_addresses()[1]
    if not bootstrap:
        raise ConfigError("no Kafka address: pass --bootstrap host:port or start the local "
                          "services with 'dedup services up'")
    return bootstrap


@dataclass(frozen=True)
class SinkKafka:
    """The sink's Kafka as the commands that only talk to it (``verify``, ``txn``)
    reach it. ``security`` holds secrets: never print it."""

    bootstrap: str
    security: dict[str, Any]  # librdkafka security, SASL and TLS settings; {} for none
    pipeline: PipelineFile | None
    what: str  # what to fix when Kafka cannot be reached

    @property
    def client_config(self) -> dict[str, Any]:
        """Settings of the command's own clients: quiet, and ``security``."""
        return quiet_clients(self.security)

    def check(self) -> None:
        """Refuse, naming the fix, when Kafka does not answer (:func:`check_kafka`)."""
        check_kafka(self.bootstrap, what=self.what, client_config=self.security or None)


def sink_kafka(config: str | None, bootstrap: str | None) -> SinkKafka:
    """``--bootstrap``, else the pipeline file's ``sink.bootstrap_servers``, else the
    local services; with a pipeline file (``--config``), the security, SASL and TLS
    settings of its ``[sink.options]``, so an audit connects as the sink did."""
    from dedup.cli.config_file import load_pipeline

    if not config:
        return SinkKafka(resolve_bootstrap(bootstrap), {}, None,
                         "--bootstrap (a secured Kafka: --config with the pipeline file, "
                         "whose [sink.options] hold its kafka.security/sasl/ssl settings)")
    pipeline = load_pipeline(config)
    address = resolve_addresses(pipeline, bootstrap=bootstrap).sink_bootstrap
    if not address:
        raise ConfigError(f"no Kafka address: set sink.bootstrap_servers in {config}, pass "
                          "--bootstrap host:port or start the local services with "
                          "'dedup services up'")
    return SinkKafka(address, sink_client_settings(pipeline), pipeline,
                     f"sink.bootstrap_servers (or --bootstrap) and the kafka.* security "
                     f"options of [sink.options] in {config}")


def resolve_redis_url(flag: str | None) -> str:
    """``--redis-url``, else the local services' Redis; refused when neither is there."""
    from dedup.local.lasting import service_addresses

    url = flag or service_addresses()[0]
    if not url:
        raise ConfigError("no Redis address: pass --redis-url redis://host:port/db or start "
                          "the local services with 'dedup services up'")
    return url


def check_services(pipeline: PipelineFile, addresses: Addresses) -> None:
    """Fail fast, naming the address and the fix, when a needed service is unreachable."""
    if pipeline.table("dedup")["enabled"] or pipeline.table("sink")["type"] == "kafka":
        check_redis(addresses.redis_url, what="redis.url (or --redis-url)")
    if pipeline.table("source")["type"] == "kafka":
        settings = source_client_settings(pipeline)
        if settings is not None:  # else Spark's own client is the first to connect
            check_kafka(addresses.source_bootstrap,
                        what="source.bootstrap_servers (or --bootstrap)", client_config=settings)
    if pipeline.table("sink")["type"] == "kafka":
        check_kafka(addresses.sink_bootstrap, what="sink.bootstrap_servers (or --bootstrap)",
                    client_config=sink_client_settings(pipeline))


def quiet_clients(settings: dict[str, Any] | None) -> dict[str, Any]:
    """librdkafka settings of the command's own clients: no log lines, and ``settings``
    (security, SASL, TLS). Holds secrets when ``settings`` does: never print it."""
    from dedup.cli.checks import QUIET_KAFKA

    return {**QUIET_KAFKA, **(settings or {})}


def sink_client_settings(pipeline: PipelineFile) -> dict[str, Any]:
    """librdkafka settings the command's own clients of the sink's Kafka need (the
    security, SASL and TLS entries of ``[sink.options]``, without ``kafka.``), so the
    reachability check, the topic it creates and ``--verify`` connect as the sink does.
    Holds secrets: never print it."""
    from sinks.config import client_settings

    options = pipeline.table("sink")["options"]
    return client_settings({str(k)[len("kafka."):]: str(v) for k, v in options.items()
                            if str(k).startswith("kafka.")})


def source_client_settings(pipeline: PipelineFile) -> dict[str, Any] | None:
    """librdkafka settings the command's own clients of the Kafka source need, from the
    Java settings of ``[source.options]`` (:func:`sources.kafka.client_settings`); None
    when they cannot be told (a JKS trust store, Kerberos). Holds secrets: never print it."""
    from sources.kafka import client_settings

    return client_settings(pipeline.table("source")["options"])


def dedup_config(pipeline: PipelineFile, redis_url: str,
                 fail_point_dir: str | None = None) -> DedupConfig:
    """The :class:`DedupConfig` of ``[dedup]`` and ``[redis]``."""
    from dedup.config import FailPointConfig

    table = pipeline.table("dedup")
    redis_table = pipeline.table("redis")
    wait_replicas = int(redis_table["wait_replicas"])
    return DedupConfig(
        app_id=pipeline.app_id,
        redis=RedisConfig(url=redis_url, require_persistence=redis_table["require_persistence"],
                          wait_replicas=None if wait_replicas == -1 else wait_replicas,
                          failover_wait=redis_table["failover_wait"]),
        id_column=DEFAULT_ID_COLUMN,
        num_shards=table["num_shards"],
        bloom=BloomConfig(enabled=table["bloom.enabled"], capacity=table["bloom.capacity"],
                          error_rate=table["bloom.error_rate"]),
        retention=RetentionConfig(
            horizon_seconds=table["retention.horizon_seconds"],
            bucket_seconds=table["retention.bucket_seconds"],
            event_time_column=table["retention.event_time_column"] or None,
            late_policy=table["retention.late_policy"],
        ),
        fail_points=FailPointConfig(fail_point_dir),
        allow_shared_app_id=table["allow_shared_app_id"],
        invalid_ids=table["invalid_ids"],
    )


def source_frame(spark: SparkSession, pipeline: PipelineFile, addresses: Addresses,
                 ) -> DataFrame:
    """The source DataFrame with the ``_record_id`` column of ``[ids]``."""
    from dedup.ids import with_record_id
    from sources.files import read_files
    from sources.kafka import read_kafka
    from sources.synthetic import synthetic_stream
    from sources.synthetic_rows import SyntheticOptions

    src = pipeline.table("source")
    ids = pipeline.table("ids")
    kind = src["type"]
    if kind == "synthetic":
        options = SyntheticOptions(**{key: src[key] for key in SYNTHETIC_KEYS})
        frame = synthetic_stream(spark, options)
        if ids["strategy"] == "none":
            return frame
        return with_record_id(frame, ids["strategy"] or "column", columns=ids["columns"],
                              column=ids["column"] or "event_id", header=ids["header"])
    if kind == "kafka":
        if not src["topics"]:
            raise ConfigError("source.topics is required for source.type = \"kafka\"")
        return read_kafka(
            spark, addresses.source_bootstrap, src["topics"],
            id_strategy=ids["strategy"] or "kafka", key_column=ids["column"] or None,
            columns=ids["columns"] or None, header=ids["header"],
            starting_offsets=src["starting_offsets"],
            max_offsets_per_trigger=src["max_offsets_per_trigger"] or None,
            options=src["options"],
        )
    if not src["path"] or not src["schema"]:
        raise ConfigError("source.path and source.schema are required for source.type = "
                          "\"files\"")
    return read_files(spark, src["path"], format=src["format"], schema=src["schema"],
                      id_strategy=ids["strategy"] or "hash",
                      key_column=ids["column"] or None, columns=ids["columns"] or None,
                      max_files_per_trigger=src["max_files_per_trigger"] or None)


def sink_frame(frame: DataFrame, pipeline: PipelineFile, carry: list[str] | None = None,
               ) -> DataFrame:
    """Project to the sink's columns: ``key``, ``value`` and ``_record_id`` (and the
    ``carry`` columns as they are)."""
    from pyspark.sql import functions as sf

    sink = pipeline.table("sink")
    columns = [c for c in frame.columns if c != DEFAULT_ID_COLUMN]
    if sink["value_column"]:
        if sink["value_column"] not in frame.columns:
            raise ConfigError(f"sink.value_column {sink['value_column']!r} is not a column; "
                              f"available: {', '.join(columns)}")
        value = sf.col(sink["value_column"]).cast("string")
    elif "value" in frame.columns:
        value = sf.col("value")
    else:
        value = sf.to_json(sf.struct(*[sf.col(c) for c in columns]))
    selected = [value.alias("value"), sf.col(DEFAULT_ID_COLUMN)]
    key = sink["key_column"]
    if key and key in frame.columns:
        selected.insert(0, sf.col(key).cast("string").alias("key"))
    elif key and key != "key":
        raise ConfigError(f"sink.key_column {key!r} is not a column; available: "
                          f"{', '.join(columns)} (set it to \"\" for no key)")
    # a carried column that is missing is named by the step that needs it
    selected += [sf.col(c) for c in carry or [] if c in frame.columns
                 and c not in ("key", "value", DEFAULT_ID_COLUMN)]
    return frame.select(*selected)


def _local_root(checkpoint: str) -> Path | None:
    """The folder of a checkpoint on the local file system; None elsewhere (HDFS,
    object stores: not read)."""
    from pathlib import Path

    if "://" in checkpoint and not checkpoint.startswith("file:"):
        return None
    return Path(checkpoint.removeprefix("file://").removeprefix("file:"))


def checkpoint_query_id(checkpoint: str) -> str | None:
    """The streaming query id in the Spark checkpoint's ``metadata``; None when there
    is none yet (or the checkpoint is not Spark's, or not local)."""
    root = _local_root(checkpoint)
    try:
        return None if root is None else str(
            json.loads((root / "metadata").read_text().splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError):
        return None


def checkpoint_history(checkpoint: str) -> tuple[str, int] | None:
    """``(query id, last committed batch)`` of the Spark checkpoint at ``checkpoint``;
    None when it has no committed batch, or is not on the local file system (not read:
    HDFS, object stores)."""
    root = _local_root(checkpoint)
    query_id = checkpoint_query_id(checkpoint)
    if root is None or query_id is None:
        return None  # no checkpoint yet (or not Spark's): nothing to compare with
    try:
        committed = [int(p.name) for p in (root / "commits").iterdir() if p.name.isdigit()]
    except OSError:
        return None
    return (query_id, max(committed)) if committed else None


def unfinished_batch(checkpoint: str) -> int | None:
    """The batch the Spark checkpoint at ``checkpoint`` planned but never committed
    (its offset log is ahead of its commit log); None when there is none, or the
    checkpoint is not on the local file system."""
    root = _local_root(checkpoint)
    if root is None:
        return None

    def last(folder: str) -> int:
        try:
            return max((int(p.name) for p in (root / folder).iterdir() if p.name.isdigit()),
                       default=-1)
        except OSError:
            return -1

    planned = last("offsets")
    return planned if planned > last("commits") else None


def _unfinished_query(pipeline: PipelineFile, checkpoint: str,
                      ) -> tuple[int, str, list[str]] | None:
    """``(batch, query id, ids)`` of a checkpoint that left a batch unfinished: the
    query id Spark recorded and, first after it, the sink's fixed ``query.id`` under
    which one pass records (each once); None when no batch is unfinished."""
    batch = unfinished_batch(checkpoint)
    query_id = None if batch is None else checkpoint_query_id(checkpoint)
    if batch is None or query_id is None:
        return None
    fixed = str(pipeline.table("sink")["options"].get("query.id") or query_id)
    return batch, query_id, list(dict.fromkeys((query_id, fixed)))


def check_dedup_kept(pipeline: PipelineFile, redis_url: str, checkpoint: str) -> None:
    """Refuse ``dedup.enabled = false`` on a checkpoint whose query deduplicated and left
    a batch unfinished: without the dedup step the batch's rows land in other sink
    partitions, and the partitions its first attempt committed would hide the rest of
    it (found by tests/integration/cli/test_pipeline_key_changes.py: 37 of 360 records
    lost, no error). After a clean stop the step may go. Read-only."""
    if pipeline.table("dedup")["enabled"] or not redis_url:
        return
    unfinished = _unfinished_query(pipeline, checkpoint)
    if unfinished is None:
        return
    from dedup.catalog import RedisCatalog

    batch, query_id, ids = unfinished
    catalog = RedisCatalog(dedup_config(pipeline, redis_url))
    if not any(catalog.knows_query(q) for q in ids):
        return
    from dedup.exceptions import SettingChangedError

    raise SettingChangedError(
        f"dedup.enabled is false, but checkpoint {checkpoint} holds streaming query "
        f"{query_id}, which deduplicated under app id {pipeline.app_id!r} and left batch "
        f"{batch} unfinished: without the dedup step that batch would be written in other "
        "sink partitions and the ones already committed would hide the rest of it. Set "
        f"dedup.enabled = true until batch {batch} is committed (run once), then turn it off")


def check_sink_kept(pipeline: PipelineFile, redis_url: str, checkpoint: str) -> None:
    """Refuse a sink other than Kafka (``sink.type = "console"``) on a checkpoint whose
    query left a batch unfinished that its Kafka sink had begun: the new sink would take
    the replayed batch, Spark would record it done, and the Kafka partitions not yet
    committed would never reach the topic the batch began in (found by
    tests/integration/cli/test_pipeline_key_changes.py: 37 records of the batch lost from
    the topic, no error). After a clean stop the sink may change. Read-only; not checked
    without a Redis (a Kafka sink always has one)."""
    if pipeline.table("sink")["type"] == "kafka" or not redis_url:
        return
    unfinished = _unfinished_query(pipeline, checkpoint)
    if unfinished is None:
        return
    from dedup.exceptions import SettingChangedError
    from dedup.keys import legacy_query_outputs_key, query_outputs_key
    from dedup.redis_client import client_and_scripts, legacy_record, redis_errors

    batch, _, ids = unfinished
    redis_config = dedup_config(pipeline, redis_url).redis
    client = client_and_scripts(redis_config)[0]
    for query in ids:
        key = query_outputs_key(redis_config.user, query)
        with redis_errors(redis_config, "reading the outputs of a streaming query", keys=[key]):
            outputs = client.hgetall(key)
            if not outputs:  # not yet taken over from an earlier release's record
                old = legacy_record(redis_config, legacy_query_outputs_key(query))
                outputs = dict(zip(old[::2], old[1::2], strict=True))
        # output -> "<batch it began>:<run id>:<topic>:<cluster id>" (sink_join.lua)
        for output, value in outputs.items():
            began, _, rest = (value.decode() if isinstance(value, bytes) else str(value)
                              ).partition(":")
            if not began.isdigit() or int(began) < batch:
                continue
            topic = rest.partition(":")[2].partition(":")[0]
            name = output.decode() if isinstance(output, bytes) else str(output)
            raise SettingChangedError(
                f"sink.type is {pipeline.table('sink')['type']!r}, but checkpoint "
                f"{checkpoint} holds streaming query {query}, whose Kafka sink output "
                f"{name!r} began batch {batch} (topic {topic!r}) and left it partly "
                f"committed: the {pipeline.table('sink')['type']} sink would take the "
                "replayed batch and its Kafka partitions not yet committed would never "
                f"reach that topic. Restart once with sink.type = \"kafka\" until batch "
                f"{batch} is committed (run once), then change it")


def _move_advice(checkpoint: str, restore: str) -> str:
    """How to leave ``checkpoint`` for a new one: at once, or, with a batch unfinished,
    after ``restore`` (the old input) has committed it."""
    # A new checkpoint while a batch is unfinished is refused in turn (the batch's
    # claims belong to the old query): the move waits for the batch.
    batch = unfinished_batch(checkpoint)
    return ("start with a new checkpoint" if batch is None else
            f"{restore} until batch {batch} is committed (run once), then start with a new "
            "checkpoint")


def check_source_path_kept(pipeline: PipelineFile, checkpoint: str) -> None:
    """Refuse a files source whose ``path`` no longer holds the files its checkpoint's
    last batch read: Spark reads them again at every start, by the names in its log,
    and fails with a bare "Wrong basePath" (found by
    tests/integration/cli/test_pipeline_key_changes.py). Not checked for a glob or a
    checkpoint off the local file system. Read-only."""
    from pathlib import Path

    from dedup.exceptions import SettingChangedError

    src = pipeline.table("source")
    path = str(src["path"])
    if src["type"] != "files" or not path or any(c in path for c in "*?[{"):
        return
    if "://" in checkpoint and not checkpoint.startswith("file:"):
        return
    log = Path(checkpoint.removeprefix("file://").removeprefix("file:")) / "sources" / "0"
    try:
        batches = {int(p.name.split(".")[0]): p for p in log.iterdir()
                   if p.name.split(".")[0].isdigit()}
        lines = batches[max(batches)].read_text().splitlines()[1:] if batches else []
        files = [str(json.loads(line)["path"]) for line in lines if line.strip()]
    except (OSError, ValueError, KeyError, TypeError):
        return  # no log yet (or not a file source's): nothing to compare with
    root = Path(path.removeprefix("file://").removeprefix("file:")).resolve()
    for file in files:
        local = Path(file.removeprefix("file://").removeprefix("file:")).resolve()
        if root != local and root not in local.parents:
            move = _move_advice(checkpoint, "to move to the new path, restore it")
            raise SettingChangedError(
                f"source.path is {path!r}, but checkpoint {checkpoint} holds a file source "
                f"whose last batch read {file}, which Spark reads again at every start and "
                f"would not find under that path (it fails with 'Wrong basePath'): restore "
                f"source.path {str(local.parent)!r} (or a folder that holds it) for as long "
                f"as this checkpoint is kept, or {move} (the catalog then drops the records "
                "read again)")


SOURCE_STAMP = "dedup-source-topics"
"""A file of ``dedup run``'s in the Spark checkpoint's folder: the Kafka topic id of each
input topic the checkpoint's offsets belong to (JSON, name -> id)."""


def check_source_topics_kept(pipeline: PipelineFile, addresses: Addresses,
                             checkpoint: str) -> dict[str, str]:
    """Refuse a kept checkpoint whose Kafka input topics are now other topics of the
    same names (another topic id: deleted and created again, or another Kafka cluster
    behind ``[source] bootstrap_servers``): Spark would resume them from the old
    topics' offsets, reading the new topic from the middle, or failing on offsets
    that went back. Returns the topics' ids as read now (for
    :func:`record_source_topics`; {} when not read: not a Kafka source, a checkpoint
    off this machine, a cluster the Python client cannot ask). Read-only."""
    from dedup.exceptions import SettingChangedError
    from sources.kafka import topic_ids

    src = pipeline.table("source")
    root = _local_root(checkpoint)
    if src["type"] != "kafka" or not src["topics"] or root is None:
        return {}
    names = [t.strip() for name in src["topics"] for t in str(name).split(",") if t.strip()]
    now = topic_ids(addresses.source_bootstrap, names,
                    {str(k): str(v) for k, v in src["options"].items()})
    try:
        recorded = json.loads((root / SOURCE_STAMP).read_text())
    except (OSError, ValueError):
        return now  # a new checkpoint, or one no dedup run has stamped yet
    for name, before in sorted(recorded.items()):
        if name in now and now[name] != before:
            move = _move_advice(checkpoint,
                                "to move to the new topic, restore the old one")
            batch = unfinished_batch(checkpoint)
            # A deleted topic cannot be restored: say what went with it (the batch's
            # records not yet emitted) and what then remains to do.
            gone = ("" if batch is None else
                    f"; if the old topic is gone for good, the records of batch {batch} not "
                    "in the output yet went with it (replay them from a copy of the old "
                    "topic, if one is kept): start with a new checkpoint")
            raise SettingChangedError(
                f"checkpoint {checkpoint} read Kafka topic {name!r} with topic id {before}, "
                f"but the topic of that name at {addresses.source_bootstrap} has id "
                f"{now[name]} (deleted and created again, or another Kafka cluster): Spark "
                "would resume it from the old topic's offsets, which do not carry to another "
                "topic: restore source.bootstrap_servers (or the old topic) for as long as "
                f"this checkpoint is kept, or {move} (source.starting_offsets where the new "
                f"topic is to be read from){gone}")
    return now


def record_source_topics(checkpoint: str, ids: dict[str, str]) -> None:
    """Stamp ``checkpoint`` with the ids of its Kafka input topics
    (:func:`check_source_topics_kept`), keeping those of topics not read now. Safe to
    repeat. A stamp that cannot be written leaves the move unchecked."""
    root = _local_root(checkpoint)
    # Spark made the folder at start; none here means the checkpoint is another
    # machine's (a remote Connect server): nothing to stamp on this one.
    if not ids or root is None or not root.is_dir():
        return
    stamp = root / SOURCE_STAMP
    try:
        recorded = json.loads(stamp.read_text()) if stamp.exists() else {}
        merged = {**recorded, **ids}
        if merged != recorded:
            stamp.write_text(json.dumps(merged, sort_keys=True) + "\n")
    except (OSError, ValueError):
        pass


SPARK_STAMP = "dedup-spark-version"
"""A file of ``dedup run``'s in the Spark checkpoint's folder: the newest Spark version
that ran the checkpoint (Spark ignores files it does not know there)."""


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def check_spark_version_kept(spark_version: str, checkpoint: str) -> None:
    """Refuse a Spark older than the newest that ran ``checkpoint``: Spark promises
    that a newer release resumes an older one's checkpoint, not the reverse. (The
    bare "Cannot invoke ...IterableOps.map... Option.get() is null" first seen when
    4.1.1 resumed 4.2.0's checkpoint is 4.1's own Kafka source bug, SPARK-55271,
    which every restart in the middle of a batch meets on 4.1.1.) An upgrade passes.
    Read-only."""
    from dedup.exceptions import SettingChangedError

    root = _local_root(checkpoint)
    try:
        newest = "" if root is None else (root / SPARK_STAMP).read_text().strip()
    except OSError:
        return  # a new checkpoint, or one no dedup run has stamped yet
    if newest and _version(spark_version) < _version(newest):
        raise SettingChangedError(
            f"Spark {spark_version} cannot resume checkpoint {checkpoint}: Spark {newest} "
            "ran it last, and Spark does not promise that an older release resumes a newer "
            f"one's checkpoint. Run this checkpoint with Spark {newest} or later")


def record_spark_version(spark_version: str, checkpoint: str) -> None:
    """Stamp ``checkpoint`` with ``spark_version`` when it is the newest that ran it
    (:func:`check_spark_version_kept`). Safe to repeat. A stamp that cannot be written
    leaves Spark's own refusal of a downgrade, which is fail-closed too."""
    root = _local_root(checkpoint)
    # Spark made the folder at start; none here means the checkpoint is another
    # machine's (a remote Connect server): nothing to stamp on this one.
    if root is None or not root.is_dir():
        return
    stamp = root / SPARK_STAMP
    try:
        newest = stamp.read_text().strip() if stamp.exists() else ""
        if not newest or _version(spark_version) > _version(newest):
            stamp.write_text(spark_version + "\n")
    except OSError:
        pass


def _dedup_history(pipeline: PipelineFile, checkpoint: str) -> tuple[str, int] | None:
    """``(query id the catalog records, last committed batch)`` of the checkpoint of a
    pipeline that deduplicates; None when it does not, or no batch is committed."""
    history = checkpoint_history(checkpoint)
    if history is None or not pipeline.table("dedup")["enabled"]:
        return None
    query_id, last = history
    sink = pipeline.table("sink")
    fixed = sink["options"].get("query.id")
    if sink["one_pass"] and fixed:
        query_id = str(fixed)  # one pass claims and records under the fixed id
    return query_id, last


def record_checkpoint_commit(pipeline: PipelineFile, redis_url: str, checkpoint: str) -> None:
    """Record in the catalog the last batch the checkpoint committed, when the catalog's
    record is older. Safe to repeat; only ever raises the record.

    The two-step form records a committed batch from the listener's progress event,
    which Spark may deliver after ``query.stop()``: a driver that dies, or a Redis
    failover, in that window loses the record while the batch's decisions survive, and
    a new query on the app id is refused ("left batch N unfinished ... restart that
    query from its checkpoint"). The restarted query, with nothing new to read, runs no
    batch and sends no event: this start is what ends that refusal. Call after
    :func:`check_catalog_knows` (a Redis that does not know the query is refused, never
    taught it here).
    """
    history = _dedup_history(pipeline, checkpoint)
    if history is None:
        return
    from dedup.catalog import RedisCatalog

    query_id, last = history
    catalog = RedisCatalog(dedup_config(pipeline, redis_url))
    recorded = catalog.committed_batch(query_id)
    if recorded is not None and recorded >= last:
        return
    log.info("streaming query %s: recording batch %d, committed in its checkpoint, in the "
             "catalog (it held %s)", query_id, last, recorded)
    catalog.commit_progress(query_id, last)


def check_catalog_knows(pipeline: PipelineFile, redis_url: str, checkpoint: str) -> None:
    """Refuse to resume a checkpoint with committed batches against a Redis that has no
    record of its query (another URL, a replaced or flushed Redis): the IDs claimed so
    far are unknown there, and their duplicates would pass. Read-only."""
    history = _dedup_history(pipeline, checkpoint)
    if history is None:
        return
    from dedup.catalog import RedisCatalog
    from dedup.config import redact_url
    from dedup.exceptions import SettingChangedError

    query_id, last = history
    if RedisCatalog(dedup_config(pipeline, redis_url)).knows_query(query_id):
        return
    raise SettingChangedError(
        f"checkpoint {checkpoint} holds streaming query {query_id}, committed up to batch "
        f"{last}, but the Redis at {redact_url(redis_url)} has no record of it under app id "
        f"{pipeline.app_id!r}: it is not the Redis this query deduplicated with (another "
        "URL, or a replaced or flushed Redis), the IDs claimed so far are unknown there, and "
        "their duplicates would pass. Point redis.url at the Redis the query used; if that "
        "catalog is lost for good, start with a new checkpoint (duplicates of records "
        "emitted before are then not caught). A dedup step added to a pipeline that ran "
        "without one needs a new checkpoint too")


def start_query(spark: SparkSession, pipeline: PipelineFile, addresses: Addresses,
                checkpoint: str, fail_point_dir: str | None = None,
                transform: Callable[[DataFrame], DataFrame] | None = None,
                watcher: QueryWatcher | None = None) -> StreamingQuery:
    """Build the pipeline and start it from ``checkpoint`` (resumes when it exists).

    Refused (:class:`~dedup.exceptions.SettingChangedError`) when the checkpoint has
    committed batches that the Redis has no record of (:func:`check_catalog_knows`);
    a record older than the checkpoint's last commit is brought up to it
    (:func:`record_checkpoint_commit`). Refused
    when the dedup step is turned off (:func:`check_dedup_kept`) or the Kafka sink
    replaced (:func:`check_sink_kept`) with a batch unfinished, or when a files
    source's path no longer holds its last batch's files (:func:`check_source_path_kept`),
    or when a Spark older than the last one resumes the checkpoint
    (:func:`check_spark_version_kept`), or when a Kafka input topic is another topic
    of the same name (:func:`check_source_topics_kept`).
    ``transform`` is user code between the dedup step and the sink (the chaos
    runner's non-deterministic step); the pipeline file has none. A
    ``watcher`` of the query is given the one-pass step's counts, which
    Spark's progress reports do not carry.
    """
    check_catalog_knows(pipeline, addresses.redis_url, checkpoint)
    record_checkpoint_commit(pipeline, addresses.redis_url, checkpoint)
    check_dedup_kept(pipeline, addresses.redis_url, checkpoint)
    check_sink_kept(pipeline, addresses.redis_url, checkpoint)
    check_source_path_kept(pipeline, checkpoint)
    check_spark_version_kept(spark.version, checkpoint)
    topic_ids = check_source_topics_kept(pipeline, addresses, checkpoint)
    frame = source_frame(spark, pipeline, addresses)
    sink = pipeline.table("sink")
    dead_letter = any(str(k).lower() == "dead.letter.topic" for k in sink["options"])
    if (pipeline.table("dedup")["enabled"] and pipeline.table("dedup")["invalid_ids"]
            == "dead_letter" and sink["type"] == "kafka" and not dead_letter):
        raise ConfigError(
            'dedup.invalid_ids = "dead_letter" needs a dead-letter topic: set '
            'sink.options."dead.letter.topic" in the pipeline file'
        )
    # parse_pipeline resolved the default and refused one pass where it cannot run
    one_pass = bool(sink["one_pass"])
    if one_pass and transform is not None:
        raise ConfigError("sink.one_pass = true (the default with dedup and a Kafka sink) "
                          "leaves no place for code between the dedup step and the sink: "
                          "set sink.one_pass = false")
    if pipeline.table("dedup")["enabled"] and not one_pass:
        from dedup import deduplicate

        frame = deduplicate(frame, dedup_config(pipeline, addresses.redis_url, fail_point_dir))
    if transform is not None:
        frame = transform(frame)
    event_time = pipeline.table("dedup")["retention.event_time_column"]
    # The one-pass step reads the event time beside the sink's columns (the sink
    # ignores a column it does not know).
    out = sink_frame(frame, pipeline, carry=[event_time] if one_pass and event_time else [])
    run = pipeline.table("run")
    writer: Any
    options: dict[str, str] | None = None
    if sink["type"] == "console":
        writer = out.writeStream.format("console").option("truncate", "false")
    else:
        import sinks

        sinks.register(spark)
        options = {
            "app.id": pipeline.app_id,
            "kafka.bootstrap.servers": addresses.sink_bootstrap,
            "topic": sink["topic"],
            "redis.url": addresses.redis_url,
            "redis.require.persistence": str(pipeline.table("redis")["require_persistence"]),
            **{str(k): str(v) for k, v in sink["options"].items()},
        }
        if fail_point_dir:
            options["fail.points.directory"] = fail_point_dir
        if one_pass:
            one_pass_sink = sinks.DedupKafkaForeachBatch(
                dedup_config(pipeline, addresses.redis_url, fail_point_dir), options)
            writer = one_pass_sink.write_stream(out)
            if watcher is not None and not is_connect(spark):
                # Under Spark Connect the counts stay in the server's copy of the
                # sink, and asking the client's is refused.
                watcher.batch_metrics = one_pass_sink.batch_metrics
        else:
            writer = out.writeStream.format("exactly_once_kafka").options(**options)
    writer = writer.option("checkpointLocation", checkpoint).queryName(pipeline.app_id)
    writer = writer.trigger(processingTime=f"{run['trigger_seconds']} seconds")
    query = writer.start()
    record_spark_version(spark.version, checkpoint)
    record_source_topics(checkpoint, topic_ids)
    if options is not None and not one_pass:  # one pass: its sink releases by itself
        import sinks

        # A reset checkpoint right after a clean stop is then not refused.
        sinks.release_when_stopped(spark, query, options)
    return query


def source_done(pipeline: PipelineFile, watcher: QueryWatcher) -> bool:
    """A finite synthetic source is done once a batch ended at its last row."""
    src = pipeline.table("source")
    if src["type"] != "synthetic" or not src["total_rows"] or watcher.last_progress is None:
        return False
    for source in watcher.last_progress.get("sources") or []:
        end = source.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                # PySpark 4.1 reports a Python data source's offset as the dict's
                # Python text ({'row': 300}), 4.2 as JSON
                try:
                    end = ast.literal_eval(end)
                except (ValueError, SyntaxError):
                    continue
        if isinstance(end, dict) and int(end.get("row", -1)) >= src["total_rows"]:
            return True
    return False
