"""A class-data archive (the JDK's AppCDS) for the Kafka JVMs a test run starts: nodes, restarts and Kafka's tools.

A test node's start is mostly loading, verifying and linking Kafka's classes on two shared cores. A dynamic archive of
the classes one node loaded (`-XX:ArchiveClassesAtExit`) is mapped by every later JVM of the same JDK and class path
(`-XX:SharedArchiveFile`): measured here, a one-node start to `Kafka Server started` took 3.4-4.1 s of the JVM's CPU
with it against 5.2-6.4 s without (load 12, three pairs), and the first start that writes it 7.6 s.

    opts = kafka_jvm_opts(kafka_home, run_tmp_dir, TEST_JVM_OPTS)   # base + the archive's flags; made on first use

The archive lives in the run's temp dir (tests write nowhere else), shared by the run's workers: the first to need it
makes it under a file lock, by starting and stopping one node of its own; the others wait for that and map it. It is
written under a name of its own and renamed only once the JVM that wrote it exited on its own, so a half archive is
never mapped. Anything that goes wrong leaves the base options: the JVM also ignores an archive it cannot use
(another JDK, another class path), silently with these log flags, so an archive can cost a start nothing but the
map attempt.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

# The JVM's own notices about the archive (mapped, not mapped, written) are not the test's output.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _key(home: Path, base_opts: str) -> str:
    """What the archive depends on: the JDK kafka-run-class.sh runs, the Kafka install, the flags."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else (shutil.which("java") or "java")
    parts = [os.path.realpath(java), str(Path(home).resolve()), base_opts]
    try:
        parts += sorted(p.name for p in (Path(home) / "libs").iterdir())
    except OSError:
        pass
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def kafka_jvm_opts(home: Path, cache: Path, base_opts: str) -> str:
    """`base_opts` plus the flags that map this run's archive of a Kafka node's classes, making it first if this run
    has none yet; `base_opts` alone if it cannot be made."""
    archive = Path(cache) / f"kafka-{_key(home, base_opts)}.jsa"
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        with open(archive.with_suffix(".lock"), "w") as lock:
            # Held while the archive is made: the other workers wait for it instead of each writing their own.
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not archive.is_file():
                _write(home, archive, base_opts)
    except (OSError, RuntimeError, TimeoutError):
        return base_opts
    return f"{base_opts} -XX:SharedArchiveFile={archive} {QUIET}" if archive.is_file() else base_opts


def _write(home: Path, archive: Path, base_opts: str) -> None:
    """One node started, given a topic (the log and partition classes every test loads), and stopped: the JVM writes
    the classes it loaded at its exit."""
    from mover.testing.kafka_cluster import KafkaCluster

    tmp = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    try:
        with tempfile.TemporaryDirectory(dir=archive.parent) as d:
            kafka = KafkaCluster(Path(d), home, brokers=1, log_dirs=1,
                                 jvm_opts=f"{base_opts} -XX:ArchiveClassesAtExit={tmp} {QUIET}")
            kafka.start()
            try:
                kafka.create_topic("class-data", partitions=1)
            finally:
                node = next(iter(kafka.nodes.values()))
                code = node.stop()
                kafka.close()
        # Kafka's SIGTERM exit is its shutdown hook's; a JVM killed because it did not stop in time wrote nothing
        # whole.
        if code in (0, 143) and tmp.is_file() and tmp.stat().st_size > 0:
            tmp.replace(archive)  # the name later JVMs map appears complete or not at all
    finally:
        tmp.unlink(missing_ok=True)
