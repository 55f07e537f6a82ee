"""Figures of a chaos matrix: JSON, a markdown table, and the summary totals."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.chaos.faults import CLUSTER_KINDS, FAULT_KINDS, KNOWN_FAILING, OPERATIONAL_KINDS
from benchmarks.chaos.model import RunResult

MATRIX_NAMES = ("chaos", "chaos_operational", "chaos_cluster")
"""The matrices whose runs together make the ``chaos_*`` figures of summary.json."""


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return round(ordered[index], 2)


def timed_recoveries(runs: list[RunResult]) -> list[float]:
    """Recovery times of ``runs`` (one kind): where some were timed to the killed
    partition's commit, only those; the older ones of such a kind were timed to any
    partition's commit, which a commit in flight at the kill could end at once."""
    timed = [r for r in runs if r.recovery_s is not None]
    by_partition = [r for r in timed if r.recovery_of == "partition"]
    return [r.recovery_s for r in (by_partition or timed) if r.recovery_s is not None]


def figures(results: list[RunResult], seed: int, metadata: dict[str, Any]) -> dict[str, Any]:
    """Aggregate per-run results into the published figures."""
    per_kind: dict[str, dict[str, Any]] = {}
    recoveries: list[float] = []
    for kind in FAULT_KINDS:
        runs = [r for r in results if r.spec.kind == kind]
        if not runs:
            continue
        kind_recoveries = timed_recoveries(runs)
        recoveries += kind_recoveries
        per_kind[kind] = {
            "description": FAULT_KINDS[kind],
            "runs": len(runs),
            "injected": sum(1 for r in runs if r.fault.injected_at is not None
                            or r.fault.confirmed),
            "confirmed_hit": sum(1 for r in runs if r.fault.confirmed),
            "losses": sum(r.report.get("lost", 0) for r in runs),
            "duplicates": sum(r.report.get("duplicated", 0) for r in runs),
            "phantoms": sum(r.report.get("phantoms", 0) + r.report.get("mismatched", 0)
                            for r in runs),
            "open_transactions": sum(r.report.get("open_transactions", 0) for r in runs),
            "failed_runs": sum(1 for r in runs if r.error or not r.report.get("ok", False)),
            "query_restarts": sum(r.restarts for r in runs),
            # why the queries died: the expected classes, and the errors no class expects
            "error_classes": dict(sum((Counter(r.error_classes) for r in runs), Counter())),
            "unexpected_errors": sum(len(r.unexpected_errors) for r in runs),
            "not_hit": sum(1 for r in runs if not r.fault.confirmed),
            # operational kinds pass either way: exact, or refused with a clear
            # message after an exact prefix and exact after the restart
            "exact": sum(1 for r in runs if r.outcome == "exact"),
            "refused": sum(1 for r in runs if r.outcome == "refused"),
            "operational": kind in OPERATIONAL_KINDS,
            "known_failing": KNOWN_FAILING.get(kind, ""),
            # fault to the next committed output; runs whose fault left nothing to redo
            # (e.g. a kill after the last commit) or that refused have none
            "recovered": len(kind_recoveries),
            "recovery_s_p50": _percentile(kind_recoveries, 0.5),
            "recovery_s_p99": _percentile(kind_recoveries, 0.99),
        }
    errors = Counter(r.error for r in results if r.error)
    return {
        **metadata,
        "seed": seed,
        "runs": len(results),
        "records_checked": sum(r.report.get("expected", 0) for r in results),
        "losses": sum(k["losses"] for k in per_kind.values()),
        "duplicates": sum(k["duplicates"] for k in per_kind.values()),
        "phantoms": sum(k["phantoms"] for k in per_kind.values()),
        "open_transactions": sum(k["open_transactions"] for k in per_kind.values()),
        "failed_runs": sum(k["failed_runs"] for k in per_kind.values()),
        "fault_kinds_hit": sum(1 for k in per_kind.values() if k["confirmed_hit"] > 0),
        "fault_kinds_total": len({r.spec.kind for r in results} | set(per_kind)),
        "operational_kinds_hit": sum(1 for kind, k in per_kind.items()
                                     if kind in OPERATIONAL_KINDS and k["confirmed_hit"] > 0),
        "recovery_s_p50": _percentile(recoveries, 0.5),
        "recovery_s_p99": _percentile(recoveries, 0.99),
        "recovery_s_mean": round(statistics.fmean(recoveries), 2) if recoveries else None,
        "per_kind": per_kind,
        "errors": dict(errors.most_common(10)),
        # the commits the runs ran on ("" before runs recorded it), with their counts
        "commits": dict(Counter(r.commit or "unrecorded" for r in results)),
        "redis_persistence": "AOF appendfsync always (everysec for redis_kill_everysec runs)",
    }


