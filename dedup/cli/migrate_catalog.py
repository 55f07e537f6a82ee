"""``dedup migrate-catalog``: convert an app id's catalog to this release's format.

Earlier releases kept the catalog's IDs as sets of ID strings (format 1); this one
keeps 16-byte digests (format 3; format 2, the same without tails, it reads as it is)
and refuses a format-1 catalog rather than miss the IDs it holds. Stop the pipeline,
run this once, start the pipeline again: its IDs, their expiry and its checkpoint
carry over. Safe to repeat; a migration that stopped half way is run again.
"""

from __future__ import annotations

import argparse
from typing import Any

from dedup.cli.catalog_args import add_catalog_arguments, catalog_config


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "migrate-catalog", parents=[parent],
        help="convert an app id's catalog to this release's format (pipeline stopped)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_catalog_arguments(parser)
    parser.set_defaults(handler=migrate_catalog_command)


def migrate_catalog_command(args: argparse.Namespace) -> int:
    from dedup.migrate import migrate_catalog

    config = catalog_config(args)
    app_id = config.app_id
    report = migrate_catalog(config, say=None if args.quiet else print)
    if report.already:
        print(f"app id {app_id}: the catalog is already in this release's format; nothing done")
    else:
        print(f"app id {app_id}: catalog converted: {report.ids} ID(s) in {report.buckets} "
              f"time bucket(s); {report.decisions} decision(s) of committed batches dropped")
    return 0
