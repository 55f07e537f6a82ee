"""dedup: exactly-once deduplication for PySpark Structured Streaming.

Commands: demo (the whole thing on local services, with a crash), run (a
pipeline file), verify (audit a topic), services (local Redis and Kafka),
txn (the sink's Kafka transactions), forget-query (drop an abandoned
query's decisions), migrate-catalog (convert a catalog an earlier release wrote),
fetch-jars (the Kafka broker and Spark's Kafka connector, with Maven).
Fetched jars, service data, checkpoints and logs live in one cache folder:
--cache-dir or DEDUP_CACHE_DIR, else a checkout's .cache, else
$XDG_CACHE_HOME/spark-exactly-once-dedup (~/.cache/...).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence

from dedup import __version__
from dedup.cli.errors import (
    EXIT_CODES_HELP,
    EXIT_CONFIG,
    EXIT_RUNTIME,
    exception_texts,
    find_toolkit_error,
    for_pipeline_file,
    from_spark,
)
from dedup.exceptions import ConfigError, DedupError
from dedup.local.paths import CACHE_ENV_VAR, cache_dir, set_cache_dir

__all__ = ["EXIT_CONFIG", "EXIT_RUNTIME", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from dedup.cli import (
        demo,
        fetch_jars,
        forget_query,
        migrate_catalog,
        run,
        services_cmd,
        txn,
        verify_cmd,
    )

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", "-q", action="store_true", default=argparse.SUPPRESS,
                        help="no progress lines, only results and errors (for CI)")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks and Spark's log on the console")
    common.add_argument("--cache-dir", metavar="PATH", default=argparse.SUPPRESS,
                        help="folder for fetched jars, service data, checkpoints and logs "
                             f"(default: {CACHE_ENV_VAR}, else a checkout's .cache, else "
                             f"~/.cache/spark-exactly-once-dedup; in use: {cache_dir()})")
    parser = argparse.ArgumentParser(prog="dedup", description=__doc__, parents=[common],
                                     epilog=EXIT_CODES_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"dedup {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in (demo, run, verify_cmd, services_cmd, txn, forget_query, migrate_catalog,
                   fetch_jars):
        module.add_parser(sub, common)
    return parser


def _error(message: str, command: str | None = None) -> None:
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    if command == "run":  # its user writes a pipeline file, not DedupConfig(...)
        first = for_pipeline_file(first)
    print(f"dedup: error: {first}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dedup`` command line; returns the exit code.

    0: success; 1: a runtime failure (service unreachable, verification
    failed); 2: bad usage or a refused configuration, also when Spark
    carries the refusal back from a worker; 3: ``dedup run`` cut short with
    input left. Errors are one line on stderr unless ``--debug``.
    """
    argv = list(argv) if argv is not None else sys.argv[1:]
    # --cache-dir applies to the whole command, help texts included, and to the
    # processes it starts (through the environment); restored on return, so a
    # caller in the same process (a test) keeps its own.
    previous = os.environ.get(CACHE_ENV_VAR)
    try:
        early, _ = _cache_option().parse_known_args(argv)
    except argparse.ArgumentError:  # e.g. no PATH after it: the full parser says so
        early = argparse.Namespace(cache_dir=None)
    if early.cache_dir:
        set_cache_dir(early.cache_dir)
    try:
        return _main(argv)
    finally:
        if previous is None:
            os.environ.pop(CACHE_ENV_VAR, None)
        else:
            os.environ[CACHE_ENV_VAR] = previous


def _cache_option() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dedup", add_help=False, exit_on_error=False)
    parser.add_argument("--cache-dir")
    return parser


def _main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.quiet = getattr(args, "quiet", False)
    args.debug = getattr(args, "debug", False)
    try:
        return int(args.handler(args))
    except ConfigError as exc:
        if args.debug:
            raise
        _error(str(exc), args.command)
        return EXIT_CONFIG
    except DedupError as exc:
        if args.debug:
            raise
        _error(str(exc), args.command)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except Exception as exc:
        # Spark wraps errors of the query (and of our code on its workers) in
        # Java exceptions with pages of stack trace, sometimes with our error
        # only in the cause chain: show our error's own line, else the root cause.
        if args.debug or not from_spark(exc):
            raise
        texts = exception_texts(exc)
        found = find_toolkit_error(texts)
        if found is not None:
            _error(found.line, args.command)
            return found.exit_code
        _error(f"the Spark query failed: {spark_root_cause(texts[0] if texts else '')} "
               "(rerun with --debug for the full trace)")
        return EXIT_RUNTIME


_CAUSE = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception|Fault)): (.+)$")


def spark_root_cause(message: str) -> str:
    """The most specific ``SomeError: text`` line of a Spark error message."""
    best = ""
    for line in message.splitlines():
        match = _CAUSE.match(line)
        if match and not match.group(1).startswith(("Py4J", "StreamingQuery", "Spark")):
            best = f"{match.group(1)}: {match.group(2).strip()}"
    if not best:
        best = next((line.strip() for line in message.splitlines() if line.strip()), "")
    return best[:400]


def console_main() -> None:
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
