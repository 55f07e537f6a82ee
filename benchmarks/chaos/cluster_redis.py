"""Chaos kind ``redis_primary_kill``: a Redis Cluster primary killed under a held claim.

The pipeline's catalog and checkpoints live on a local Redis Cluster (3 primaries,
1 replica each). One dedup task of batch ``k`` is held right after its claim of a
shard was acknowledged (the claim waited for the replica); the primary serving
that shard's slot is killed with kill -9. Its replica takes over; claims fail
closed until the old primary is back, now as the new primary's replica. The
output must still be exact: the acknowledged claim is on the promoted replica.
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.chaos.faults import held_alive, hold_evidence
from dedup.catalog import state_key

HOLD_S = 3.0
PROMOTION_TIMEOUT_S = 60.0


def kill_primary(run: Any) -> None:
    """The injector of one run (a thread beside the pipeline)."""
    hit = run._wait_sync("dedup.after_claim")
    if hit is None:
        return
    cluster = run.redis
    shard = int(hit.get("context", {}).get("shard", 0))
    key = state_key(run.app_id, shard)
    port = cluster.primary_port_for_key(key)
    node = cluster.node(port)
    pid = node.pid
    run.component_back.clear()
    try:
        alive, started = held_alive(hit), time.time()
        node.kill()
        hold = hold_evidence(hit, started, time.time(), alive)
        run.fault.evidence.update(hold)
        promoted = cluster.promoted(key, port, PROMOTION_TIMEOUT_S) or port
        node.start()  # back, as the promoted node's replica
        cluster.wait_healthy()
    finally:
        run.component_back.set()
    run.fault.evidence.update({"shard": shard, "killed_primary": port, "killed_pid": pid,
                               "promoted": promoted})
    # Hit: the killed process served the held claim's slot, it died while the held
    # task (with rows) was inside its hold, and a replica took the slot over.
    run.fault.confirmed = pid is not None and promoted != port and hold["in_hold"]
    run.fault.detail = (f"kill -9 of Redis Cluster primary :{port} (pid {pid}) serving shard "
                        f"{shard} under a held claim of batch {run.spec.batch}; replica "
                        f":{promoted} promoted")
    run._start_clock()
