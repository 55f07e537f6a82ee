"""Hostile input, fuzzed at scale (issue 50): ``fuzz_cases``, ``fuzz_tracebacks``, ...

Runs the properties of the fuzz tests on many more generated cases than the test
tiers do: pipeline files, sink options, ``RedisConfig`` and ``DedupConfig`` arguments
(:mod:`benchmarks.fuzz_cases`, pure, ``--config-cases`` each) and partitions of hostile
records through ``keep_rows`` and ``write_batches`` against a Redis and a Kafka broker
of its own (:mod:`benchmarks.fuzz_records`, ``--record-cases``; their output is read
back ``read_committed`` every ``--check-every`` cases, one pair of topics each), then
``--spark-cases`` hostile records through Spark end to end (:mod:`benchmarks.fuzz_spark`:
one streaming query of the one-pass form per invalid-ID policy, half the records each,
``--spark-per-trigger`` records per micro-batch, on a local Spark). It stops generating
(and starts no Spark query) after ``--max-seconds`` and reports what it ran. Writes
``benchmarks/results/fuzz.json`` (counts per property, the Spark runs' under
``spark``, the first example of each kind of problem) and merges into
``summary.json``: ``fuzz_cases`` (the Spark records included), ``fuzz_tracebacks``
(outcomes that are not a ``DedupError``, or a message of several lines),
``fuzz_records_lost``, ``fuzz_records_duplicated``, ``fuzz_records_phantom`` and
``fuzz_secrets_printed``. Every figure but ``fuzz_cases`` should be 0.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.common import bench_args, bench_services, merge_summary, progress, run_metadata
from benchmarks.common import write_json as write_result
from benchmarks.fuzz_cases import (
    dedup_config_problems,
    dedup_kwargs,
    kind,
    pipeline_files,
    pipeline_problems,
    redis_config_problems,
    redis_kwargs,
    sink_option_problems,
    sink_options,
)

FULL = {"config_cases": 1000, "record_cases": 8000, "check_every": 500, "spark_cases": 300,
        "spark_per_trigger": 20, "seed": 50, "max_seconds": 1500.0}
QUICK = {"config_cases": 30, "record_cases": 60, "check_every": 30, "spark_cases": 40,
         "spark_per_trigger": 8, "max_seconds": 300.0}
SPARK_POLICIES = ("dead_letter", "fail")
SPARK_COUNTS = ("records", "batches", "written", "dead_lettered", "dropped", "late",
                "refused", "lost", "duplicated", "phantom", "repaired", "left_out")
"""What :func:`benchmarks.fuzz_spark.run_spark_cases` counts, summed over the runs."""
CONFIG_PROPERTIES: dict[str, tuple[Callable[[], Any], Callable[[Any], list[str]]]] = {
    "pipeline_files": (pipeline_files, pipeline_problems),
    "sink_options": (sink_options, sink_option_problems),
    "redis_config": (redis_kwargs, redis_config_problems),
    "dedup_config": (dedup_kwargs, dedup_config_problems),
}


class _OutOfTime(Exception):  # noqa: N818 - the event, not an error
    """The run's time is up: stop generating."""


