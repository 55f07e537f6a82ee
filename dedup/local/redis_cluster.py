"""A local Redis Cluster: primaries with one replica each, on free loopback ports.

Built from the same ``redis-server`` binary as :class:`~dedup.local.services.RedisServer`
(``--cluster-enabled yes``) and joined with ``redis-cli --cluster create``. Every
node has AOF on with ``appendfsync always``. A short ``cluster-node-timeout``
lets a replica take over a killed primary within a few seconds, which is what
the failover tests and the chaos kind need.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from dedup.exceptions import ServiceError
from dedup.local.paths import require_program
from dedup.local.services import RedisServer, free_ports


class LocalRedisCluster:
    """``primaries`` Redis primaries, each with ``replicas`` replicas, on 127.0.0.1.

    Parameters
    ----------
    data_dir:
        One folder per node is made under it (AOF, ``nodes.conf``, log).
    primaries, replicas:
        Cluster shape; ``redis-cli --cluster create`` needs at least 3 primaries.
    node_timeout_ms:
        ``cluster-node-timeout``: how long a primary may be unreachable before
        its replica is promoted.
    die_with_parent:
        Kill the nodes when the starting Python process dies.
    appendfsync:
        Every node's AOF fsync policy (``always`` or ``everysec``).
    password, tls:
        As for :class:`~dedup.local.services.RedisServer`: every node wants the
        password (replicas authenticate to their primary with it) and speaks only
        TLS, on client, replication and cluster-bus links; :attr:`url` is then
        ``rediss+cluster://:<password>@...?ssl_ca_certs=<ca>``.
    """

    def __init__(self, data_dir: Path, primaries: int = 3, replicas: int = 1,
                 node_timeout_ms: int = 2000, die_with_parent: bool = True,
                 appendfsync: str = "always", password: str | None = None,
                 tls: Any = None) -> None:
        if primaries < 3:
            raise ValueError("a Redis Cluster needs at least 3 primaries")
        self.data_dir = Path(data_dir)
        self.primaries = primaries
        self.replicas = replicas
        self.password = password
        self.tls = tls
        args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(node_timeout_ms),
                # a replica that lost its primary long ago still takes over: the
                # tests kill primaries whose replicas are in sync
                "--cluster-replica-validity-factor", "0")
        self._args = args
        # The bus port is given, not left at port + 10000, which may be taken (or
        # above 65535 for a free port that high); all ports distinct.
        count = primaries * (1 + replicas)
        ports = free_ports(2 * count)
        self.nodes = [
            RedisServer(self.data_dir / f"node{i}", port=ports[i], appendonly=True,
                        appendfsync=appendfsync, die_with_parent=die_with_parent,
                        extra_args=(*args, "--cluster-port", str(ports[count + i])),
                        password=password, tls=tls)
            for i in range(count)
        ]

    @property
    def url(self) -> str:
        """``redis+cluster://`` URL naming every node, so a client can start while any
        one of them is down."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        auth = f":{self.password}@" if self.password else ""
        if self.tls is not None:
            return f"rediss+cluster://{auth}{hosts}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis+cluster://{auth}{hosts}/0"

    def node(self, port: int) -> RedisServer:
        """The node listening on ``port``."""
        for node in self.nodes:
            if node.port == port:
                return node
        raise KeyError(f"no node of this cluster listens on port {port}")

    def start(self, timeout: float = 60.0, create_timeout: float = 60.0) -> LocalRedisCluster:
        """Start every node, create the cluster on first use, wait until it serves all
        slots. Safe to call when running.

        A creation that has not finished after ``create_timeout`` (``redis-cli``
        waiting for the nodes to join: seen once under load, with TLS) is given up:
        the nodes are made again, empty, on other ports, and created once more.
        """
        for node in self.nodes:
            self._start_node(node)
        if not self._created():
            try:
                self._create(create_timeout)
            except subprocess.TimeoutExpired:
                self._renew()
                self._create(max(create_timeout, 120.0))
        self.wait_healthy(timeout)
        return self

    def _create(self, timeout: float) -> None:
        """``redis-cli --cluster create`` over every node (``TimeoutExpired`` when it
        hangs: the caller decides)."""
        cli = require_program("redis-cli", "install Debian's package: apt-get install "
                              "redis-tools")
        secured = ["--tls", "--cacert", str(self.tls.ca)] if self.tls is not None else []
        # the password goes in the environment, not on a command line others can read
        env = {**os.environ, "REDISCLI_AUTH": self.password} if self.password else None
        result = subprocess.run(
            [cli, *secured, "--cluster", "create",
             *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=timeout, check=False, env=env,
        )
        if result.returncode != 0:
            raise ServiceError(f"redis-cli --cluster create failed ({result.returncode}): "
                               f"{(result.stderr or result.stdout).strip()[-800:]}")

    def _renew(self) -> None:
        """Every node stopped, its folder emptied, and started again on other free
        ports (before the cluster holds any data)."""
        for node in self.nodes:
            node.stop(timeout=2.0)
        count = len(self.nodes)
        ports = self._other_free_ports(2 * count)
        for i, node in enumerate(self.nodes):
            shutil.rmtree(node.data_dir, ignore_errors=True)
            node.port = ports[i]
            node.extra_args = (*self._args, "--cluster-port", str(ports[count + i]))
        for node in self.nodes:
            self._start_node(node)

    def _start_node(self, node: RedisServer, attempts: int = 3) -> None:
        """Start ``node``; at its first start (no ``nodes.conf`` yet), a port taken
        since it was chosen (a client's outgoing connection may hold any port of the
        ephemeral range) gets the node other free ports, up to ``attempts`` times."""
        first = not (node.data_dir / "nodes.conf").exists()
        for attempt in range(attempts):
            try:
                node.start()
                return
            except ServiceError as exc:
                if not first or "Address already in use" not in str(exc) or \
                        attempt == attempts - 1:
                    raise
            shutil.rmtree(node.data_dir, ignore_errors=True)
            port, bus = self._other_free_ports(2)
            node.port = port
            node.extra_args = (*self._args, "--cluster-port", str(bus))

    def _other_free_ports(self, count: int) -> list[int]:
        """``count`` distinct free ports, none of them a client or bus port a node has now."""
        taken = {n.port for n in self.nodes} | {int(n.extra_args[-1]) for n in self.nodes}
        return [p for p in free_ports(count + len(taken)) if p not in taken][:count]

    def _created(self) -> bool:
        return bool(self._info(self.nodes[0]).get("cluster_known_nodes", "1") != "1")

    def _node_client(self, node: RedisServer) -> Any:
        """A plain client of one node (its own view: role, replicas, cluster state)."""
        import redis

        secured: dict[str, Any] = {"password": self.password}
        if self.tls is not None:
            secured.update(ssl=True, ssl_ca_certs=str(self.tls.ca))
        return redis.Redis(port=node.port, socket_timeout=2, socket_connect_timeout=2,
                           **secured)

    def _info(self, node: RedisServer) -> dict[str, str]:
        client = self._node_client(node)
        try:
            text = client.execute_command("CLUSTER INFO")
        finally:
            client.close()
        if isinstance(text, bytes):
            text = text.decode()
        if isinstance(text, dict):
            return {str(k): str(v) for k, v in text.items()}
        return dict(line.split(":", 1) for line in str(text).splitlines() if ":" in line)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Wait until every running node reports ``cluster_state:ok`` and each primary
        has its replicas attached."""
        deadline = time.monotonic() + timeout
        last = "not checked"
        while time.monotonic() < deadline:
            try:
                states = [self._info(n).get("cluster_state") for n in self.nodes if n.alive()]
                layout = self.layout()
                attached = all(len(r) >= self.replicas for r in layout.values())
                if states and all(s == "ok" for s in states) and attached \
                        and len(layout) == self.primaries:
                    return
                last = f"states {states}, primaries and replicas {layout}"
            except Exception as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.3)
        raise ServiceError(f"Redis Cluster not healthy after {timeout:.0f} s ({last}); see "
                           f"the logs under {self.data_dir}")

    def layout(self) -> dict[int, list[int]]:
        """Primary port -> ports of its connected replicas, as the nodes see it now."""
        out: dict[int, list[int]] = {}
        for node in self.nodes:
            if not node.alive():
                continue
            client = self._node_client(node)
            try:
                info = client.info("replication")
            finally:
                client.close()
            if info.get("role") == "master":
                out[node.port] = sorted(
                    int(v["port"]) for k, v in info.items()
                    if k.startswith("slave") and isinstance(v, dict)
                    and v.get("state") == "online")
        return out

    def primary_port_for_key(self, key: str) -> int:
        """Port of the primary serving ``key``'s slot now."""
        client = self.client()
        try:
            return int(client.get_node_from_key(key).port)
        finally:
            client.close()

    def promoted(self, key: str, old_port: int, timeout: float = 30.0) -> int | None:
        """Wait until a node other than ``old_port`` serves ``key``'s slot (a replica took
        over a killed primary); its port, or None when ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                port = self.primary_port_for_key(key)
            except Exception:  # the cluster is reorganising: ask again
                port = old_port
            if port != old_port:
                return port
            time.sleep(0.3)
        return None

    def client(self) -> Any:
        """A ``redis.cluster.RedisCluster`` client (tests' own reads)."""
        from dedup.config import RedisConfig

        return RedisConfig(self.url, socket_timeout=5, replica_timeout=2).client()

    def stop(self, timeout: float = 10.0) -> None:
        for node in self.nodes:
            node.stop(timeout)

    def __enter__(self) -> LocalRedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
