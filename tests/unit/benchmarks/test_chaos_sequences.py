"""The operator-sequence explorer's pure parts: its generator, its link to the
operational-changes table and the refusals registry, its figures (no services)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from benchmarks.chaos.sequences import (
    ACTION_KINDS,
    ADVICE,
    CHANGES,
    OLDER_SPARKS,
    PROBE_FROM_INDEX,
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


class _Offline:
    """A :class:`Sequence` with no services: ``run_query`` answers from a script (the
    refusal a start meets, or none), ``visible`` is empty. Tests the explorer's logic."""

    @staticmethod
    def make(index: int, tmp_path: Path, starts: list[str | None]) -> Any:
        from benchmarks.chaos.sequences import Refusal, Sequence, SequenceSpec, start_settings

        seq: Any = Sequence.__new__(Sequence)
        seq.spec = SequenceSpec(index=index, seed=1, one_pass=False, actions=())
        seq.base_app_id = seq.app_id = f"seq-{index}"
        seq.dir = tmp_path
        seq.settings = start_settings()
        seq.recorded = None
        seq.checkpoints = [str(tmp_path / "checkpoint-0")]
        seq.unfinished = False
        seq.pending = None
        seq.flushed_with_batches = True  # a flush under a checkpoint with batches
        seq.announced, seq.flushed_visible = set(), set()
        seq.hits, seq.contradictions, seq.trace = Counter(), [], []
        seq.started = []

        def run_query(hold: Any = None) -> dict[str, Any]:
            seq.started.append(seq.checkpoint)
            error = starts.pop(0)
            if error is None:
                return {"outcome": "works", "errors": []}
            message = (f"{error}: the catalog of app id {seq.app_id} was lost; ... or "
                       "start a new checkpoint location")
            seq.pending = Refusal(error, message, "start", seq.checkpoint)
            return {"outcome": "refused", "error": error, "stage": "start",
                    "message": message, "errors": []}

        seq.run_query = run_query
        seq.visible = list
        return seq


def test_follow_advice_with_nothing_refused_yet_starts_and_follows_what_it_meets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sequences 0-65 skipped ``follow_advice`` when no start had met the refusal yet
    (7 hits in 66 sequences); from PROBE_FROM_INDEX on it starts first, judges that
    start as a plain run, and follows the advice of the refusal it meets."""
    import benchmarks.chaos.sequences as sequences

    monkeypatch.setattr(sequences, "committed_batches", lambda checkpoint: 0)
    monkeypatch.setattr(sequences, "_advice", lambda error, message: "new_checkpoint")
    seq = _Offline.make(PROBE_FROM_INDEX, tmp_path, ["SettingChangedError", None])
    step = seq.do(sequences.Action("follow_advice"))
    assert step["probe"] == {"outcome": "refused", "error": "SettingChangedError",
                             "expected": ["refused:SettingChangedError"]}
    assert step["followed"] == "new_checkpoint" and step["outcome"] == "works"
    assert seq.started == [str(tmp_path / "checkpoint-0"), str(tmp_path / "checkpoint-1")]
    assert seq.hits["follow_advice"] == 1 and not seq.contradictions

    # a start that meets no refusal: judged, not counted as advice followed
    seq = _Offline.make(PROBE_FROM_INDEX, tmp_path, [None])
    seq.flushed_with_batches = False
    step = seq.do(sequences.Action("follow_advice"))
    assert step["outcome"] == "works" and "followed" not in step
    assert seq.hits["follow_advice"] == 0 and not seq.contradictions

    # a start the table says must be refused, and was not: a contradiction
    seq = _Offline.make(PROBE_FROM_INDEX, tmp_path, [None])
    seq.do(sequences.Action("follow_advice"))
    assert seq.contradictions and "probe_of=follow_advice" in seq.contradictions[0]

    # before PROBE_FROM_INDEX: skipped, as those sequences ran
    seq = _Offline.make(PROBE_FROM_INDEX - 1, tmp_path, [])
    assert seq.do(sequences.Action("follow_advice")).get("skipped") is True
    assert seq.started == []


@pytest.mark.parametrize("start", ["SettingChangedError", None])
def test_advice_followed_on_a_flushed_checkpoint_expects_the_lost_catalog_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str | None) -> None:
    """Sequence 129: a refusal (a changed shard count), then ``FLUSHALL`` under the
    checkpoint's committed batches, then its advice (the recorded count back). The
    advice answers the older refusal only: the kept checkpoint on the flushed Redis
    must still be refused (the table's lost-catalog row), and a start that works is
    the contradiction. The explorer expected "works" and failed the right refusal."""
    import benchmarks.chaos.sequences as sequences

    monkeypatch.setattr(sequences, "committed_batches", lambda checkpoint: 1)
    monkeypatch.setattr(sequences, "_advice", lambda error, message: "restore_recorded")
    seq = _Offline.make(PROBE_FROM_INDEX, tmp_path, [start])
    seq.pending = sequences.Refusal("ShardCountMismatchError",
                                    "ShardCountMismatchError: ... use num_shards=4",
                                    "start", seq.checkpoint)
    step = seq.do(sequences.Action("follow_advice"))
    assert step["followed"] == "restore_recorded" and step["expected"] == [
        "refused:SettingChangedError"]
    assert seq.hits["follow_advice"] == 1
    assert bool(seq.contradictions) == (start is None), seq.contradictions
