"""``dedup run CONFIG``: run a pipeline described in a TOML file."""

from __future__ import annotations

import argparse
import os
import re
import time
from typing import Any

from dedup.cli.config_file import PipelineFile, check_remote_url, example_path, load_pipeline
from dedup.cli.errors import EXIT_INCOMPLETE, RUN_EXIT_CODES_HELP
from dedup.cli.pipeline import (
    Addresses,
    check_services,
    quiet_clients,
    resolve_addresses,
    sink_client_settings,
    source_client_settings,
    source_done,
    start_query,
)
from dedup.cli.progress import Progress, QueryWatcher, stderr_to_file, wait_for
from dedup.exceptions import ConfigError
from dedup.local.paths import cache_dir
from dedup.spark_session import is_kafka_replay_bug

__all__ = ["EXIT_INCOMPLETE", "add_parser", "run_command", "run_pipeline", "shuffle_partitions",
           "shuffle_partitions_reason", "spark_target"]

UNKNOWN_CORES_PARTITIONS = 4
"""``run.shuffle_partitions = 0`` where the master's URL does not say its cores (a
cluster's master, a Spark Connect server): this release's earlier fixed default."""
_LOCAL_MASTER = re.compile(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?")


def spark_target(run: dict[str, Any], master: str | None = None,
                 remote: str | None = None) -> tuple[str, str]:
    """Where the pipeline runs: ``("remote", sc://...)`` or ``("master", url)``.

    The options (``--master``, ``--remote``) override the file's ``run.master`` and
    ``run.remote``; both options together are refused (the file's pair is refused
    when it is read).

    Raises
    ------
    ConfigError
        ``--master`` and ``--remote`` together, or a remote URL that is not ``sc://``.
    """
    if master and remote:
        raise ConfigError("--master and --remote both given: a pipeline runs either in a "
                          "classic session (--master) or through a Spark Connect server "
                          "(--remote); give one of them")
    if remote:
        check_remote_url(remote, "--remote")
        return "remote", remote
    if master:
        return "master", master
    if run.get("remote"):
        return "remote", str(run["remote"])
    return "master", str(run["master"])


def shuffle_partitions(run: dict[str, Any], kind: str, where: str) -> int:
    """The partitions of the pipeline's shuffle by shard (``spark.sql.shuffle.partitions``).

    ``run.shuffle_partitions`` when it is set (>= 1); 0, the default, is one per core
    of a local master (``local[2]``: 2, ``local[*]``: this machine's cores, ``local``:
    1) and :data:`UNKNOWN_CORES_PARTITIONS` where the URL does not say the cores (a
    cluster's master, a Spark Connect server). One partition per core measured faster
    than two per core on ``local[2]`` (docs/benchmarks.md): each partition pays its own
    transaction and claim per shard, and a second wave of tasks buys nothing when every
    core is busy. An app id keeps the count it recorded at its first batch: a changed
    value takes effect only for a new app id (the operator says so in a warning).

    Raises
    ------
    ConfigError
        A negative ``run.shuffle_partitions``.
    """
    given = int(run["shuffle_partitions"])
    if given < 0:
        raise ConfigError(f"run.shuffle_partitions must be >= 1, or 0 for one per core of the "
                          f"master, not {given}")
    if given:
        return given
    local = _LOCAL_MASTER.fullmatch(where.strip()) if kind == "master" else None
    if local is None:
        return UNKNOWN_CORES_PARTITIONS
    cores = local.group(1)
    if cores == "*":
        return os.cpu_count() or 1
    return max(1, int(cores or 1))


def shuffle_partitions_reason(run: dict[str, Any], kind: str, where: str) -> str:
    """Why :func:`shuffle_partitions` chose its count, in a few words (for the start
    line of ``dedup run``). Pure."""
    if int(run["shuffle_partitions"]) > 0:
        return "run.shuffle_partitions"
    if kind == "master" and _LOCAL_MASTER.fullmatch(where.strip()):
        return f"one per core of {where.strip()}; run.shuffle_partitions sets another"
    return (f"{where.strip()} does not say its cores; run.shuffle_partitions sets the "
            "count, one per core measured fastest")


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "run", parents=[parent], help="run a pipeline described in a TOML file",
        description="Run source -> record IDs -> dedup -> exactly-once Kafka sink as described\n"
                    "in a TOML pipeline file. Empty service addresses are taken from\n"
                    "'dedup services up'.",
        epilog=RUN_EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", nargs="?", help="pipeline file (TOML)")
    parser.add_argument("--example", action="store_true",
                        help=f"run the shipped example ({example_path()})")
    parser.add_argument("--redis-url", help="Redis of the ID catalog and sink checkpoints")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (source and sink)")
    parser.add_argument("--checkpoint", help="Spark checkpoint folder "
                        "(default: <cache>/runs/<app_id>/checkpoint)")
    parser.add_argument("--master", help="Spark master URL, e.g. spark://host:7077 for a "
                        "standalone cluster (overrides run.master)")
    parser.add_argument("--remote", help="run through a Spark Connect server, e.g. "
                        "sc://127.0.0.1:15002 (overrides run.remote; the server needs the "
                        "Kafka connector's jars and the toolkit importable by its Python "
                        "workers)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop after this long (overrides run.max_seconds)")
    parser.add_argument("--verify", action="store_true",
                        help="synthetic source only: check the output topic against the "
                             "expected records at the end")
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    if args.example == bool(args.config):
        raise ConfigError("give either a pipeline file or --example (not both, not neither): "
                          "dedup run path/to/pipeline.toml")
    pipeline = load_pipeline(example_path() if args.example else args.config)
    addresses = resolve_addresses(pipeline, args.redis_url, args.bootstrap)
    check_services(pipeline, addresses)
    return run_pipeline(pipeline, addresses, args)


def run_pipeline(pipeline: PipelineFile, addresses: Addresses, args: argparse.Namespace) -> int:
    from dedup.local.spark import cli_spark_session, no_artifacts_folder_left
    from dedup.spark_session import connect_session
    from sinks.kafka_io import ensure_topic

    progress = Progress(quiet=args.quiet)
    run = pipeline.table("run")
    sink = pipeline.table("sink")
    base = cache_dir() / "runs" / pipeline.app_id
    checkpoint = args.checkpoint or pipeline.tables[""]["checkpoint"] or str(base / "checkpoint")
    kind, where = spark_target(run, getattr(args, "master", None), getattr(args, "remote", None))
    partitions = shuffle_partitions(run, kind, where)
    if sink["type"] == "kafka":
        ensure_topic(addresses.sink_bootstrap, sink["topic"], sink["partitions"],
                     client_config=quiet_clients(sink_client_settings(pipeline)))
    steps = ("dedup and kafka sink in one pass" if sink["one_pass"] else
             f"{'dedup -> ' if pipeline.table('dedup')['enabled'] else ''}{sink['type']} sink")
    progress.say(f"pipeline {pipeline.app_id}: {pipeline.table('source')['type']} source -> "
                 f"{steps} {sink['topic'] or ''}; checkpoint {checkpoint}")
    # an app id keeps the count of its first batch (the operator warns when it differs)
    progress.say(f"{partitions} shuffle partitions "
                 f"({shuffle_partitions_reason(run, kind, where)})")
    if kind == "remote":
        progress.say(f"connecting to the Spark Connect server {where} (Spark's log is the "
                     "server's)")
    else:
        progress.say(f"starting Spark ({where}); Spark's log: {base / 'logs'}")
    with stderr_to_file(base / "logs" / "stderr.log", enabled=not args.debug), \
            no_artifacts_folder_left():
        if kind == "remote":
            spark = connect_session(where, {
                # what the classic session sets that a Connect session may set
                "spark.sql.shuffle.partitions": str(partitions),
                "spark.sql.adaptive.enabled": "false",
                "spark.sql.execution.arrow.pyspark.enabled": "true",
            })
        else:
            spark = cli_spark_session(base / "logs", app_name=f"dedup-run-{pipeline.app_id}",
                                      master=where, shuffle_partitions=partitions,
                                      debug=args.debug)
        try:
            started, watcher, stopped_by = _stream(spark, pipeline, addresses, checkpoint,
                                                   args, progress)
        except Exception as exc:
            refused = _source_denied(pipeline, exc)
            if refused is not None and not args.debug:
                raise refused from exc
            raise
        finally:
            spark.stop()
    elapsed = time.monotonic() - started
    rate = watcher.rows / elapsed if elapsed > 0 else 0.0
    dropped = f", {watcher.dropped} duplicates dropped" if watcher.have_metrics else ""
    progress.always(f"dedup run {pipeline.app_id}: {watcher.batches} batches, "
                    f"{watcher.rows} records in{dropped}, {elapsed:.1f} s, "
                    f"{rate:,.0f} records/s")
    src = pipeline.table("source")
    if src["type"] == "synthetic" and src["total_rows"] > 0 and not source_done(pipeline,
                                                                                 watcher):
        progress.always(f"dedup run {pipeline.app_id}: stopped at max_seconds before the "
                        f"source's last row ({src['total_rows']}); run the same command "
                        f"again to resume from the checkpoint {checkpoint}")
        return EXIT_INCOMPLETE
    if src["type"] == "kafka" and stopped_by != "done":
        left = _kafka_input_left(pipeline, addresses, checkpoint, watcher)
        if left != 0:
            how = "an unknown number of" if left is None else f"about {left}"
            when = "stopped at max_seconds" if stopped_by == "max_seconds" else "interrupted"
            progress.always(f"dedup run {pipeline.app_id}: {when} with input left in "
                            f"{', '.join(src['topics'])} ({how} records not yet read); run "
                            f"the same command again to resume from the checkpoint "
                            f"{checkpoint}")
            return EXIT_INCOMPLETE
    if args.verify:
        return _verify(pipeline, addresses, progress)
    return 0


def _source_denied(pipeline: PipelineFile, exc: BaseException) -> Exception | None:
    """The one-line :class:`~sinks.exceptions.KafkaDeniedError` of a query that Spark's
    Kafka source lost to the broker's authorizer, or None for any other failure.

    Spark says only "TopicAuthorizationException: Topic authorization failed", naming
    neither the topic nor the ACL; the source's READ on each of its topics is the only
    topic ACL it needs (docs/operations.md, Kafka ACLs). The toolkit's own refusals (the
    sink's) are named by the sink and left alone."""
    from dedup.cli.errors import exception_texts, find_toolkit_error, from_spark
    from sinks.acls import denied, required_acls

    src = pipeline.table("source")
    if src["type"] != "kafka" or not from_spark(exc):
        return None
    texts = exception_texts(exc)
    if find_toolkit_error(texts) is not None or not any(
            "TopicAuthorizationException" in text for text in texts):
        return None
    needed = [acl for acl in required_acls("-", "-", source_topics=src["topics"])
              if acl.part == "source"]
    topics = ", ".join(repr(topic) for topic in src["topics"])
    return denied(f"Spark's Kafka source the read of {topics}", "TOPIC_AUTHORIZATION_FAILED",
                  needed)


def _kafka_input_left(pipeline: PipelineFile, addresses: Addresses, checkpoint: str,
                      watcher: QueryWatcher) -> int | None:
    """Records of the Kafka source the query has not read; None when it cannot be told."""
    from confluent_kafka import KafkaException

    from dedup.cli.input_left import checkpoint_offsets, progress_offsets, topic_ends, unread

    src = pipeline.table("source")
    read = checkpoint_offsets(checkpoint)
    if read is None:
        read = progress_offsets(watcher.last_progress)
    settings = source_client_settings(pipeline)
    if settings is None:
        return None  # no client of ours can connect as the source does: cannot tell
    try:
        ends = topic_ends(addresses.source_bootstrap, src["topics"],
                          quiet_clients(settings))
    except KafkaException:
        return None  # cannot tell: say so rather than claim the run is complete
    return unread(ends, read, src["starting_offsets"])


def _stream(spark: Any, pipeline: PipelineFile, addresses: Addresses, checkpoint: str,
            args: argparse.Namespace, progress: Progress,
            ) -> tuple[float, QueryWatcher, str]:
    """Run the query until done or idle (``"done"``), ``"max_seconds"`` or ``"interrupted"``."""
    from dedup.operator import metric_name

    run = pipeline.table("run")
    started = time.monotonic()
    watcher = QueryWatcher(progress, metric=metric_name(pipeline.app_id))
    query = start_query(spark, pipeline, addresses, checkpoint, watcher=watcher)
    max_seconds = args.max_seconds if args.max_seconds is not None else run["max_seconds"]
    idle = run["stop_after_idle_seconds"]

    src = pipeline.table("source")
    finite = src["type"] == "synthetic" and src["total_rows"] > 0

    def done() -> bool:
        if source_done(pipeline, watcher):
            return True
        # A finite source ends by itself (or at max_seconds); idleness only
        # ends the other runs. Seen in the chaos matrix on a loaded machine: a
        # batch stalled while Spark replaced a killed executor looked idle, and
        # the run stopped half way yet exited 0 as if the source were done.
        if finite:
            return False
        return idle > 0 and watcher.idle_seconds() > idle

    stopped_by = "interrupted"
    try:
        try:
            finished = wait_for(query, watcher, done, max_seconds=max_seconds)
        except Exception as exc:
            if not is_kafka_replay_bug(exc):
                raise
            # Spark 4.1's SPARK-55271 ends a restart that replayed a batch after the
            # batch is committed; the next start plans a new batch and goes on. Once:
            # a second failure is not that bug's.
            progress.say("Spark's Kafka source failed after the replayed batch was committed "
                         "(Spark 4.1's SPARK-55271); starting the query once more")
            query = start_query(spark, pipeline, addresses, checkpoint, watcher=watcher)
            left = max(max_seconds - (time.monotonic() - started), 0.001) \
                if max_seconds > 0 else 0.0  # 0 waits forever, as before the restart
            finished = wait_for(query, watcher, done, max_seconds=left)
        stopped_by = "done" if finished else "max_seconds"
    except KeyboardInterrupt:
        progress.say("interrupted: stopping the query (it resumes from the checkpoint)")
    finally:
        if query.isActive:
            query.stop()
    return started, watcher, stopped_by


def _verify(pipeline: PipelineFile, addresses: Addresses, progress: Progress) -> int:
    from dedup.cli.config_file import SYNTHETIC_KEYS
    from sinks.verify import verify_topic
    from sources.synthetic_rows import SyntheticOptions, expected_output

    src = pipeline.table("source")
    if src["type"] != "synthetic" or not src["total_rows"]:
        raise ConfigError("--verify needs a synthetic source with total_rows set; for other "
                          "sources use 'dedup verify --topic ...'")
    options = SyntheticOptions(**{key: src[key] for key in SYNTHETIC_KEYS})
    expected = {rid: payload.encode() for rid, payload in expected_output(options).items()}
    sink = pipeline.table("sink")
    report = verify_topic(addresses.sink_bootstrap, sink["topic"], expected,
                          compare_payloads=sink["value_column"] == "payload",
                          client_config=quiet_clients(sink_client_settings(pipeline)))
    progress.always(f"verify: {report.summary()}")
    return 0 if report.ok else 1
