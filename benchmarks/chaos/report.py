"""Figures of a chaos matrix: JSON, a markdown table, and the summary totals."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.chaos.faults import FAULT_KINDS
from benchmarks.chaos.runner import RunResult


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return round(ordered[index], 2)


def figures(results: list[RunResult], seed: int, metadata: dict[str, Any]) -> dict[str, Any]:
    """Aggregate per-run results into the published figures."""
    per_kind: dict[str, dict[str, Any]] = {}
    for kind in FAULT_KINDS:
        runs = [r for r in results if r.spec.kind == kind]
        if not runs:
            continue
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
        }
    recoveries = [r.recovery_s for r in results if r.recovery_s is not None]
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
        "fault_kinds_total": len(FAULT_KINDS),
        "recovery_s_p50": _percentile(recoveries, 0.5),
        "recovery_s_p99": _percentile(recoveries, 0.99),
        "recovery_s_mean": round(statistics.fmean(recoveries), 2) if recoveries else None,
        "per_kind": per_kind,
        "errors": dict(errors.most_common(10)),
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
        "failed runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["per_kind"].values():
        lines.append(
            f"| {row['description']} | {row['runs']} | {row['confirmed_hit']} | "
            f"{row['losses']} | {row['duplicates']} | {row['phantoms']} | "
            f"{row['open_transactions']} | {row['failed_runs']} |"
        )
    lines += [
        f"| **total** | **{data['runs']}** | **{data['fault_kinds_hit']}/"
        f"{data['fault_kinds_total']} kinds** | **{data['losses']}** | "
        f"**{data['duplicates']}** | **{data['phantoms']}** | "
        f"**{data['open_transactions']}** | **{data['failed_runs']}** |",
        "",
        f"Recovery time (fault to the next committed output): p50 {data['recovery_s_p50']} s, "
        f"p99 {data['recovery_s_p99']} s.",
    ]
    return "\n".join(lines) + "\n"


def summary_figures(data: dict[str, Any]) -> dict[str, Any]:
    """The totals merged into ``benchmarks/results/summary.json``."""
    return {
        "chaos_runs": data["runs"],
        "chaos_fault_kinds_hit": data["fault_kinds_hit"],
        "chaos_losses": data["losses"],
        "chaos_duplicates": data["duplicates"],
        "chaos_phantoms": data["phantoms"],
    }


def write(data: dict[str, Any], out_dir: Path, name: str) -> tuple[Path, Path]:
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{name}.json"
    json_path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    md_path = out_dir / f"{name}.md"
    md_path.write_text(markdown(data))
    return json_path, md_path
