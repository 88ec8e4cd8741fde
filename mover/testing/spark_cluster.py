"""A real Spark standalone cluster for tests: one Master and one Worker (1 core, 1g) started with the `spark-class` of
the pyspark wheel, on loopback only, free ports, everything (work dir, local dirs, logs) in a temp dir.

    with SparkCluster(tmp_path) as cluster:
        cluster.master_url           # "spark://127.0.0.1:PORT", for --master
        cluster.env()                # environment for a driver (mover-audit --master ..., spark-submit)
        cluster.status()             # the master's JSON: workers, activeapps, completedapps
        cluster.spark_submit         # the wheel's bin/spark-submit

Executors run the interpreter that runs the tests and import the code under test: the Worker's environment carries
PYSPARK_PYTHON and PYTHONPATH (the repo root holding this `mover`), and an executor inherits its Worker's environment,
so a worktree's code is what runs on the cluster, not whatever `mover` the interpreter has installed.
The Master's and the Worker's output go to `<dir>/master.log` and `<dir>/worker.log`; a failed start shows their tail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from mover.testing.ports import free_ports
from mover.testing.wait import WaitTimeout, wait_for

# Two JVMs starting on a loaded 2-core machine take several seconds; this only bounds how long a broken start hangs.
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
LOG_TAIL_CHARS = 3000
# The repo (or site-packages) directory that holds the `mover` package these tests import.
CODE_ROOT = Path(__file__).resolve().parents[2]
WORKER_CORES = 1
WORKER_MEMORY = "1g"
# The Master's and the Worker's own JVMs (not the executors, which the application configures): C1 only and the
# serial collector, as the tests' Kafka nodes (mover.testing.kafka_node.TEST_JVM_OPTS): two daemons that mostly wait
# start for less CPU on the shared cores.
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# The tests' Spark drivers (the test run's in-process session, tests/conftest.py; a command a test runs with it in its
# environment): the same, added to what mover-audit gives its JVM (mover.audit.spark: its C2 thresholds stay on the
# command line, unused). A test's driver runs many kinds of small query, each once: C2's compiling was 30 of the 85 s
# of CPU the session JVM spent on tests/audit/test_pipeline.py (since split: test_pipeline_*.py), and C1 only took
# that JVM to 45-49 s in all.
# Through SPARK_SUBMIT_OPTS, which Spark's launcher puts on the driver JVM's command line: a
# spark-defaults.conf would put its directory on the class path, where a non-empty directory stops the class-data
# archive's dump ("Cannot have non-empty directory in paths").
DRIVER_JAVA_OPTS = DAEMON_JAVA_OPTS
DRIVER_OPTS_ENV = "SPARK_SUBMIT_OPTS"


class SparkClusterError(RuntimeError):
    """The cluster did not start: the message ends with the tail of its logs."""


def spark_home() -> Path:
    """$SPARK_HOME if it has bin/spark-class, else the pyspark package (the wheel ships bin/, sbin/ and jars/)."""
    env = os.environ.get("SPARK_HOME")
    if env and (Path(env) / "bin" / "spark-class").exists():
        return Path(env)
    spec = importlib.util.find_spec("pyspark")  # found, not imported: no JVM, no pandas warnings here
    if spec is None or spec.origin is None:
        raise SparkClusterError("pyspark is not installed (the audit extra): no spark-class to start a cluster with")
    return Path(spec.origin).parent


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except FileNotFoundError:
        return "(no log)"


class SparkCluster:
    def __init__(self, base_dir: Path) -> None:
        self.dir = Path(base_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.home = spark_home()
        self.port, self.webui_port, self.worker_webui_port = free_ports(3)
        self.work_dir = self.dir / "work"
        self.master_log = self.dir / "master.log"
        self.worker_log = self.dir / "worker.log"
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def spark_submit(self) -> Path:
        return self.home / "bin" / "spark-submit"

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a process of the cluster or a driver of it: this Spark, loopback only (SPARK_LOCAL_IP is the
        address every JVM binds and advertises, the web UIs too), the tests' interpreter and code, a conf dir of its
        own (no spark-defaults.conf or spark-env.sh of the machine's; its spark-defaults.conf sets the executors' JVM
        options) and Spark's scratch dirs in the cluster's dir."""
        conf = self.dir / "conf"
        conf.mkdir(exist_ok=True)
        defaults = conf / "spark-defaults.conf"
        if not defaults.exists():
            # The executors' JVMs as the daemons' (C1 only, serial collector): each application's executor lives for
            # one command on a test's few rows, where HotSpot's C2 compiling was most of its CPU.
            defaults.write_text(f"spark.executor.extraJavaOptions {DAEMON_JAVA_OPTS}\n")
        local = self.dir / "local"
        local.mkdir(exist_ok=True)
        python_path = [str(CODE_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        return dict(os.environ, SPARK_HOME=str(self.home), SPARK_CONF_DIR=str(conf), SPARK_LOCAL_IP="127.0.0.1",
                    SPARK_LOCAL_DIRS=str(local), PYSPARK_PYTHON=sys.executable,
                    PYTHONPATH=os.pathsep.join(dict.fromkeys(python_path)), **extra)

    def _spawn(self, log: Path, main_class: str, *args: str, **env: str) -> None:
        with open(log, "ab") as out:
            # Its own process group: stop() kills the JVM with the executors and Python workers it started.
            self.procs.append(subprocess.Popen(
                [str(self.home / "bin" / "spark-class"), main_class, *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env(SPARK_DAEMON_JAVA_OPTS=DAEMON_JAVA_OPTS, **env), cwd=self.dir,
                start_new_session=True))

    def start(self) -> SparkCluster:
        # The Master's REST submission server would listen on a fixed port (6066) that another cluster may hold.
        self._spawn(self.master_log, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.webui_port),
                    SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        self._spawn(self.worker_log, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                    "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
                    "--webui-port", str(self.worker_webui_port), "--work-dir", str(self.work_dir), self.master_url)
        try:
            wait_for(self._one_worker_alive, START_TIMEOUT_S, f"a worker ALIVE at {self.master_url}", interval=0.2)
        except (WaitTimeout, SparkClusterError) as e:
            self.stop()
            raise SparkClusterError(f"Spark standalone cluster did not start: {e}\n"
                                    f"--- {self.master_log} ---\n{_tail(self.master_log)}\n"
                                    f"--- {self.worker_log} ---\n{_tail(self.worker_log)}") from None
        return self

    def _one_worker_alive(self) -> bool:
        for proc, name in zip(self.procs, ("master", "worker"), strict=True):
            if proc.poll() is not None:
                raise SparkClusterError(f"the {name} exited with {proc.returncode}")
        try:
            status = self.status()
        except (OSError, ValueError):  # not listening yet, or a half-written answer
            return False
        return any(w.get("state") == "ALIVE" for w in status.get("workers", []))

    def status(self) -> dict[str, Any]:
        """The master's state as its web UI's JSON gives it (workers, activeapps, completedapps)."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return dict(json.load(answer))

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the worker first: it kills its executors as it goes
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
            try:
                # Also whatever of the group outlived its leader (an executor, a Python worker).
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self.procs = []

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
