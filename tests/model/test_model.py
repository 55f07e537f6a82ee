"""The protocol model (docs/model.md): the reduced exploration finds nothing, every model
mutant is caught with a counterexample, and the model's crash points are the code's
fail-points."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from tests.model.explore import BOUNDS, bound_figures, explore, instance
from tests.model.protocol import (
    CRASH_POINTS,
    FORMS,
    MUTANTS,
    NOT_MODELLED_FAIL_POINTS,
    expected_outputs,
    initial_state,
    successors,
)

ROOT = Path(__file__).resolve().parents[2]

# Each mutant with the form and the failures that show it (the CI bound's input; two
# workers where a zombie must run beside its retry):
# a breadth-first search stops at its first violation, so each takes a few seconds.
MUTANT_CASES = {
    "no_fencing": ("sink_only", dict(workers=2, crashes=0, zombies=1, kinds=("zombie",))),
    "marker_ignored": ("two_step", dict(crashes=1, zombies=0, kinds=("driver",))),
    "claim_not_idempotent": ("one_pass", dict(crashes=1, zombies=0, kinds=("failpoint",))),
    "stale_bloom_trusted": ("one_pass", dict(workers=2, crashes=0, zombies=1,
                                             kinds=("zombie",))),
    "checkpoint_after_emit": ("sink_only", dict(crashes=1, zombies=0, kinds=("failpoint",))),
    "lease_not_checked": ("one_pass", dict(workers=2, crashes=2, zombies=0,
                                           kinds=("driver", "takeover"))),
    "decisions_gc_early": ("one_pass", dict(crashes=1, zombies=0, kinds=("failpoint",))),
    "checkpoint_per_attempt": ("sink_only", dict(crashes=1, zombies=0, kinds=("failpoint",))),
    "no_record_at_start": ("two_step", dict(crashes=1, zombies=0, kinds=("driver",))),
}


def _code_fail_points() -> set[str]:
    """Names passed to ``fail_point("...")`` anywhere in dedup/ and sinks/ (by the AST)."""
    names: set[str] = set()
    for folder in ("dedup", "sinks"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in
                        ("fail_point", "clock_offset") and node.args
                        and isinstance(node.args[0], ast.Constant)):
                    names.add(str(node.args[0].value))
    return names


def test_the_models_crash_points_are_the_codes_fail_points() -> None:
    code = _code_fail_points()
    assert code, "no fail_point(...) call found: the scan is broken"
    modelled = set(CRASH_POINTS)
    skipped = set(NOT_MODELLED_FAIL_POINTS)
    assert not modelled & skipped
    assert modelled - code == set(), f"model crash points the code has no fail-point for: " \
                                     f"{sorted(modelled - code)}"
    assert code - modelled - skipped == set(), (
        f"code fail-points the model neither fires nor lists as not modelled: "
        f"{sorted(code - modelled - skipped)}")
    assert skipped <= code, f"listed as not modelled but gone from the code: {skipped - code}"


def test_every_fail_point_the_model_fires_is_reached() -> None:
    """Each named crash point is a reachable place of a task in some form."""
    reached: set[str] = set()
    for form in FORMS:
        inst = instance("ci", form, crashes=0, zombies=0)
        frontier, seen = [initial_state(inst)], set()
        while frontier:
            s = frontier.pop()
            if s in seen:
                continue
            seen.add(s)
            reached |= {t.fp for t in s.tasks if t.fp}
            frontier += [n for _, _, n in successors(inst, s)]
    assert reached == set(CRASH_POINTS)


def test_the_failure_free_output_is_first_occurrences() -> None:
    inst = instance("ci", "one_pass")
    assert expected_outputs(inst) == (((("a", 1),), (("b", 2),)), ((("c", 5),), ()))
    assert expected_outputs(instance("ci", "sink_only"))[1][1] == (("b", 4),)


@pytest.mark.slow
@pytest.mark.parametrize("bound", ["ci", "ci_zombie"])
@pytest.mark.parametrize("form", FORMS)
def test_reduced_exploration_finds_no_violation(form: str, bound: str) -> None:
    result = explore(instance(bound, form), max_seconds=120)
    assert not result.truncated, result.summary()
    assert result.ok, result.report()
    assert result.complete_states > 0 and result.states > 10_000
    # the liveness rule (docs/model.md, "Liveness"): from every reachable state, refusals
    # included, a failure-free path completes, stops the query and leaves a new query on
    # the app id unrefused
    assert result.settled_states > 0
    assert bound_figures([result])["model_liveness_violations"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("bound", ["ci", "ci_zombie"])
@pytest.mark.parametrize("form", FORMS)
def test_the_reduction_keeps_the_verdict(form: str, bound: str) -> None:
    """The reduced search (partial-order reduction and renumbered epochs and fences,
    docs/model.md "Reduction") against the full one: the same verdict, fewer states."""
    full = explore(instance(bound, form), max_seconds=120, reduce=False)
    reduced = explore(instance(bound, form), max_seconds=120, reduce=True)
    assert not full.truncated and not reduced.truncated
    assert (full.kind, full.ok) == (reduced.kind, reduced.ok)
    assert reduced.states < full.states and reduced.reduced_states > 0
    assert reduced.complete_states > 0


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_reduction_keeps_each_mutants_counterexample(mutant: str) -> None:
    """Each mutant's violation is found with the reduction off too, of the same kind."""
    form, bound = MUTANT_CASES[mutant]
    full = explore(instance("ci", form, mutant, **bound), max_seconds=120, reduce=False)
    reduced = explore(instance("ci", form, mutant, **bound), max_seconds=120, reduce=True)
    assert full.kind and full.kind == reduced.kind, (full.summary(), reduced.summary())


