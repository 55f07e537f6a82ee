"""Session-scoped real services for the whole suite.

Redis, Kafka and Spark are started once per pytest session, on free loopback
ports, and only when a test asks for them. ``REDIS_URL`` and
``KAFKA_BOOTSTRAP`` reuse services that are already running instead. The
services die with pytest even when it is killed (PR_SET_PDEATHSIG), and are
stopped in fixture teardown after failures and Ctrl-C.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dedup.local.kafka_cluster import KafkaCluster
from dedup.local.services import KafkaBroker, RedisServer
from tests.jvm import C1_ONLY, driver_options, spark_class_archive_in_background, warm_up
from tests.order import longest_files_first, recorded_seconds

# Every JVM of the suite on C1 alone, and every driver's reading its classes from the
# checkout's class-data archive once there is one (why: tests/jvm.py). spark-submit
# reads SPARK_SUBMIT_OPTS for a driver's JVM (JDK_JAVA_OPTIONS would print a note on
# every child's stderr, which tests read); KafkaBroker adds KAFKA_OPTS to a broker's.
# A value set outside is kept as it is; xdist's workers inherit the controller's
# environment, and with it the mark that the value is the suite's own.
_OWN_DRIVER_OPTIONS = ("SPARK_SUBMIT_OPTS" not in os.environ
                       or os.environ.get("DEDUP_TESTS_DRIVER_OPTIONS") == "own")
if _OWN_DRIVER_OPTIONS:
    os.environ["DEDUP_TESTS_DRIVER_OPTIONS"] = "own"
    os.environ["SPARK_SUBMIT_OPTS"] = driver_options()
os.environ.setdefault("KAFKA_OPTS", C1_ONLY)


def pytest_configure(config: pytest.Config) -> None:
    """Keep the collection order under ``--dist loadfile`` (pytest-xdist would put the
    files with the most tests first): :func:`pytest_collection_modifyitems` orders them."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files whose tests were recorded longest run first (why: ``tests/order.py``);
    after ``-m`` has deselected what the tier leaves out (trylast)."""
    items[:] = longest_files_first(items, recorded_seconds(), lambda item: item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Each test's own seconds (its call, not its fixtures' set-up) as a junit property.

    A junit case's time includes set-up, so the first test of a worker that asks for the
    session's Spark carries its 30 s start: ``benchmarks.test_times`` decides which tests
    are slow by ``call_seconds`` instead (the teardown report carries the property).
    """
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.user_properties.append(("call_seconds", round(report.duration, 2)))


@pytest.fixture(scope="session")
def services_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dedup-test-services-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server(services_dir: Path) -> Iterator[RedisServer | None]:
    """The session's redis-server (AOF on, fsync always), or None when REDIS_URL is set."""
    if os.environ.get("REDIS_URL"):
        yield None
        return
    server = RedisServer(services_dir / "redis", appendonly=True, appendfsync="always")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer | None) -> str:
    return os.environ.get("REDIS_URL") or (redis_server.url if redis_server else "")


@pytest.fixture(scope="session")
def kafka_broker(services_dir: Path) -> Iterator[KafkaBroker | None]:
    """The session's Kafka broker, or None when KAFKA_BOOTSTRAP is set."""
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield None
        return
    broker = KafkaBroker(services_dir / "kafka", heap_mb=384)
    broker.start()
    try:
        yield broker
    finally:
        from sinks.transactions import close_clients

        close_clients()  # sink clients cached in this process, before their broker goes
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: KafkaBroker | None) -> str:
    return os.environ.get("KAFKA_BOOTSTRAP") or (
        kafka_broker.bootstrap_servers if kafka_broker else ""
    )


@pytest.fixture(scope="session")
def kafka_cluster(services_dir: Path) -> Iterator[KafkaCluster]:
    """A three-node KRaft cluster (RF 3, min.insync.replicas 2), started on first use.

    Tests may kill and restart its nodes; each restart waits until every
    partition is in sync again, so the next test finds the cluster whole.
    """
    cluster = KafkaCluster(services_dir / "kafka-cluster", heap_mb=320)
    cluster.start()
    try:
        yield cluster
    finally:
        from sinks.transactions import close_clients

        close_clients()  # sink clients cached in this process, before their brokers go
        cluster.stop()


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """A ``local[2,4]`` SparkSession with the Kafka connector, 4 shuffle partitions, no UI."""
    from dedup.local.spark import local_spark_session

    # local[2,4]: two threads, and a failed task is retried up to 4 times as on
    # a cluster, so task-level crash recovery (replay of decisions and
    # checkpoints) is exercised, not only query restarts.
    # The first session of a checkout makes the drivers' class archive meanwhile; the
    # drivers started after it is there read it (_drivers_read_the_class_archive).
    maker = spark_class_archive_in_background() if _OWN_DRIVER_OPTIONS else None
    session = local_spark_session("dedup-tests", master="local[2,4]", shuffle_partitions=4)
    # The first use of the JVM and the Python workers, here rather than in whichever
    # test comes first (why: tests/jvm.py).
    warm_up(session)
    try:
        yield session
    finally:
        session.stop()
        if maker is not None:
            maker.join(330)  # past its JVM run's own timeout


@pytest.fixture(autouse=True)
def _drivers_read_the_class_archive() -> None:
    """The drivers this test starts read the class archive if it was made since."""
    if _OWN_DRIVER_OPTIONS:
        os.environ["SPARK_SUBMIT_OPTS"] = driver_options()


@pytest.fixture
def app_id(request: pytest.FixtureRequest) -> str:
    """A fresh app id per test, so keys, topics and transactional ids never collide."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:40].strip("-")
    return f"t-{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def tmp_checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")


@pytest.fixture(autouse=True)
def _spark_active_on_this_thread(request: pytest.FixtureRequest) -> None:
    """Each Spark test starts with the session fixture active on its JVM thread.

    Python data sources are looked up in the calling thread's active session,
    which an earlier test (a long pause of this thread) can leave unset.
    """
    if "spark" in request.fixturenames:
        from dedup.spark_session import make_active

        make_active(request.getfixturevalue("spark"))
