"""The one way mover-audit gets its SparkSession: `local[*]` unless `--master` (or spark-submit) says otherwise.

Importing this module does not import pyspark: `mover-audit --help` and the pure planner never start a JVM.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mover.audit.errors import AuditError
from mover.cli.arguments import positive_int

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP_NAME = "mover-audit"
DEFAULT_MASTER = "local[*]"
# A snapshot's aggregates are small (one row per disk); the big shuffles (replicas by broker) want a few partitions per
# core, not Spark's 200 tiny ones.
DEFAULT_SHUFFLE_PARTITIONS = 16
# spark-submit's Python runner hands the driver the gateway of the JVM it started: the session exists already and
# its master comes from spark-submit.
SPARK_SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"
# A standalone master that does not answer costs Spark 3 registration attempts of 20 s each (hard-coded in
# StandaloneAppClient, no setting) before it gives up with "Cannot call methods on a stopped SparkContext"; a TCP
# connect to the master first says what is wrong within this bound.
MASTER_CONNECT_TIMEOUT_S = 5.0

# Spark logs INFO/WARN lines to stderr at start-up (native libraries, default log level); the command line promises
# one line per error, so the driver JVM logs errors only.
_LOG4J2 = """\
# pyspark's driver counts as a shell: Spark announces "Setting default log level" unless the root's level is the one
# configured for its own loggers, so both are set. A failed task raises in Python, where the command line turns it
# into one line; the JVM's copy of it (with stack) is not printed.
rootLogger.level = fatal
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = fatal
logger.sparkproject.name = org.sparkproject
logger.sparkproject.level = fatal
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = fatal
logger.parquet.name = org.apache.parquet
logger.parquet.level = fatal
"""

_created_here: SparkSession | None = None

# Class-data sharing (the JDK's AppCDS): half of what a fresh driver JVM spends before its first job is loading and
# verifying Spark's classes (docs/audit.md#performance). The first command that starts a JVM records the classes it
# loaded into an archive at its exit (-XX:ArchiveClassesAtExit, once per JDK and Spark install); later JVMs map it
# (-XX:SharedArchiveFile). An archive the JVM finds unusable is ignored by the JVM itself, and the JDK's own messages
# about it are off (-Xlog:cds), so a command never fails or prints because of it.
CDS_ENV = "MOVER_AUDIT_CDS"  # "off": no archive used or written
CDS_DIR_ENV = "MOVER_AUDIT_CDS_DIR"  # where archives live (default $XDG_CACHE_HOME/mover-audit or ~/.cache/...)
# The dump at exit writes ~180 MB (seconds; minutes on a machine loaded many times over); a JVM that takes longer
# than this to end is left to itself, and no archive is made this time.
CDS_DUMP_TIMEOUT_S = 600.0
_CDS_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# The driver JVM lives for one command: HotSpot's C2 compiler spent 11-16 s of CPU of `audit --plan --report` at 20M
# replicas (its threads, from /proc), beside 15 s of Spark's task threads on the same 2 cores. A method is given to
# C2 after 4x the invocations, 2x the compile threshold and 3x the loop back-edges of the defaults (5000, 15000,
# 40000); until then C1's code runs it. Measured side by side (docs/audit.md#performance): C2's CPU 11 -> 7.5 s,
# the tasks' unchanged, the command 1.7 s faster. C1 alone (-XX:TieredStopAtLevel=1) made the tasks far slower.
_JIT = "-XX:Tier4InvocationThreshold=20000 -XX:Tier4CompileThreshold=30000 -XX:Tier4BackEdgeThreshold=120000"
# (the JVM's Popen, the archive it writes at exit, where it goes once complete), for stop_if_created_here.
_cds_pending: tuple[object, Path, Path] | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The Spark options every subcommand that runs on Spark shares."""
    group = parser.add_argument_group("Spark")
    group.add_argument("--master", default=None,
                       help=f"Spark master URL (default {DEFAULT_MASTER}, or spark-submit's)")
    group.add_argument("--shuffle-partitions", type=positive_int, default=DEFAULT_SHUFFLE_PARTITIONS,
                       metavar="N", help=f"spark.sql.shuffle.partitions (default {DEFAULT_SHUFFLE_PARTITIONS})")
    group.add_argument("--driver-memory", default="2g", metavar="SIZE",
                       help="driver JVM heap for a local master (default 2g)")



