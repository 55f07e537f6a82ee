"""``dedup fetch-jars``: fetch the Kafka broker and Spark's Kafka connector with Maven."""

from __future__ import annotations

import argparse
import re
from typing import Any

from dedup.exceptions import ConfigError


def add_parser(sub: Any, parent: argparse.ArgumentParser) -> None:
    from dedup.local.paths import cache_dir

    parser = sub.add_parser(
        "fetch-jars", parents=[parent],
        help="fetch the Kafka broker's jars and Spark's Kafka connector with Maven "
             "(once; `services up`, `demo` and `run` need them)",
        description="Fetch, with Maven (`mvn` and a JDK on PATH), the Kafka broker's jars that "
                    "`dedup services up` and `dedup demo` run, and Spark's Kafka connector at "
                    "the installed PySpark's version, into the cache folder's jars/ (now "
                    f"{cache_dir() / 'jars'}; --cache-dir or DEDUP_CACHE_DIR move it). "
                    "Maven's own repository (~/.m2/repository, or -Dmaven.repo.local in "
                    "MAVEN_OPTS) serves what it already holds. Fetched folders are not "
                    "fetched again.",
    )
    parser.add_argument("--spark-version",
                        help="connector version (default: the installed PySpark's)")
    parser.add_argument("--force", action="store_true",
                        help="fetch again even folders that are complete")
    parser.set_defaults(handler=fetch_jars_command)


def fetch_jars_command(args: argparse.Namespace) -> int:
    from dedup.local.jars import fetch_jars

    version = args.spark_version
    if version is not None and not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ConfigError(f"--spark-version must be an exact version (major.minor.patch), "
                          f"not '{version}'")

    def say(message: str) -> None:
        if not args.quiet:
            print(message, flush=True)

    fetch_jars(say, spark_version=version, force=args.force)
    return 0
