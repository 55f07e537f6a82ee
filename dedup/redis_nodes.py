"""One way to reach a single Redis and a Redis Cluster alike.

A Redis Cluster client routes a keyed command to the primary of its slot, but
sends key-less commands (``WAIT``, ``INFO``, ``CONFIG GET``) to one default
node. Those must reach a chosen node instead: ``WAIT`` the primary that took
the write, on the same connection; the safety checks every node. The helpers
here hand out the per-node ``redis.Redis`` clients the cluster client already
keeps, and a plain client stands for itself.
"""

from __future__ import annotations

import contextlib
from typing import Any

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""URL schemes that select the cluster client, and the scheme redis-py is given."""


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a ``redis.cluster.RedisCluster``."""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def client_for_key(client: Any, key: str) -> Any:
    """The client of the primary that serves ``key`` now (``client`` itself when not a
    cluster). Commands sent through it share one connection pool with that node, so a
    ``WAIT`` after a write in one pipeline covers that write."""
    if not is_cluster(client):
        return client
    return client.get_redis_connection(client.get_node_from_key(key))


def node_clients(client: Any, primaries_only: bool = False) -> list[tuple[str, Any]]:
    """``(name, client)`` of every node (or every primary) the cluster client knows;
    ``[("", client)]`` for a single Redis. A replica is listed too because a failover
    makes it the primary: what is checked of primaries must hold for it."""
    if not is_cluster(client):
        return [("", client)]
    # A long-lived client keeps the layout it last saw: after a failover its primaries
    # may be replicas now. The checks are rare (a start), so ask the cluster again.
    refresh_topology(client)
    out = [(node.name, client.get_redis_connection(node)) for node in client.get_primaries()]
    if primaries_only:
        return out
    # Replicas as each primary lists them: the cluster client learns of a replica
    # from CLUSTER SLOTS, which a node fills from gossip, some time after it attached.
    manager = client.nodes_manager
    for _name, primary in list(out):
        info = primary.info("replication")
        for key, value in info.items():
            if key.startswith("slave") and isinstance(value, dict):
                host, port = str(value["ip"]), int(value["port"])
                out.append((f"{host}:{port}", manager.create_redis_node(
                    host, port, **manager.connection_kwargs)))
    return out


def refresh_topology(client: Any) -> None:
    """Re-read which node serves which slot after a failure seen on a node client (the
    cluster client does this itself only for commands it routes). Never raises: a
    cluster that cannot be read now is found out by the next call."""
    if is_cluster(client):
        with contextlib.suppress(Exception):
            client.nodes_manager.initialize()