def _log4j_file() -> Path:
    path = Path(tempfile.gettempdir()) / f"mover-audit-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        tmp.replace(path)  # atomic: a concurrent start reads the old or the new file, never half of one
    return path


# Set while session() starts a JVM here, which keeps a core or two busy meanwhile (see starting()).
_starting = threading.Event()


def starting() -> bool:
    """Whether a session is being started in this process now: work that would take a core of its own (the plan's
    helper process) waits until it is up."""
    return _starting.is_set()


def session(master: str | None = None, shuffle_partitions: int = DEFAULT_SHUFFLE_PARTITIONS,
            driver_memory: str = "2g", stop_at_exit: bool = True) -> SparkSession:
    """The running session if there is one (spark-submit, a test's), else a new one. Session-level SQL options are
    applied either way; JVM options only matter for a session started here. A session started here is stopped by
    stop_if_created_here() unless `stop_at_exit` is false (a test session shared by many commands)."""
    global _created_here
    # Executors must run the interpreter that runs us (the venv with pandas/pyarrow), not whatever `python3` is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # pyspark warns at import that pandas 3 is newer than it was tested with; the pins (docs/dependencies.md) are
    # what the tests run, so the warning tells the operator nothing.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    # toPandas' "attempted Arrow optimization ... reached the error below": the error itself is raised anyway.
    warnings.filterwarnings("ignore", message="toPandas attempted Arrow optimization", category=UserWarning)
    from pyspark.logger import PySparkLogger
    from pyspark.sql import SparkSession

    # pyspark logs every analysis error as a JSON record with the JVM's stack trace before raising it; the command
    # line turns the exception into its one line, so these loggers stay silent.
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True

    existing = SparkSession.getActiveSession()
    builder = SparkSession.builder.appName(APP_NAME)
    if existing is None:
        options: dict[str, str] = {"spark.app.name": APP_NAME}
        if master is None and SPARK_SUBMIT_ENV not in os.environ:
            master = DEFAULT_MASTER
        if master is not None:
            options["spark.master"] = master
        if master is not None and master.startswith("local"):
            # A local driver listens on loopback only: nothing outside this host needs to reach it, and a host name
            # that does not resolve would otherwise fail the start.
            options.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                            "spark.driver.memory": driver_memory})
        if master is not None and master.startswith("spark://"):
            check_standalone_master(master)
        options.update({"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
        dump: tuple[Path, Path] | None = None
        if SPARK_SUBMIT_ENV not in os.environ:
            # Only a JVM not yet started takes it; under spark-submit the driver's logging is spark-submit's
            # (--driver-java-options). Executors are not given the file: it is on this host only, and their logs go
            # to their worker's files, not to the operator's terminal.
            java_options = f"-Dlog4j.configurationFile=file:{_log4j_file()}"
            cds, dump = _cds_options(may_write=stop_at_exit)
            options["spark.driver.extraJavaOptions"] = f"{java_options} {_JIT} {cds}".strip()
        for key, value in options.items():
            builder = builder.config(key, value)
    _starting.set()
    try:
        if existing is None and SPARK_SUBMIT_ENV not in os.environ:
            _launch_jvm(options, dump)
        spark = (builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
                 .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                 .config("spark.sql.session.timeZone", "UTC")
                 .getOrCreate())
    finally:
        _starting.clear()
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.sparkContext.setLogLevel("FATAL")
    if existing is None and stop_at_exit and SPARK_SUBMIT_ENV not in os.environ:
        _created_here = spark
    return spark


# What the JVM prints on its own at every start (Spark's launcher adds the Vector API incubator module): not an error
# of ours, and the command line promises one line on stderr per error.
_JVM_NOISE = (b"WARNING: Using incubator modules:",)


def _cds_archive() -> Path | None:
    """Where the archive of this JDK and this Spark install is (the name changes when either does), or None when
    archives are off or the JDK is not found the way Spark's launcher finds it."""
    import hashlib
    import shutil

    if os.environ.get(CDS_ENV, "").lower() in ("off", "0", "false", "no"):
        return None
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None or not Path(java).exists():
        return None
    import pyspark

    home = Path(os.path.realpath(java)).parents[1]
    jars = Path(pyspark.__file__).parent / "jars"
    identity = [os.path.realpath(java), pyspark.__version__, str(jars)]
    for part in (home / "lib" / "modules", home / "lib" / "server" / "libjvm.so"):
        try:
            st = part.stat()
        except OSError:
            continue
        identity.append(f"{part}:{st.st_size}:{st.st_mtime_ns}")
    try:
        identity += sorted(p.name for p in jars.iterdir())
    except OSError:
        pass
    key = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:16]
    root = os.environ.get(CDS_DIR_ENV)
    if root is None:
        root = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mover-audit")
    return Path(root) / f"spark-{pyspark.__version__}-{key}.jsa"


def _class_path_has_a_filled_dir() -> bool:
    """Whether a directory Spark's launcher puts on the driver's class path holds files (its conf dir,
    $SPARK_CONF_DIR or $SPARK_HOME/conf, and $HADOOP_CONF_DIR, $YARN_CONF_DIR). The JDK archives no class path with a
    non-empty directory in it: the dump fails, printing "Error occurred during initialization of VM / Cannot have
    non-empty directory in paths" on stdout, at every command, which -Xlog:cds=off does not silence."""
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home is None:
        import pyspark

        spark_home = str(Path(pyspark.__file__).parent)
    dirs = [os.environ.get("SPARK_CONF_DIR") or str(Path(spark_home) / "conf"),
            os.environ.get("HADOOP_CONF_DIR"), os.environ.get("YARN_CONF_DIR")]
    for d in dirs:
        if d:
            try:
                with os.scandir(d) as entries:
                    if next(entries, None) is not None:
                        return True
            except OSError:
                continue  # missing or unreadable: the launcher adds it, the JDK finds nothing in it
    return False


def _cds_options(may_write: bool) -> tuple[str, tuple[Path, Path] | None]:
    """The JVM options for the archive, and (temporary file, archive) when this JVM is to write it at exit."""
    try:
        archive = _cds_archive()
    except (OSError, RuntimeError):  # no home directory, an unreadable JDK: start as without an archive
        return "", None
    if archive is None or any(c.isspace() for c in str(archive)):  # Spark's launcher splits the options at spaces
        return "", None
    if _class_path_has_a_filled_dir():
        return "", None
    if archive.is_file():
        return f"-XX:SharedArchiveFile={archive} {_CDS_QUIET}", None
    if not may_write:  # nobody would wait for this JVM's exit to put the archive in place
        return "", None
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return "", None
    if not os.access(archive.parent, os.W_OK):
        return "", None
    # Written under a name of its own and renamed once the JVM ended well: a JVM killed while dumping, or two
    # commands dumping at once, never leave a half archive under the name the next JVMs map.
    tmp = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    return f"-XX:ArchiveClassesAtExit={tmp} {_CDS_QUIET}", (tmp, archive)


def _finish_cds() -> None:
    """After stop(): ends this process's JVM (EOF on its stdin is how pyspark's gateway server is told to exit) and
    waits for it to write the archive, then puts the archive in place."""
    global _cds_pending
    if _cds_pending is None:
        return
    proc, tmp, archive = _cds_pending
    _cds_pending = None
    import subprocess

    assert isinstance(proc, subprocess.Popen)
    try:
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        if gateway is not None:
            gateway.shutdown()
            SparkContext._gateway = None
            SparkContext._jvm = None
        if proc.stdin is not None:
            proc.stdin.close()
        code = proc.wait(timeout=CDS_DUMP_TIMEOUT_S)
        if code == 0 and tmp.is_file() and tmp.stat().st_size > 0:
            tmp.replace(archive)
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        tmp.unlink(missing_ok=True)


def _launch_jvm(options: dict[str, str], dump: tuple[Path, Path] | None = None) -> None:
    """Starts the driver JVM (pyspark's own launch, with the options a session would pass it) with its stderr read
    by a thread that passes every line on to ours except the start-up notice. Without this, pyspark starts the same
    JVM writing to our stderr directly."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # a JVM from an earlier session in this process is reused
        return
    read_end, write_end = os.pipe()

    def forward() -> None:
        # Never stop reading while the JVM lives: a full pipe would block its next write to stderr. Started before
        # the JVM, so why a JVM that fails to start failed is passed on too.
        with os.fdopen(read_end, "rb") as stream:
            for line in iter(stream.readline, b""):
                if not line.startswith(_JVM_NOISE):
                    try:
                        os.write(2, line)
                    except OSError:
                        pass

    threading.Thread(target=forward, name="spark-jvm-stderr", daemon=True).start()
    try:
        conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})
    finally:
        os.close(write_end)  # the JVM holds its own copy; ours would keep the reader from ever seeing the end
    SparkContext._ensure_initialized(gateway=gateway)
    if dump is not None and getattr(gateway, "proc", None) is not None:
        global _cds_pending
        _cds_pending = (gateway.proc, *dump)


def check_standalone_master(master: str) -> None:
    """A AuditError unless some master of a `spark://HOST:PORT[,HOST:PORT...]` URL accepts a connection."""
    errors = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        host = host.strip("[]")  # an IPv6 address is written [::1]:7077
        if not host or not port.isdigit():
            raise AuditError(f"Spark master {master}: expected spark://HOST:PORT[,HOST:PORT...]")
        try:
            socket.create_connection((host, int(port)), timeout=MASTER_CONNECT_TIMEOUT_S).close()
            return
        except OSError as e:
            errors.append(f"{address}: {e.strerror or e}")
    raise AuditError(f"Spark master {master}: cannot connect ({'; '.join(errors)})")


def local_master(args: argparse.Namespace) -> bool:
    """The session from_args starts will be local (local, local[N], local[*]): its driver and executors are this
    process's host, so work the driver can do itself on the same cores (LOCAL_SCAN_ROWS, mover/audit/plan/options.py) is
    done there. Under spark-submit without --master, the master is spark-submit's and not known yet: False."""
    master = args.master if args.master is not None else (None if SPARK_SUBMIT_ENV in os.environ else DEFAULT_MASTER)
    return master is not None and master.startswith("local")


def from_args(args: argparse.Namespace, defer: bool = False) -> SparkSession:
    """The command's session. With `defer`, on a local master, it starts when a step first uses it (Deferred): for a
    caller that expects no Spark job (a snapshot the driver reads itself); else now, beside the driver's own reads."""
    if defer and local_master(args):
        # A Deferred stands in for the session: every attribute is the session's, started on first use.
        return cast("SparkSession", Deferred(lambda: session(args.master, args.shuffle_partitions,
                                                             args.driver_memory)))
    return session(args.master, args.shuffle_partitions, args.driver_memory)


class Deferred:
    """A session started on its first use. On a local master, a snapshot the driver reads itself (a vouched layout,
    up to LOCAL_SCAN_ROWS replica rows: mover/audit/plan/options.py) needs no Spark job at all, and the JVM's start
    was then most of a command's CPU (docs/audit.md#performance, issue 38): 12 s of the driver JVM's CPU on the two
    cores the driver's reads and planning need. A step that does need Spark (a layout only Spark reads, the duplicate
    check's suspects among more than DRIVER_ROWS replicas, ...) starts it by using it, as from_args would have.
    pyspark's column functions (functions.col, lit, ...) want a running session but do not start one: a step makes
    its DataFrame (snapshot.Snapshot.frame, session.createDataFrame) before building columns for it."""

    def __init__(self, start: Callable[[], SparkSession]) -> None:
        self._start: Callable[[], SparkSession] | None = start
        self._session: SparkSession | None = None

    @property
    def started(self) -> bool:
        return self._session is not None

    def get(self) -> SparkSession:
        if self._session is None:
            assert self._start is not None
            self._session, self._start = self._start(), None
        return self._session

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and repr probe for these: not a reason to start a JVM
            raise AttributeError(name)
        return getattr(self.get(), name)


def running(session: SparkSession) -> SparkSession:
    """`session` started, when it is a Deferred not yet used: for a step that builds columns (functions.col, lit)
    before it makes its first DataFrame."""
    return session.get() if isinstance(session, Deferred) else session


def is_local(session: SparkSession) -> bool:
    """Whether `session`'s master is local, without starting a Deferred one (made only on a local master)."""
    if isinstance(session, Deferred) and not session.started:
        return True
    return bool(session.sparkContext.master.startswith("local"))


def release() -> None:
    """The command needs Spark no more: the session this process started stops in a thread while the command
    writes and renders what it computed (stopping the context and the JVM's exit took 0.6 s of the main thread);
    stop_if_created_here waits for it. A session someone else owns stays."""
    global _created_here, _stopping
    if _created_here is None:
        return
    stopping, _created_here = _created_here, None

    def stop() -> None:
        stopping.stop()
        _finish_cds()

    _stopping = threading.Thread(target=stop, name="spark-stop")
    _stopping.start()


_stopping: threading.Thread | None = None


def stop_if_created_here() -> None:
    """Stops the session this process started (the CLI at exit), or waits for release's stop to end; a session
    someone else owns stays."""
    global _stopping
    release()
    if _stopping is not None:
        _stopping.join()
        _stopping = None
