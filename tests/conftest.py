"""Fixtures shared by every test: real size-limited tmpfs mounts, real managers on real files, and pytest wrappers of
the shared harness in mover/testing (a real ZooKeeper, real moverd processes, a real Apache Kafka)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mover.config.broker import BrokerConfig
from mover.log.log_manager import LogManager
from mover.testing.jvm_archive import kafka_jvm_opts as _kafka_jvm_opts
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.kafka_home import SKIP_REASON, kafka_home
from mover.testing.kafka_node import TEST_JVM_OPTS
from mover.testing.moverd import Moverd
from mover.testing.zookeeper import ZooKeeperServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# The files whose tests start real clusters or Spark take longest; scheduled first, so that under pytest-xdist
# (scripts/test.sh: three workers) the short files fill in beside them instead of one long file running alone at the
# end. The order inside a file is kept.
SLOW_FIRST = ("tests/kafka/", "tests/audit/", "tests/system/")
# Seconds the longest files took in a full run (the summary at its end: 2026-12-02 20:50, `pytest -n 3 --dist
# loadgroup` with CI=true, 12:19; test_audit_cluster.py from the two-worker run before it, 13:44, as a Kafka start
# failed it in this one): the files go out longest first, the longest-processing-time rule, so that the last ones
# to start are short and the workers end near each other. A file not listed counts as short. Only the order matters.
LONGEST_FILES_S = {
    "tests/audit/test_pipeline_*": 244,  # test_pipeline.py's, before it was split (SHARED_FIXTURE_GROUPS)
    "tests/audit/test_spark_cluster.py": 209,
    "tests/kafka/reassign/": 169,  # test_reassign.py's, before it was split
    "tests/audit/test_forecast_real.py": 168,
    "tests/kafka/test_balancer_kafka.py": 135,
    "tests/audit/test_balancer_moverd.py": 99,
    "tests/audit/test_forecast_columns.py": 95,
    "tests/kafka/test_log_dirs_cli.py": 89,
    "tests/kafka/test_kip113_system.py": 70,
    "tests/audit/test_forecast_history.py": 59,
    "tests/kafka/test_audit_cluster.py": 48,
    "tests/audit/test_forecast.py": 43,
    "tests/kafka/test_reassign_zookeeper.py": 41,
    "tests/cli/test_progress.py": 40,
    "tests/moves/test_crash.py": 37,
    "tests/audit/test_balancer.py": 31,
}


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist hands the groups out by their number of tests (its --loadscope-reorder, on by default), which put a
    # 12-test file of six minutes after hundreds of quick ones: it is to keep the order set below.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# Files split from one long file whose tests shared one expensive fixture of its module (a Kafka cluster, a fleet
# synthesized on Spark), now package- or session-scoped in the nearest conftest.py: each prefix is one group, as the
# file was, so that one worker runs its files one after the other and starts that fixture once (and no other worker
# starts a Spark session for them); LONGEST_FILES_S counts the group as one.
SHARED_FIXTURE_GROUPS = (
    "tests/audit/test_pipeline_*",  # tests/audit/conftest.py's fleet (session-scoped)
    "tests/kafka/reassign/",  # tests/kafka/reassign/conftest.py's cluster (package-scoped)
)


# First: pytest-xdist's worker reads the xdist_group marks in its own pytest_collection_modifyitems, and pluggy runs
# the plugin registered last first. Ran after it, the marks came too late: every test was a group of its own, a file's
# tests went to both workers, and each worker started the file's module-scoped clusters and its own Spark session.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def path(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    def group(item: pytest.Item) -> str:
        return next((g for g in SHARED_FIXTURE_GROUPS if path(item).startswith(g.rstrip("*"))), path(item))

    def rank(item: pytest.Item) -> int:
        return next((i for i, prefix in enumerate(SLOW_FIRST) if path(item).startswith(prefix)), len(SLOW_FIRST))

    # xdist's loadgroup keeps a group on one worker: a whole file, so its module-scoped clusters start once. The files
    # using Spark are not one group: together they took most of a run (23 min, one worker on them while the other
    # ran out of work), so each worker that runs one starts its own session (the fixture is per worker), two at most.
    items.sort(key=lambda item: (-LONGEST_FILES_S.get(group(item), 0), rank(item)))  # stable: collection order within
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group(item)))


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """mount(name, size) -> a fresh tmpfs of that size (e.g. "8m"), unmounted at teardown: a separate "disk"."""
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        target = tmp_path / name
        target.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(target)], check=True)
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], check=False)


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., BrokerConfig]:
    def make(dirs: list[Path] | None = None, **overrides: object) -> BrokerConfig:
        if dirs is None:
            dirs = [tmp_path / "d1", tmp_path / "d2"]
        props = {"log.dirs": ",".join(str(d) for d in dirs), "log.segment.delete.delay.ms": "100"}
        props.update({k: str(v) for k, v in overrides.items()})
        return BrokerConfig.from_properties(props)

    return make


@pytest.fixture
def manager_of() -> Iterator[Callable[[BrokerConfig], LogManager]]:
    """make(config) -> a started LogManager on real files, shut down at teardown unless the test did."""
    started: list[LogManager] = []

    def make(config: BrokerConfig) -> LogManager:
        m = LogManager(config)
        m.startup()
        started.append(m)
        return m

    yield make
    for m in started:
        if m.housekeeping_alive():  # not shut down by the test itself
            m.shutdown()


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper server per test module (Debian's package, loopback, free port)."""
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture
def moverd(tmp_path: Path) -> Iterator[Callable[..., Moverd]]:
    """start(**options) -> a running moverd (mover.testing.moverd.Moverd options; default base dir tmp_path, or
    `base=` for a second daemon), stopped at teardown however the test ended."""
    started: list[Moverd] = []

    def start(base: Path | None = None, **options: object) -> Moverd:
        d = Moverd(base or tmp_path, **options)  # type: ignore[arg-type]
        started.append(d)
        return d.start()

    yield start
    for d in reversed(started):
        d.__exit__(None, None, None)


