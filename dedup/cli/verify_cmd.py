"""``dedup verify``: audit a topic for losses and duplicates of record IDs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dedup.cli.pipeline import sink_kafka
from dedup.constants import RECORD_ID_HEADER
from dedup.exceptions import ConfigError


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "verify", parents=[parent], help="audit a topic (read_committed) for lost or "
        "duplicated record IDs",
        description="Read a topic from the beginning with a read_committed consumer and count "
                    "lost, duplicated and unknown record IDs against an expected ID file, or, "
                    "without one, repeated record IDs. Exit 1 when anything is wrong.",
    )
    parser.add_argument("--topic", help="topic to audit (default: sink.topic of --config)")
    parser.add_argument("--config", help="the pipeline file that wrote the topic: its sink's "
                        "Kafka address and [sink.options] security settings (SASL, TLS) are "
                        "used, its sink.topic is the default topic")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: "
                        "sink.bootstrap_servers of --config, else the local services of "
                        "'dedup services up')")
    parser.add_argument("--expected", help="file of expected record IDs, one per line "
                        "('#' comments and blank lines ignored)")
    parser.add_argument("--id-header", default=RECORD_ID_HEADER,
                        help=f"header holding the record ID (default {RECORD_ID_HEADER})")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=verify_command)


def read_expected_ids(path: str) -> set[str]:
    """IDs of an expected-ID file, one per line."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError as exc:
        raise ConfigError(f"expected-ID file {path} not found: check --expected") from exc
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def verify_command(args: argparse.Namespace) -> int:
    from sinks.verify import verify_topic

    kafka = sink_kafka(args.config, args.bootstrap)
    topic = args.topic or (kafka.pipeline.table("sink")["topic"] if kafka.pipeline else "")
    if not topic:
        raise ConfigError("no topic to audit: pass --topic, or --config with a pipeline file "
                          "that sets sink.topic")
    expected = read_expected_ids(args.expected) if args.expected else None
    kafka.check()
    report = verify_topic(kafka.bootstrap, topic, expected, id_header=args.id_header,
                          compare_payloads=False, client_config=kafka.client_config)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    else:
        mode = "against expected IDs" if expected is not None else "for repeated record IDs"
        print(f"verify {topic} {mode}: {report.summary()}")
        for kind, sample in sorted(report.samples.items()):
            if sample:
                print(f"  {kind} (first {len(sample)}): {', '.join(sample)}")
        print("OK" if report.ok else "FAILED")
    return 0 if report.ok else 1
