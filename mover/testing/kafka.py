"""A real Apache Kafka (KRaft, JBOD) for tests and benches: one combined node or a cluster of one controller and
several brokers, every data dir, config and log in a temp dir, free loopback ports, small heaps.

    home = kafka_home()                      # $KAFKA_HOME, else <repo>/../shared/kafka/kafka_2.13-3.7.0, else None
    with KafkaCluster(tmp_path, home, brokers=1, log_dirs=2) as kafka:     # one broker+controller node, id 1
        kafka.bootstrap                      # "127.0.0.1:PORT,..." (the PLAINTEXT listeners of the brokers)
        kafka.broker_ids                     # [1]
        kafka.log_dirs(1)                    # [Path, Path]: chmod or read them
        kafka.create_topic("t", partitions=2)
        kafka.tool("kafka-log-dirs.sh", "--describe", "--bootstrap-server", kafka.bootstrap)
        kafka.kill(1); kafka.start_broker(1) # kill -9, then start again on the same dirs and ports
    with KafkaCluster(tmp_path, home, brokers=3, log_dirs=3, controller=True) as kafka:   # controller 1000, brokers 1-3

Tests pass `jvm_opts=TEST_JVM_OPTS` (the `kafka_cluster` fixture does): JVM flags that start a node for less CPU;
without it (benches) Kafka's own. Extra broker keys go in `props` (every broker) or `broker_props={id: {...}}`; extra
listeners in `listeners` (name -> security protocol, e.g. {"SASL_PLAINTEXT": "SASL_PLAINTEXT"}, each on its own free
port per broker; `kafka.bootstrap_for("SASL_PLAINTEXT")`). A node's Kafka log4j output goes to `<node dir>/logs`
(LOG_DIR) and its stdout to `<node dir>/kafka.out`: nothing is written into the Kafka home, which may be shared and
read-only.

Readiness is polled, never slept for: the node's `Kafka Server started` line, then (brokers) a Metadata answer from it
listing every running broker.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mover.testing.ports import free_ports
from mover.testing.wait import WaitTimeout, wait_for

REPO = Path(__file__).resolve().parents[2]
KAFKA_DIST = "kafka_2.13-3.7.0"
SHARED_HOME = REPO.parent / "shared" / "kafka" / KAFKA_DIST
SKIP_REASON = (f"no Apache Kafka: set $KAFKA_HOME to an unpacked Kafka 3.x, or put {KAFKA_DIST} at "
               f"{REPO.parent / 'shared' / 'kafka'}")
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
TOOL_TIMEOUT_S = 120.0
CONTROLLER_ID = 1000

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


def _main_checkout() -> Path | None:
    """The main checkout when this one is a `git worktree` (its .git is a file naming <main>/.git/worktrees/NAME):
    a worktree sits elsewhere, but the shared Kafka is beside the main checkout."""
    try:
        text = (REPO / ".git").read_text()
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    gitdir = Path(text.split(":", 1)[1].strip())
    return gitdir.parents[2] if gitdir.parent.name == "worktrees" else None


def kafka_home() -> Path | None:
    """The Kafka installation to test against: $KAFKA_HOME if set and it holds bin/kafka-server-start.sh, else the
    shared 3.7.0 beside the checkout (or beside the main checkout of a git worktree); None when neither exists (tests
    skip with SKIP_REASON)."""
    candidates = [Path(os.environ["KAFKA_HOME"])] if os.environ.get("KAFKA_HOME") else []
    candidates.append(SHARED_HOME)
    main = _main_checkout()
    if main is not None:
        candidates.append(main.parent / "shared" / "kafka" / KAFKA_DIST)
    for home in candidates:
        if (home / "bin" / "kafka-server-start.sh").is_file():
            return home.resolve()
    return None


def random_cluster_id() -> str:
    """What `kafka-storage.sh random-uuid` prints (a base64url UUID, no padding, never starting with '-'), without
    paying a JVM start for it."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


# Kafka's UnifiedLog.parseTopicPartitionName (2.x to 4.x): the names a broker starts beside.
_KAFKA_SUFFIXED_DIR = {s: re.compile(rf"^(\S+)-(\S+)\.(\S+){s}$") for s in ("-delete", "-future", "-stray")}