def generate(strategy: Any, body: Callable[[Any], None], cases: int, seed: int,
             stop_at: float) -> None:
    """Call ``body`` on ``cases`` generated values (fewer if time runs out); generation
    only (``body`` records problems, it never fails, so there is nothing to shrink)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    @with_seed(seed)
    @settings(max_examples=cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(case: Any) -> None:
        if time.monotonic() > stop_at:
            raise _OutOfTime
        body(case)

    with contextlib.suppress(_OutOfTime):
        run()


def figures(kinds: Counter[str], cases: int, lost: int, duplicated: int,
            phantoms: int) -> dict[str, int]:
    """The summary's figures from the problem kinds (:func:`benchmarks.fuzz_cases.kind`)
    and the record counts."""
    return {"fuzz_cases": cases,
            "fuzz_tracebacks": kinds["traceback"] + kinds["multi-line"],
            "fuzz_records_lost": lost, "fuzz_records_duplicated": duplicated,
            "fuzz_records_phantom": phantoms, "fuzz_secrets_printed": kinds["secret"]}


def spark_halves(cases: int) -> list[tuple[str, int]]:
    """``cases`` split between the invalid-ID policies, one Spark query each (a policy
    left with no case runs none). Pure."""
    half = cases // len(SPARK_POLICIES)
    sizes = [cases - half * (len(SPARK_POLICIES) - 1)] + [half] * (len(SPARK_POLICIES) - 1)
    return [(policy, size) for policy, size in zip(SPARK_POLICIES, sizes, strict=True)
            if size > 0]


def run_spark(args: Any, services: Any, stop_at: float, properties: dict[str, dict[str, Any]],
              kinds: Counter[str], examples: dict[str, str], say: Callable[[str], None],
              counts: tuple[int, int, int]) -> tuple[int, int, int]:
    """The Spark end-to-end runs (:mod:`benchmarks.fuzz_spark`) on a local Spark of their
    own, into ``properties["spark"]``, ``kinds`` and ``examples``; ``counts`` (lost,
    duplicated, phantoms) with theirs added. None starts after ``stop_at``."""
    from benchmarks.fuzz_spark import run_spark_cases
    from dedup.local.spark import local_spark_session

    lost, duplicated, phantoms = counts
    spark_runs: list[dict[str, Any]] = []
    section: dict[str, Any] = {"cases": 0, "problems": Counter(),
                               **dict.fromkeys(SPARK_COUNTS, 0), "runs": spark_runs}
    properties["spark"] = section
    halves = spark_halves(args.spark_cases)
    if not halves or time.monotonic() > stop_at:
        return counts
    # local[2,4]: a failed task is retried as on a cluster (the tests' session too)
    spark = local_spark_session("bench-fuzz", master="local[2,4]", shuffle_partitions=4)
    try:
        for number, (policy, size) in enumerate(halves):
            if time.monotonic() > stop_at:
                break
            run = run_spark_cases(
                spark, services.bootstrap, services.redis_url,
                f"fuzz-spark-{uuid.uuid4().hex[:8]}-{number}", size,
                args.seed + 1000 + number, policy=policy, per_trigger=args.spark_per_trigger,
                timeout=max(120.0, stop_at - time.monotonic()))
            spark_runs.append({"policy": policy, **run})
            section["cases"] += run["cases"]
            for key in SPARK_COUNTS:
                section[key] += run[key]
            for name, n in run["problems"].items():
                kinds[name] += n
                section["problems"][name] += n
                examples.setdefault(f"spark {name}", run["examples"][name])
            lost, duplicated = lost + run["lost"], duplicated + run["duplicated"]
            phantoms += run["phantom"]
            say(f"spark ({policy}): {run['cases']} cases, {run['records']} records in "
                f"{run['batches']} batches: {run['written']} written, "
                f"{run['dead_lettered']} dead-lettered, {run['dropped']} dropped, "
                f"{run['refused']} refused ({run['refusal'][:80] or 'no refusal'}), lost "
                f"{run['lost']}, duplicated {run['duplicated']}, phantoms {run['phantom']}, "
                f"{run['seconds']} s, problems {run['problems'] or 'none'}")
    finally:
        spark.stop()
    return lost, duplicated, phantoms


def main(argv: Sequence[str] | None = None) -> int:
    args = bench_args(__doc__, argv, FULL, QUICK)
    say = progress("fuzz")
    started = time.monotonic()
    stop_at = started + args.max_seconds
    properties: dict[str, dict[str, Any]] = {}
    kinds: Counter[str] = Counter()
    examples: dict[str, str] = {}

    def note(name: str, problems: list[str]) -> None:
        for problem in problems:
            kinds[kind(problem)] += 1
            properties[name]["problems"][kind(problem)] += 1
            examples.setdefault(f"{name} {kind(problem)}", problem[:1000])

    for name, (strategy, check) in CONFIG_PROPERTIES.items():
        properties[name] = {"cases": 0, "problems": Counter()}

        def body(case: Any, name: str = name, check: Callable[[Any], list[str]] = check
                 ) -> None:
            properties[name]["cases"] += 1
            note(name, check(case))

        generate(strategy(), body, args.config_cases, args.seed, stop_at)
        say(f"{name}: {properties[name]['cases']} cases, "
            f"problems {dict(properties[name]['problems']) or 'none'}")

    from benchmarks.fuzz_records import RecordFuzz, cases
    from sinks.transactions import close_clients

    records = properties["records"] = {"cases": 0, "problems": Counter(), "refused": 0,
                                       "written": 0, "slowest_case_seconds": 0.0}
    lost = duplicated = phantoms = 0
    with bench_services("fuzz", kafka=True) as services:
        chunk = 0
        while records["cases"] < args.record_cases and time.monotonic() < stop_at:
            size = min(args.check_every, args.record_cases - records["cases"])
            fuzz = RecordFuzz(services.bootstrap, services.redis_url,
                              f"fuzz-{uuid.uuid4().hex[:8]}-{chunk}")

            def run_case(case: Any, fuzz: RecordFuzz = fuzz) -> None:
                note("records", fuzz.run(case))

            generate(cases(), run_case, size, args.seed + 1 + chunk, stop_at)
            note("records", fuzz.check())
            close_clients()
            tally = fuzz.tally
            records["cases"] += tally.cases
            records["refused"] += tally.refused
            records["written"] += tally.written
            records["slowest_case_seconds"] = round(max(records["slowest_case_seconds"],
                                                        tally.slowest_seconds), 3)
            lost, duplicated = lost + tally.lost, duplicated + tally.duplicated
            phantoms += tally.phantoms
            chunk += 1
            say(f"records: {records['cases']} cases ({records['written']} records written "
                f"and read back, {records['refused']} cases refused), lost {lost}, "
                f"duplicated {duplicated}, phantoms {phantoms}, slowest case "
                f"{records['slowest_case_seconds']:.2f} s, "
                f"problems {dict(records['problems']) or 'none'}")
        lost, duplicated, phantoms = run_spark(args, services, stop_at, properties, kinds,
                                               examples, say, (lost, duplicated, phantoms))
    total = sum(p["cases"] for p in properties.values())
    summary = figures(kinds, total, lost, duplicated, phantoms)
    out_of_time = time.monotonic() > stop_at
    write_result("fuzz.json", {
        "metadata": run_metadata(),
        "setup": {**{key: getattr(args, key) for key in FULL}, "quick": args.quick},
        "seconds": round(time.monotonic() - started, 1),
        "stopped_by_max_seconds": out_of_time,
        "properties": {name: {**p, "problems": dict(p["problems"])}
                       for name, p in properties.items()},
        "first_examples": examples,
        "summary": summary,
    })
    if not args.quick:
        merge_summary(summary)
    say(f"done: {summary}")
    return 0 if all(v == 0 for k, v in summary.items() if k != "fuzz_cases") else 1


if __name__ == "__main__":
    raise SystemExit(main())
