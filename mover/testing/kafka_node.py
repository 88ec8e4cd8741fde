"""One real Kafka JVM of a test or bench: a broker, a controller, or both; its dirs, config, output and process,
and what every test node starts with (small heaps, the tests' JVM flags, BASE_PROPS). Apart from the cluster so the
KRaft cluster and the ZooKeeper-mode cluster start their nodes the same way.

A node is formatted as `kafka-storage.sh format` formats, without a JVM start per node (the release's
bootstrap.checkpoint comes from one real format per Kafka home and process). Its Kafka log4j output goes to
`<node dir>/logs` (LOG_DIR) and its stdout to `<node dir>/kafka.out`: nothing is written into the Kafka home, which may
be shared and read-only. Its start is polled, never slept for: the node's `Kafka Server started` line.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mover.testing.wait import WaitTimeout, wait_for

# Several brokers, tools and the tests' own JVMs share a 2-core, shared machine: small heaps are enough for tests.
DEFAULT_HEAP = "-Xmx256m -Xms128m"
# kafka-server-start.sh's own heap when KAFKA_HEAP_OPTS is unset: benches against Kafka run it at its defaults.
KAFKA_START_SCRIPT_HEAP = "-Xmx1G -Xms1G"
# The test nodes' BASE_PROPS that are not Kafka's defaults and change what a bench measures: put back for benches.
KAFKA_DEFAULT_PROPS: dict[str, Any] = {"log.cleaner.dedupe.buffer.size": 128 * 1024 * 1024}
TOOL_HEAP = "-Xmx128m -Xms32m"
# What the tests run Kafka's JVMs with (nodes and tools), in place of kafka-run-class.sh's G1 flags: C1 only and the
# serial collector. A start is mostly class loading and JIT work on two shared cores, where C2's and G1's threads
# compete with every other JVM of the run, for throughput no test measures: a node's start-and-stop took about a third
# less CPU (8.2-9.7 s -> 5.4-6.4 s). Benches leave `jvm_opts` unset: Kafka's own flags.
TEST_JVM_OPTS = "-server -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true"
STARTED = "Kafka Server started"
# A JVM start (format or broker) on a loaded 2-core machine can take tens of seconds; these only bound how long a
# broken start or stop hangs a test.
START_TIMEOUT_S = 120.0
# Kafka 3.7's broker that heartbeats with a stale epoch never recovers (KafkaNode.wait_started): after this many
# answers saying so (its back-off reaches 9 s between them after about 8) it is started again, at most twice.
STALE_EPOCH = "received error STALE_BROKER_EPOCH"
STALE_EPOCH_LOOP = 6
STALE_EPOCH_RESTARTS = 2
STOP_TIMEOUT_S = 60.0

# Keys every test node starts with: single-copy internal topics, no rebalance delay, deletes of retired copies
# after 1 s instead of a minute (so a test sees a finished move's source go), and a small cleaner buffer.
BASE_PROPS: dict[str, Any] = {
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "group.initial.rebalance.delay.ms": 0,
    "log.segment.delete.delay.ms": 1000,
    "file.delete.delay.ms": 1000,
    "auto.create.topics.enable": "false",
    # The log cleaner allocates its whole dedupe buffer at start-up (128 MiB by default, one contiguous array): in a
    # 256 MiB test heap that failed once with OutOfMemoryError and the node exited. Tests compact nothing large.
    "log.cleaner.dedupe.buffer.size": 16 * 1024 * 1024,
}


def random_cluster_id() -> str:
    """What `kafka-storage.sh random-uuid` prints (a base64url UUID, no padding, never starting with '-'), without
    paying a JVM start for it."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _props_text(props: Mapping[str, Any]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


# What `kafka-storage.sh format` writes into each dir of a node: meta.properties (version 1, node.id, the cluster id,
# a directory.id of its own per dir) and bootstrap.checkpoint (the metadata.version record of the Kafka release, the
# same for every node and dir). One format per Kafka home and process makes the template of the latter; each node's
# dirs then get a copy of it and their meta.properties written here: a JVM start less per node (2 s of CPU each).
_BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
_templates: dict[Path, bytes] = {}
_templates_lock = threading.Lock()