def accepts_partition_dir_name(name: str) -> bool:
    """Whether a Kafka broker starts with a directory of this name in a log dir (UnifiedLog.parseTopicPartitionName):
    a name ending in `-delete`, `-future` or `-stray` must be `<topic>-<partition>.<id>-<suffix>`, anything else
    `<topic>-<partition>` with an integer partition. Otherwise it stops with "... is not in the form of
    topic-partition or topic-partition.uniqueId-delete (if marked for deletion)"."""
    if "-" not in name:
        return False
    for suffix, pattern in _KAFKA_SUFFIXED_DIR.items():
        if name.endswith(suffix):
            if not pattern.match(name):
                return False
            name = name[:name.rindex(".")]
            break
    topic, _, partition = name.rpartition("-")
    if not topic or not partition:
        return False
    try:
        int(partition)
    except ValueError:
        return False
    return True


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


class KafkaCluster:
    """`brokers` brokers with `log_dirs` log dirs each. With `controller=False` (the default for one broker) node 1 is
    broker and controller at once; with `controller=True` (default for several) a separate controller, node 1000,
    and brokers 1..N."""

    def __init__(self, base_dir: Path, home: Path, *, brokers: int = 1, log_dirs: int = 2,
                 controller: bool | None = None, props: Mapping[str, Any] | None = None,
                 broker_props: Mapping[int, Mapping[str, Any]] | None = None,
                 listeners: Mapping[str, str] | None = None, heap: str | None = None,
                 jvm_opts: str | None = None) -> None:
        self.home = Path(home)
        self.base = Path(base_dir)
        self.base.mkdir(parents=True, exist_ok=True)
        self.heap = heap or os.environ.get("KAFKA_TEST_HEAP_OPTS", DEFAULT_HEAP)
        self.jvm_opts = jvm_opts
        self.cluster_id = random_cluster_id()
        self.extra_listeners = dict(listeners or {})
        separate = brokers > 1 if controller is None else controller
        broker_ids = list(range(1, brokers + 1))
        n_listeners = 1 + len(self.extra_listeners)
        ports = iter(free_ports(brokers * n_listeners + 1 + (1 if separate else 0)))
        self.nodes: dict[int, KafkaNode] = {}
        broker_ports = {b: {"PLAINTEXT": next(ports), **{n: next(ports) for n in self.extra_listeners}}
                        for b in broker_ids}
        controller_port = next(ports)
        controller_id = CONTROLLER_ID if separate else 1
        voters = f"{controller_id}@127.0.0.1:{controller_port}"
        protocol_map = {"CONTROLLER": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT", **self.extra_listeners}
        common = {**BASE_PROPS,
                  "controller.quorum.voters": voters,
                  "controller.listener.names": "CONTROLLER",
                  "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocol_map.items())}
        if separate:
            cprops = {**common, "process.roles": "controller", "node.id": controller_id,
                      "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
                      "metadata.log.dir": None, **dict(props or {})}
            node = KafkaNode(self.home, self.base, controller_id, "controller", log_dirs=0,
                             ports={"CONTROLLER": controller_port}, props={}, heap=self.heap, jvm_opts=jvm_opts)
            cprops["metadata.log.dir"] = node.metadata_dir
            cprops["log.dirs"] = node.metadata_dir
            # Broker-only keys in `props` (listener SASL settings, throttles) are harmless to a controller, but the
            # listener keys of the brokers' extra listeners are not its listeners: leave those out.
            node.props = {k: v for k, v in cprops.items() if not k.startswith("listener.name.")}
            self.nodes[controller_id] = node
        for b in broker_ids:
            bports = broker_ports[b]
            listen = {name: port for name, port in bports.items()}
            if not separate:
                listen["CONTROLLER"] = controller_port
            node = KafkaNode(self.home, self.base, b, "broker" if separate else "broker,controller",
                             log_dirs=log_dirs, ports=listen, props={}, heap=self.heap, jvm_opts=jvm_opts)
            node.props = {
                **common,
                "process.roles": node.roles,
                "node.id": b,
                "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in listen.items()),
                "advertised.listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in bports.items()),
                "inter.broker.listener.name": "PLAINTEXT",
                "log.dirs": ",".join(str(d) for d in node.log_dirs),
                "metadata.log.dir": node.metadata_dir,
                **dict(props or {}),
                **dict((broker_props or {}).get(b, {})),
            }
            self.nodes[b] = node

    # -- what tests read ------------------------------------------------------------------------------------------
    @property
    def brokers(self) -> list[KafkaNode]:
        return [n for n in self.nodes.values() if n.is_broker]

    @property
    def broker_ids(self) -> list[int]:
        return [n.node_id for n in self.brokers]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.brokers)

    def bootstrap_for(self, listener: str) -> str:
        return ",".join(n.address_for(listener) for n in self.brokers)

    def broker(self, broker_id: int) -> KafkaNode:
        return self.nodes[broker_id]

    def log_dirs(self, broker_id: int) -> list[Path]:
        return list(self.nodes[broker_id].log_dirs)

    def bin(self, tool: str) -> Path:
        return self.home / "bin" / tool

    def dir_of(self, broker_id: int, topic: str, partition: int) -> Path | None:
        """The log dir holding the current copy of topic-partition on this broker (from the files), or None."""
        for d in self.log_dirs(broker_id):
            if (d / f"{topic}-{partition}").is_dir():
                return d
        return None

    # -- life cycle -----------------------------------------------------------------------------------------------
    def start(self) -> KafkaCluster:
        try:
            for node in self.nodes.values():
                node.format(self.cluster_id)
            for node in self.nodes.values():
                node.start()
            for node in self.nodes.values():
                node.wait_started()
            self.wait_brokers()
        except BaseException:
            self.close()
            raise
        return self

    def wait_brokers(self, timeout: float = START_TIMEOUT_S) -> None:
        """Poll Metadata on every running broker until each lists every running broker (unfenced, serving)."""
        running = {n.node_id for n in self.brokers if n.running}
        for node in self.brokers:
            if node.running:
                wait_for(lambda node=node: _metadata_brokers(node.address) >= running, timeout,
                         f"broker {node.node_id} to list brokers {sorted(running)} in Metadata", interval=0.1)

    def stop_broker(self, broker_id: int) -> int | None:
        return self.nodes[broker_id].stop()

    def kill(self, broker_id: int) -> None:
        self.nodes[broker_id].kill()

    def start_broker(self, broker_id: int, prefix: Iterable[str] | None = None) -> None:
        """Start a stopped or killed node again on its own dirs and ports (no format) and wait until it serves.
        `prefix` (e.g. mover.testing.moverd.SETPRIV) goes before the start script, from now on."""
        node = self.nodes[broker_id]
        if prefix is not None:
            node.prefix = tuple(prefix)
        node.start()
        node.wait_started()
        if node.is_broker:
            self.wait_brokers()

    def restart(self, broker_id: int) -> None:
        self.stop_broker(broker_id)
        self.start_broker(broker_id)

    def close(self) -> None:
        # Brokers first: a KRaft broker's controlled shutdown asks the controller, which must still be there. The
        # brokers all at once: one after the other, a cluster of five took 19 s to stop.
        brokers = [n for n in self.brokers if n.running]
        for node in brokers:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGTERM)
        for node in [*brokers, *(n for n in self.nodes.values() if not n.is_broker)]:
            try:
                node.stop()
            except Exception:  # noqa: BLE001 - cleanup must reach every node
                node.kill()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers tests need ---------------------------------------------------------------------------------------
    def tool(self, name: str, *args: str, check: bool = True, timeout: float = TOOL_TIMEOUT_S,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's own tools (bin/NAME) with a small heap and its logs in the temp dir."""
        env = {k: v for k, v in os.environ.items() if k not in ("JMX_PORT", "KAFKA_OPTS", "KAFKA_DEBUG")}
        env["KAFKA_HEAP_OPTS"] = TOOL_HEAP
        env["LOG_DIR"] = str(self.base / "tool-logs")
        if self.jvm_opts is not None:
            env["KAFKA_JVM_PERFORMANCE_OPTS"] = self.jvm_opts
        proc = subprocess.run([str(self.bin(name)), *args], capture_output=True, text=True, env=env,
                              timeout=timeout, input=input, stdin=None if input is not None else subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(args)} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def admin(self) -> Any:
        """A kafka-python KafkaAdminClient on the PLAINTEXT listeners (the caller closes it)."""
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="kafka-harness")

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     assignment: Mapping[int, Iterable[int]] | None = None,
                     configs: Mapping[str, Any] | None = None) -> None:
        """Create a topic through kafka-python and wait until every broker's Metadata gives each partition a
        leader (a test may produce right after)."""
        from kafka.admin import NewTopic

        if assignment is not None:
            topic = NewTopic(name, num_partitions=-1, replication_factor=-1,
                             replica_assignments={p: list(r) for p, r in assignment.items()},
                             topic_configs={k: str(v) for k, v in (configs or {}).items()})
            n_parts = len(assignment)
        else:
            topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                             topic_configs={k: str(v) for k, v in (configs or {}).items()})
            n_parts = partitions
        admin = self.admin()
        try:
            admin.create_topics([topic])
        finally:
            admin.close()
        for node in self.brokers:
            if node.running:
                wait_for(lambda node=node: _leaders(node.address, name) >= n_parts, START_TIMEOUT_S,
                         f"{name}'s {n_parts} partitions to have leaders on broker {node.node_id}", interval=0.05)
        # Metadata answers before every broker has made its replicas' dirs: wait for the files too, so a test can
        # look at where each replica lives right away.
        replicas = self.replicas(name)
        wait_for(lambda: all(self.dir_of(b, name, p) is not None
                             for p, brokers in replicas.items() for b in brokers if self.nodes[b].running),
                 START_TIMEOUT_S, f"the replicas of {name} to have their dirs", interval=0.05)

    def replicas(self, topic: str) -> dict[int, list[int]]:
        """partition -> replica broker ids, from Metadata."""
        from mover.admin.client import Client

        with Client(self.bootstrap, timeout=10) as client:
            reply = client.metadata([topic])
        return {p["partition_index"]: list(p["replica_nodes"])
                for t in reply["topics"] if t["name"] == topic for p in t["partitions"]}



