"""``dedup txn list|abort``: the sink's Kafka transactions of an app id."""

from __future__ import annotations

import argparse
from typing import Any

from dedup.cli.pipeline import sink_kafka
from dedup.config import validate_app_id


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "txn", parents=[parent], help="list or abort the sink's transactions of an app id",
        description="list: the sink's transactional ids of an app id with their last committed "
                    "batch marker. abort: abort lingering open transactions (fences the old "
                    "writers; run it only while the pipeline is stopped).",
    )
    parser.add_argument("action", choices=["list", "abort"])
    parser.add_argument("--app-id", help="the pipeline's app id (default: app_id of --config; "
                        "one of them is required)")
    parser.add_argument("--config", help="the pipeline file: its app id, its sink's Kafka "
                        "address and [sink.options] security settings (SASL, TLS)")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: "
                        "sink.bootstrap_servers of --config, else the local services of "
                        "'dedup services up')")
    parser.add_argument("--partitions", type=int, default=0,
                        help="also include sink partitions 0..N-1 even without a marker")
    parser.set_defaults(handler=txn_command)


def txn_command(args: argparse.Namespace) -> int:
    from sinks.admin import abort_transactions, list_transactions

    kafka = sink_kafka(args.config, args.bootstrap)
    app_id = validate_app_id(args.app_id or (kafka.pipeline.app_id if kafka.pipeline else None))
    kafka.check()
    if args.action == "list":
        found = list_transactions(kafka.bootstrap, app_id, probe_partitions=args.partitions,
                                  client_config=kafka.client_config)
        if not found:
            print(f"no sink transactions found for app id {app_id}")
        for txn in found:
            marker = (f"next batch {txn.next_batch} (query {txn.query_id})"
                      if txn.next_batch >= 0 else "no committed batch")
            print(f"{txn.transactional_id}  partition {txn.partition}  {marker}")
        return 0
    partitions = list(range(args.partitions)) if args.partitions else None
    done = abort_transactions(kafka.bootstrap, app_id, partitions,
                              client_config=kafka.client_config)
    print(f"aborted open transactions (if any) of {len(done)} transactional id(s)"
          + (f": {', '.join(done)}" if done else ""))
    return 0
