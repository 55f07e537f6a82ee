"""Fail-points: crash the pipeline at a named place, once, on purpose.

A fail-point is armed by writing a file ``<directory>/<name>.armed`` holding
JSON ``{"action": "raise" | "kill" | "sleep", "seconds": 5, "match": {...}}``.
``match`` restricts it to a context (``{"batch": 2, "partition": 0}``); a key
``<key>_min`` asks for a context whose ``<key>`` is a number at least that
big (``{"rows_min": 1}``: a partition with rows, not an empty one). The
first process that reaches the point with a matching context renames the file
to ``<name>.fired-<pid>`` (atomic, so exactly one process fires it) and then
acts: ``raise`` raises :class:`InjectedFault`, ``kill`` sends SIGKILL to its
own process (a Python worker or the driver), ``sleep`` stalls, ``stop`` sends
SIGSTOP to its own process (someone else must continue it, with :func:`resume`:
the pid is in the fired file, written just before the stop). The fired file
is the proof that the fault hit.

The folder comes from :class:`dedup.config.FailPointConfig` (the sink's option
``fail.points.directory``) or, failing that, from the ``DEDUP_FAIL_POINT_DIR``
environment variable. When neither is set a check costs one attribute test
and one environment lookup.

Names used by the toolkit:

``dedup.after_claim``
    After the catalog claim of a (batch, shard) and before its rows are returned.
``dedup.before_progress_record``
    In the driver's listener (dedup/gc.py), on a progress event of a query that
    deduplicates, before the lease renewal, the committed batch's record and the
    collection of older decisions. Spark delivers a stopped query's last events
    after ``query.stop()`` returned: armed with ``sleep`` it holds them there.
``dedup.batch_clock``
    Where a partition reads the batch time that decides late records and time
    buckets; armed with action ``skew`` it shifts that time by ``seconds`` (see
    :func:`clock_offset`): a skewed clock, at the place a clock is read.
``sink.after_checkpoint``
    After a partition's rows were checkpointed and before producing.
``sink.before_send_offsets``
    After ``begin_transaction``, before the batch marker's
    ``send_offsets_to_transaction`` (a cached producer's first broker call).
``sink.mid_produce``
    After half of a partition's records were produced, inside the transaction.
``sink.before_commit``
    After producing and the marker, before ``commit_transaction``.
``sink.after_commit``
    After the Kafka commit, before the task returns (so before Spark's commit).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dedup.exceptions import InjectedFault

ENV_VAR = "DEDUP_FAIL_POINT_DIR"

KNOWN_FAIL_POINTS = (
    "dedup.after_claim",
    "dedup.before_progress_record",
    "dedup.batch_clock",
    "sink.after_checkpoint",
    "sink.before_send_offsets",
    "sink.mid_produce",
    "sink.before_commit",
    "sink.after_commit",
)


def _folder(directory: str | None) -> str | None:
    """``directory``, else the environment's fail-point folder (``None``: fail-points off)."""
    return directory or os.environ.get(ENV_VAR)


def _matches(match: dict[str, Any], context: dict[str, Any]) -> bool:
    """Whether ``context`` fits ``match``: equal values, or ``<key>_min`` lower bounds."""
    for key, value in match.items():
        if key.endswith("_min") and key not in context:
            try:
                if float(context[key.removesuffix("_min")]) < float(value):
                    return False
            except (KeyError, TypeError, ValueError):
                return False  # no such number in the context: it cannot be big enough
        elif str(context.get(key)) != str(value):
            return False
    return True


def fail_point(name: str, directory: str | None = None,
               before: Callable[[], object] | None = None, **context: Any) -> None:
    """Fire the fail-point ``name`` if it is armed and its match fits ``context``.

    ``before`` runs only when the point fires, before its action (e.g. a flush so
    that a reader sees what was produced up to the fault): an unarmed point
    changes nothing in the caller. Raises :class:`InjectedFault` when it fires
    with action ``raise``.
    """
    folder = _folder(directory)
    if not folder:
        return
    armed = Path(folder) / f"{name}.armed"
    try:
        spec = json.loads(armed.read_text())
    except (FileNotFoundError, ValueError):
        return
    if not _matches(spec.get("match") or {}, context):
        return
    fired = Path(folder) / f"{name}.fired-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.rename(armed, fired)
    except FileNotFoundError:
        return  # another process fired it first
    if before is not None:
        before()
    fired.write_text(json.dumps({**spec, "context": {k: str(v) for k, v in context.items()},
                                 "pid": os.getpid(), "time": time.time()}))
    action = spec.get("action", "raise")
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "sleep":
        time.sleep(float(spec.get("seconds", 5)))
    elif action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    else:
        raise InjectedFault(f"injected fault at fail-point {name} ({context})")


