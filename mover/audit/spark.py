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
from pathlib import Path
from typing import TYPE_CHECKING

from mover.audit.errors import AuditError

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The Spark options every subcommand that runs on Spark shares."""
    group = parser.add_argument_group("Spark")
    group.add_argument("--master", default=None,
                       help=f"Spark master URL (default {DEFAULT_MASTER}, or spark-submit's)")
    group.add_argument("--shuffle-partitions", type=positive_int, default=DEFAULT_SHUFFLE_PARTITIONS,
                       metavar="N", help=f"spark.sql.shuffle.partitions (default {DEFAULT_SHUFFLE_PARTITIONS})")
    group.add_argument("--driver-memory", default="2g", metavar="SIZE",
                       help="driver JVM heap for a local master (default 2g)")


def positive_int(text: str) -> int:
    """argparse type of the counts every mover-audit subcommand takes (partitions, brokers, bytes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _log4j_file() -> Path:
    path = Path(tempfile.gettempdir()) / f"mover-audit-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        tmp.replace(path)  # atomic: a concurrent start reads the old or the new file, never half of one
    return path


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
        if SPARK_SUBMIT_ENV not in os.environ:
            # Only a JVM not yet started takes it; under spark-submit the driver's logging is spark-submit's
            # (--driver-java-options). Executors are not given the file: it is on this host only, and their logs go
            # to their worker's files, not to the operator's terminal.
            options["spark.driver.extraJavaOptions"] = f"-Dlog4j.configurationFile=file:{_log4j_file()}"
        for key, value in options.items():
            builder = builder.config(key, value)
        if SPARK_SUBMIT_ENV not in os.environ:
            _launch_jvm(options)
    spark = (builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
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


def _launch_jvm(options: dict[str, str]) -> None:
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


def from_args(args: argparse.Namespace) -> SparkSession:
    return session(args.master, args.shuffle_partitions, args.driver_memory)


def stop_if_created_here() -> None:
    """Stops the session this process started (the CLI at exit); a session someone else owns stays."""
    global _created_here
    if _created_here is not None:
        _created_here.stop()
        _created_here = None
