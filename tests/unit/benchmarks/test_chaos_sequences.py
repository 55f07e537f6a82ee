"""The operator-sequence explorer's pure parts: its generator, its link to the
operational-changes table and the refusals registry, its figures (no services)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from benchmarks.chaos.sequences import (
    ACTION_KINDS,
    ADVICE,
    CHANGES,
    OLDER_SPARKS,
    REFUSALS_DOC,
    UPGRADE_FROM_INDEX,
    figures,
    generate,
    named_errors,
    summary_figures,
)
from tests.unit.test_operational_surface import NOT_YET_CLASSIFIED, rows, surface


def test_the_generator_is_seeded_and_covers_every_kind() -> None:
    specs = generate(300, seed=5)
    assert [s.as_dict() for s in specs] == [s.as_dict() for s in generate(300, seed=5)]
    assert [s.as_dict() for s in specs] != [s.as_dict() for s in generate(300, seed=6)]
    assert all(3 <= len(s.actions) <= 8 for s in specs)
    counts = Counter(a.kind for s in specs for a in s.actions)
    assert set(counts) == set(ACTION_KINDS)
    assert min(counts.values()) >= 20 * 3, counts  # room for actions skipped in their state
    changed = Counter(a.params["name"] for s in specs for a in s.actions
                      if a.kind == "change_name")
    assert set(changed) == {c.id for c in CHANGES}


def test_the_sequences_run_before_spark_upgrade_joined_are_drawn_as_they_were() -> None:
    """The recorded results of the sequences before UPGRADE_FROM_INDEX stay those of
    the specs drawn now (``--resume`` checks each one); spark_upgrade comes after."""
    import json

    from benchmarks.common import RESULTS_DIR

    progress = RESULTS_DIR / "chaos_sequences.progress.jsonl"
    recorded = [json.loads(line)["spec"] for line in progress.read_text().splitlines()
                if line.strip()]
    assert len(recorded) >= UPGRADE_FROM_INDEX
    drawn = {s.index: s.as_dict() for s in generate(300, seed=20261122)}
    for spec in recorded:
        assert drawn[spec["index"]] == spec, spec["index"]
    upgrades = [a for s in drawn.values() for a in s["actions"] if a["kind"] == "spark_upgrade"]
    assert all(s["index"] >= UPGRADE_FROM_INDEX for s in drawn.values()
               if any(a["kind"] == "spark_upgrade" for a in s["actions"]))
    assert len(upgrades) >= 20 * 3
    assert {a["params"]["version"] for a in upgrades} == set(OLDER_SPARKS)
    assert {a["params"]["held"] for a in upgrades} == {True, False}


def test_every_change_is_a_name_of_the_surface_with_the_tables_verdict() -> None:
    names = surface()
    verdicts = {name: verdict for row_names, verdict, _ in rows() for name in row_names}
    for change in CHANGES:
        assert change.name in names, change.name
        verdict = verdicts[change.name]
        if change.verdict == "works exactly":
            assert "works exactly" in verdict, (change.name, verdict)
        else:
            assert "refused" in verdict, (change.name, verdict)
        numeric = [v for v in change.values if isinstance(v, int | float)
                   and not isinstance(v, bool)]
        assert len(numeric) in (0, 2), f"{change.name}: a numeric name goes up and down"


def test_every_advice_followed_is_a_registered_refusal() -> None:
    registry = REFUSALS_DOC.read_text()
    for error, phrase, _ in ADVICE:
        assert error in named_errors(), error
        assert phrase in registry, (error, phrase)


def test_figures_and_summary_keys() -> None:
    done = [{"spec": {"index": 0}, "verdict": "exact", "hits": {"crash": 2, "redis_flush": 1},
             "report": {"lost": 0, "duplicated": 3, "duplicated_unannounced": 0,
                        "phantoms": 0, "mismatched": 0},
             "contradictions": [], "duration_s": 10.0, "commit": "abc"},
            {"spec": {"index": 1}, "verdict": "failed", "hits": {"crash": 1},
             "report": {"lost": 1, "duplicated": 0, "duplicated_unannounced": 0,
                        "phantoms": 0, "mismatched": 0},
             "contradictions": ["x"], "duration_s": 30.0, "commit": "abc"}]
    data = figures(done, seed=1, scheduled=300, metadata={"date": "d", "machine": "m"})
    assert data["actions_hit"]["crash"] == 3 and data["actions_hit"]["run_batches"] == 0
    assert (data["failed"], data["lost"], data["duplicated"], data["duplicated_announced"]) \
        == (1, 1, 0, 3)
    assert data["sequence_s_mean"] == 20.0
    summary = summary_figures(data)
    assert summary["chaos_sequences"] == 2 and summary["chaos_sequence_failures"] == 1
    assert summary["chaos_sequence_actions_hit"]["crash"] == 3
    assert summary["operational_surface_names"] == len(surface())
    assert summary["operational_surface_untested"] <= NOT_YET_CLASSIFIED


def test_a_fail_point_cleared_between_actions_is_not_taken_for_fired_again(
        tmp_path: Path) -> None:
    """A second hold at the same fail-point in one sequence waited on the first one's
    record (``wait_fired`` returned at once), so the query was stopped with no task
    held: the explorer clears fired records with the armed ones between actions."""
    import json

    from benchmarks.chaos.faults import wait_fired
    from benchmarks.chaos.sequences import clear_fail_points
    from dedup.failpoints import arm

    arm(tmp_path, "sink.after_checkpoint", "sleep", seconds=1)
    # what a task that fired the first hold leaves (the armed file renamed, its record)
    (tmp_path / "sink.after_checkpoint.armed").rename(
        tmp_path / "sink.after_checkpoint.fired-1-1")
    (tmp_path / "sink.after_checkpoint.fired-1-1").write_text(json.dumps({"pid": 1}))
    clear_fail_points(tmp_path)
    arm(tmp_path, "sink.after_checkpoint", "sleep", seconds=1)  # the second hold
    assert wait_fired(tmp_path, "sink.after_checkpoint", timeout=0.5) is None
