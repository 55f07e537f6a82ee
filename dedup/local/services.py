"""Start, health-check and stop the local services the toolkit runs against.

One manager serves the demo, the CLI, the tests and the benchmarks:

* :class:`RedisServer` runs Debian's ``redis-server`` on a free loopback port
  with its own data folder, AOF on or off;
* :class:`KafkaBroker` runs a single-node Apache Kafka broker in KRaft mode
  from the jars that ``dedup fetch-jars`` fetched (``setup.sh`` runs it), formatted with
  ``kafka.tools.StorageTool`` and started with ``kafka.Kafka``.

Both are ready only when a real client call succeeds (``PING``; an AdminClient
metadata call and ``init_transactions()``). ``stop()`` sends SIGTERM, then
SIGKILL after a timeout. ``kill()`` is the kill -9 that crash tests need, and
``start()`` after it restarts the service on the same port and data folder.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import os
import queue
import shlex
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dedup.exceptions import ServiceError
from dedup.local.paths import kafka_broker_jars, require_program


def redis_server_binary() -> str:
    """Path of ``redis-server``; :class:`MissingToolError` naming the fix if absent."""
    return require_program("redis-server",
                           "install Debian's package: apt-get install redis-server")


def java_binary() -> str:
    """Path of ``java`` (runs the Kafka broker); :class:`MissingToolError` if absent."""
    return require_program("java", "install a JDK 17: apt-get install openjdk-17-jdk-headless")


_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (``free_port()`` twice may return one port
    twice: the first socket is closed before the second binds)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def process_alive(pid: int | None) -> bool:
    """Whether process ``pid`` runs.

    Parameters
    ----------
    pid:
        Process id; ``None``, 0 and negative ids (process groups to ``kill``)
        are never alive.

    Returns
    -------
    bool
        True for a running process, also one this user may not signal (it
        exists); False for a process that is gone or a zombie (exited, not yet
        reaped: it holds no port and no file any more).
    """
    if not pid or pid < 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by another user
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False  # exited and reaped since the kill(0)
    except OSError:
        return True  # no /proc to look at: trust kill(0)
    # The state follows the last ")": the command name may hold spaces and ")".
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

SERVICE_COMMANDS = {"redis": "redis-server", "kafka": "kafka.Kafka"}
"""The word of each service's command line that an old record is checked against
(``redis-server`` retitles itself ``redis-server 127.0.0.1:<port>``; the broker
runs ``java ... kafka.Kafka server.properties``)."""


def process_identity(pid: int | None) -> dict[str, Any] | None:
    """What tells process ``pid`` apart from any later process given the same pid.

    Parameters
    ----------
    pid:
        Process id.

    Returns
    -------
    dict or None
        ``{"boot_id": ..., "start_ticks": ...}``: the kernel's boot id
        (``/proc/sys/kernel/random/boot_id``, new at every boot) and the start
        time of the process in clock ticks after boot (field 22 of
        ``/proc/<pid>/stat``). A pid can be reused, within one boot or after a
        reboot, but not with both the same. ``None`` when the process is gone,
        a zombie, or ``/proc`` cannot be read.
    """
    if not process_alive(pid):
        return None
    try:
        boot_id = _BOOT_ID.read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The fields after the last ")" start at field 3 (the state): field 22 is the 20th.
    fields = stat.rsplit(")", 1)[1].split()
    try:
        return {"boot_id": boot_id, "start_ticks": int(fields[19])}
    except (IndexError, ValueError):
        return None


def _runs_command(pid: int, command: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # redis-server rewrites its argv into one space-separated title: split on both.
    words = cmdline.replace(b"\0", b" ").decode(errors="replace").split()
    return any(word == command or word.rsplit("/", 1)[-1] == command for word in words)


def recorded_process(pid: Any, identity: Any, command: str) -> str:
    """Whether the process a services record names still runs, and is still that process.

    Parameters
    ----------
    pid:
        The recorded pid (anything: a record is read from a file).
    identity:
        The recorded :func:`process_identity`, or ``None`` for a record written
        before identities were recorded.
    command:
        The service's word of :data:`SERVICE_COMMANDS` (``redis-server``, ``kafka.Kafka``).

    Returns
    -------
    str
        ``"running"``: the recorded process runs, it may be signalled;
        ``"gone"``: no process has that pid (or no pid is recorded);
        ``"reused"``: a process runs under that pid but is not the recorded
        one (a reboot or pid wrap-around gave the pid to another process), or
        it cannot be told that it is: it must not be signalled.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or not process_alive(pid):
        return "gone"
    if isinstance(identity, dict):
        return "running" if process_identity(pid) == {
            "boot_id": identity.get("boot_id"), "start_ticks": identity.get("start_ticks"),
        } else "reused"
    # An old record carries the pid alone: it is trusted only while the process
    # runs the service's command. Conservative, not exact: a redis-server or a
    # broker started by hand that reused the pid would still pass for ours.
    return "running" if _runs_command(pid, command) else "reused"


