"""Exhaustive exploration of the protocol model (docs/model.md).

Breadth-first search over every reachable state of a bounded instance, with
state hashing. At every state: the failure-transparency check
(:func:`tests.model.protocol.violations`). After the search: liveness, i.e.
from every reachable state some path of non-failure steps (the protocol and
Spark's or the operator's recovery, a refusal's advice included) settles
(:func:`tests.model.protocol.settled`: every batch committed, the query
stopped, a new query on the app id not refused); with finitely many failures
and fair scheduling every batch's output then becomes visible and the app id
is left usable. ``model_liveness_violations`` counts the states that cannot.

    python -m tests.model.explore [--bound small|full] [--form F] [--mutant NAME]
                                  [--all-mutants] [--json PATH] [--no-reduction]

By default the search applies the model's partial-order reduction
(:func:`tests.model.protocol.ample`, docs/model.md "Reduction"); ``--no-reduction``
(``reduce=False``) expands every enabled step of every state.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.model.protocol import (
    FAILURE_KINDS,
    FORMS,
    MUTANTS,
    Instance,
    State,
    ample,
    canonical,
    canonical_order,
    check,
    complete,
    expected_outputs,
    initial_state,
    settled,
    successors,
    unfinished_batches,
    violations,
)

# Shard of each record ID: a, c in shard 0 (partition 0); b, d in shard 1 (partition 1).
SHARD_OF = (("a", 0), ("b", 1), ("c", 0), ("d", 1))
# Batch 0 repeats a inside the batch; batch 1 repeats b from batch 0 (its partition 1 then
# has nothing to write), and brings c.
INPUT_CI = ((("a", 1), ("b", 2), ("a", 3)),
            (("b", 4), ("c", 5)))
# As above, and batch 1 brings d to partition 1 beside the repeated b.
INPUT_SMALL = ((("a", 1), ("b", 2), ("a", 3)),
               (("b", 4), ("c", 5), ("d", 6)))

_ALL_BUT_ZOMBIE = tuple(k for k in FAILURE_KINDS if k != "zombie")

BOUNDS: dict[str, dict[str, object]] = {
    # The pytest bounds, 2 batches x 2 partitions x 2 shards. ci: one Python worker (the
    # zombies a driver's kill leaves finish before the restarted run's tasks start), up to
    # 2 failures of every kind but a zombie; ci_zombie: 2 workers and 1 zombie.
    "ci": dict(batches=INPUT_CI, workers=1, crashes=2, zombies=0, kinds=_ALL_BUT_ZOMBIE),
    "ci_zombie": dict(batches=INPUT_CI, workers=2, crashes=0, zombies=1, kinds=FAILURE_KINDS),
    # One failure of any kind but a zombie, anywhere: a fail-point, a worker's SIGKILL at any
    # step, the driver, a transaction timeout, a broker restart, a Redis failover, a takeover.
    "small": dict(batches=INPUT_SMALL, workers=2, crashes=1, zombies=0, kinds=_ALL_BUT_ZOMBIE),
    # One zombie plus one failure of any kind.
    "zombie": dict(batches=INPUT_SMALL, workers=2, crashes=1, zombies=1, kinds=FAILURE_KINDS),
    # The bound: up to 2 crashes (a fail-point's raise in a task, a Python
    # worker's SIGKILL at any step, the driver's kill) and 1 zombie.
    "crashes2": dict(batches=INPUT_SMALL, workers=2, crashes=2, zombies=1,
                     kinds=("failpoint", "kill", "driver", "zombie")),
    # Up to 2 failures of any kind and 1 zombie: bounded by --max-seconds on this machine.
    "full": dict(batches=INPUT_SMALL, workers=2, crashes=2, zombies=1, kinds=FAILURE_KINDS),
    # Two shards per partition (a, c in partition 0's shards 0 and 2), the driver's kill and
    # a takeover: a zombie of the old query claims a shard the new owner has not claimed
    # yet (docs/model.md, "Finding: a zombie claims after a takeover").
    "takeover4": dict(batches=((("a", 1), ("c", 2), ("b", 3), ("c", 6)),
                               (("a", 4), ("d", 5))),
                      shard_of=(("a", 0), ("b", 1), ("c", 2), ("d", 3)), shards=4,
                      workers=2, crashes=2, zombies=0, kinds=("driver", "takeover")),
}


def instance(bound: str, form: str, mutant: str = "", **overrides: object) -> Instance:
    spec = {**BOUNDS[bound], **overrides}
    return Instance(name=f"{bound}/{form}" + (f"/{mutant}" if mutant else ""), form=form,
                    batches=spec["batches"],  # type: ignore[arg-type]
                    shard_of=spec.get("shard_of", SHARD_OF),  # type: ignore[arg-type]
                    shards=spec.get("shards", 2),  # type: ignore[arg-type]
                    workers=spec["workers"], crashes=spec["crashes"],  # type: ignore[arg-type]
                    zombies=spec["zombies"], kinds=frozenset(spec["kinds"]),  # type: ignore
                    mutant=mutant, ahead=spec.get("ahead", True))  # type: ignore[arg-type]


@dataclass
class Result:
    inst: Instance
    states: int = 0
    edges: int = 0
    seconds: float = 0.0
    complete_states: int = 0
    settled_states: int = 0
    """Liveness goals reached: complete, the query stopped, no refusal of a new query."""
    liveness_violations: int = 0
    """Reachable states from which no failure-free path reaches a goal (0 expected)."""
    violation: list[str] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    kind: str = ""
    """'' (none), 'safety' or 'liveness'."""
    truncated: bool = False
    reduce: bool = True
    reduced_states: int = 0
    """States where the reduction explored one step instead of all."""
    after: list[str] = field(default_factory=list)
    """Liveness: failure-free steps after the trace's last state, until a state repeats
    (every one of them is as stuck: no path from them settles either)."""

    @property
    def ok(self) -> bool:
        return not self.kind and not self.truncated

    def summary(self) -> str:
        verdict = ("OK" if self.ok else "TRUNCATED" if self.truncated and not self.kind
                   else f"VIOLATION ({self.kind})")
        por = (f", reduction on ({self.reduced_states:,} states reduced)" if self.reduce
               else ", reduction off")
        return (f"{self.inst.name}: {verdict}; {self.states:,} states, {self.edges:,} steps, "
                f"{self.complete_states:,} complete, {self.settled_states:,} settled, "
                f"{self.seconds:.1f} s{por}")

    def report(self) -> str:
        lines = [self.summary()]
        if self.kind:
            lines += ["", f"{self.kind} violation:", *[f"  - {v}" for v in self.violation], "",
                      "trace (from the initial state):"]
            lines += [f"  {n:3d}. {step}" for n, step in enumerate(self.trace, 1)]
            if self.after:
                lines += ["then, failure-free, until a state repeats (workers numbered "
                          "canonically):"]
                lines += [f"  {n:3d}. {step}" for n, step in
                          enumerate(self.after, len(self.trace) + 1)]
        return "\n".join(lines)


def explore(inst: Instance, max_states: int = 6_000_000, max_seconds: float = 600.0,
            liveness: bool = True, reduce: bool = True) -> Result:
    """Search every reachable state of ``inst``; stop at the first safety violation.

    ``reduce``: where :func:`tests.model.protocol.ample` names one step that commutes with
    everything else that can happen before it, expand only that step (partial-order
    reduction), and renumber producer epochs and fences densely
    (:func:`tests.model.protocol.renumber`); the verdicts are those of the full search
    (docs/model.md, "Reduction"). Without it only the workers are renumbered.

    Visited states are kept as 64-bit fingerprints (Python's tuple hash, as TLC keeps
    fingerprints); the frontier holds the states themselves. A trace is rebuilt by
    replaying, from the initial state, the successor chosen at each step.
    """
    started = time.monotonic()
    expected = expected_outputs(inst)
    result = Result(inst, reduce=reduce)
    init = canonical(initial_state(inst), reduce)
    seen: dict[int, int] = {hash(init): 0}
    parent = array("l", [-1])
    choice = array("l", [-1])
    # non-failure edges, for liveness (CSR: starts[i]..starts[i+1] in targets)
    targets = array("l")
    starts = array("l")
    goal = bytearray()
    queue: deque[tuple[int, State]] = deque([(0, init)])
    while queue:
        i, s = queue.popleft()
        starts.append(len(targets))
        goal.append(1 if settled(inst, s) else 0)
        if complete(inst, s):
            result.complete_states += 1
        bad = violations(inst, s, expected)
        if bad:
            result.kind, result.violation = "safety", bad
            result.trace = _trace(inst, parent, choice, i, reduce)
            break
        succ = successors(inst, s)
        pick = ample(inst, s, succ) if reduce else -1
        if pick >= 0:
            result.reduced_states += 1
        for n, (_, kind, nxt) in enumerate(succ):
            if pick >= 0 and n != pick:
                continue
            result.edges += 1
            nxt = canonical(nxt, reduce)
            h = hash(nxt)
            j = seen.get(h)
            if j is None:
                j = len(parent)
                seen[h] = j
                parent.append(i)
                choice.append(n)
                queue.append((j, nxt))
            if kind != "failure":
                targets.append(j)
        if len(parent) > max_states or time.monotonic() - started > max_seconds:
            result.truncated = True
            break
    result.states = len(parent)
    result.settled_states = sum(goal)
    if liveness and not result.kind and not result.truncated:
        starts.append(len(targets))
        dead, result.liveness_violations = _not_live(starts, targets, goal)
        if dead >= 0:
            result.kind = "liveness"
            result.trace = _trace(inst, parent, choice, dead, reduce)
            s = _replay(inst, parent, choice, dead, reduce)
            refused = "".join(f"; a new query on the app id is refused: query {q} left batch "
                              f"{b} unfinished" for q, b in unfinished_batches(s))
            result.violation = [
                "no failure-free path from this state reaches completion (every batch in "
                "Spark's commit log, the query stopped, a new query on the app id not "
                f"refused); Spark committed {max(s.commits)} of {len(inst.batches)} batches"
                f"{refused} ({result.liveness_violations:,} such states)",
                *[f"enabled: {label} [{kind}]" for label, kind, _ in successors(inst, s)][:12],
                f"state: driver {s.drv}, lease {s.lease}, queries {s.queries}, decisions "
                f"{sorted(s.decisions)}, tasks {list(s.tasks)}"]
            result.after = _stuck(inst, s, reduce)
    result.seconds = time.monotonic() - started
    return result


def _stuck(inst: Instance, s: State, reduce: bool, limit: int = 60) -> list[str]:
    """A failure-free continuation of the stuck state ``s``: at each state the first step
    (in successor order) to a state not seen on the way, until none is left (the path runs
    into a cycle or a dead end: e.g. the refusal's advice followed, and refused again)."""
    seen = {hash(canonical(s, reduce))}
    labels: list[str] = []
    while len(labels) < limit:
        for label, kind, nxt in successors(inst, s):
            nxt = canonical(nxt, reduce)
            if kind != "failure" and hash(nxt) not in seen:
                seen.add(hash(nxt))
                labels.append(label)
                s = nxt
                break
        else:
            repeat = [label for label, kind, _ in successors(inst, s) if kind != "failure"]
            labels += [f"{label} (back to a state above)" for label in repeat[:1]]
            break
    return labels


def _path(parent: array, choice: array, index: int) -> list[int]:
    steps = []
    while index > 0:
        steps.append(choice[index])
        index = parent[index]
    return steps[::-1]


def _replay(inst: Instance, parent: array, choice: array, index: int,
            reduce: bool = True) -> State:
    s = canonical(initial_state(inst), reduce)
    for n in _path(parent, choice, index):
        s = canonical(successors(inst, s)[n][2], reduce)
    return s


def _trace(inst: Instance, parent: array, choice: array, index: int,
           reduce: bool = True) -> list[str]:
    """The labels of the path to ``index``, with each worker named as it was first
    named (the search renumbers workers canonically at every state; with ``reduce``
    producer epochs and fences too, so a trace's epochs and fences are their ranks)."""
    s, _ = canonical_order(initial_state(inst), reduce)
    physical = list(range(inst.workers))  # canonical index -> the worker's stable name
    labels = []
    for n in _path(parent, choice, index):
        label, _, nxt = successors(inst, s)[n]
        names = list(physical)
        labels.append(re.sub(r"\bon w(\d+)", lambda m, names=names: f"on w{names[int(m[1])]}",
                             label))
        s, order = canonical_order(nxt, reduce)
        physical = [physical[old] for old in order]
    return labels


def _not_live(starts: array, targets: array, goal: bytearray) -> tuple[int, int]:
    """The first state (in BFS order: a shortest trace) from which no goal is reachable
    along non-failure edges, or -1; and how many such states there are."""
    n = len(goal)
    reverse: list[list[int]] = [[] for _ in range(n)]
    for src in range(n):
        for k in range(starts[src], starts[src + 1]):
            reverse[targets[k]].append(src)
    live = bytearray(goal)
    stack = [i for i in range(n) if goal[i]]
    while stack:
        j = stack.pop()
        for i in reverse[j]:
            if not live[i]:
                live[i] = 1
                stack.append(i)
    dead = n - sum(live)
    return (live.index(0) if dead else -1), dead


@dataclass
class Walk:
    """A concrete trace of the model: each step's label, kind and the state it led to."""

    inst: Instance
    seed: int
    steps: list[tuple[str, str, State]]

    @property
    def labels(self) -> list[str]:
        return [label for label, _, _ in self.steps]

    @property
    def final(self) -> State:
        return self.steps[-1][2] if self.steps else initial_state(self.inst)


def walk(inst: Instance, seed: int, inject: tuple[str, ...] = (), avoid: tuple[str, ...] = (),
         inject_chance: float = 0.3, max_steps: int = 400,
         checked: bool = True) -> Walk | None:
    """A seeded random path of the model from the initial state to a quiet end: every
    batch in Spark's commit log and no task left, zombies included.

    At each state it takes one enabled successor: a failure only when it matches the
    next pattern (regular expression on the label) of ``inject``, with probability
    ``inject_chance`` whenever one is enabled, otherwise a protocol or recovery step
    chosen at random; steps whose label matches ``avoid`` are never taken. Workers keep
    their numbers (no canonical renumbering), so the labels name real threads. Every
    state on the path passes :func:`tests.model.protocol.check` (asserted; not with
    ``checked=False``, for a mutant's trace). Returns
    None when the walk ends elsewhere (stuck, too long, or a failure never injected).
    Deterministic for a given seed. These are the traces the conformance test replays
    against the real implementation (tests/model/replay.py).
    """
    import random

    rng = random.Random(seed)
    expected = expected_outputs(inst)
    s = initial_state(inst)
    pending = list(inject)
    steps: list[tuple[str, str, State]] = []
    while not (complete(inst, s) and not s.tasks and not pending):
        if len(steps) >= max_steps:
            return None
        # the operator's stop of a complete query (the liveness rule's step) is left out:
        # a walk ends at a quiet complete state, where the replay compares the outputs
        succ = [x for x in successors(inst, s) if not any(re.search(a, x[0]) for a in avoid)
                and not x[0].startswith("operator stops query")]
        fails = [x for x in succ if x[1] == "failure" and pending and re.search(pending[0], x[0])]
        moves = [x for x in succ if x[1] != "failure"]
        if fails and (not moves or rng.random() < inject_chance):
            step = rng.choice(fails)
            pending.pop(0)
        elif moves:
            step = rng.choice(moves)
        else:
            return None
        s = step[2]
        if checked:
            bad = check(inst, s, expected)
            assert not bad, (bad, [label for label, _, _ in steps])
        steps.append(step)
    return Walk(inst, seed, steps)


def find_walk(inst: Instance, want: Callable[[list[str]], bool], inject: tuple[str, ...] = (),
              avoid: tuple[str, ...] = (), seeds: range = range(2000),
              inject_chance: float = 0.3) -> Walk:
    """The first walk (by seed) whose labels satisfy ``want``; deterministic."""
    for seed in seeds:
        found = walk(inst, seed, inject, avoid, inject_chance)
        if found is not None and want(found.labels):
            return found
    raise LookupError(f"no walk of {inst.name} with {inject} in {seeds}")


def run_bound(bound: str, forms: tuple[str, ...] = FORMS, mutant: str = "",
              max_seconds: float = 600.0, echo: bool = True, reduce: bool = True,
              max_states: int = 6_000_000) -> list[Result]:
    results = []
    for form in forms:
        res = explore(instance(bound, form, mutant), max_seconds=max_seconds, reduce=reduce,
                      max_states=max_states)
        if echo:
            print(res.report() if res.kind else res.summary(), flush=True)
        results.append(res)
    return results


MUTANT_FORMS: dict[str, tuple[str, ...]] = {
    # the forms where each mutant's branch exists (the sink alone makes no claims)
    "no_fencing": ("two_step", "one_pass", "sink_only"),
    "marker_ignored": ("two_step", "one_pass", "sink_only"),
    "claim_not_idempotent": ("two_step", "one_pass"),
    "stale_bloom_trusted": ("two_step", "one_pass"),
    "checkpoint_after_emit": ("two_step", "one_pass", "sink_only"),
    "lease_not_checked": ("two_step", "one_pass"),
    "decisions_gc_early": ("two_step", "one_pass"),
    "checkpoint_per_attempt": ("two_step", "one_pass", "sink_only"),
    # one pass records a batch before Spark's commit, so only two step loses the record
    "no_record_at_start": ("two_step",),
}


def catch_mutant(bound: str, mutant: str, max_seconds: float = 600.0,
                 reduce: bool = True) -> Result:
    """Explore the mutant's forms until one shows a violation (the counterexample)."""
    last = None
    for form in MUTANT_FORMS[mutant]:
        last = explore(instance(bound, form, mutant), max_seconds=max_seconds, reduce=reduce)
        if last.kind:
            return last
    assert last is not None
    return last


def bound_figures(results: list[Result]) -> dict[str, int]:
    """The summary figures of a bound's explorations: ``model_liveness_violations`` counts
    the reachable states from which no failure-free path settles (docs/model.md,
    "Liveness"), 0 expected."""
    return {"model_states_explored": sum(r.states for r in results),
            "model_violations": sum(1 for r in results if r.kind),
            "model_liveness_violations": sum(r.liveness_violations for r in results)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.model.explore",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--bound", choices=sorted(BOUNDS), default="small")
    parser.add_argument("--form", choices=FORMS, action="append",
                        help="a form to explore (repeatable; default: all)")
    parser.add_argument("--mutant", choices=sorted(MUTANTS),
                        help="explore a deliberately broken variant: expect a counterexample")
    parser.add_argument("--all-mutants", action="store_true",
                        help="check that every mutant is caught")
    parser.add_argument("--mutant-bound", choices=sorted(BOUNDS), default="full",
                        help="the bound mutants are searched in (a search stops at its first "
                             "counterexample; default: full)")
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--max-states", type=int, default=6_000_000)
    parser.add_argument("--no-reduction", dest="reduce", action="store_false",
                        help="expand every enabled step (no partial-order reduction)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    forms = tuple(args.form) if args.form else FORMS
    started = time.monotonic()
    figures: dict[str, object] = {"bound": args.bound, "reduction": args.reduce}
    if args.mutant:
        res = catch_mutant(args.mutant_bound, args.mutant, args.max_seconds, args.reduce)
        print(res.report())
        return 0 if res.kind else 1
    results = run_bound(args.bound, forms, max_seconds=args.max_seconds, reduce=args.reduce,
                        max_states=args.max_states)
    figures.update(bound_figures(results))
    figures["per_form"] = {r.inst.form: {"states": r.states, "steps": r.edges,
                                         "settled_states": r.settled_states,
                                         "liveness_violations": r.liveness_violations,
                                         "seconds": round(r.seconds, 1),
                                         "reduced_states": r.reduced_states,
                                         "violation": r.kind or None,
                                         "truncated": r.truncated} for r in results}
    code = 0 if all(r.ok for r in results) else 1
    if args.all_mutants:
        caught = {}
        for mutant in MUTANTS:
            res = catch_mutant(args.mutant_bound, mutant, args.max_seconds, args.reduce)
            caught[mutant] = {"caught": bool(res.kind), "form": res.inst.form,
                              "kind": res.kind or None, "states": res.states,
                              "seconds": round(res.seconds, 1),
                              "first_problem": res.violation[0] if res.violation else None,
                              "trace_steps": len(res.trace)}
            print(f"mutant {mutant}: {'caught' if res.kind else 'NOT CAUGHT'} "
                  f"({res.summary()})", flush=True)
        figures["mutant_bound"] = args.mutant_bound
        figures["model_mutants"] = len(caught)
        figures["model_mutants_caught"] = sum(1 for c in caught.values() if c["caught"])
        figures["per_mutant"] = caught
        if figures["model_mutants_caught"] != len(caught):
            code = 1
    figures["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps({k: v for k, v in figures.items() if k.startswith("model_")}))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2, sort_keys=True)
            fh.write("\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