ZK_STARTED = "started (kafka.server.KafkaServer)"


class ZkKafkaCluster:
    """Kafka brokers in ZooKeeper mode (Kafka 3.x still has it; the mode of every Kafka before 2.8), on a ZooKeeper
    the caller runs (mover.testing.zookeeper), one log dir each: what `mover-reassign --zookeeper` and the tools'
    pre-2.4 paths are tested against. The controller is whichever broker ZooKeeper elects."""

    def __init__(self, base: Path, connect: str, broker_ids: Iterable[int], *, heap: str | None = None,
                 props: Mapping[str, Any] | None = None, jvm_opts: str | None = None) -> None:
        home = kafka_home()
        if home is None:
            raise RuntimeError(SKIP_REASON)
        self.connect = connect
        self.nodes: list[KafkaNode] = []
        ids = list(broker_ids)
        for b, port in zip(ids, free_ports(len(ids)), strict=True):
            node = KafkaNode(home, base, b, "broker", log_dirs=1, ports={"PLAINTEXT": port}, props={},
                             heap=heap or DEFAULT_HEAP, jvm_opts=jvm_opts)
            node.props = {**BASE_PROPS, "broker.id": b, "zookeeper.connect": connect,
                          "listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(node.log_dirs[0]),
                          **(props or {})}
            self.nodes.append(node)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def start(self) -> ZkKafkaCluster:
        try:
            for n in self.nodes:
                n.start()
            for n in self.nodes:
                wait_for(lambda n=n: ZK_STARTED in n.output() or n.proc.poll() is not None,  # type: ignore[misc]
                         START_TIMEOUT_S, f"ZooKeeper-mode broker {n.node_id} to start")
                if ZK_STARTED not in n.output():
                    raise RuntimeError(f"ZooKeeper-mode broker {n.node_id} exited:\n{n.output(tail=3000)}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for n in self.nodes:  # all at once: one after the other, each controlled shutdown waits for the others
            if n.proc is not None and n.proc.poll() is None:
                n.proc.send_signal(signal.SIGTERM)
        for n in self.nodes:
            try:
                n.stop()
            except Exception:  # noqa: BLE001 - every node must be stopped
                n.kill()


def _metadata_brokers(address: str) -> set[int]:
    """The broker ids a broker's Metadata lists, or {} while it does not answer."""
    from mover.admin.client import Client, ClientError

    try:
        with Client(address, timeout=5) as client:
            return set(client.brokers)
    except (ClientError, OSError):
        return set()


def _leaders(address: str, topic: str) -> int:
    from mover.admin.client import Client, ClientError

    try:
        with Client(address, timeout=5) as client:
            reply = client.metadata([topic])
    except (ClientError, OSError):
        return 0
    for t in reply["topics"]:
        if t["name"] == topic and t["error_code"] == 0:
            return sum(1 for p in t["partitions"] if p["error_code"] == 0 and p["leader_id"] >= 0)
    return 0