def child_dies_with_parent() -> None:
    """A ``preexec_fn``: the child dies when the thread that forked it ends.

    Runs in the child between fork and exec: if the Python process that started the
    service dies (even by SIGKILL), the kernel kills the service, so a crashed test run
    leaves no redis-server or java behind. The child gets a session of its own.
    """
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setsid()


class _Keeper:
    """One thread that lives as long as the process and forks every service.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not
    the process: a service restarted from a short-lived thread (a chaos
    injector, a timer) would be killed the moment that thread returned.
    """

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[Callable[[], Any], queue.Queue[Any]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="dedup-service-keeper",
                                                daemon=True)
                self._thread.start()
        reply: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._requests.put((fn, reply))
        ok, value = reply.get()
        if not ok:
            raise value
        return value

    def _loop(self) -> None:
        while True:
            fn, reply = self._requests.get()
            try:
                reply.put((True, fn()))
            except BaseException as exc:  # handed back to the caller's thread
                reply.put((False, exc))


_KEEPER = _Keeper()


def _wait_until(check: Callable[[], bool], timeout: float, what: str, proc: _Process) -> None:
    deadline = time.monotonic() + timeout
    last_error = "none"
    while time.monotonic() < deadline:
        if not proc.alive():
            raise ServiceError(
                f"{what} exited with code {proc.returncode()} while starting; "
                f"see {proc.log_path}:\n{proc.tail_log()}"
            )
        try:
            if check():
                return
        except Exception as exc:
            # Keep the text only: the traceback would pin the probe client alive.
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2)
    raise ServiceError(
        f"{what} not ready after {timeout:.0f} s (last error: {last_error}); "
        f"see {proc.log_path}:\n{proc.tail_log()}"
    )


