"""A real Apache Kafka (KRaft, JBOD) for tests and benches: one combined node or a cluster of one controller and
several brokers, every data dir, config and log in a temp dir, free loopback ports, small heaps. What the real-Kafka
tests prove moverd against, so it is started as Kafka is deployed (KRaft, several dirs per broker), not faked.

    home = kafka_home()                      # mover.testing.kafka_home: $KAFKA_HOME, else <repo>/../shared/kafka/...
    with KafkaCluster(tmp_path, home, brokers=1, log_dirs=2) as kafka:     # one broker+controller node, id 1
        kafka.bootstrap                      # "127.0.0.1:PORT,..." (the PLAINTEXT listeners of the brokers)
        kafka.broker_ids                     # [1]
        kafka.log_dirs(1)                    # [Path, Path]: chmod or read them
        kafka.create_topic("t", partitions=2)
        kafka.tool("kafka-log-dirs.sh", "--describe", "--bootstrap-server", kafka.bootstrap)
        kafka.kill(1); kafka.start_broker(1) # kill -9, then start again on the same dirs and ports
    with KafkaCluster(tmp_path, home, brokers=3, log_dirs=3, controller=True) as kafka:   # controller 1000, brokers 1-3

Tests pass `jvm_opts=TEST_JVM_OPTS` (mover.testing.kafka_node; the `kafka_cluster` fixture does): JVM flags that start
a node for less CPU; without it (benches) Kafka's own. Extra broker keys go in `props` (every broker) or
`broker_props={id: {...}}`; extra listeners in `listeners` (name -> security protocol, e.g. {"SASL_PLAINTEXT":
"SASL_PLAINTEXT"}, each on its own free port per broker; `kafka.bootstrap_for("SASL_PLAINTEXT")`).

Readiness is polled, never slept for: each node's `Kafka Server started` line (KafkaNode.wait_started), then
(brokers) a Metadata answer from it listing every running broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mover.testing.kafka_node import BASE_PROPS, DEFAULT_HEAP, START_TIMEOUT_S, TOOL_HEAP, KafkaNode, random_cluster_id
from mover.testing.ports import free_ports
from mover.testing.wait import wait_for

TOOL_TIMEOUT_S = 120.0
CONTROLLER_ID = 1000


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