def clock_offset(name: str, directory: str | None = None, **context: Any) -> float:
    """Seconds an armed ``skew`` fail-point ``name`` adds to a clock; 0.0 when none fits.

    Unlike the other actions it stays armed (a skewed clock stays skewed) from
    batch ``from_batch`` of its spec on, for contexts that fit its ``match``;
    each use leaves a ``<name>.fired-...`` record with the context and offset.
    """
    folder = _folder(directory)
    if not folder:
        return 0.0
    try:
        spec = json.loads((Path(folder) / f"{name}.armed").read_text())
    except (FileNotFoundError, ValueError):
        return 0.0
    if spec.get("action") != "skew" or not _matches(spec.get("match") or {}, context):
        return 0.0
    batch = str(context.get("batch", "0"))  # a batch DataFrame's is a token, not a number
    if not batch.isdigit() or int(batch) < int(spec.get("from_batch", 0)):
        return 0.0
    seconds = float(spec.get("seconds", 0.0))
    record = Path(folder) / f"{name}.fired-{os.getpid()}-{time.monotonic_ns()}"
    record.write_text(json.dumps({**spec, "context": {k: str(v) for k, v in context.items()},
                                  "pid": os.getpid(), "time": time.time()}))
    return seconds


def arm(directory: str | Path, name: str, action: str = "raise",
        match: dict[str, Any] | None = None, seconds: float | None = None,
        from_batch: int | None = None) -> Path:
    """Arm ``name`` in ``directory``; returns the armed file. For tests and chaos runs."""
    if name not in KNOWN_FAIL_POINTS:
        raise ValueError(f"unknown fail-point {name!r}; known: {', '.join(KNOWN_FAIL_POINTS)}")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    spec: dict[str, Any] = {"action": action, "match": match or {}}
    if seconds is not None:
        spec["seconds"] = seconds
    if from_batch is not None:
        spec["from_batch"] = from_batch
    path = folder / f"{name}.armed"
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps(spec))
    os.replace(tmp, path)
    return path


def fired(directory: str | Path, name: str | None = None) -> list[dict[str, Any]]:
    """The fail-points that fired in ``directory`` (all, or those named ``name``)."""
    pattern = f"{name}.fired-*" if name else "*.fired-*"
    out = []
    for path in sorted(Path(directory).glob(pattern)):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            data = {}  # the firing process died between rename and write: still a hit
        data["name"] = path.name.split(".fired-")[0]
        out.append(data)
    return out


def _state(pid: int) -> str | None:
    """The state letter of process ``pid`` in ``/proc`` (``None``: gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The state follows the last ")": the command name may hold spaces and ")".
    return stat.rsplit(")", 1)[1].split()[0]


def resume(record: dict[str, Any], timeout: float = 10.0) -> bool:
    """Continue the process held by the fired ``stop`` point ``record`` (from :func:`fired`).

    The point writes its record before it stops its own process, so a SIGCONT
    sent as soon as the record shows the pid could come first and leave the
    process stopped for good; this waits up to ``timeout`` seconds for the stop,
    then sends SIGCONT. Returns False when there is nothing to continue (no pid
    in the record: the process died between rename and write; or it is gone or
    a zombie). A process not stopped within ``timeout`` gets the SIGCONT anyway
    (True). Safe to repeat: a SIGCONT to a running process changes nothing.
    Tests and chaos runs only.
    """
    pid = int(record.get("pid") or 0)
    if pid <= 0:
        return False
    deadline = time.monotonic() + timeout
    while (state := _state(pid)) not in ("T", "t", None, "Z", "X"):
        if time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    if state in (None, "Z", "X"):
        return False
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        return False
    return True