class _Process:
    """A child process with its log file; stopped with SIGTERM then SIGKILL."""

    def __init__(self, argv: list[str], log_path: Path, die_with_parent: bool,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        def spawn() -> subprocess.Popen[bytes]:
            with open(log_path, "ab") as log:
                return subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=cwd,
                    preexec_fn=child_dies_with_parent if die_with_parent else os.setsid,
                )

        self.popen: subprocess.Popen[bytes] = _KEEPER.run(spawn) if die_with_parent else spawn()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def returncode(self) -> int | None:
        return self.popen.poll()

    def tail_log(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def signal(self, sig: int) -> None:
        # Not once the child is reaped (poll() may have done it): its pid is free
        # for any other process then.
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, sig)

    def stop(self, timeout: float, repeat_every: float | None = None) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; with ``repeat_every``, SIGTERM
        again at that interval meanwhile (for a server that drops a SIGTERM it cannot
        act on yet, as Redis does while it writes its first AOF)."""
        if not self.alive():
            return
        step = repeat_every or timeout
        deadline = time.monotonic() + timeout
        while True:
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(max(0.0, min(step, deadline - time.monotonic())))
                return
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    break
        self.signal(signal.SIGKILL)
        self.popen.wait(10)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)


class RedisServer:
    """A ``redis-server`` on 127.0.0.1 with its own data folder.

    Parameters
    ----------
    data_dir:
        Folder for the AOF / RDB files and the log. Reused across restarts.
    port:
        Port to listen on; a free one is chosen when omitted.
    appendonly:
        Turn the append-only file on (durability across a kill -9).
    appendfsync:
        ``always`` (no acknowledged write is lost) or ``everysec`` (up to about
        one second of writes may be lost on a crash of the machine or process).
    die_with_parent:
        Kill the server when the starting Python process dies (tests), or let
        it outlive it (``dedup services up``).
    extra_args:
        Further ``redis-server`` arguments (``--cluster-enabled yes``, ...).
    password:
        ``requirepass``: clients must authenticate (the URL carries it).
    tls:
        Certificates (:func:`dedup.local.tls.make_certificates`): the server then
        speaks only TLS on ``port`` and :attr:`url` is ``rediss://``.

    A replica of this server gets its first copy at once (``repl-diskless-sync-delay``
    0), not after Redis' default wait of 5 s for more replicas to share the transfer.
    """

    def __init__(self, data_dir: Path, port: int | None = None, appendonly: bool = True,
                 appendfsync: str = "always", die_with_parent: bool = True,
                 extra_args: tuple[str, ...] = (), password: str | None = None,
                 tls: Any = None) -> None:
        if appendfsync not in {"always", "everysec", "no"}:
            raise ValueError(f"appendfsync must be always, everysec or no, not {appendfsync!r}")
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.die_with_parent = die_with_parent
        self.extra_args = tuple(extra_args)
        self.password = password
        self.tls = tls
        self._proc: _Process | None = None

    @property
    def url(self) -> str:
        """The client URL: ``rediss://`` with the CA as ``ssl_ca_certs`` under TLS, the
        password in it when one is set (clients redact it: ``dedup.config.redact_url``)."""
        auth = f":{self.password}@" if self.password else ""
        if self.tls is not None:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 20.0) -> RedisServer:
        """Start the server (again) and wait for ``PING``. Safe to call when running."""
        if self._proc and self._proc.alive():
            return self
        binary = redis_server_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        secured: list[str] = []
        if self.password:
            secured += ["--requirepass", self.password, "--masterauth", self.password]
        if self.tls is not None:
            secured += ["--port", "0", "--tls-port", str(self.port),
                        "--tls-cert-file", str(self.tls.cert),
                        "--tls-key-file", str(self.tls.key),
                        "--tls-ca-cert-file", str(self.tls.ca), "--tls-auth-clients", "no",
                        "--tls-replication", "yes", "--tls-cluster", "yes"]
        argv = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.data_dir), "--daemonize", "no", "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync, "--protected-mode", "yes",
            "--logfile", "", "--loglevel", "warning",
            # A replica that attaches syncs at once: Redis waits 5 s by default for
            # more replicas to share one transfer, and a local one attaches alone.
            "--repl-diskless-sync-delay", "0", *secured, *self.extra_args,
        ]
        self._proc = _Process(argv, self.data_dir / "redis.log", self.die_with_parent)
        _wait_until(self.ping, timeout, f"redis-server on port {self.port}", self._proc)
        return self

    def ping(self) -> bool:
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()

    def alive(self) -> bool:
        return bool(self._proc and self._proc.alive())

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (Redis flushes its AOF), then SIGKILL after ``timeout``. Safe to repeat.

        The SIGTERM is sent again every half second: Redis drops one that comes while
        it writes the AOF that ``CONFIG SET appendonly yes`` starts ("Writing initial
        AOF, can't exit") and would otherwise run on until the SIGKILL.
        """
        if self._proc:
            self._proc.stop(timeout, repeat_every=0.5)

    def kill(self) -> None:
        """kill -9, for crash tests. ``start()`` restarts on the same port and data."""
        if self._proc:
            self._proc.kill()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def kafka_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.stdout.ref = STDOUT
