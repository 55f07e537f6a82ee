"""The mutant matrix's schedule, verdicts and figures (no services needed)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from benchmarks.chaos.faults import FAULT_KINDS, FaultOutcome
from benchmarks.chaos.model import RunResult, RunSpec
from benchmarks.chaos.mutant_patches import KNOWN_MUTANTS
from benchmarks.chaos.mutants import PLANS, caught_by, figures, markdown, schedule
from benchmarks.chaos.variants import VARIANTS


def _result(spec: RunSpec, **report: int) -> RunResult:
    full = {"expected": 10, "observed": 10, "lost": 0, "duplicated": 0, "phantoms": 0,
            "mismatched": 0, "open_transactions": 0, **report}
    ok = not any(report.values())
    return RunResult(spec=spec, fault=FaultOutcome(kind=spec.kind, confirmed=True),
                     report={**full, "ok": ok}, outcome="exact" if ok else "failed")


def test_every_mutant_has_a_plan_of_known_kinds_and_variants() -> None:
    assert set(PLANS) == set(KNOWN_MUTANTS)
    assert all(p.kind in FAULT_KINDS and p.variant in ("", *VARIANTS) for p in PLANS.values())


def test_schedule_is_stable_per_mutant_and_ends_with_one_control_each() -> None:
    everything = schedule(5)
    one = schedule(5, ["no_fencing"])
    assert [s for s in everything if s.mutant == "no_fencing"] == [s for s in one if s.mutant]
    controls = [s for s in everything if not s.mutant]
    assert len(controls) == len(KNOWN_MUTANTS)
    assert len({s.index for s in everything}) == len(everything)


def test_an_older_progress_line_without_mutant_fields_is_read() -> None:
    line = {"spec": {"index": 0, "kind": "worker_kill", "seed": 1, "batch": 2,
                     "point": "sink.after_commit"},
            "fault": {"kind": "worker_kill"}}
    result = RunResult.from_dict(json.loads(json.dumps(line)))
    assert (result.spec.mutant, result.spec.variant) == ("", "")


def test_a_mutant_is_caught_by_the_checks_that_failed() -> None:
    specs = schedule(5, ["marker_ignored"])
    caught, control = _result(specs[0], duplicated=7), _result(specs[-1])
    assert caught_by(caught) == {"duplicated": 7}
    assert caught_by(control) == {}
    errored = _result(specs[1])
    errored.error, errored.outcome = "RuntimeError: boom", "failed"
    assert caught_by(errored) == {"error": 1}
    data = figures([caught, errored, _result(specs[2]), control], 5, {"date": "d"}, 4)
    row = data["per_mutant"]["marker_ignored"]
    assert (row["runs"], row["caught_runs"], row["caught"]) == (3, 2, True)
    assert row["caught_by"] == {"duplicated": 7, "error": 1}
    assert row["control"]["exact"] and data["controls_exact"] == 1
    assert (data["mutants"], data["mutants_caught"]) == (1, 1)
    assert "| `marker_ignored` |" in markdown(data)


def test_a_mutant_no_run_catches_is_reported() -> None:
    specs = schedule(5, ["no_fencing"])
    data = figures([_result(s) for s in specs], 5, {"date": "d"}, len(specs))
    assert data["not_caught"] == ["no_fencing"] and data["mutants_caught"] == 0
    assert "**not caught**" in markdown(data)


def test_the_one_pass_variant_switches_the_pipeline_file_to_one_pass(tmp_path: Any) -> None:
    from types import SimpleNamespace

    from benchmarks.chaos.model import pipeline_text
    from benchmarks.chaos.variants import apply_variant
    from dedup.cli.config_file import parse_pipeline

    spec = RunSpec(index=3, kind="worker_kill", seed=7, batch=1, point="sink.mid_produce",
                   variant="one_pass")
    run = SimpleNamespace(spec=spec, app_id="chaos-3-x", topic="chaos-3-x-out",
                          fault=FaultOutcome(kind=spec.kind), fp_dir=tmp_path)
    plain = pipeline_text(run.app_id, run.topic, replace(spec, variant=""))
    assert parse_pipeline(plain).table("sink")["one_pass"] is False
    # the file of every path that writes one (the operational kinds' own starts too)
    written = pipeline_text(run.app_id, run.topic, spec)
    assert parse_pipeline(written).table("sink")["one_pass"] is True
    text, transform = apply_variant(run, written)  # type: ignore[arg-type]
    assert transform is None and text == written
    assert run.fault.evidence["variant"] == VARIANTS["one_pass"]
    with pytest.raises(ValueError, match="no one_pass setting"):
        apply_variant(run, plain)  # type: ignore[arg-type]


def test_an_operational_kind_starts_the_one_pass_pipeline_of_its_variant(
        tmp_path: Any) -> None:
    from types import SimpleNamespace

    from benchmarks.chaos.operational import _pipeline

    spec = RunSpec(index=4, kind="restart_shard_count", seed=7, batch=1, point="",
                   variant="one_pass")
    run = SimpleNamespace(spec=spec, app_id="chaos-4-x", topic="chaos-4-x-out",
                          fault=FaultOutcome(kind=spec.kind), fp_dir=tmp_path)
    assert _pipeline(run).table("sink")["one_pass"] is True  # type: ignore[arg-type]
    assert _pipeline(run, num_shards=8).table("dedup")["num_shards"] == 8  # type: ignore[arg-type]
    assert run.fault.evidence["variant"] == VARIANTS["one_pass"]
    plain = SimpleNamespace(spec=replace(spec, variant=""), app_id="chaos-4-y",
                            topic="chaos-4-y-out", fault=FaultOutcome(kind=spec.kind),
                            fp_dir=tmp_path)
    assert _pipeline(plain).table("sink")["one_pass"] is False  # type: ignore[arg-type]


def test_a_one_pass_matrix_leaves_out_the_two_step_only_kinds() -> None:
    from benchmarks.chaos.__main__ import matrix_kinds

    every = matrix_kinds("", FAULT_KINDS, "one_pass")
    assert "two_outputs_foreach_batch" not in every
    assert len(every) == len(FAULT_KINDS) - 1
    assert "two_outputs_foreach_batch" in matrix_kinds("", FAULT_KINDS, "")
    with pytest.raises(ValueError, match="exist only in the two-step form"):
        matrix_kinds("worker_kill,two_outputs_foreach_batch", FAULT_KINDS, "one_pass")
    with pytest.raises(ValueError, match="unknown fault kinds"):
        matrix_kinds("no_such_kind", FAULT_KINDS, "")


def test_a_matrix_on_the_one_pass_pipeline_combines_variants_and_leaves_out_user_code(
        tmp_path: Any) -> None:
    from types import SimpleNamespace

    from benchmarks.chaos.model import pipeline_text
    from benchmarks.chaos.mutants import not_applicable
    from benchmarks.chaos.variants import apply_variant
    from dedup.cli.config_file import parse_pipeline

    specs = schedule(5, None, "one_pass")
    skipped = not_applicable("one_pass")
    # the mutants whose plan puts non-deterministic user code between the steps
    assert set(skipped) == {n for n, p in PLANS.items() if p.variant == "nondeterministic"}
    assert skipped and {s.mutant for s in specs if s.mutant} == set(PLANS) - set(skipped)
    assert all(s.variant.split("+")[-1] == "one_pass" for s in specs)
    # a mutant's runs are the plain matrix's, on the combined pipeline
    plain = [s for s in schedule(5) if s.mutant == "stale_bloom_trusted"]
    both = [s for s in specs if s.mutant == "stale_bloom_trusted"]
    assert [(s.index, s.seed, s.batch) for s in both] == [(s.index, s.seed, s.batch)
                                                          for s in plain]
    assert {s.variant for s in both} == {"tiny_bloom+one_pass"}
    run = SimpleNamespace(spec=both[0], app_id="chaos-1-x", topic="chaos-1-x-out",
                          fault=FaultOutcome(kind=both[0].kind), fp_dir=tmp_path)
    text, transform = apply_variant(run, pipeline_text(run.app_id, run.topic,  # type: ignore[arg-type]
                                                       both[0]))
    pipeline = parse_pipeline(text)
    assert transform is None and pipeline.table("sink")["one_pass"] is True
    assert pipeline.table("dedup")["bloom.capacity"] == 20
    data = figures([], 5, {"date": "d"}, len(specs), variant="one_pass")
    assert data["not_applicable"] == skipped and "Not applicable" in markdown(data)
