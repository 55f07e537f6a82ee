"""A small-step model of the exactly-once protocol (docs/model.md).

One state is the whole world: Spark's driver (offset and commit logs, the
running batch), the tasks (each a program counter over the steps of the real
code), the Python workers' caches (Bloom filters, transactional producers and
the batch markers they remember), Redis (catalog, decisions, checkpoints,
leases, the marker copy) and Kafka (one transaction coordinator per
transactional id with producer epochs, the batch markers, the records a
``read_committed`` reader sees and those a ``read_uncommitted`` reader saw).

:func:`successors` lists every step enabled in a state, each tagged ``step``
(the protocol moving), ``recovery`` (Spark or the operator restarting
something: part of a failure-free continuation) or ``failure`` (a crash, a
zombie, a timeout, a restart, a failover, a takeover: the failure rules).
:func:`violations` is the failure-transparency check of one state.

Every step names the function of the real code it stands for. Each Redis call
is one atomic step (a Lua script or one pipeline), each Kafka call one step
at the coordinator; the program order inside a task is the code's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

FORMS = ("two_step", "one_pass", "sink_only")
"""two_step: ``deduplicate`` then the ``exactly_once_kafka`` data source (the claims run in
the sink's task, as Spark pipelines the operator's UDF into it; the listener records the
committed batch after Spark's commit). one_pass: ``deduplicate_to_kafka`` (claim and write
in one ``mapInArrow`` task; ``commit_progress`` before Spark's commit). sink_only: the sink
alone on input it does not deduplicate."""

CRASH_POINTS: dict[str, str] = {
    # name of the code's fail_point(...) -> where the model fires it (a task's ``fp``)
    "dedup.after_claim": "after each shard's claim (dedup/partition_step.py decide_partition)",
    "sink.after_checkpoint": "after put_if_absent, before write_partition (sinks/writer.py)",
    "sink.before_send_offsets": "after get_producer and the marker check, before "
                                "send_offsets_to_transaction (sinks/transactions.py _attempt)",
    "sink.mid_produce": "after the first half of the records (sinks/transactions.py "
                        "_produce_all)",
    "sink.before_commit": "after producing, before commit_transaction (_attempt)",
    "sink.after_commit": "after the Kafka commit, before the task returns (write_partition); "
                         "also after a skip. An empty partition passes it right after "
                         "sink.after_checkpoint, where the model fires only that one (a crash "
                         "at either leaves the same state)",
}
"""The model's named crash points. A failure ``raise at <name>`` is the fail-point's
``raise`` action (InjectedFault; write_partition's ``except BaseException`` drops the
producer when it fires inside a transaction). A SIGKILL of the task's Python worker at any
step, with its caches, is the failure ``kill``; the driver's kill is ``driver``."""

NOT_MODELLED_FAIL_POINTS: dict[str, str] = {
    "dedup.before_progress_record": "a hold of the driver's listener (action 'sleep'), not a "
                                    "crash: the model's listener step is apart from Spark's "
                                    "commit already, and a driver kill loses it (progress=-1)",
    "dedup.batch_clock": "a clock skew (action 'skew'), not a crash: decisions read the batch's "
                         "time (docs/design.md, invariant 11); the model has no clock, so a skew "
                         "changes nothing in it (late records and time buckets are not modelled)",
}
"""Code fail-points the model deliberately does not fire, each with the reason."""

RAISE_DROPS_PRODUCER = frozenset({"sink.before_send_offsets", "sink.mid_produce",
                                  "sink.before_commit"})
"""Fail-points inside write_partition's try: its ``except BaseException`` drops the producer."""

MUTANTS: dict[str, str] = {
    "no_fencing": "a fresh transactional id per producer: init_transactions fences no older "
                  "writer and aborts none of its transactions (get_producer)",
    "marker_ignored": "the batch marker and its Redis copy are not checked (_attempt)",
    "claim_not_idempotent": "a repeated claim of (query, batch, shard) takes the batch's own IDs "
                            "as seen (_claim_once on REPLAY)",
    "stale_bloom_trusted": "a Bloom filter's negatives are trusted whatever its tag: no lookup "
                           "even when the shard moved on (claim.lua's trust mode)",
    "checkpoint_after_emit": "the sink emits its own computation and checkpoints after it: a "
                             "retry recomputes (write_batches without put_if_absent first)",
    "lease_not_checked": "claims ignore the app id's lease: no fence check in claim.lua, no "
                         "_check_unfinished at a new owner",
    "decisions_gc_early": "a batch's decisions are deleted right after its claim, before Spark "
                          "committed it (dedup/gc.py's rule broken)",
    "checkpoint_per_attempt": "sink checkpoints keyed by task attempt, not (batch, partition)",
    "no_record_at_start": "the query the operator restarts as a refusal advises does not "
                          "record the last batch its checkpoint committed (dedup/cli/pipeline.py "
                          "record_checkpoint_commit left out, as a script of one's own does)",
}

FAILURE_KINDS = ("failpoint", "kill", "driver", "zombie", "txn_timeout", "broker_restart",
                 "redis_failover", "takeover")


@dataclass(frozen=True)
class Instance:
    """A bounded instance: the input, the layout, the form, the failure budget."""

    name: str
    form: str
    batches: tuple[tuple[tuple[str, int], ...], ...]
    """Input rows ``(record id, payload)`` per batch (fixed per batch: Spark's offset log)."""
    shard_of: tuple[tuple[str, int], ...]
    partitions: int = 2
    shards: int = 2
    workers: int = 2
    crashes: int = 2
    """Failures of every kind but ``zombie``, at most this many per execution."""
    zombies: int = 1
    kinds: frozenset[str] = frozenset(FAILURE_KINDS)
    mutant: str = ""
    ahead: bool = True
    """One pass makes a task's new producer in a thread while it decides
    (producer_ahead): its init_transactions may come at any step before get_producer's.
    Off in the conformance replays, which run the task body without it."""
    slots: int = 1
    """Live (non-zombie) tasks the driver runs at once (Spark's cores). Tasks of different
    partitions touch disjoint state (their shards, checkpoints, transactional id, marker)
    and commute, so 1 (Spark local[1]) loses no reachable per-partition state; zombies run
    concurrently with everything whatever this is."""
    _shard: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        assert self.form in FORMS, self.form
        assert not self.mutant or self.mutant in MUTANTS, self.mutant
        self._shard.update(self.shard_of)

    def shard(self, record_id: str) -> int:
        return self._shard[record_id]

    def partition_of_shard(self, shard: int) -> int:
        # dedup/placement.py: shard s lands in partition s mod P
        return shard % self.partitions

    def rows(self, b: int, p: int) -> tuple[tuple[str, int], ...]:
        """The input rows of batch ``b`` in partition ``p`` (the shuffle by placement)."""
        return tuple(r for r in self.batches[b]
                     if self.partition_of_shard(self.shard(r[0])) == p)

    def shards_in(self, b: int, p: int) -> tuple[int, ...]:
        """Shards present in (b, p), in claim order (decide_partition groups by shard)."""
        return tuple(sorted({self.shard(i) for i, _ in self.rows(b, p)}))

    @property
    def dedups(self) -> bool:
        return self.form != "sink_only"


def expected_outputs(inst: Instance) -> tuple[tuple[tuple[tuple[str, int], ...], ...], ...]:
    """The failure-free output of every (batch, partition): for the dedup forms the first
    occurrence of each record ID over all batches in order (dedup/verify.py's reference),
    for the sink alone every row."""
    seen: set[str] = set()
    out = []
    for b in range(len(inst.batches)):
        per_p = []
        for p in range(inst.partitions):
            kept = []
            for rid, payload in inst.rows(b, p):
                if not inst.dedups:
                    kept.append((rid, payload))
                    continue
                # placement puts an ID's every row in one partition, so the order over
                # partitions does not matter for "first occurrence"
                if rid not in seen:
                    seen.add(rid)
                    kept.append((rid, payload))
            per_p.append(tuple(kept))
        out.append(tuple(per_p))
    return tuple(out)


class Task(NamedTuple):
    """One Spark task attempt of (query q, batch b, partition p) on Python worker w."""

    q: int
    b: int
    p: int
    w: int
    pc: str
    zombie: bool
    serial: int
    """Attempt number of (q, b, p) (checkpoint_per_attempt keys by it)."""
    fence: int
    si: int
    """Index of the next shard to claim."""
    kept: tuple[str, ...]
    rows: tuple[tuple[str, int, int], ...] | None
    """The records to write: (id, payload, production token)."""
    redo: bool
    """write_partition's redo_after_fence still available."""
    fp: str
    """The fail-point this task has just reached ('' between them)."""
    ahead: bool = False
    """One pass: a new producer of the partition is being made in a thread
    (sinks/transactions.py producer_ahead) and has not called init_transactions yet."""


class Driver(NamedTuple):
    q: int
    """The streaming query: 0, or 1 after a takeover by a second query on the app id."""
    alive: bool
    phase: str
    """idle | run | progressed (one pass: commit_progress done, Spark's commit not yet)"""
    done: tuple[bool, ...]
    progress: int
    """Two-step: the batch whose progress event the listener has yet to handle (-1: none)."""
    refused: bool
    last: int = -1
    """The batch of the last progress event this driver process's listener handled (two
    step; -1: none): its ``onQueryTerminated`` collects decisions up to it (dedup/gc.py
    ``_last``). A new process (a restart) starts with none."""


class Producer(NamedTuple):
    txn_id: tuple[int, int]
    epoch: int
    known: tuple[int, int] | None
    """``_MARKERS``: the marker (query, next batch) this producer read or committed."""


class State(NamedTuple):
    drv: Driver
    commits: tuple[int, int]
    """Batches in each query's Spark commit log (query 1 starts where query 0 stood)."""
    tasks: tuple[Task, ...]
    filters: tuple[tuple[int, ...], ...]
    """Per worker, per shard: the Bloom filter's tag (the shard version it holds), -1: none."""
    prods: tuple[tuple[Producer | None, ...], ...]
    """Per worker, per partition: the cached transactional producer."""
    journal: tuple[tuple[frozenset[str], ...], ...]
    """Per shard: the IDs each version added (version = length; the catalog is their union)."""
    decisions: frozenset[tuple[int, int, int, tuple[str, ...]]]
    """(query, batch, shard, kept IDs): the dec hash."""
    ckpts: frozenset[tuple[tuple[int, int, int, int], tuple[tuple[str, int, int], ...]]]
    lease: tuple[int, int, int]
    """The app id's lease: (owner query or -1, fence, checked fence)."""
    sfence: tuple[int, ...]
    """Per shard: the highest fence that claimed it (claim.lua's owner fence)."""
    queries: tuple[int, int]
    """dedup:{app}:queries: the last committed batch recorded per query (-1: none)."""
    mcopy: tuple[tuple[int, int], ...]
    """Per partition, per query: the Redis copy of the marker (last committed batch, -1)."""
    txns: tuple[tuple[tuple[int, int], int, tuple | None], ...]
    """Coordinator: (transactional id, producer epoch, open transaction or None); an open
    transaction is (query, batch, partition, records)."""
    markers: tuple[tuple[int, int] | None, ...]
    """Per partition: the committed batch marker (query, batch + 1)."""
    visible: tuple[tuple[str, int, int, int, int], ...]
    """read_committed: (id, payload, batch, partition, token), sorted."""
    kcount: tuple[int, ...]
    """Committed Kafka transactions per (batch, partition) (index b * P + p)."""
    emitted: frozenset[tuple[int, int, int]]
    """read_uncommitted: (batch, partition, token) of every record ever produced."""
    comp: tuple[int, ...]
    """Per (batch, partition): productions computed and used so far (the next token)."""
    serials: tuple[int, ...]
    """Per (query, batch, partition): task attempts launched."""
    nprod: int
    used: tuple[int, int]
    """(crash-like failures, zombies) used."""


def initial_state(inst: Instance) -> State:
    nb, np_ = len(inst.batches), inst.partitions
    return State(
        drv=Driver(0, True, "idle", (False,) * np_, -1, False),
        commits=(0, 0), tasks=(),
        filters=tuple((-1,) * inst.shards for _ in range(inst.workers)),
        prods=tuple((None,) * np_ for _ in range(inst.workers)),
        journal=tuple(() for _ in range(inst.shards)), decisions=frozenset(),
        ckpts=frozenset(), lease=(-1, 0, 0), sfence=(0,) * inst.shards, queries=(-1, -1),
        mcopy=tuple((-1, -1) for _ in range(np_)), txns=(), markers=(None,) * np_,
        visible=(), kcount=(0,) * (nb * np_), emitted=frozenset(), comp=(0,) * (nb * np_),
        serials=(0,) * (2 * nb * np_), nprod=0, used=(0, 0))


Step = tuple[str, str, State]
"""(label, kind: step | recovery | failure, next state)"""


def _set(seq: tuple, index: int, value: object) -> tuple:
    return (*seq[:index], value, *seq[index + 1:])


def _with_task(s: State, old: Task, new: Task | None) -> State:
    tasks = [t for t in s.tasks if t is not old]
    if new is not None:
        tasks.append(new)
    return s._replace(tasks=tuple(sorted(tasks)))


def _txn(s: State, txn_id: tuple[int, int]) -> tuple[int, tuple | None] | None:
    for tid, epoch, open_ in s.txns:
        if tid == txn_id:
            return epoch, open_
    return None


def _put_txn(s: State, txn_id: tuple[int, int], epoch: int, open_: tuple | None) -> State:
    rest = [x for x in s.txns if x[0] != txn_id]
    return s._replace(txns=tuple(sorted([*rest, (txn_id, epoch, open_)])))


def _catalog(s: State, shard: int, version: int | None = None) -> frozenset[str]:
    versions = s.journal[shard] if version is None else s.journal[shard][:version]
    return frozenset().union(*versions) if versions else frozenset()


def _tname(t: Task) -> str:
    return f"task q{t.q} b{t.b} p{t.p} #{t.serial} on w{t.w}{' (zombie)' if t.zombie else ''}"


def _live_query(s: State, q: int) -> bool:
    return s.drv.alive and s.drv.q == q


# --------------------------------------------------------------------------- tasks


def _fail_task(s: State, t: Task, fatal: bool = False) -> State:
    """The task ends with an exception. ``fatal``: one Spark's retries cannot cure (the
    query fails: AppIdInUseError, QueryIdReusedError); a zombie's is ignored."""
    s = _with_task(s, t, None)
    if fatal and not t.zombie and _live_query(s, t.q):
        s = _query_fails(s)
    return s


def _query_fails(s: State) -> State:
    """The streaming query terminates: its lease is released (onQueryTerminated, or
    take_lease's release on refusal), its tasks run on as zombies."""
    s = _terminated(s)
    return s._replace(drv=s.drv._replace(alive=False, phase="idle", progress=-1, refused=True,
                                         last=-1))


def _terminated(s: State) -> State:
    """dedup/gc.py DecisionGcListener.onQueryTerminated in the live driver: collect the
    query's decisions of every batch up to the last one its progress events carried in
    this process (``collect_garbage(q, last + 1)``; none in one pass, whose progress carries
    no metric of the app id), release the app id's lease if the query holds it; its tasks
    run on as zombies."""
    d = s.drv
    decisions = s.decisions
    if d.last >= 0:
        decisions = frozenset(x for x in decisions if not (x[0] == d.q and x[1] <= d.last))
    lease = s.lease
    if lease[0] == d.q:
        lease = (-1, lease[1], lease[2])
    tasks = tuple(sorted(t._replace(zombie=True) for t in s.tasks))
    return s._replace(decisions=decisions, lease=lease, tasks=tasks)


def _drop_producer(s: State, w: int, p: int) -> State:
    """sinks/transactions.py drop_producer: forget the cached producer and its marker."""
    return s._replace(prods=_set(s.prods, w, _set(s.prods[w], p, None)))


def _task_step(inst: Instance, s: State, t: Task) -> list[Step]:
    name = _tname(t)
    t0 = t._replace(fp="")
    s = _with_task(s, t, t0)  # the steps below replace t0 (by identity)
    t = t0
    # producer_ahead's thread may call init_transactions at any step of the task before
    # get_producer (the task's own step still comes first in the list)
    early = ([_step_init(inst, s, t0, name, "producer_ahead, in its thread", t0.pc)]
             if t.ahead and t.pc in ("claim", "ckpt") else [])
    if t.pc == "claim":
        return [_step_claim(inst, s, t0, name), *early]
    if t.pc == "ckpt":
        return [_step_checkpoint(inst, s, t0, name), *early]
    if t.ahead and t.pc == "return":
        # producer_ahead's block ends: its thread is joined before the task returns
        return [_step_init(inst, s, t0, name, "producer_ahead, joined", t0.pc)]
    if t.pc == "producer":
        prod = s.prods[t.w][t.p]
        if prod is None or t.ahead:
            # get_producer (or what is left of producer_ahead's thread, whose producer
            # replaces the cached one)
            return [_step_init(inst, s, t0, name,
                               "producer_ahead, awaited" if t.ahead else "get_producer",
                               "marker")]
        return [_step_marker(inst, s, t0, name, prod)]
    if t.pc == "marker":
        prod = s.prods[t.w][t.p]
        assert prod is not None
        return [_step_marker(inst, s, t0, name, prod)]
    if t.pc in ("send", "produce1", "produce2", "commit"):
        return [_step_txn(inst, s, t0, name)]
    if t.pc == "return":
        # the task returns: its commit message / written row reaches the driver
        s2 = _with_task(s, t, None)
        d = s.drv
        if (not t.zombie and d.alive and d.q == t.q and d.phase == "run"
                and t.b == s.commits[d.q]):
            s2 = s2._replace(drv=d._replace(done=_set(d.done, t.p, True)))
            return [(f"{name}: returns, the driver counts partition {t.p} done", "step", s2)]
        return [(f"{name}: returns (ignored by the driver)", "step", s2)]
    raise AssertionError(t.pc)


def _step_init(inst: Instance, s: State, t: Task, name: str, where: str, pc: str) -> Step:
    """sinks/transactions.py _new_producer: a new producer of the task's partition, cached
    in its worker (replacing the one there); init_transactions bumps the epoch of its
    transactional id (fencing older ones) and aborts its open transaction."""
    if inst.mutant == "no_fencing":
        txn_id, nprod = (t.p, s.nprod + 1), s.nprod + 1
    else:
        txn_id, nprod = (t.p, 0), s.nprod
    cur = _txn(s, txn_id)
    epoch = 0 if cur is None else cur[0] + 1
    s2 = _put_txn(s, txn_id, epoch, None)._replace(nprod=nprod)
    s2 = s2._replace(prods=_set(s2.prods, t.w, _set(s2.prods[t.w], t.p,
                                                    Producer(txn_id, epoch, None))))
    aborted = " (aborts the open transaction)" if cur and cur[1] else ""
    return (f"{name}: init_transactions, epoch {epoch}{aborted} [{where}]", "step",
            _with_task(s2, t, t._replace(pc=pc, ahead=False)))


def _step_lease(inst: Instance, s: State, t: Task, name: str) -> Step:
    """RedisCatalog._fence -> take_lease (lease.lua) and, for a new owner,
    _check_unfinished; release on refusal (dedup/catalog.py)."""
    owner, fence, checked = s.lease
    if owner not in (-1, t.q) and _live_query(s, owner) and inst.mutant != "lease_not_checked":
        return (f"{name}: take_lease -> INUSE by query {owner} (AppIdInUseError)", "step",
                _fail_task(s, t, fatal=True))
    if owner != t.q:
        fence += 1
    lease = (t.q, fence, checked)
    if checked != fence and inst.mutant != "lease_not_checked":
        # RedisCatalog._fence_shards (fence.lua): a new owner raises every shard's fence
        # before its check, so no task of an earlier owner claims a shard it has not
        # claimed yet (the model's takeover4 finding, fixed 2026-11-27).
        s = s._replace(sfence=tuple(max(f, fence) for f in s.sfence))
        unfinished = sorted({(q, b) for q, b, _, _ in s.decisions
                             if q != t.q and b > s.queries[q]})
        if unfinished:
            q, b = unfinished[0]
            s2 = s._replace(lease=(-1, fence, checked))
            return (f"{name}: take_lease fence {fence}; _check_unfinished: query {q} left batch "
                    f"{b} unfinished -> release, AppIdInUseError", "step",
                    _fail_task(s2, t, fatal=True))
        lease = (t.q, fence, fence)
    s2 = s._replace(lease=lease)
    return (f"{name}: take_lease -> fence {fence} [RedisCatalog._fence]", "step",
            _with_task(s2, t, t._replace(pc="claim", fence=fence)))


def _step_claim(inst: Instance, s: State, t: Task, name: str) -> Step:
    """ShardClaimer.claim (dedup/claim.py) -> RedisCatalog.claim -> claim.lua, one shard."""
    shard = inst.shards_in(t.b, t.p)[t.si]
    tag = s.filters[t.w][shard]
    version = len(s.journal[shard])
    if tag < 0:
        # ShardClaimer._rebuild: catalog.snapshot, its own round trip before the claim
        filters = _set(s.filters, t.w, _set(s.filters[t.w], shard, version))
        return (f"{name}: Bloom filter of shard {shard} rebuilt from a snapshot at version "
                f"{version} [ShardClaimer._rebuild]", "step",
                _with_task(s._replace(filters=filters), t, t))
    if t.fence == 0:
        # The task's first catalog claim takes the lease (RedisCatalog._claim_once ->
        # _fence), after the first shard's rebuild: the order of the code, which the
        # conformance replay (tests/model/replay.py) found the model had reversed.
        return _step_lease(inst, s, t, name)
    # the shard's unique candidates (decide_partition drops in-batch repeats, first wins)
    cands: list[str] = []
    for rid, _ in inst.rows(t.b, t.p):
        if inst.shard(rid) == shard and rid not in cands:
            cands.append(rid)
    prev = next((k for q, b, sh, k in s.decisions if (q, b, sh) == (t.q, t.b, shard)), None)
    nxt = t._replace(si=t.si + 1, fp="dedup.after_claim",
                     pc="claim" if t.si + 1 < len(inst.shards_in(t.b, t.p)) else "ckpt")
    if prev is not None:
        # REPLAY: the recorded decision (the filter is not updated on a replay)
        kept = () if inst.mutant == "claim_not_idempotent" else prev
        return (f"{name}: claim shard {shard} -> REPLAY, kept {list(kept)} [claim.lua]", "step",
                _with_task(s, t, nxt._replace(kept=t.kept + kept)))
    if s.sfence[shard] > t.fence and inst.mutant != "lease_not_checked":
        # claim.lua refuses the task's fence; RedisCatalog.claim then takes the lease
        # afresh (the fence a worker cached for the batch may be stale: a takeover that
        # was refused or lapsed raised every shard's fence) and claims again: refused
        # only if another live query holds the lease (fixed 2026-11-27, found by the
        # conformance replay)
        label, kind, s2 = _step_lease(inst, s, t, name)
        return (f"{name}: claim shard {shard} -> INUSE (fence {t.fence} < {s.sfence[shard]}); "
                + label.removeprefix(f"{name}: "), kind, s2)
    sfence = _set(s.sfence, shard, max(s.sfence[shard], t.fence))
    catalog = _catalog(s, shard)
    trust = tag == version or inst.mutant == "stale_bloom_trusted"
    held = _catalog(s, shard, tag)  # a Bloom filter has no false negatives
    keep: list[str] = []
    for rid in cands:
        if trust and rid not in held:
            keep.append(rid)  # trust mode: a current filter's negative is new, no lookup
        elif rid not in catalog:
            keep.append(rid)  # journal / full mode: the catalog decides
    kept = tuple(keep)
    journal = s.journal
    if kept:
        journal = _set(journal, shard, journal[shard] + (frozenset(kept),))
    decisions = s.decisions | {(t.q, t.b, shard, kept)}
    if inst.mutant == "decisions_gc_early":
        decisions = frozenset(d for d in decisions if not (d[0] == t.q and d[1] <= t.b))
    # _update_filter: catch up from the journal plus the kept IDs, retag to the new version
    filters = _set(s.filters, t.w, _set(s.filters[t.w], shard, len(journal[shard])))
    mode = "trust" if tag == version else "lookup"
    s2 = s._replace(sfence=sfence, journal=journal, decisions=decisions, filters=filters)
    return (f"{name}: claim shard {shard} ({mode}, filter v{tag}, shard v{version}) -> kept "
            f"{list(kept)} [claim.lua]", "step",
            _with_task(s2, t, nxt._replace(kept=t.kept + kept)))


def _step_checkpoint(inst: Instance, s: State, t: Task, name: str) -> Step:
    """sinks/writer.py write_batches: keep_rows' output (or every row: the sink alone),
    then CheckpointStore.put_if_absent (sinks/checkpoint.py): the first attempt wins."""
    if inst.dedups:
        rows, seen = [], set()
        for rid, payload in inst.rows(t.b, t.p):
            if rid in t.kept and rid not in seen:
                seen.add(rid)
                rows.append((rid, payload))
    else:
        rows = list(inst.rows(t.b, t.p))
    i = t.b * inst.partitions + t.p
    token = s.comp[i]
    computed = tuple((rid, payload, token) for rid, payload in rows)
    nxt = t._replace(fp="sink.after_checkpoint", pc="producer" if rows else "return")
    if inst.mutant == "checkpoint_after_emit":
        s2 = s._replace(comp=_set(s.comp, i, token + 1))
        return (f"{name}: computes its rows (token {token}), no checkpoint first", "step",
                _with_task(s2, t, nxt._replace(rows=computed)))
    key = (t.q, t.b, t.p, t.serial if inst.mutant == "checkpoint_per_attempt" else 0)
    stored = next((r for k, r in s.ckpts if k == key), None)
    if stored is not None:
        return (f"{name}: put_if_absent lost: replays the checkpoint (token "
                f"{stored[0][2] if stored else '-'})", "step",
                _with_task(s, t, nxt._replace(rows=stored, pc="producer" if stored else "return")))
    s2 = s._replace(ckpts=s.ckpts | {(key, computed)}, comp=_set(s.comp, i, token + 1))
    return (f"{name}: put_if_absent won: checkpoint {[r[0] for r in computed]} (token {token})",
            "step", _with_task(s2, t, nxt._replace(rows=computed)))


def _step_marker(inst: Instance, s: State, t: Task, name: str, prod: Producer) -> Step:
    """sinks/transactions.py _attempt up to begin: the marker (_MARKERS or read_marker,
    read_committed), the skip, _committed_per_redis."""
    known = prod.known
    read = ""
    if known is None:
        pending = any(o is not None and o[2] == t.p for _, _, o in s.txns)
        if pending:
            # a fresh producer waits for pending offsets up to CALL_TIMEOUT_S, then fails
            return (f"{name}: read_marker waits on pending offsets -> TransactionFailedError",
                    "step", _fail_task(s, t))
        marker = s.markers[t.p]
        known = marker if marker is not None else (-1, -1)
        s = s._replace(prods=_set(s.prods, t.w, _set(s.prods[t.w], t.p,
                                                     prod._replace(known=known))))
        read = "read_marker"
    else:
        read = "_MARKERS"
    mq, nb = known
    ignore = inst.mutant == "marker_ignored"
    skip = (t._replace(pc="return", fp="sink.after_commit"))
    if mq == t.q and nb > t.b + 1:
        return (f"{name}: {read} {known}: QueryIdReusedError", "step",
                _fail_task(s, t, fatal=True))
    if mq == t.q and nb == t.b + 1 and not ignore:
        return (f"{name}: {read} says batch {t.b} is in: skip", "step", _with_task(s, t, skip))
    if not ignore and not (mq == t.q and nb == t.b):
        copy = s.mcopy[t.p][t.q]
        if copy > t.b:
            return (f"{name}: marker copy {copy}: QueryIdReusedError", "step",
                    _fail_task(s, t, fatal=True))
        if copy == t.b:
            return (f"{name}: {read} {known}; the Redis marker copy says batch {t.b} is in: "
                    "skip [_committed_per_redis]", "step", _with_task(s, t, skip))
    return (f"{name}: {read} {known}: batch {t.b} not in; begin_transaction", "step",
            _with_task(s, t, t._replace(pc="send", fp="sink.before_send_offsets")))


def _fenced(s: State, t: Task, name: str, what: str) -> Step:
    """write_partition's ``except _Fenced``: drop the producer, redo once, else fail."""
    s2 = _drop_producer(s, t.w, t.p)
    if t.redo:
        return (f"{name}: {what}: fenced -> drop producer, redo the attempt", "step",
                _with_task(s2, t, t._replace(pc="producer", redo=False)))
    return (f"{name}: {what}: fenced twice -> ProducerFencedError", "step", _fail_task(s2, t))


def _step_txn(inst: Instance, s: State, t: Task, name: str) -> Step:
    """send_offsets_to_transaction, _produce_all (two halves), _commit (sinks/transactions.py)."""
    prod = s.prods[t.w][t.p]
    assert prod is not None and t.rows is not None
    cur = _txn(s, prod.txn_id)
    assert cur is not None
    epoch, open_ = cur
    what = {"send": "send_offsets_to_transaction", "produce1": "produce",
            "produce2": "produce (second half)", "commit": "commit_transaction"}[t.pc]
    if epoch > prod.epoch:
        return _fenced(s, t, name, what)
    if t.pc == "send":
        s2 = _put_txn(s, prod.txn_id, epoch, (t.q, t.b, t.p, ()))
        return (f"{name}: {what}: marker {t.b + 1} in the transaction", "step",
                _with_task(s2, t, t._replace(pc="produce1")))
    if open_ is None:
        # the coordinator aborted it (a broker restart): _Abortable -> abort, retry the attempt
        return (f"{name}: {what}: transaction aborted -> abort_transaction, retry", "step",
                _with_task(s, t, t._replace(pc="producer")))
    half = len(t.rows) // 2
    if t.pc in ("produce1", "produce2"):
        part = (t.rows[:half] if half else t.rows) if t.pc == "produce1" else t.rows[half:]
        q, b, p, recs = open_
        s2 = _put_txn(s, prod.txn_id, epoch, (q, b, p, recs + part))
        s2 = s2._replace(emitted=s2.emitted | {(t.b, t.p, r[2]) for r in part})
        if t.pc == "produce1" and half:
            nxt = t._replace(pc="produce2", fp="sink.mid_produce")
        else:
            nxt = t._replace(pc="commit", fp="sink.before_commit")
        return (f"{name}: {what} {[r[0] for r in part]}", "step", _with_task(s2, t, nxt))
    # commit_transaction: records and marker visible together
    q, b, p, recs = open_
    s2 = _put_txn(s, prod.txn_id, epoch, None)
    visible = tuple(sorted(s.visible + tuple((r[0], r[1], b, p, r[2]) for r in recs)))
    i = b * inst.partitions + p
    s2 = s2._replace(visible=visible, markers=_set(s.markers, p, (q, b + 1)),
                     kcount=_set(s.kcount, i, s.kcount[i] + 1),
                     mcopy=_set(s.mcopy, p, _set(s.mcopy[p], q, b)))
    s2 = s2._replace(prods=_set(s2.prods, t.w, _set(s2.prods[t.w], t.p,
                                                    prod._replace(known=(q, b + 1)))))
    return (f"{name}: commit_transaction: {[r[0] for r in recs]} and marker {b + 1} visible "
            "(record_committed in the Redis copy)", "step",
            _with_task(s2, t, t._replace(pc="return", fp="sink.after_commit")))


# --------------------------------------------------------------------------- driver


def _driver_steps(inst: Instance, s: State) -> list[Step]:
    d = s.drv
    out: list[Step] = []
    nbatches = len(inst.batches)
    if not d.alive:
        if d.phase == "stopped":
            # after the query's clean stop, a new query on the app id (a new checkpoint
            # location) is refused by _check_unfinished while some query's decisions of a
            # batch it never recorded as committed remain: the operator does as the refusal
            # says and restarts that query from its checkpoint (the liveness rule,
            # docs/model.md: the goal is a stopped query and no such refusal)
            unfinished = unfinished_batches(s)
            if unfinished:
                q, b = unfinished[0]
                out.append((f"a new query on the app id is refused (AppIdInUseError: query {q} "
                            f"left batch {b} unfinished): operator restarts query {q} from its "
                            "checkpoint (the refusal's advice)" + _record_label(inst, s, q),
                            "recovery", _record_checkpoint_commit(
                                inst, s._replace(drv=Driver(q, True, "idle", d.done, -1, False)),
                                q)))
        elif not d.refused:
            # no record_checkpoint_commit here: the query started again by a script of one's
            # own, or by Spark re-running it, records a lost batch only at its next batch.
            # It covers dedup run's restart too: the state that start's record makes is the
            # one of the listener's record made before the driver died
            out.append(("driver restarts from its checkpoint (offset log, commit log)",
                        "recovery",
                        s._replace(drv=d._replace(alive=True, phase="idle", last=-1))))
        elif d.q == 1:
            out.append(("operator restarts query 0 from its checkpoint (the refusal's advice)"
                        + _record_label(inst, s, 0), "recovery",
                        _record_checkpoint_commit(
                            inst, s._replace(drv=Driver(0, True, "idle", d.done, -1, False)), 0)))
        return out
    c = s.commits[d.q]
    if d.progress >= 0:
        # dedup/gc.py onQueryProgress -> RedisCatalog.commit_progress (the listener, async);
        # the listener remembers the batch for the query's termination (_last)
        out.append((f"listener: commit_progress(q{d.q}, batch {d.progress})", "step",
                    _commit_progress(s, d.q, d.progress)._replace(
                        drv=d._replace(progress=-1, last=d.progress))))
    if d.phase == "idle" and c == nbatches and d.progress < 0:
        # every batch committed and the listener's pending event handled (Spark posts a
        # query's events in order, the termination last): the operator stops the query;
        # the listener's onQueryTerminated collects and releases (dedup/gc.py)
        last = f"collect_garbage(q{d.q}, {d.last + 1}), " if d.last >= 0 else ""
        out.append((f"operator stops query {d.q}: onQueryTerminated: {last}release "
                    "[DecisionGcListener.onQueryTerminated]", "step",
                    _terminated(s)._replace(drv=d._replace(alive=False, phase="stopped",
                                                           last=-1))))
    if d.phase == "idle" and c < nbatches:
        # Spark writes batch c to its offset log (or finds it there) and runs it
        out.append((f"driver runs batch {c} (offset log)", "step",
                    s._replace(drv=d._replace(phase="run",
                                              done=(False,) * inst.partitions))))
    live = sum(1 for t in s.tasks if not t.zombie)
    if d.phase == "run" and live < inst.slots:
        busy = {t.w for t in s.tasks}
        for p in range(inst.partitions):
            if d.done[p] or any(not t.zombie and t.q == d.q and t.b == c and t.p == p
                                for t in s.tasks):
                continue
            i = (d.q * nbatches + c) * inst.partitions + p
            # attempt numbers only matter to the mutant keyed by them: elsewhere they
            # would tell apart states that are the same world
            serial = s.serials[i] if inst.mutant == "checkpoint_per_attempt" else 0
            first = "claim" if inst.dedups and inst.rows(c, p) else "ckpt"
            for w in range(inst.workers):
                if w in busy:
                    continue
                task = Task(d.q, c, p, w, first, False, serial, 0, 0, (), None, True, "")
                prod = s.prods[w][p]
                if (inst.form == "one_pass" and inst.ahead and inst.rows(c, p)
                        and (prod is None or prod.known != (d.q, c))):
                    # producer_ahead: this worker did not commit the partition's last batch
                    task = task._replace(ahead=True)
                s2 = s._replace(tasks=tuple(sorted((*s.tasks, task))))
                if inst.mutant == "checkpoint_per_attempt":
                    s2 = s2._replace(serials=_set(s.serials, i, serial + 1))
                out.append((f"driver launches {_tname(task)}", "step", s2))
    if d.phase == "run" and all(d.done):
        if inst.form == "one_pass":
            # foreachBatch's end: end_batch (checkpoint GC < c), commit_progress(q, c)
            s2 = _gc_checkpoints(s, d.q, c)
            s2 = _commit_progress(s2, d.q, c)
            out.append((f"driver: end_batch and commit_progress(q{d.q}, batch {c})",
                        "step", s2._replace(drv=d._replace(phase="progressed"))))
        else:
            # the data source's commit (checkpoint GC < c), then Spark's commit log
            s2 = _gc_checkpoints(s, d.q, c)
            s2 = s2._replace(commits=_set(s.commits, d.q, c + 1),
                             drv=d._replace(phase="idle",
                                            progress=c if inst.dedups else -1))
            out.append((f"driver: writer commit, Spark commits batch {c}", "step", s2))
    if d.phase == "progressed":
        out.append((f"driver: Spark commits batch {c}", "step",
                    s._replace(commits=_set(s.commits, d.q, c + 1),
                               drv=d._replace(phase="idle"))))
    return out


def _checkpoint_history(s: State, q: int) -> int:
    """The last batch query ``q``'s Spark checkpoint committed, or -1 (none). Query 1
    starts at query 0's position when it takes over, before query 0 can be restarted
    (it is refused at its first claim, before any commit, or runs on), so it committed a
    batch only if it stands beyond query 0."""
    first = s.commits[0] if q == 1 else 0
    return s.commits[q] - 1 if s.commits[q] > first else -1


def _record_checkpoint_commit(inst: Instance, s: State, q: int) -> State:
    """dedup/cli/pipeline.py record_checkpoint_commit, at the start of a query the operator
    restarts as a refusal advises (with ``dedup run``, as the refusal's text says): the last
    batch the checkpoint committed is recorded (commit_progress) when the catalog's record
    is older, as when the listener's event of it was lost with the driver (the CHANGELOG's
    "a committed batch could stay unfinished for good")."""
    last = _checkpoint_history(s, q)
    if not inst.dedups or inst.mutant == "no_record_at_start" or last <= s.queries[q]:
        return s
    return _commit_progress(s, q, last)


def _record_label(inst: Instance, s: State, q: int) -> str:
    last = _checkpoint_history(s, q)
    if not inst.dedups or inst.mutant == "no_record_at_start" or last <= s.queries[q]:
        return ""
    return f"; record_checkpoint_commit: commit_progress(q{q}, batch {last})"


def unfinished_batches(s: State) -> list[tuple[int, int]]:
    """RedisCatalog._check_unfinished as a new query (neither 0 nor 1) sees it: per query
    with decisions of a batch it has not recorded as committed, the highest such batch
    (the one the code's refusal names), sorted."""
    found: dict[int, int] = {}
    for q, b, _, _ in s.decisions:
        if b > s.queries[q]:
            found[q] = max(b, found.get(q, b))
    return sorted(found.items())


def settled(inst: Instance, s: State) -> bool:
    """The liveness goal (docs/model.md): every batch in Spark's commit log, the query
    stopped with its listener's events handled, and a new query on the app id not refused
    (no query's decisions of a batch it did not record as committed)."""
    return complete(inst, s) and s.drv.phase == "stopped" and not unfinished_batches(s)


def _gc_checkpoints(s: State, q: int, before: int) -> State:
    """CheckpointStore.collect_garbage(q, before) (sinks/checkpoint.py)."""
    return s._replace(ckpts=frozenset(x for x in s.ckpts if not (x[0][0] == q
                                                                 and x[0][1] < before)))


def _commit_progress(s: State, q: int, batch: int) -> State:
    """RedisCatalog.commit_progress: record the committed batch, delete older decisions."""
    return s._replace(queries=_set(s.queries, q, batch),
                      decisions=frozenset(x for x in s.decisions
                                          if not (x[0] == q and x[1] < batch)))


# --------------------------------------------------------------------------- failures


def _failure_steps(inst: Instance, s: State) -> list[Step]:
    out: list[Step] = []
    crashes, zombies = s.used
    kinds = inst.kinds
    if crashes < inst.crashes:
        more = s._replace(used=(crashes + 1, zombies))
        for t in s.tasks:
            if "failpoint" in kinds and t.fp:
                s2 = _fail_task(more, t)
                if t.fp in RAISE_DROPS_PRODUCER:
                    s2 = _drop_producer(s2, t.w, t.p)
                out.append((f"FAILURE raise at {t.fp} in {_tname(t)}", "failure", s2))
            if "kill" in kinds:
                # SIGKILL of the Python worker at any step: the task and the caches go
                s2 = _fail_task(more, t)
                s2 = s2._replace(filters=_set(s2.filters, t.w, (-1,) * inst.shards),
                                 prods=_set(s2.prods, t.w, (None,) * inst.partitions))
                out.append((f"FAILURE kill the worker of {_tname(t)} at {t.pc}", "failure", s2))
        d = s.drv
        if "driver" in kinds and d.alive:
            tasks = tuple(sorted(t._replace(zombie=True) for t in s.tasks))
            out.append(("FAILURE kill the driver (its tasks run on as zombies)", "failure",
                        more._replace(drv=d._replace(alive=False, phase="idle", progress=-1,
                                                     last=-1),
                                      tasks=tasks)))
        if "takeover" in kinds and inst.dedups and not d.alive and not d.refused \
                and d.q == 0 and d.phase != "stopped":
            # another query on the app id (a new checkpoint location resuming at the source
            # position of query 0's last commit) once query 0's lease lapsed
            out.append(("FAILURE takeover: query 1 starts on the app id at batch "
                        f"{s.commits[0]} while query 0 is down", "failure",
                        more._replace(drv=Driver(1, True, "idle", d.done, -1, False),
                                      commits=(s.commits[0], s.commits[0]))))
        for tid, epoch, open_ in s.txns:
            if open_ is not None and "txn_timeout" in kinds:
                # the coordinator aborts a transaction open past its timeout, bumping the epoch
                out.append((f"FAILURE transaction timeout of {tid}: aborted, epoch {epoch + 1}",
                            "failure", _put_txn(more, tid, epoch + 1, None)))
        if "broker_restart" in kinds and any(o is not None for _, _, o in s.txns):
            txns = tuple((tid, e, None) for tid, e, _ in s.txns)
            out.append(("FAILURE broker restart: open transactions aborted", "failure",
                        more._replace(txns=txns)))
        if "redis_failover" in kinds and (s.ckpts or any(c != (-1, -1) for c in s.mcopy)):
            # writes no WAIT covered are lost: the sink's checkpoints and marker copy
            # (claims, decisions, leases and query records wait for the replicas)
            # what aborted attempts of a (batch, partition) whose checkpoint is lost
            # produced may differ from what its retry commits: the design accepts it
            # (docs/design.md, "Failure model"); check 4 then exempts that pair
            lost = {(k[1], k[2], -1) for k, _ in s.ckpts}
            emitted = s.emitted | frozenset(lost)
            out.append(("FAILURE Redis failover to a replica without the unWAITed writes "
                        "(checkpoints, marker copy)", "failure",
                        more._replace(ckpts=frozenset(), emitted=emitted,
                                      mcopy=tuple((-1, -1) for _ in s.mcopy))))
    if zombies < inst.zombies and "zombie" in kinds and s.drv.alive:
        for t in s.tasks:
            if not t.zombie and t.q == s.drv.q:
                s2 = _with_task(s, t, t._replace(zombie=True))._replace(
                    used=(crashes, zombies + 1))
                out.append((f"FAILURE the driver gives up on {_tname(t)}: it runs on as a "
                            "zombie", "failure", s2))
    return out


def successors(inst: Instance, s: State) -> list[Step]:
    out = _driver_steps(inst, s)
    for t in s.tasks:
        out += _task_step(inst, s, t)
    out += _failure_steps(inst, s)
    return out


def complete(inst: Instance, s: State) -> bool:
    """Every batch is in Spark's commit log (of the query that runs the app id)."""
    return max(s.commits) == len(inst.batches)


# --------------------------------------------------------------------------- the check


_CHECKED: dict[tuple, list[str]] = {}


def violations(inst: Instance, s: State,
               expected: tuple[tuple[tuple[tuple[str, int], ...], ...], ...]) -> list[str]:
    """See :func:`check` (memoized: the observation repeats across many states)."""
    key = (inst.batches, inst.partitions, s.visible, s.kcount, max(s.commits), s.emitted)
    found = _CHECKED.get(key)
    if found is None:
        if len(_CHECKED) > 200_000:
            _CHECKED.clear()
        found = _CHECKED[key] = check(inst, s, expected)
    return found


def check(inst: Instance, s: State,
          expected: tuple[tuple[tuple[tuple[str, int], ...], ...], ...]) -> list[str]:
    """Failure transparency of one state (docs/model.md, "The invariant").

    With K = the (batch, partition) pairs some committed Kafka transaction carried the
    marker of, and C = the batches in Spark's commit log:
    1. read_committed shows exactly the union over K of the failure-free outputs
       (multisets: no loss, no duplicate, no phantom), each pair committed at most once;
    2. per partition K is a prefix (no batch skipped), and ends at most at batch C;
    3. every batch below C is fully visible (K holds all its partitions with output);
    4. strong productions: every record a read_uncommitted reader saw of a (batch,
       partition) carries the one production that is committed.
    """
    out: list[str] = []
    nb, np_ = len(inst.batches), inst.partitions
    c = max(s.commits)
    k = {(b, p) for b in range(nb) for p in range(np_) if s.kcount[b * np_ + p] > 0}
    for b in range(nb):
        for p in range(np_):
            if s.kcount[b * np_ + p] > 1:
                out.append(f"batch {b} partition {p} committed {s.kcount[b * np_ + p]} times")
    want = Counter(r for b, p in k for r in expected[b][p])
    have = Counter((r[0], r[1]) for r in s.visible)
    for rec in sorted((have - want).elements()):
        kind = "duplicate" if any(r[0] == rec[0] for r in want) else "phantom"
        out.append(f"{kind}: {rec} visible")
    for rec in sorted((want - have).elements()):
        out.append(f"lost: {rec} of a committed batch partition is not visible")
    for b, p in sorted(k):
        if b > c:
            out.append(f"partition {p} committed batch {b} beyond Spark's batch {c}")
        for b0 in range(b):
            if expected[b0][p] and (b0, p) not in k:
                out.append(f"partition {p} committed batch {b} but not batch {b0}: lost")
    for b in range(c):
        for p in range(np_):
            if expected[b][p] and (b, p) not in k:
                out.append(f"Spark committed batch {b} but partition {p}'s output "
                           f"{list(expected[b][p])} is not visible: lost")
    for b in range(nb):
        for p in range(np_):
            tokens = {e[2] for e in s.emitted if (e[0], e[1]) == (b, p)}
            if len(tokens) > 1 and -1 not in tokens:  # -1: a failover lost its checkpoint
                out.append(f"batch {b} partition {p}: productions {sorted(tokens)} emitted "
                           "(read_uncommitted): a retry recomputed instead of replaying")
    return out


def canonical(s: State, numbers: bool = True) -> State:
    """The state with its Python workers renumbered in a canonical order: workers are
    interchangeable, so states that differ only by which worker is which are one; and,
    with ``numbers``, its producer epochs and lease fences renumbered densely
    (:func:`renumber`, part of the explorer's reduction)."""
    return canonical_order(s, numbers)[0]


def renumber(s: State) -> State:
    """Producer epochs (per transactional id) and the app id's fences replaced by their
    rank, 0 kept: the model only compares them (``epoch > prod.epoch``, ``sfence > fence``,
    ``checked != fence``, ``fence == 0``: no lease yet), takes their maximum, and draws a
    new one as the highest plus one (the coordinator's epoch, the lease's fence, which
    are the highest of their kind). An order-preserving renumbering keeping 0 maps every
    step to the same step, so states that differ only in these numbers are one."""
    ranks: dict[tuple[int, int], dict[int, int]] = {}
    for tid, epoch, _ in s.txns:
        vals = {epoch} | {pr.epoch for row in s.prods for pr in row
                          if pr is not None and pr.txn_id == tid}
        if max(vals) + 1 != len(vals) or min(vals) != 0:
            ranks[tid] = {v: r for r, v in enumerate(sorted(vals))}
    if ranks:
        s = s._replace(
            txns=tuple((tid, ranks[tid][e] if tid in ranks else e, o) for tid, e, o in s.txns),
            prods=tuple(tuple(pr if pr is None or pr.txn_id not in ranks
                              else pr._replace(epoch=ranks[pr.txn_id][pr.epoch]) for pr in row)
                        for row in s.prods))
    fences = {0, s.lease[1], s.lease[2], *s.sfence, *(t.fence for t in s.tasks)}
    if max(fences) + 1 != len(fences):
        rank = {v: r for r, v in enumerate(sorted(fences))}
        s = s._replace(lease=(s.lease[0], rank[s.lease[1]], rank[s.lease[2]]),
                       sfence=tuple(rank[f] for f in s.sfence),
                       tasks=tuple(sorted(t._replace(fence=rank[t.fence]) for t in s.tasks)))
    return s


def canonical_order(s: State, numbers: bool = True) -> tuple[State, list[int]]:
    """:func:`canonical` and the order: new worker k is old worker order[k]."""
    if numbers:
        s = renumber(s)
    n = len(s.filters)
    if n < 2:
        return s, list(range(n))
    def key(w: int) -> str:
        own = [t._replace(w=0) for t in s.tasks if t.w == w]
        return repr((s.filters[w], s.prods[w], own))
    order = sorted(range(n), key=key)
    if order == list(range(n)):
        return s, order
    new_of = {old: new for new, old in enumerate(order)}
    return s._replace(filters=tuple(s.filters[w] for w in order),
                      prods=tuple(s.prods[w] for w in order),
                      tasks=tuple(sorted(t._replace(w=new_of[t.w]) for t in s.tasks))), order


# --------------------------------------------------------------------------- reduction


def failures_left(inst: Instance, s: State) -> bool:
    """Whether some failure step can still be enabled in ``s`` or a state after it (the
    budgets only shrink)."""
    crashes, zombies = s.used
    crash_kinds = inst.kinds - {"zombie"}
    return bool((crashes < inst.crashes and crash_kinds)
                or (zombies < inst.zombies and "zombie" in inst.kinds))


_PHASE = {"claim": "claim", "ckpt": "ckpt", "producer": "kafka", "marker": "kafka",
          "send": "kafka", "produce1": "kafka", "produce2": "kafka", "commit": "kafka"}
"""A task's phase by its program counter: the objects a step of the phase touches are its
partition's shards (journal, decisions, shard fences; and, at a lease step, the lease and
every shard's fence), its (batch, partition) checkpoint and production counter, or its
partition's Kafka objects (transactional id, marker, marker copy). A task never goes back
to an earlier phase (a fenced redo and an aborted transaction's retry stay in ``kafka``)."""


def _future(u: Task) -> set[tuple]:
    """The objects task ``u`` may still touch, over all its remaining steps (its lease
    steps apart: :func:`ample` rules them out separately)."""
    phase = _PHASE.get(u.pc, "")
    out: set[tuple] = set()
    if phase == "claim":
        out.add(("claim", u.p))
    if phase in ("claim", "ckpt"):
        out.add(("ckpt", u.b, u.p))
    if phase:
        out.add(("kafka", u.p))
    return out


def ample(inst: Instance, s: State, succ: list[Step]) -> int:
    """Partial-order reduction (docs/model.md, "Reduction"): the index in ``succ`` (that is
    ``successors(inst, s)``) of a step that may be explored alone, or -1 to explore all.

    The step is the next step of the live task T of the running batch, chosen only where
    it commutes with every step that can be taken before it:

    * no failure can happen any more (both budgets spent), so no step kills, raises in,
      zombifies or times out T, nothing makes the query fail but a live task (a zombie's
      refusal is ignored), and T is the only live task (one slot);
    * T is of the driver's current batch, alive, not done: so the driver launches no task
      before T returns and does not commit (its garbage collection waits for T), and its
      listener's ``commit_progress`` deletes decisions of older batches only;
    * the objects the step touches (by T's phase: its partition's shards at a claim, its
      checkpoint at ``ckpt``, its partition's Kafka objects after) are none that another
      task may still touch (:func:`_future`: a zombie past its claims never touches a
      shard again, one past its checkpoint never a checkpoint);
    * the step is no lease step (T's first claim, a refused claim), which reads and writes
      the app id's lease, every shard's fence and every query's decisions; and at a claim
      of T no other task can take a step of the lease before T's: every other task still
      at its claims has one same fence, not 0 (it took the lease) and no shard's fence is
      above it (claims only raise a shard's fence to the claimer's, so none is refused);
    * or, the other case: the step is a zombie's return. It only removes the zombie,
      which the driver ignores, and frees its worker; every other step commutes with it
      (a launch on another worker) or is enabled only by it (a launch on that worker).
    * the step is invisible: it leaves the read_committed records, the committed
      transactions and Spark's commit log as they are and only adds non-negative tokens to
      the records read_uncommitted saw (check 4 is monotone in those), removes no task and
      changes neither the driver nor the lease nor the query records;
    * no task has a producer ahead (one pass, :class:`Task` ``ahead``): its thread's
      ``init_transactions`` is a second step of the task, at any point before
      ``get_producer``, and touches the partition's Kafka objects during its claims;
    * not under the mutants whose branch widens a step's footprint (decisions_gc_early: a
      claim deletes other shards' decisions; no_fencing: init_transactions draws a global
      counter).

    The footprint is checked on the step actually produced (:func:`_local`); a step that
    breaks a condition is explored with all the others.
    """
    if inst.slots != 1 or failures_left(inst, s) or any(t.ahead for t in s.tasks):
        # a task with a producer ahead has two steps (the list below has one per task)
        return -1
    index0 = len(succ) - len(s.tasks)  # no failure steps: the task steps come last
    for k, u in enumerate(s.tasks):
        if u.zombie and u.pc == "return":
            label, kind, s2 = succ[index0 + k]
            assert kind == "step" and label.startswith(_tname(u) + ":"), (label, _tname(u))
            return index0 + k
    d = s.drv
    if not d.alive or d.phase != "run":
        return -1
    live = [k for k, t in enumerate(s.tasks) if not t.zombie]
    if len(live) != 1:
        return -1
    k = live[0]
    t = s.tasks[k]
    phase = _PHASE.get(t.pc, "")
    if t.q != d.q or t.b != s.commits[d.q] or d.done[t.p] or not phase:
        return -1
    if phase == "claim":
        if inst.mutant == "decisions_gc_early":
            return -1
        shard = inst.shards_in(t.b, t.p)[t.si]
        if s.filters[t.w][shard] >= 0 and (t.fence == 0 or s.sfence[shard] > t.fence):
            return -1  # a lease step (the first claim, or a claim refused for its fence)
        claiming = {u.fence for u in s.tasks if u is not t and _PHASE.get(u.pc) == "claim"}
        if claiming and (len(claiming) > 1 or 0 in claiming
                         or max(s.sfence) > min(claiming)):
            return -1  # another task may take a step of the lease first
        mine: tuple = ("claim", t.p)
    elif phase == "ckpt":
        mine = ("ckpt", t.b, t.p)
    else:
        if inst.mutant == "no_fencing":
            return -1
        mine = ("kafka", t.p)
    if any(mine in _future(u) for u in s.tasks if u is not t):
        return -1
    index = index0 + k
    label, kind, s2 = succ[index]
    assert kind == "step" and label.startswith(_tname(t) + ":"), (label, _tname(t))
    return index if _local(inst, s, t, s2, phase) else -1


def _local(inst: Instance, s: State, t: Task, s2: State, phase: str) -> bool:
    """The footprint check of :func:`ample`: ``s2`` differs from ``s`` only in T, T's
    worker's caches and the objects of T's phase (of T's partition), and is invisible."""
    if len(s2.tasks) != len(s.tasks):
        return False
    others = [u for u in s.tasks if u is not t]
    if [u for u in s2.tasks if u.w != t.w] != others:
        return False
    if (s2.drv, s2.commits, s2.lease, s2.queries, s2.visible, s2.kcount, s2.markers,
            s2.mcopy, s2.used, s2.nprod, s2.serials) != (
            s.drv, s.commits, s.lease, s.queries, s.visible, s.kcount, s.markers,
            s.mcopy, s.used, s.nprod, s.serials):
        return False
    new = s2.emitted - s.emitted
    if not s.emitted <= s2.emitted or any(e[2] < 0 or (e[0], e[1]) != (t.b, t.p) for e in new):
        return False
    if any(s2.filters[w] != s.filters[w] or s2.prods[w] != s.prods[w]
           for w in range(len(s.filters)) if w != t.w):
        return False
    own = {sh for sh in range(inst.shards) if inst.partition_of_shard(sh) == t.p}
    shards_same = all(s2.journal[sh] == s.journal[sh] and s2.sfence[sh] == s.sfence[sh]
                      for sh in range(inst.shards) if phase != "claim" or sh not in own)
    decisions = s.decisions ^ s2.decisions
    if not shards_same or any(phase != "claim" or x[2] not in own or x[:2] != (t.q, t.b)
                              for x in decisions):
        return False
    i = t.b * inst.partitions + t.p
    if any(phase != "ckpt" or x[0][1:3] != (t.b, t.p) for x in s.ckpts ^ s2.ckpts):
        return False
    if any(s2.comp[j] != s.comp[j] for j in range(len(s.comp)) if phase != "ckpt" or j != i):
        return False
    return not any(phase != "kafka" or x[0][0] != t.p for x in set(s.txns) ^ set(s2.txns))
