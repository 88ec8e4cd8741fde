"""When the balancer must not start a move on a cluster, and why: one `Pause` (its kind, a metric label, and one
line) or None. Asked before each cycle and, while a cycle's moves run, every `check_s` seconds before starting more.

In the order asked (the first that holds is the reason said):
- another_balancer: another balancer holds the cluster's lease (lease.py; asked by the loop before these);
- plan_executing: mover-audit execute carries out a plan on the cluster (it holds the lease shared: lease.py);
- broker_down: a broker that partitions name is not among Metadata's brokers (down or fenced), or does not answer
  DescribeLogDirs;
- broker_settling: for SETTLE_S from the first look that finds a broker once seen down answering again (the loop
  keeps when: loop.py `_settling`). Kafka
  3.7.0 swaps a finished copy in only once the controller acknowledged the replica's dir, and a move started while
  a broker that just came back still reports its replicas' dirs can lose that acknowledgement: the copy is never
  swapped in, nor any later one on that broker, until it restarts (KAFKA-16365, docs/kafka-compat.md: none of the
  moves sent 20 s after were lost);
- dir_offline: a log dir answers with an error (KAFKA_STORAGE_ERROR: Kafka marks a dir offline after an I/O error);
- reassignment: ListPartitionReassignments lists a reassignment that is not one of the balancer's own running moves
  between brokers (kafka-reassign-partitions.sh's, Cruise Control's); a broker without KIP-455's APIs (moverd, Kafka
  before 2.4) has none to list. On a cluster found through ZooKeeper, `/admin/reassign_partitions` is read too
  (mover.admin.reassign.zookeeper_view.py): a controller before Kafka 2.4 carries out what that znode asks and no API of
  its brokers lists it;
- log_dir_move: a future replica (a copy a log-dir move is building) that is not one of the balancer's own running
  moves;
- produce_latency: the canary's p99 over its window above the bound, or not known yet (fewer than MIN_SAMPLES
  produces in the window: at the start).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kazoo.exceptions import KazooException

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, TopicPartitionReplica, error_name, some
from mover.admin.log_dir_state import describe_broker
from mover.admin.reassign.kip455 import list_reassignments
from mover.audit.balancer.canary import MIN_SAMPLES, Canary
from mover.wire.messages import LIST_PARTITION_REASSIGNMENTS
from mover.zk.znodes import REASSIGN_PARTITIONS

BROKER_DOWN = "broker_down"
DIR_OFFLINE = "dir_offline"
REASSIGNMENT = "reassignment"
LOG_DIR_MOVE = "log_dir_move"
PRODUCE_LATENCY = "produce_latency"
ANOTHER_BALANCER = "another_balancer"
PLAN_EXECUTING = "plan_executing"
BROKER_SETTLING = "broker_settling"
REASONS = (ANOTHER_BALANCER, PLAN_EXECUTING, BROKER_DOWN, BROKER_SETTLING, DIR_OFFLINE, REASSIGNMENT, LOG_DIR_MOVE,
           PRODUCE_LATENCY)


SETTLE_S = 30.0


@dataclass(frozen=True)
class Pause:
    kind: str  # one of REASONS
    text: str


def settling(settle_s: float) -> Pause:
    return Pause(BROKER_SETTLING, f"a broker that was down answers again: no move starts for {settle_s:g} s (Kafka "
                                  f"3.7.0 never swaps in moves started while a broker that came back reports its "
                                  f"replicas' dirs: KAFKA-16365)")


# A running move of the balancer's own: the replica and the dir its copy is being built in.
OwnMove = tuple[TopicPartitionReplica, str]


def check(client: Client, brokers: Iterable[int], missing: Iterable[int], own: set[OwnMove],
          canary: Canary | None = None, max_p99_ms: float | None = None,
          zookeeper: str | None = None) -> Pause | None:
    """Why a cluster must wait now, or None. `brokers`: those discovery found; `missing`: ids partitions name that
    no broker list does; `zookeeper`: the cluster's ZooKeeper (HOST:PORT[/chroot]) when it was found through it."""
    missing = sorted(missing)
    if missing:
        return Pause(BROKER_DOWN, f"broker(s) {some(missing, ',')} not among the live brokers (down or fenced)")
    futures: list[str] = []
    for broker in sorted(brokers):
        try:
            dirs = describe_broker(client, broker)
        except (ClientError, AdminError) as e:
            try:
                client.reconnect(broker)
            except ClientError:
                pass
            return Pause(BROKER_DOWN, f"broker {broker} does not answer DescribeLogDirs: {e}")
        for d in dirs:
            if d.error_code:
                return Pause(DIR_OFFLINE, f"log dir {d.path} of broker {broker} is offline "
                                          f"({error_name(d.error_code)})")
            for p in d.partitions:
                if p.is_future and (TopicPartitionReplica(p.topic, p.partition, broker), d.path) not in own:
                    futures.append(f"{p.topic}-{p.partition} on broker {broker} to {d.path}")
    mine = {f"{r.topic}-{r.partition}" for r, _ in own}  # the balancer's own moves between brokers among them
    try:
        ongoing = [tp for tp in _reassignments(client) if tp not in mine]
    except (ClientError, AdminError) as e:
        return Pause(REASSIGNMENT, f"cannot list the reassignments running: {e}")
    if zookeeper is not None:
        try:
            listed = _zk_reassignments(zookeeper)
        except (AdminError, KazooException) as e:
            return Pause(REASSIGNMENT, f"cannot read {REASSIGN_PARTITIONS} in ZooKeeper: {e or type(e).__name__}")
        ongoing += [tp for tp in listed if tp not in mine and tp not in ongoing]
    if ongoing:
        return Pause(REASSIGNMENT, f"{len(ongoing)} partition reassignment(s) running that the balancer did not "
                                   f"start: {some(ongoing)}")
    if futures:
        return Pause(LOG_DIR_MOVE, f"{len(futures)} log-dir move(s) running that the balancer did not start: "
                                   f"{some(futures, '; ')}")
    if canary is not None and max_p99_ms is not None:
        p99 = canary.p99_ms()
        if p99 is None:  # no move starts on a latency not known yet
            return Pause(PRODUCE_LATENCY, f"waiting for the canary's first {MIN_SAMPLES} produces")
        if p99 > max_p99_ms:
            return Pause(PRODUCE_LATENCY, f"produce p99 {p99:.0f} ms over the last {canary.window_s:g} s is above "
                                          f"{max_p99_ms:g} ms")
    return None


def _zk_reassignments(connect: str) -> list[str]:
    """The partitions `/admin/reassign_partitions` lists (none when it is absent)."""
    from mover.admin.reassign.zookeeper_view import ZkReassignments
    from mover.admin.zookeeper import AdminZkClient

    with AdminZkClient(connect, read_only=True) as zk:
        return [f"{t}-{p}" for t, p in sorted(ZkReassignments(zk.zk).list_reassignments())]


def _reassignments(client: Client) -> list[str]:
    conn = client.any_connection()
    if not conn.supports(LIST_PARTITION_REASSIGNMENTS):
        return []  # moverd, Kafka before 2.4: no KIP-455 reassignment can run through them
    return [f"{t}-{p}" for t, p in sorted(list_reassignments(client))]
