"""Real Kafka brokers in ZooKeeper mode: the mode of every Kafka before 2.8, which `mover-reassign --zookeeper` and
the tools' pre-2.4 paths must still work against. Apart from the KRaft cluster because it shares only the nodes:
no format, no controller of its own, a ZooKeeper the caller runs, its own start line."""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mover.testing.kafka_home import SKIP_REASON, kafka_home
from mover.testing.kafka_node import BASE_PROPS, DEFAULT_HEAP, START_TIMEOUT_S, KafkaNode
from mover.testing.ports import free_ports
from mover.testing.wait import wait_for

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