"""


class KafkaBroker:
    """A single-node Apache Kafka broker in KRaft mode on 127.0.0.1.

    Transactions work on one node because the transaction state log and the
    offsets topic are created with replication factor 1 and ``min.isr`` 1.
    The heap and the log cleaner's dedupe buffer are kept small so the broker
    fits beside Spark on a 2-core machine.

    Parameters
    ----------
    data_dir:
        Folder for the log segments, the KRaft metadata log and the broker log.
    port, controller_port:
        Listener ports; free ones are chosen when omitted.
    heap_mb:
        JVM heap (``-Xmx``), 256-512 MB is plenty for tests.
    overrides:
        Extra ``server.properties`` entries (for example
        ``{"transaction.max.timeout.ms": "60000"}``). Further JVM options come from the
        environment's ``KAFKA_OPTS``, read at each start, as Kafka's own scripts take
        them.
    node_id, quorum_voters, cluster_id:
        For one node of a multi-node cluster (:class:`~dedup.local.kafka_cluster.KafkaCluster`):
        its ``node.id``, the ``controller.quorum.voters`` all nodes share, and
        the cluster id every node is formatted with. The defaults make a
        single node that is its own quorum, with a fresh cluster id.
    scram, tls:
        A secured broker: ``scram=(user, password)`` and certificates
        (:func:`dedup.local.tls.make_certificates`) make its one client
        listener ``SASL_SSL`` with ``SCRAM-SHA-256`` (the user is created when
        the storage is formatted; brokers talk to each other the same way).
        :attr:`client_config` holds what a client needs besides the address.
    users:
        Further SCRAM-SHA-256 users ``{name: password}`` of a secured broker, created
        when the storage is formatted (a pipeline's own principal, for ACL tests).
    authorizer:
        Turn on ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``
        (needs ``scram``): only the ``scram`` user (also the inter-broker principal)
        and ``User:ANONYMOUS`` are super users. The latter is the principal of the
        PLAINTEXT controller listener, on which the broker half of this node
        registers and heartbeats to the controller half: without it the node never
        becomes ready. That listener is on 127.0.0.1 only; a production cluster
        secures it instead. Every other user gets only the ACLs granted to it.
    """

    def __init__(self, data_dir: Path, port: int | None = None,
                 controller_port: int | None = None, heap_mb: int = 384,
                 overrides: dict[str, str] | None = None, die_with_parent: bool = True,
                 log_level: str = "WARN", node_id: int = 1, quorum_voters: str | None = None,
                 cluster_id: str | None = None, scram: tuple[str, str] | None = None,
                 tls: Any = None, users: dict[str, str] | None = None,
                 authorizer: bool = False) -> None:
        if (scram is None) != (tls is None):
            raise ValueError("a secured broker needs both scram=(user, password) and tls")
        if (users or authorizer) and scram is None:
            raise ValueError("users and authorizer need a secured broker (scram and tls)")
        self.data_dir = Path(data_dir)
        # one call: two free_port() calls may hand out one port twice
        spare = free_ports(2)
        self.port = port or spare[0]
        self.controller_port = controller_port or spare[1]
        self.node_id = node_id
        self.quorum_voters = quorum_voters or f"{node_id}@127.0.0.1:{self.controller_port}"
        self.cluster_id = cluster_id
        self.heap_mb = heap_mb
        self.overrides = dict(overrides or {})
        self.die_with_parent = die_with_parent
        self.log_level = log_level
        self.scram = scram
        self.tls = tls
        self.users = dict(users or {})
        self.authorizer = authorizer
        self._proc: _Process | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def user_config(self, user: str) -> dict[str, str]:
        """:attr:`client_config` of ``user``, one of ``users`` (holds its password)."""
        return {**self.client_config, "sasl.username": user,
                "sasl.password": self.users[user]}

    @property
    def client_config(self) -> dict[str, str]:
        """librdkafka settings a client needs besides ``bootstrap.servers`` (empty for a
        plaintext broker; holds the password for a secured one: never log it)."""
        if self.scram is None:
            return {}
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": self.scram[0], "sasl.password": self.scram[1],
                "ssl.ca.location": str(self.tls.ca)}

    def _secured_properties(self) -> dict[str, str]:
        if self.scram is None:
            return {}
        user, password = self.scram
        keystore = self.data_dir / "keystore.pem"  # key then certificate, as Kafka reads PEM
        keystore.write_text(self.tls.key.read_text() + self.tls.cert.read_text())
        jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{user}" password="{password}";')
        return {
            "listeners": f"SASL_SSL://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{self.port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.tls.ca),
            **({"authorizer.class.name":
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "allow.everyone.if.no.acl.found": "false",
                # see the class docstring: the controller listener's principal
                "super.users": f"User:{user};User:ANONYMOUS"} if self.authorizer else {}),
        }

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def server_properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.quorum_voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.dedupe.buffer.size": str(2 * 1024 * 1024),
            "log.cleaner.threads": "1",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "log.flush.interval.messages": "9223372036854775807",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
        }
        props.update(self._secured_properties())
        props.update(self.overrides)
        return props

    def _java(self, main_class: str, *args: str) -> list[str]:
        java = java_binary()
        jars = kafka_broker_jars()
        return [
            java, f"-Xms{min(self.heap_mb, 256)}m", f"-Xmx{self.heap_mb}m",
            "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            # after ours, so that one of them given again there wins
            *shlex.split(os.environ.get("KAFKA_OPTS", "")),
            "-cp", f"{jars}/*", main_class, *args,
        ]

    def _format_if_needed(self) -> None:
        props_path = self.data_dir / "server.properties"
        props_path.write_text(
            "".join(f"{key}={value}\n" for key, value in self.server_properties().items())
        )
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2.format(level=self.log_level))
        if (self.data_dir / "logs" / "meta.properties").exists():
            return
        result = subprocess.run(
            # "--cluster-id=<id>" in one word: an id may begin with "-", which a
            # separate argument would turn into an unknown option (1 run in 64).
            self._java("kafka.tools.StorageTool", "format",
                       f"--cluster-id={self.cluster_id or kafka_cluster_id()}",
                       "--config", str(props_path), "--ignore-formatted",
                       *self._scram_arguments()),
            capture_output=True, text=True, timeout=120, check=False,
        )
        if result.returncode != 0:
            raise ServiceError(
                f"kafka.tools.StorageTool format failed ({result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )

    def _scram_arguments(self) -> list[str]:
        if self.scram is None:
            return []
        arguments = []
        for name, password in [self.scram, *self.users.items()]:
            arguments += ["--add-scram", f"SCRAM-SHA-256=[name={name},password={password}]"]
        return arguments

    def start(self, timeout: float = 90.0) -> KafkaBroker:
        """Format storage on first use, start ``kafka.Kafka``, wait until ready.

        Ready means an AdminClient metadata call lists this node and
        ``init_transactions()`` of a probe producer succeeded, so
        transactional tests can start at once. Safe to call when already
        running. A node of a cluster can only be ready once a majority of the
        controller quorum runs: start the others with :meth:`launch` first.
        """
        if self._proc and self._proc.alive():
            return self
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> KafkaBroker:
        """Format storage on first use and start ``kafka.Kafka`` without waiting.

        Safe to call when already running (does nothing). A failure to format
        raises :class:`~dedup.exceptions.ServiceError`.
        """
        if self._proc and self._proc.alive():
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._format_if_needed()
        self._proc = _Process(
            self._java("kafka.Kafka", str(self.data_dir / "server.properties")),
            self.data_dir / "broker.log", self.die_with_parent,
        )
        return self

    def wait_ready(self, timeout: float = 90.0, nodes: set[int] | None = None,
                   transactions: bool = True) -> KafkaBroker:
        """Wait until this broker's metadata lists ``nodes`` (default: this node) and,
        with ``transactions``, a probe producer's ``init_transactions()`` succeeds.

        Safe to repeat. Raises :class:`~dedup.exceptions.ServiceError` when the
        process exits or ``timeout`` passes first (with the log's tail).
        """
        if self._proc is None:
            raise ServiceError(f"Kafka broker on port {self.port} was never launched; "
                               "call start() or launch() first")
        wanted = nodes or {self.node_id}
        _wait_until(lambda: self._admin_ready(wanted), timeout,
                    f"Kafka broker on port {self.port}", self._proc)
        if transactions:
            _wait_until(self._transactions_ready, timeout,
                        f"Kafka transactions on port {self.port}", self._proc)
        return self

    def _admin_ready(self, nodes: set[int]) -> bool:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0,
                             **self.client_config})
        metadata = admin.list_topics(timeout=2)
        return nodes <= set(metadata.brokers)

    def _transactions_ready(self) -> bool:
        from confluent_kafka import Producer

        producer = Producer({
            "bootstrap.servers": self.bootstrap_servers,
            "transactional.id": "dedup-local-readiness-probe",
            "transaction.timeout.ms": 10000,
            "log_level": 0,
            **self.client_config,
        })
        try:
            producer.init_transactions(10)
            return True
        finally:
            producer.flush(1)

    def alive(self) -> bool:
        return bool(self._proc and self._proc.alive())

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (controlled shutdown), then SIGKILL after ``timeout``."""
        if self._proc:
            self._proc.stop(timeout)

    def kill(self) -> None:
        """kill -9, for crash tests. ``start()`` restarts on the same ports and data."""
        if self._proc:
            self._proc.kill()

    def signal(self, sig: int) -> None:
        """Send a signal to the broker (SIGSTOP / SIGCONT for stall tests)."""
        if self._proc:
            self._proc.signal(sig)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
