"""``dedup verify``: audit a topic for losses and duplicates of record IDs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dedup.cli.checks import QUIET_KAFKA, check_kafka
from dedup.cli.pipeline import resolve_bootstrap
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
    parser.add_argument("--topic", required=True, help="topic to audit")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local "
                        "services of 'dedup services up')")
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

    bootstrap = resolve_bootstrap(args.bootstrap)
    expected = read_expected_ids(args.expected) if args.expected else None
    check_kafka(bootstrap, what="--bootstrap")
    report = verify_topic(bootstrap, args.topic, expected, id_header=args.id_header,
                          compare_payloads=False, client_config=QUIET_KAFKA)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    else:
        mode = "against expected IDs" if expected is not None else "for repeated record IDs"
        print(f"verify {args.topic} {mode}: {report.summary()}")
        for kind, sample in sorted(report.samples.items()):
            if sample:
                print(f"  {kind} (first {len(sample)}): {', '.join(sample)}")
        print("OK" if report.ok else "FAILED")
    return 0 if report.ok else 1