@pytest.fixture(scope="session", autouse=True)
def _no_class_data_archive() -> Iterator[None]:
    """mover-audit's JVMs write a class-data archive of ~170 MB to the user's cache at their first start
    (docs/audit.md#performance): not from tests, which write to temp dirs only. The test of the archive turns it on
    for its own commands."""
    import os

    before = os.environ.get("MOVER_AUDIT_CDS")
    os.environ["MOVER_AUDIT_CDS"] = "off"
    yield
    if before is None:
        os.environ.pop("MOVER_AUDIT_CDS", None)
    else:
        os.environ["MOVER_AUDIT_CDS"] = before


@pytest.fixture(scope="session")
def kafka_home_dir() -> Path:
    """The Apache Kafka installation ($KAFKA_HOME, else ../shared/kafka/kafka_2.13-3.7.0); the test skips with one
    line naming both when there is none."""
    home = kafka_home()
    if home is None:
        pytest.skip(SKIP_REASON)
    return home


@pytest.fixture(scope="session")
def kafka_jvm_opts(kafka_home_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """TEST_JVM_OPTS plus the run's class-data archive of a Kafka node (mover/testing/jvm_archive.py), made by the
    first worker that needs it in the run's temp dir, which the workers share (each worker's own is below it)."""
    base = tmp_path_factory.getbasetemp()
    run_dir = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return _kafka_jvm_opts(kafka_home_dir, run_dir / "class-data", TEST_JVM_OPTS)


@pytest.fixture(scope="module")
def kafka_cluster(kafka_home_dir: Path, kafka_jvm_opts: str, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[Callable[..., KafkaCluster]]:
    """start(**options) -> a running real Kafka (mover.testing.kafka_cluster.KafkaCluster options: brokers, log_dirs,
    controller, props, broker_props, listeners, heap, jvm_opts: kafka_jvm_opts unless given), all stopped at the end
    of the module: one cluster per module, shared by its tests, because a KRaft start costs several seconds."""
    started: list[KafkaCluster] = []

    def start(**options: Any) -> KafkaCluster:
        options.setdefault("jvm_opts", kafka_jvm_opts)
        cluster = KafkaCluster(tmp_path_factory.mktemp("kafka"), kafka_home_dir, **options)
        started.append(cluster)
        return cluster.start()

    yield start
    for cluster in reversed(started):
        cluster.close()


@pytest.fixture(scope="module")
def kafka(kafka_cluster: Callable[..., KafkaCluster]) -> KafkaCluster:
    """One real Kafka KRaft node (broker and controller, node id 1) with two log dirs, per test module."""
    return kafka_cluster(brokers=1, log_dirs=2)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One real local Spark (2 cores, 2 shuffle partitions, no UI) per test process (xdist worker), started only when
    a test asks for it: the JVM is the cost. Commands run in-process (mover.audit.cli.main) reuse it and leave it
    running. Its JVM runs C1 only, with the serial collector (mover.testing.spark_cluster.DRIVER_JAVA_OPTS: about
    40% less of its CPU), beside mover-audit's own options."""
    from mover.audit import spark as audit_spark
    from mover.testing.spark_cluster import DRIVER_JAVA_OPTS, DRIVER_OPTS_ENV

    before = os.environ.get(DRIVER_OPTS_ENV)
    # Only for this launch: the commands the tests run as processes inherit the worker's environment.
    os.environ[DRIVER_OPTS_ENV] = f"{before or ''} {DRIVER_JAVA_OPTS}".strip()
    try:
        session = audit_spark.session("local[2]", shuffle_partitions=2, driver_memory="1g", stop_at_exit=False)
    finally:
        if before is None:
            os.environ.pop(DRIVER_OPTS_ENV, None)
        else:
            os.environ[DRIVER_OPTS_ENV] = before
    yield session
    session.stop()


@pytest.fixture
def reassign_cli(capsys: pytest.CaptureFixture[str]) -> Callable[[list[str]], tuple[int, str, str]]:
    """mover-reassign's main() in this process: `reassign_cli(argv)` gives (exit code, stdout, stderr)."""
    from mover.cli import reassign_partitions

    def run(argv: list[str]) -> tuple[int, str, str]:
        try:
            rc = reassign_partitions.main(argv)
        except SystemExit as e:
            rc = int(e.code or 0)
        out, err = capsys.readouterr()
        return rc, out, err

    return run


# Seconds each test file took (setup, tests and teardown, its module-scoped clusters included), summed from the
# reports every worker sends back: printed at the end of a run, so where the suite's time goes is in every CI log.
_FILE_SECONDS: dict[str, float] = {}
SLOWEST_FILES_SHOWN = 15


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    terminalreporter.write_sep("-", f"slowest test files (seconds on their worker; {total:.0f} s in all files)")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:SLOWEST_FILES_SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")
