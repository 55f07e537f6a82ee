"""What the toolkit's session listener costs the driver per streaming event (classic).

Spark calls a Python listener through Py4J for every event of every query of the
session. PySpark turns a progress event into Python objects field by field, one Py4J
round trip each (``QueryProgressEvent.fromJObject``): about 470 round trips, 107 ms
of wall time, 30 ms of the driver's Python CPU and 96 ms of its JVM's per event on
the 2-core machine (2026-12-04), on the listener bus's one thread. The event's JSON
is one round trip (as Spark Connect delivers events, and as PySpark 4.2 reads
``lastProgress``). A query without Python code of its own (``noop`` sink), so that
every Py4J call a callback thread makes is the listener's (its start and
termination events count too).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from py4j.clientserver import ClientServerConnection

from dedup.gc import DecisionGcListener, session_listener

pytestmark = [pytest.mark.integration, pytest.mark.spark]

# Round trips one event may cost: the event's JSON, and room (PySpark's own conversion
# made 466, and 501 with the releases of its Java objects).
MAX_ROUND_TRIPS_PER_EVENT = 4


def test_a_progress_event_costs_the_driver_a_few_round_trips(
        spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import functions as sf

    listener = session_listener(spark)
    main = threading.get_ident()
    calls: Counter[int] = Counter()
    events: list[Any] = []
    send = ClientServerConnection.send_command

    def counted(self: Any, command: str) -> Any:
        # Py4J's finalizer thread releases Java objects made by any thread ("m"
        # commands): not counted, as no call can be told the listener's
        if threading.get_ident() != main and not command.startswith("m\n"):
            calls[threading.get_ident()] += 1
        return send(self, command)

    def seen(self: DecisionGcListener, event: Any) -> None:
        if threading.get_ident() != main:
            events.append(event)
        on_progress(self, event)

    on_progress = DecisionGcListener.onQueryProgress
    monkeypatch.setattr(ClientServerConnection, "send_command", counted)
    monkeypatch.setattr(DecisionGcListener, "onQueryProgress", seen)
    stream = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
              .observe("events-test", sf.count(sf.lit(1)).alias("rows")))
    query = stream.writeStream.format("noop").trigger(processingTime="300 milliseconds").start()
    try:
        deadline = time.monotonic() + 60
        while len(events) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
    assert len(events) >= 4, "the listener heard fewer than 4 progress events in 60 s"
    # what the listener reads of each event, as PySpark's own objects
    last = events[-1].progress
    assert str(last.id) == str(query.id)
    assert last.observedMetrics["events-test"]["rows"] >= 0
    assert listener is session_listener(spark)
    per_event = sum(calls.values()) / len(events)
    assert per_event <= MAX_ROUND_TRIPS_PER_EVENT, (
        f"{per_event:.0f} Py4J round trips per progress event (of {len(events)} events)")
