"""A one-pass query restarted against another Redis (a failover) releases its app id
lease there when it stops (found by the operator-sequence explorer, issue 33 item 5).

``DecisionGcListener.hold`` keeps the first catalog it was given for an app id
(``setdefault``), where ``watch`` (the two-step form) keeps the newest: a one-pass
query that ran against Redis A, failed over to B and was stopped cleanly released its
lease on A (unreachable) and left it held on B, so a reset checkpoint on B was
refused with ``AppIdInUseError`` until the lease lapsed (a false refusal: nothing
lost, the docs say a reset after a clean stop works). Now the newest catalog wins.
"""

from __future__ import annotations

from types import SimpleNamespace

from dedup.gc import DecisionGcListener
from tests.unit.dedup.test_gc_listener import RecordingCatalog


def test_a_one_pass_query_releases_its_lease_on_the_redis_it_runs_on_now() -> None:
    before, after = RecordingCatalog(), RecordingCatalog()
    listener = DecisionGcListener()
    listener.hold("q1", "dedup_app", before)  # type: ignore[arg-type]
    listener.onQueryTerminated(SimpleNamespace(id="q1"))
    # the same query (its checkpoint kept) restarted against the promoted replica
    listener.hold("q1", "dedup_app", after)  # type: ignore[arg-type]
    listener.onQueryTerminated(SimpleNamespace(id="q1"))
    assert after.released == ["q1"], (before.released, after.released)