def markdown(data: dict[str, Any]) -> str:
    """The figures as a markdown table (embedded in the README)."""
    scheduled = data.get("runs_scheduled", data["runs"])
    interrupted = (f" (interrupted: {data['runs']} of {scheduled} scheduled runs done)"
                   if scheduled > data["runs"] else "")
    lines = [
        f"Chaos matrix of {data['date']} on {data['machine']}{interrupted}: "
        f"{data['runs']} runs, seed {data['seed']}, {data['records_checked']} records "
        f"checked; Spark {data['pyspark']}, Kafka broker {data.get('kafka', '?')}, confluent-kafka "
        f"{data['confluent_kafka']} (librdkafka {data['librdkafka']}), Redis "
        f"{data.get('redis', '?')} with {data['redis_persistence']}.",
        "",
        "| fault | runs | confirmed hit | lost | duplicated | phantoms | open txns | "
        "failed runs | recovery p50 / p99 s (runs) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    crash = {kind: row for kind, row in data["per_kind"].items() if not row.get("operational")}
    operational = {kind: row for kind, row in data["per_kind"].items() if row.get("operational")}
    for row in crash.values():
        lines.append(
            f"| {row['description']} | {row['runs']} | {row['confirmed_hit']} | "
            f"{row['losses']} | {row['duplicates']} | {row['phantoms']} | "
            f"{row['open_transactions']} | {row['failed_runs']} | {_recovery(row)} |"
        )
    if operational:
        lines += _operational_rows(operational)
    lines += [
        f"| **total** | **{data['runs']}** | **{data['fault_kinds_hit']}/"
        f"{data['fault_kinds_total']} kinds** | **{data['losses']}** | "
        f"**{data['duplicates']}** | **{data['phantoms']}** | "
        f"**{data['open_transactions']}** | **{data['failed_runs']}** | "
        f"**{data['recovery_s_p50']} / {data['recovery_s_p99']}** |",
        "",
        f"Recovery time (fault to the next committed output): p50 {data['recovery_s_p50']} s, "
        f"p99 {data['recovery_s_p99']} s.",
    ]
    commits = data.get("commits") or {}
    if commits:
        lines += ["", "Runs per commit of the toolkit: " + ", ".join(
            f"{commit} {count}" for commit, count in commits.items()) + "."]
    return "\n".join(lines) + "\n"


def _recovery(row: dict[str, Any]) -> str:
    """A kind's recovery cell: p50 / p99 over the runs that measured one, and how many."""
    if not row.get("recovered"):
        return "-"
    return f"{row['recovery_s_p50']} / {row['recovery_s_p99']} ({row['recovered']})"


def _operational_rows(operational: dict[str, dict[str, Any]]) -> list[str]:
    """Rows of the operational kinds: the table's columns, then how each run ended."""
    lines = ["| *operational changes (pass: exact, or refused + exact prefix + exact "
             "restart)* | | | | | | | | |"]
    for row in operational.values():
        mark = " (known failing)" if row.get("known_failing") else ""
        lines.append(
            f"| {row['description']}{mark}: {row.get('exact', 0)} exact, "
            f"{row.get('refused', 0)} refused | {row['runs']} | {row['confirmed_hit']} | "
            f"{row['losses']} | {row['duplicates']} | {row['phantoms']} | "
            f"{row['open_transactions']} | {row['failed_runs']} | {_recovery(row)} |"
        )
    return lines


def summary_figures(data: dict[str, Any], others: list[dict[str, Any]] | None = None,
                    ) -> dict[str, Any]:
    """The totals merged into ``benchmarks/results/summary.json``.

    ``others`` are the figures of the other matrices (:data:`MATRIX_NAMES`):
    the totals cover every run of all of them, and a kind counts as hit if
    any matrix confirmed it.
    """
    matrices = [data, *(others or [])]
    hit = {kind for m in matrices for kind, row in m["per_kind"].items()
           if row["confirmed_hit"] > 0}
    return {
        "chaos_runs": sum(m["runs"] for m in matrices),
        "chaos_fault_kinds_hit": len(hit),
        "chaos_operational_kinds_hit": len(hit & set(OPERATIONAL_KINDS)),
        "chaos_cluster_kinds_hit": len(hit & set(CLUSTER_KINDS)),
        "chaos_losses": sum(m["losses"] for m in matrices),
        "chaos_duplicates": sum(m["duplicates"] for m in matrices),
        "chaos_phantoms": sum(m["phantoms"] for m in matrices),
        "chaos_open_transactions": sum(m.get("open_transactions", 0) for m in matrices),
        "chaos_failed_runs": sum(m.get("failed_runs", 0) for m in matrices),
    }


def other_matrices(out_dir: Path, name: str) -> list[dict[str, Any]]:
    """The written figures of the matrices of :data:`MATRIX_NAMES` other than ``name``."""
    import json

    out = []
    for other in MATRIX_NAMES:
        path = out_dir / f"{other}.json"
        if other != name and path.exists():
            out.append(json.loads(path.read_text()))
    return out


def write(data: dict[str, Any], out_dir: Path, name: str) -> tuple[Path, Path]:
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{name}.json"
    json_path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    md_path = out_dir / f"{name}.md"
    md_path.write_text(markdown(data))
    return json_path, md_path
