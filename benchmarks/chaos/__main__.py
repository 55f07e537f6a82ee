"""``python -m benchmarks.chaos``: the full chaos matrix (or a subset) in one command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace

from benchmarks.chaos.faults import (
    CLUSTER_KINDS,
    CRASH_KINDS,
    FAULT_KINDS,
    OPERATIONAL_KINDS,
    TWO_STEP_ONLY_KINDS,
)
from benchmarks.chaos.model import RunResult, finished_runs, schedule
from benchmarks.chaos.report import (
    MATRIX_NAMES,
    figures,
    other_matrices,
    summary_figures,
    write,
)
from benchmarks.chaos.runner import run_schedule
from benchmarks.common import (
    RESULTS_DIR,
    kafka_version,
    merge_summary,
    redis_version,
    run_metadata,
)


def matrix_kinds(requested: str, default: Sequence[str], variant: str) -> list[str]:
    """The fault kinds of a matrix: ``requested`` (comma-separated) or ``default``.

    The one_pass variant leaves out the kinds that exist only in the two-step
    form (said on stdout), and refuses them when they were asked for by name.
    Raises ValueError naming an unknown or inapplicable kind. Pure but for the note.
    """
    kinds = [k for k in (requested or ",".join(default)).split(",") if k]
    unknown = set(kinds) - set(FAULT_KINDS)
    if unknown:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: "
                         f"{', '.join(FAULT_KINDS)}")
    two_step = sorted(TWO_STEP_ONLY_KINDS & set(kinds))
    if "one_pass" in variant.split("+") and two_step:
        if requested:
            raise ValueError(f"fault kinds {two_step} exist only in the two-step form; drop "
                             "them from --kinds for --variant one_pass")
        print(f"--variant one_pass leaves out {', '.join(two_step)} (two-step form only)",
              flush=True)
        kinds = [k for k in kinds if k not in TWO_STEP_ONLY_KINDS]
    return kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__)
    parser.add_argument("--runs", type=int, default=0,
                        help="faulted runs (default 200; 1008 with --all: 42 per kind)")
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--kinds", default="",
                        help="comma-separated fault kinds (default: the crash kinds, or the "
                             "operational kinds with --operational)")
    parser.add_argument("--operational", action="store_true",
                        help="the matrix of the operational kinds: --kinds defaults to them "
                             "and --name to chaos_operational")
    parser.add_argument("--cluster", action="store_true",
                        help="the matrix of the cluster kinds (a Redis Cluster, three Kafka "
                             "brokers, a Spark standalone cluster, each started on first "
                             "use): --kinds defaults to them and --name to chaos_cluster")
    parser.add_argument("--all", action="store_true",
                        help="one seeded schedule over every fault kind (crash, operational "
                             "and cluster): --kinds defaults to all of them and --name to "
                             "chaos_full; meant to run over several sittings with --resume "
                             "(its progress file is committed as it goes)")
    parser.add_argument("--mutants", nargs="?", const="all", default="",
                        help="the mutant matrix (benchmarks/chaos/mutants.py): each broken "
                             "variant of the toolkit must be caught by the checks; optionally "
                             "a comma-separated list of mutants. Honours --seed, --resume, "
                             "--max-minutes, --no-summary and --variant (every run also on "
                             "that pipeline); writes chaos_mutants[_<variant>].json")
    parser.add_argument("--name", default="",
                        help="results file name (JSON + markdown; default chaos, or "
                             "chaos_operational with --operational)")
    parser.add_argument("--no-summary", action="store_true",
                        help="do not merge the totals into summary.json")
    parser.add_argument("--max-minutes", type=float, default=0,
                        help="stop scheduling new runs after this long (0: no limit)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the finished runs of an interrupted matrix with the same "
                             "seed and name (results/<name>.progress.jsonl) and do the rest")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: write the figures of the runs recorded in the "
                             "progress file (an interrupted matrix, reported as such)")
    parser.add_argument("--variant", default="",
                        help="run every scheduled run with this pipeline variant "
                             "(benchmarks/chaos/mutants.py VARIANTS, e.g. one_pass); "
                             "--name defaults to chaos_<variant>")
    parser.add_argument("--only-runs", default="",
                        help="START:END: do only the scheduled runs with START <= index < END "
                             "(to split one matrix over processes; merge the progress files "
                             "and --report-only)")
    parser.add_argument("--sequences", action="store_true",
                        help="the operator-sequence explorer (benchmarks/chaos/sequences.py): "
                             "seeded sequences of 3-8 operator actions, each judged by one "
                             "oracle; --runs defaults to 300; honours --seed, --resume, "
                             "--max-minutes, --report-only and --no-summary; writes "
                             "chaos_sequences.json / .md and chaos_sequences.progress.jsonl")
    args = parser.parse_args(argv)
    if args.sequences:
        from benchmarks.chaos import sequences

        return sequences.main(args.runs or 300, args.seed, args.resume, args.max_minutes,
                              not args.no_summary, args.report_only)
    if args.mutants:
        from benchmarks.chaos.mutant_patches import KNOWN_MUTANTS
        from benchmarks.chaos.mutants import run_matrix

        names = [] if args.mutants == "all" else [n for n in args.mutants.split(",") if n]
        unknown_mutants = set(names) - set(KNOWN_MUTANTS)
        if unknown_mutants:
            parser.error(f"unknown mutants {sorted(unknown_mutants)}; known: "
                         f"{', '.join(KNOWN_MUTANTS)}")
        if args.variant:
            from benchmarks.chaos.variants import VARIANTS

            if args.variant not in VARIANTS:
                parser.error(f"unknown pipeline variant {args.variant!r}; known: "
                             f"{', '.join(VARIANTS)}")
        name = args.name or ("chaos_mutants" + (f"_{args.variant}" if args.variant else ""))
        return run_matrix(RESULTS_DIR, args.seed, names or None, args.resume,
                          args.max_minutes, not args.no_summary, name, args.variant)
    if args.operational + args.cluster + args.all > 1:
        parser.error("--operational, --cluster and --all are separate matrices: run them one "
                     "at a time")
    if args.variant:
        from benchmarks.chaos.variants import VARIANTS

        if args.variant not in VARIANTS:
            parser.error(f"unknown pipeline variant {args.variant!r}; known: "
                         f"{', '.join(VARIANTS)}")
    args.name = args.name or (f"chaos_{args.variant}" if args.variant else
                              "chaos_operational" if args.operational else
                              "chaos_cluster" if args.cluster else
                              "chaos_full" if args.all else "chaos")
    default_kinds = (OPERATIONAL_KINDS if args.operational else
                     CLUSTER_KINDS if args.cluster else
                     tuple(FAULT_KINDS) if args.all else CRASH_KINDS)
    args.runs = args.runs or (42 * len(FAULT_KINDS) if args.all else 200)
    try:
        kinds = matrix_kinds(args.kinds, default_kinds, args.variant)
    except ValueError as exc:
        parser.error(str(exc))
    specs = schedule(args.runs, args.seed, kinds)
    if args.variant:
        specs = [replace(spec, variant=args.variant) for spec in specs]
    # One line per finished run, so that a matrix of two hours survives the
    # loss of its own process: --resume reads them back instead of rerunning.
    progress = RESULTS_DIR / f"{args.name}.progress.jsonl"
    results = finished_runs(progress, specs) if args.resume or args.report_only else []
    if results:
        print(f"{len(results)} runs already done in {progress}", flush=True)
    elif not args.report_only:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        progress.write_text("")
    if args.report_only:
        return _report(results, args, scheduled=len(specs))
    first, _, last = args.only_runs.partition(":")

    def line(result: RunResult) -> str:
        report = result.report
        return (f"run {result.spec.index + 1}/{len(specs)} {result.spec.kind:<20} "
                f"hit={result.fault.confirmed!s:<5} lost={report.get('lost', '?')} "
                f"dup={report.get('duplicated', '?')} phantom={report.get('phantoms', '?')} "
                f"restarts={result.restarts} {result.outcome} {result.duration_s:.0f}s "
                f"{result.error[:80]}")

    run_schedule(specs, results, progress, args.max_minutes, line,
                 wanted=range(int(first or 0), int(last or len(specs))))
    return _report(results, args, scheduled=len(specs))


def _report(results: list[RunResult], args: argparse.Namespace, scheduled: int) -> int:
    metadata = {**run_metadata(), "kafka": kafka_version(), "redis": redis_version(),
                "runs_scheduled": scheduled}
    data = figures(results, args.seed, metadata)
    results.sort(key=lambda r: r.spec.index)
    data["runs_detail"] = [r.as_dict() for r in results]
    json_path, md_path = write(data, RESULTS_DIR, args.name)
    full = RESULTS_DIR / "chaos_full.json"
    if not args.no_summary:
        if args.name in MATRIX_NAMES and full.exists():
            # the full matrix (every kind, strict rules) owns the chaos_* totals
            print(f"summary.json keeps the chaos_* totals of {full.name}")
        else:
            # the full matrix alone; before it, every run of the matrices of MATRIX_NAMES
            others = (other_matrices(RESULTS_DIR, args.name) if args.name in MATRIX_NAMES
                      else [])
            merge_summary(summary_figures(data, others))
    print(json.dumps({k: data[k] for k in ("runs", "fault_kinds_hit", "losses", "duplicates",
                                           "phantoms", "failed_runs")}))
    print(f"wrote {json_path} and {md_path}")
    ok = not (data["losses"] or data["duplicates"] or data["phantoms"] or data["failed_runs"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