def test_the_bounds_meet_the_minimum() -> None:
    for name, spec in BOUNDS.items():
        batches = spec["batches"]
        assert len(batches) >= 2, name  # type: ignore[arg-type]
        ids = [[r[0] for r in b] for b in batches]  # type: ignore[union-attr]
        assert any(len(set(b)) < len(b) for b in ids), f"{name}: no duplicate in a batch"
        assert set(ids[0]) & set(ids[1]), f"{name}: no duplicate across batches"


def test_a_refusal_after_the_stop_is_ended_by_its_advice() -> None:
    """The liveness rule is not vacuous: in two step, with the driver's kill after Spark's
    commit of the last batch and before its listener's record, a new query on the app id
    is refused after the stop (query 0 left batch 1 unfinished), and the advice's restart
    (record_checkpoint_commit at its start) ends the refusal: every state settles."""
    form, bound = MUTANT_CASES["no_record_at_start"]
    inst = instance("ci", form, **bound)
    result = explore(inst, max_seconds=120)
    assert result.ok and result.settled_states > 0, result.report()
    frontier, seen, advice = [initial_state(inst)], set(), []
    while frontier:
        s = frontier.pop()
        if s in seen:
            continue
        seen.add(s)
        for label, _, nxt in successors(inst, s):
            if label.startswith("a new query on the app id is refused"):
                advice.append(label)
            frontier.append(nxt)
    assert any("query 0 left batch 1 unfinished" in label
               and "record_checkpoint_commit: commit_progress(q0, batch 1)" in label
               for label in advice), advice


def test_a_lost_progress_record_not_recorded_at_start_is_a_liveness_violation() -> None:
    """The liveness rule can fail: without record_checkpoint_commit at a restart (the
    mutant no_record_at_start, as a query started from a script of one's own) the
    CHANGELOG's "a committed batch could stay unfinished for good" comes back. The driver
    dies after Spark's commit of the last batch, before its listener records it; the
    restarted query has nothing to run, so a new query on the app id is refused, and
    following the refusal's advice (restart the query) refuses it again, for good."""
    form, bound = MUTANT_CASES["no_record_at_start"]
    result = explore(instance("ci", form, "no_record_at_start", **bound), max_seconds=120)
    assert result.kind == "liveness", result.summary()
    assert result.liveness_violations > 0
    assert result.trace[-1] == "FAILURE kill the driver (its tasks run on as zombies)"
    assert "driver: writer commit, Spark commits batch 1" in result.trace
    assert "left batch 1 unfinished" in result.violation[0]
    assert any("the refusal's advice" in step for step in result.after), result.report()


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_each_mutant_is_caught_with_a_counterexample(mutant: str) -> None:
    form, bound = MUTANT_CASES[mutant]
    result = explore(instance("ci", form, mutant, **bound), max_seconds=120, reduce=True)
    assert result.kind, f"mutant {mutant} not caught: {result.summary()}"
    assert result.trace and result.violation
    report = result.report()
    assert "trace (from the initial state):" in report and "FAILURE" in report


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("DEDUP_MODEL_FULL"),
                    reason="minutes per form: set DEDUP_MODEL_FULL=1 to run")
@pytest.mark.parametrize("form", FORMS)
def test_small_bound_exploration_finds_no_violation(form: str) -> None:
    """One failure of every kind but a zombie, exhaustively (minutes: not in the default
    run; ``DEDUP_MODEL_FULL=1 pytest tests/model -m slow``)."""
    result = explore(instance("small", form), max_seconds=900)
    assert result.ok, result.report()


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("DEDUP_MODEL_FULL"),
                    reason="minutes (exhaustive with the reduction: 1,855,567 states in 284 s "
                           "on the loaded 2-core machine): set DEDUP_MODEL_FULL=1 to run")
def test_a_zombie_of_a_query_taken_over_cannot_claim_after_the_takeover() -> None:
    """The model's finding (docs/model.md): after a takeover, a zombie of the old query
    claimed with its cached fence a shard the new owner had not claimed yet, and the new
    owner dropped those IDs as seen. Fixed by fencing every shard at the takeover
    (fence.lua; the code's test is test_a_zombie_task_cannot_claim_a_shard_the_new_owner_
    has_not_claimed_yet in tests/integration/dedup/test_catalog_operational.py)."""
    result = explore(instance("takeover4", "one_pass"), max_seconds=1800)
    assert result.ok, result.report()