def _bootstrap_checkpoint(home: Path, env: Mapping[str, str]) -> bytes:
    with _templates_lock:
        if home not in _templates:
            with tempfile.TemporaryDirectory(prefix="kafka-format-") as tmp:
                base = Path(tmp)
                (base / "config").write_text(_props_text({
                    "process.roles": "controller", "node.id": 1, "controller.quorum.voters": "1@127.0.0.1:9",
                    "controller.listener.names": "CONTROLLER", "listeners": "CONTROLLER://127.0.0.1:9",
                    "log.dirs": base / "meta"}))
                done = subprocess.run([str(home / "bin" / "kafka-storage.sh"), "format", "-t", random_cluster_id(),
                                       "-c", str(base / "config")], capture_output=True, text=True,
                                      stdin=subprocess.DEVNULL, env={**env, "LOG_DIR": str(base / "logs")},
                                      timeout=START_TIMEOUT_S)
                if done.returncode != 0:
                    raise RuntimeError(f"kafka-storage.sh format failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
                _templates[home] = (base / "meta" / _BOOTSTRAP_CHECKPOINT).read_bytes()
        return _templates[home]


class KafkaNode:
    """One Kafka JVM: a broker, a controller, or both (a combined node). Knows its dirs, ports and process."""

    def __init__(self, home: Path, base: Path, node_id: int, roles: str, *, log_dirs: int, ports: dict[str, int],
                 props: dict[str, Any], heap: str, jvm_opts: str | None = None) -> None:
        self.home = home
        self.node_id = node_id
        self.roles = roles
        self.dir = base / f"node-{node_id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_dirs = [self.dir / f"d{i + 1}" for i in range(log_dirs)] if self.is_broker else []
        self.metadata_dir = self.dir / "metadata"
        self.ports = ports  # listener name -> port
        self.props = props
        self.heap = heap
        self.jvm_opts = jvm_opts
        self.config = self.dir / "server.properties"
        self.out = self.dir / "kafka.out"
        self.proc: subprocess.Popen[bytes] | None = None
        self._out_mark = 0
        # Put before kafka-server-start.sh: mover.testing.moverd.SETPRIV runs the JVM without root's DAC override, so
        # a chmod 000 log dir really is unreadable to it.
        self.prefix: tuple[str, ...] = ()

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.ports['PLAINTEXT']}"

    def address_for(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def env(self, heap: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("JMX_PORT", "KAFKA_OPTS", "KAFKA_DEBUG")}
        env["KAFKA_HEAP_OPTS"] = heap or self.heap
        env["LOG_DIR"] = str(self.dir / "logs")
        if self.jvm_opts is not None:
            env["KAFKA_JVM_PERFORMANCE_OPTS"] = self.jvm_opts
        return env

    def write_config(self) -> None:
        self.config.write_text(_props_text(self.props))

    def format(self, cluster_id: str) -> None:
        """What `kafka-storage.sh format -t cluster_id` does to the dirs this node's config names (log.dirs and
        metadata.log.dir), from the process's template (_bootstrap_checkpoint)."""
        self.write_config()
        checkpoint = _bootstrap_checkpoint(self.home, self.env(TOOL_HEAP))
        named = [*str(self.props["log.dirs"]).split(","), self.props.get("metadata.log.dir")]
        for d in dict.fromkeys(Path(str(x)) for x in named if x):
            d.mkdir(parents=True, exist_ok=True)
            (d / _BOOTSTRAP_CHECKPOINT).write_bytes(checkpoint)
            (d / "meta.properties").write_text(_props_text({
                "node.id": self.node_id, "directory.id": random_cluster_id(), "version": 1,
                "cluster.id": cluster_id}))

    def start(self) -> None:
        """Spawn the JVM (kafka-server-start.sh execs java, so the pid is the broker's); `wait_started` waits."""
        assert self.proc is None or self.proc.poll() is not None, f"node {self.node_id} is running"
        self.write_config()
        self._out_mark = self.out.stat().st_size if self.out.exists() else 0
        with open(self.out, "ab") as out:
            self.proc = subprocess.Popen(
                [*self.prefix, str(self.home / "bin" / "kafka-server-start.sh"), str(self.config)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env(),
                start_new_session=True)

    def output(self, since_start: bool = True, tail: int | None = None) -> str:
        try:
            with open(self.out, "rb") as f:
                if since_start:
                    f.seek(self._out_mark)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return text[-tail:] if tail else text

    def wait_started(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until the node prints `Kafka Server started`. A broker caught in Kafka 3.7's stale-epoch loop is started
        again (kill -9, same dirs and ports), at most STALE_EPOCH_RESTARTS times: on a loaded machine a registration
        that timed out is sent again, the controller registers the broker twice, and the broker heartbeats with the
        first epoch for good, every answer STALE_BROKER_EPOCH, never unfenced (seen here with three test workers on
        two cores). A restart registers it anew, as an operator restarting a stuck broker would."""
        deadline = time.monotonic() + timeout
        for attempt in range(STALE_EPOCH_RESTARTS + 1):
            proc = self.proc
            assert proc is not None

            def started(proc: subprocess.Popen[bytes] = proc) -> bool | str:
                if proc.poll() is not None:
                    raise RuntimeError(f"kafka node {self.node_id} exited with {proc.returncode}:\n"
                                       f"{self.output(tail=4000)}")
                out = self.output()
                if STARTED in out:
                    return True
                return "stale" if out.count(STALE_EPOCH) >= STALE_EPOCH_LOOP else False

            try:
                state = wait_for(started, max(0.0, deadline - time.monotonic()),
                                 f"kafka node {self.node_id} to print '{STARTED}'", interval=0.1)
            except WaitTimeout as e:
                raise TimeoutError(f"kafka node {self.node_id} not started:\n{self.output(tail=4000)}") from e
            if state is True:
                return
            if attempt < STALE_EPOCH_RESTARTS:
                self.kill()
                self.start()
        raise TimeoutError(f"kafka node {self.node_id} stuck on {STALE_EPOCH} after {STALE_EPOCH_RESTARTS} "
                           f"restarts:\n{self.output(tail=4000)}")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.running and self.proc else None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (Kafka's controlled shutdown) and wait; SIGKILL if it does not exit in `timeout`."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(STOP_TIMEOUT_S)

    def kill(self) -> None:
        """kill -9 the JVM: no shutdown hook, no flush, dirs left as a crash leaves them."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STOP_TIMEOUT_S)
