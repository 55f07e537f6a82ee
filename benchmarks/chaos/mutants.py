"""The mutant matrix: the chaos checks must fail on a toolkit that is not exactly-once.

Each mutant (:data:`benchmarks.chaos.mutant_patches.KNOWN_MUTANTS`) is a deliberately
broken variant of the toolkit, patched into every process of a run from
:mod:`benchmarks.chaos.mutant_patches` and switched on for one run by a file in
that run's fail-point folder (:func:`~benchmarks.chaos.mutant_patches.mutant_on`;
the run's ``mutant_hits`` evidence names the processes where it acted). For each mutant,
:data:`PLANS` names the fault kind (and fail-point) that should expose it, the
pipeline variant its runs need, and the check expected to catch it. A mutant is
*caught* when at least one of its runs fails the normal check of the chaos
runner (lost, duplicated, phantoms, mismatched payloads, open transactions, or
an error). One control run per mutant (its first spec, mutant off) must be
exact: the failure is the mutant's, not the fault's or the variant's.

``python -m benchmarks.chaos --mutants`` writes ``results/chaos_mutants.json``
(and ``.md``) and merges ``chaos_mutants`` / ``chaos_mutants_caught`` into
``summary.json``; mutant runs are not chaos runs (the ``chaos_*`` totals stay).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.chaos.model import (
    ROWS,
    ROWS_PER_BATCH,
    RunResult,
    RunSpec,
    finished_runs,
)
from benchmarks.chaos.mutant_patches import KNOWN_MUTANTS
from benchmarks.chaos.runner import run_schedule

CHECKS = ("lost", "duplicated", "phantoms", "mismatched", "open_transactions")


@dataclass(frozen=True)
class Plan:
    """How one mutant is exposed: fault kind, fail-point, pipeline variant, runs."""

    kind: str
    point: str = "dedup.after_claim"
    variant: str = ""
    runs: int = 3
    expect: str = ""
    """The check that should catch it (the report says which did)."""


PLANS: dict[str, Plan] = {
    "marker_ignored": Plan("worker_kill", "sink.after_commit", expect="duplicated"),
    "claim_not_idempotent": Plan("worker_kill", "dedup.after_claim", expect="lost"),
    "no_fencing": Plan("zombie_producer", expect="phantoms"),
    "strong_productions_off": Plan("worker_kill", "sink.before_commit", "nondeterministic",
                                   expect="mismatched"),
    # Not dup90_tiny_bloom: its worker kill retries the claim, which the catalog's
    # digest refuses (the mutant sends fewer candidates), so every run errs slowly.
    "stale_bloom_trusted": Plan("zombie_producer", variant="tiny_bloom", expect="lost"),
    "decisions_gc_early": Plan("worker_kill", "dedup.after_claim", expect="lost"),
    "late_policy_wall_clock": Plan("worker_kill", "sink.after_checkpoint", "late_events",
                                   runs=2, expect="lost"),
    "checkpoint_per_attempt": Plan("worker_kill", "sink.mid_produce", "nondeterministic",
                                   expect="mismatched"),
}
assert set(PLANS) == set(KNOWN_MUTANTS), "every mutant needs a plan"


# Variants that cannot be combined: one pass leaves no place for user code.
_EXCLUSIVE = ({"one_pass", "nondeterministic"},)


def combined_variant(plan: Plan, variant: str = "") -> str:
    """The pipeline variant of a mutant's runs when the whole matrix runs ``variant``
    too (``a+b``: both applied); ``""`` for none."""
    return "+".join(part for part in (plan.variant, variant) if part)


def not_applicable(variant: str) -> dict[str, str]:
    """The mutants whose plan cannot run with ``variant`` (name -> why)."""
    out = {}
    for name, plan in PLANS.items():
        parts = set(combined_variant(plan, variant).split("+"))
        clash = next((pair for pair in _EXCLUSIVE if pair <= parts), None)
        if clash is not None:
            out[name] = (f"its {plan.variant} pipeline needs user code between the dedup "
                         f"step and the sink, which the {variant} pipeline has no place for")
    return out


def schedule(seed: int, names: list[str] | None = None, variant: str = "") -> list[RunSpec]:
    """The mutant runs of ``names`` (default all), then one control run per mutant,
    each on its plan's pipeline variant combined with ``variant``.

    Seeded like the other matrices, and stable per mutant: a mutant's specs do
    not depend on which others are selected. Mutants whose plan cannot run with
    ``variant`` (:func:`not_applicable`) are left out.
    """
    batches = ROWS // ROWS_PER_BATCH
    specs: list[RunSpec] = []
    controls: list[RunSpec] = []
    skip = not_applicable(variant)
    for number, name in enumerate(KNOWN_MUTANTS):
        if (names and name not in names) or name in skip:
            continue
        plan = PLANS[name]
        both = combined_variant(plan, variant)
        rng = random.Random(seed * 100 + number)
        for i in range(plan.runs):
            spec = RunSpec(index=number * 10 + i, kind=plan.kind,
                           seed=rng.randrange(1, 1_000_000),
                           batch=rng.randrange(1, batches - 2), point=plan.point,
                           mutant=name, variant=both)
            specs.append(spec)
            if i == 0:
                controls.append(RunSpec(index=1000 + number, kind=spec.kind, seed=spec.seed,
                                        batch=spec.batch, point=spec.point,
                                        variant=spec.variant))
    return specs + controls


# -- verdicts and figures -------------------------------------------------------

def caught_by(result: RunResult) -> dict[str, int]:
    """The failed checks of one run with their numbers (empty: the run was exact)."""
    report = result.report
    found = {check: int(report.get(check, 0)) for check in CHECKS
             if isinstance(report.get(check), int) and report.get(check, 0) > 0}
    if result.error:
        found["error"] = 1
    if not found and (result.outcome == "failed" or not report.get("ok", False)):
        found["not_ok"] = 1
    return found


def figures(results: list[RunResult], seed: int, metadata: dict[str, Any],
            scheduled: int, variant: str = "") -> dict[str, Any]:
    """Per mutant: runs, caught, which checks caught it (with numbers), the control;
    ``variant``: the pipeline variant the whole matrix ran (its inapplicable mutants
    are listed with the reason)."""
    per: dict[str, dict[str, Any]] = {}
    for name, description in KNOWN_MUTANTS.items():
        runs = sorted((r for r in results if r.spec.mutant == name), key=lambda r: r.spec.index)
        plan = PLANS[name]
        control = next((r for r in results if not r.spec.mutant and r.spec.index ==
                        1000 + list(KNOWN_MUTANTS).index(name)), None)
        if not runs and control is None:
            continue
        checks: dict[str, int] = {}
        caught_runs = 0
        for r in runs:
            found = caught_by(r)
            caught_runs += bool(found)
            for check, number in found.items():
                checks[check] = checks.get(check, 0) + number
        per[name] = {
            "description": description, "kind": plan.kind,
            "point": plan.point if plan.kind == "worker_kill" else "",
            "variant": runs[0].spec.variant if runs else plan.variant,
            "expected_check": plan.expect,
            "runs": len(runs), "caught_runs": caught_runs, "caught": caught_runs > 0,
            "caught_by": checks,
            "faults_confirmed": sum(1 for r in runs if r.fault.confirmed),
            "control": None if control is None else {
                "outcome": control.outcome, "exact": not caught_by(control),
                "failed_checks": caught_by(control), "error": control.error},
            "runs_detail": [_run_row(r) for r in runs],
        }
    caught = sum(1 for row in per.values() if row["caught"])
    return {**metadata, "seed": seed, "variant": variant,
            "not_applicable": not_applicable(variant),
            "runs": len(results), "runs_scheduled": scheduled,
            "mutants": len(per), "mutants_caught": caught,
            "not_caught": sorted(n for n, row in per.items() if not row["caught"]),
            "controls_exact": sum(1 for row in per.values()
                                  if row["control"] and row["control"]["exact"]),
            "per_mutant": per}


def _run_row(r: RunResult) -> dict[str, Any]:
    report = r.report
    return {"index": r.spec.index, "seed": r.spec.seed, "batch": r.spec.batch,
            "confirmed": r.fault.confirmed, "outcome": r.outcome,
            **{check: report.get(check) for check in CHECKS},
            "error": r.error, "duration_s": round(r.duration_s, 1)}


def markdown(data: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    lines = [
        f"Mutant matrix of {data.get('date', '?')}: {data['mutants_caught']} of "
        f"{data['mutants']} mutants caught, {data['runs']} runs (controls included), seed "
        f"{data['seed']}; controls exact: {data['controls_exact']}."
        + (f" Every run on the {data['variant']} pipeline." if data.get("variant") else ""),
        *(f"Not applicable: `{name}` ({why})."
          for name, why in data.get("not_applicable", {}).items()),
        "",
        "| mutant | exposed by | runs | caught runs | caught by | control |",
        "|---|---|---:|---:|---|---|",
    ]
    for name, row in data["per_mutant"].items():
        where = row["kind"] + (f" at {row['point']}" if row["point"] else "") + \
            (f", {row['variant']} pipeline" if row["variant"] else "")
        checks = ", ".join(f"{c} {n}" for c, n in row["caught_by"].items()) or "**not caught**"
        control = "-" if row["control"] is None else (
            "exact" if row["control"]["exact"] else f"FAILED {row['control']['failed_checks']}")
        lines.append(f"| `{name}` | {where} | {row['runs']} | {row['caught_runs']} | "
                     f"{checks} | {control} |")
    return "\n".join(lines) + "\n"


def run_matrix(results_dir: Path, seed: int, names: list[str] | None, resume: bool,
               max_minutes: float, summary: bool,
               name: str = "chaos_mutants", variant: str = "") -> int:
    """Run (or resume) the mutant matrix, every run also on the pipeline ``variant``
    (e.g. ``one_pass``); write its figures. 0 when every mutant is caught and every
    control exact, else 1. ``summary.json`` gets ``chaos_mutants`` and
    ``chaos_mutants_caught`` (with a variant: ``chaos_mutants_<variant>``, ...)."""
    from benchmarks.common import kafka_version, merge_summary, redis_version, run_metadata

    specs = schedule(seed, names, variant)
    progress = results_dir / f"{name}.progress.jsonl"
    results = finished_runs(progress, specs) if resume else []
    if results:
        print(f"{len(results)} mutant runs already done in {progress}", flush=True)
    else:
        results_dir.mkdir(parents=True, exist_ok=True)
        progress.write_text("")

    def line(result: RunResult) -> str:
        spec = result.spec
        return (f"run {spec.index:>4} {spec.mutant or 'control':<24} {spec.kind:<16} "
                f"hit={result.fault.confirmed!s:<5} caught_by={caught_by(result)} "
                f"{result.outcome} {result.duration_s:.0f}s {result.error[:80]}")

    run_schedule(specs, results, progress, max_minutes, line)
    metadata = {**run_metadata(), "kafka": kafka_version(), "redis": redis_version()}
    data = figures(results, seed, metadata, scheduled=len(specs), variant=variant)
    data["runs_detail"] = [r.as_dict() for r in sorted(results, key=lambda r: r.spec.index)]
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"{name}.json").write_text(
        json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    (results_dir / f"{name}.md").write_text(markdown(data))
    if summary:
        key = f"chaos_mutants_{variant}" if variant else "chaos_mutants"
        merge_summary({key: data["mutants"], f"{key}_caught": data["mutants_caught"]})
    print(json.dumps({k: data[k] for k in ("runs", "mutants", "mutants_caught", "not_caught",
                                           "controls_exact")}))
    ok = data["mutants_caught"] == data["mutants"] and data["controls_exact"] == data["mutants"]
    return 0 if ok else 1
