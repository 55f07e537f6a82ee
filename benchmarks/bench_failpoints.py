"""What an unarmed fail-point costs the product: ``fail_point(...)`` against a no-op call.

The toolkit's only test hook in its hot path is :func:`dedup.failpoints.fail_point`
(and :func:`~dedup.failpoints.clock_offset`), unarmed in production: no
fail-point folder in the configuration and no ``DEDUP_FAIL_POINT_DIR``. This times
one call of each, with the keyword context the toolkit passes, against a Python
function that takes the same arguments and does nothing (the price of any call),
with :mod:`timeit` (best of ``--repeat`` rounds of ``--number`` calls).

The calls are per partition, never per record: per partition and micro-batch the
operator reads ``dedup.batch_clock`` once and passes ``dedup.after_claim`` once per
shard it claims, and the sink passes ``sink.after_checkpoint``,
``sink.before_send_offsets``, ``sink.mid_produce`` (one call, at the middle record),
``sink.before_commit`` and ``sink.after_commit`` once per transaction. The figure
of merit is the extra time per partition against the work of a partition
(``results/profile_operator.json``'s per-row cost).

``python -m benchmarks.bench_failpoints [--write]`` prints JSON (``--write``: also
``results/failpoints.json``). No services needed.
"""

from __future__ import annotations

import argparse
import json
import os
import timeit
from collections.abc import Callable
from typing import Any

from dedup.failpoints import ENV_VAR, clock_offset, fail_point

PER_PARTITION_FIXED = 6
"""Unarmed checks per partition and batch besides ``dedup.after_claim``: the batch
clock and the sink's five points (one transaction, no retry)."""


def _noop(name: str, directory: str | None = None, before: Callable[[], object] | None = None,
          **context: Any) -> None:
    """The same signature as :func:`fail_point`, doing nothing."""


def _cases(folder: str | None) -> dict[str, Callable[[], object]]:
    flush = lambda: None  # noqa: E731 - the caller's `before` (a flush), never called
    return {
        "noop_call": lambda: _noop("dedup.after_claim", None, batch="3", shard=5,
                                   partition=1, query="q", rows=1000),
        "fail_point_unarmed": lambda: fail_point("dedup.after_claim", None, batch="3",
                                                 shard=5, partition=1, query="q", rows=1000),
        "noop_call_with_before": lambda: _noop("sink.before_commit", None, before=flush,
                                               batch=3, partition=1, attempt=1, rows=1000),
        "fail_point_unarmed_with_before": lambda: fail_point(
            "sink.before_commit", None, before=flush, batch=3, partition=1, attempt=1,
            rows=1000),
        "clock_offset_unarmed": lambda: clock_offset("dedup.batch_clock", None, batch="3",
                                                     partition=1, now=1.0),
        # Tests and chaos runs only: a folder, nothing armed in it (one failed open).
        "fail_point_folder_nothing_armed": lambda: fail_point(
            "dedup.after_claim", folder, batch="3", shard=5, partition=1, query="q",
            rows=1000),
    }


def measure(number: int, repeat: int, folder: str) -> dict[str, float]:
    """Nanoseconds per call of each case (best round)."""
    return {name: min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e9
            for name, call in _cases(folder).items()}


def main(argv: list[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--shards", type=int, default=8,
                        help="shards one partition claims (DedupConfig.num_shards default 8)")
    parser.add_argument("--rows", type=int, default=50_000, help="rows of one partition")
    parser.add_argument("--write", action="store_true", help="write results/failpoints.json")
    args = parser.parse_args(argv)
    os.environ.pop(ENV_VAR, None)  # production: no fail-point folder
    with tempfile.TemporaryDirectory() as folder:
        ns = measure(args.number, args.repeat, folder)
    extra = {
        "fail_point": ns["fail_point_unarmed"] - ns["noop_call"],
        "fail_point_with_before": ns["fail_point_unarmed_with_before"]
        - ns["noop_call_with_before"],
        "clock_offset": ns["clock_offset_unarmed"] - ns["noop_call"],
    }
    calls = PER_PARTITION_FIXED + args.shards
    per_partition_ns = ns["fail_point_unarmed"] * calls  # whole calls, not only the extra
    us_per_row = None
    try:
        from benchmarks.common import RESULTS_DIR

        profile = json.loads((RESULTS_DIR / "profile_operator.json").read_text())
        us_per_row = float(profile["us_per_row"])
    except (OSError, ValueError, KeyError):
        pass
    partition_us = us_per_row * args.rows if us_per_row else None
    data: dict[str, Any] = {
        "ns_per_call": {k: round(v, 1) for k, v in ns.items()},
        "ns_over_a_noop_call": {k: round(v, 1) for k, v in extra.items()},
        "calls_per_partition": calls,
        "calls_per_record": 0,
        "unarmed_us_per_partition": round(per_partition_ns / 1000, 2),
        "operator_partition_us": partition_us,
        "share_of_a_partition": (round(per_partition_ns / 1000 / partition_us, 9)
                                 if partition_us else None),
        "setup": {"number": args.number, "repeat": args.repeat, "shards": args.shards,
                  "rows": args.rows, "operator_us_per_row": us_per_row},
    }
    if args.write:
        from benchmarks.common import run_metadata, write_json

        write_json("failpoints.json", {**run_metadata(), **data})
    print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
