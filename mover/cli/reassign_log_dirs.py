"""--execute / --move, --verify and --cancel: kafka-reassign-partitions.sh's log-dir half, over AlterReplicaLogDirs
and DescribeLogDirs (KIP-113 Scripts). With --bootstrap-server the lines are those of Kafka 3.x's tool (the one
users run today); with --zookeeper, which Kafka's tool dropped in 3.0, those of Kafka 2.3's
(docs/kafka-compat.md#kafka-reassign-partitionssh-with-log_dirs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TextIO

from mover.admin import throttle
from mover.admin.assignment import PartitionTarget, move_json, reassignment_json
from mover.admin.client import Client
from mover.admin.common import TopicPartitionReplica
from mover.admin.log_dir_state import ReplicaDirs
from mover.admin.reassign.log_dir_moves import (
    cancel_moves,
    check_cancel,
    check_log_dir_plan,
    check_move,
    describe_replicas,
    partition_assignment,
    set_move_throttle,
    start_move,
    start_moves,
)
from mover.admin.zookeeper import AdminZkClient
from mover.cli import java_order
from mover.cli.common import EXIT_ERROR, EXIT_IN_PROGRESS, EXIT_OK

DEFAULT_TIMEOUT_S = 10.0


# ------------------------------------------------------------------------------------------ AlterReplicaLogDirs


def _print_request_ids(request_ids: dict[int, list[int]], out: TextIO) -> None:
    for broker, ids in request_ids.items():
        for rid in dict.fromkeys(ids):
            print(f"Request id: {rid} (broker {broker})", file=out)


# --------------------------------------------------------------------------------------------------- execute


def execute(client: Client, targets: list[PartitionTarget], timeout_s: float, out: TextIO,
            throttle_rate: int | None = None, *, zk: AdminZkClient | None = None) -> int:
    """The library's checks and moves (mover/admin/reassign/log_dir_moves.py) with Kafka's lines around them. With
    `zk` (--zookeeper) the moves go to /admin/reassign_partitions (the brokers carry them out); no request id is
    known yet. Files that move replicas between brokers go to the step engine (mover/cli/reassign_brokers.py)."""
    plan = check_log_dir_plan(client, targets, zk)
    print("Current partition replica assignment\n", file=out)
    print(reassignment_json(plan.current) + "\n", file=out)
    print("Save this to use as the --reassignment-json-file option during rollback", file=out, flush=True)
    if throttle_rate is not None:
        if zk is not None:
            print("Warning: You must run Verify periodically, until the reassignment completes, to ensure the "
                  "throttle is removed. You can also alter the throttle by rerunning the Execute command passing a "
                  "new value.", file=out)
        else:
            print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                  "throttle is removed.", file=out)
        set_move_throttle(client, plan.brokers, throttle_rate, zk)
        print(f"The replica-alter-dir throttle limit was set to {throttle_rate} B/s", file=out, flush=True)
    if zk is not None:
        start_moves(client, targets, plan, timeout_s, zk)
        print("Successfully started reassignment of partitions.", file=out)
        return EXIT_OK
    # Kafka 3.x's tool also (re)asks the controller for the same replica lists here; between log dirs of the same
    # brokers that changes nothing, so only its line is printed.
    parts = sorted({(t.topic, t.partition) for t in targets})
    print(f"Successfully started partition reassignment{'' if len(parts) == 1 else 's'} for "
          f"{','.join(f'{t}-{p}' for t, p in parts)}", file=out)
    request_ids = start_moves(client, targets, plan, timeout_s)
    if plan.wanted:
        started = sorted(plan.wanted, key=_replica_order)
        print(f"Successfully started log directory move{'' if len(started) == 1 else 's'} for: "
              f"{','.join(map(str, started))}", file=out)
    _print_request_ids(request_ids, out)
    return EXIT_OK


def _replica_order(r: TopicPartitionReplica) -> tuple[int, str, int]:
    """Kafka 3.x's tool sorts replicas by broker, then topic, then partition."""
    return (r.broker, r.topic, r.partition)


def move(client: Client, broker: int, wanted: dict[TopicPartitionReplica, str], timeout_s: float, out: TextIO,
         *, zk: AdminZkClient | None = None) -> int:
    """kafka-log-dirs.sh --move (KIP-113 Scripts 1): one broker, every replica to the dir named."""
    current = check_move(client, broker, wanted, zk)
    print("Current replica log dirs\n", file=out)
    print(move_json(current) + "\n", file=out)
    print("Save this to use as the --assignment option during rollback", file=out, flush=True)
    request_ids = start_move(client, wanted, timeout_s, zk)
    print("Successfully started moving replicas.", file=out)
    _print_request_ids(request_ids, out)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------------- verify


@dataclass
class LogDirMoves:
    """Kafka 3.x's judgement of a file's `log_dirs` (its verifyReplicaMoves): one line per replica with a dir,
    sorted by broker, topic, partition."""

    lines: list[str] = field(default_factory=list)
    in_progress: bool = False  # a future copy heading for the wanted dir
    copying: bool = False  # a future copy anywhere: Kafka keeps the throttles while one runs
    failed: bool = False  # a replica elsewhere than the file says, or on a broker the cluster does not have
    # Replicas their (live) broker does not hold: a failure, unless a move between brokers is still bringing them.
    missing: list[TopicPartitionReplica] = field(default_factory=list)


def log_dir_moves(client: Client, targets: list[PartitionTarget]) -> LogDirMoves:
    """Where each replica the file gives a dir is (DescribeLogDirs of its broker): in that dir with no future copy
    left is done; a broker the cluster does not have cannot be asked."""
    wanted = {r: d for t in targets for r, d in t.replica_dirs().items()}
    known = {r: d for r, d in wanted.items() if r.broker in client.brokers}
    state = describe_replicas(client, known)
    moves = LogDirMoves()
    for replica in sorted(wanted, key=_replica_order):
        log_dir = wanted[replica]
        where = f"Partition {replica.partition_name} on broker {replica.broker}"
        if replica not in known:
            moves.failed = True
            moves.lines.append(f"Partition {replica.partition_name} cannot be found in any live log directory on "
                               f"broker {replica.broker}.")
            continue
        info = state[replica.broker][1].get(replica)
        if info is None or info.current is None:
            moves.missing.append(replica)
            moves.lines.append(f"Partition {replica.partition_name} is not found in any live log dir on broker "
                               f"{replica.broker}. There is likely an offline log directory on the broker.")
        elif info.future is not None:
            moves.copying = True
            if info.future == log_dir:
                moves.in_progress = True
                moves.lines.append(f"Reassignment of replica {replica} is still in progress.")
            else:
                moves.failed = True
                moves.lines.append(f"{where} is being moved to log dir {info.future} instead of {log_dir}.")
        elif info.current == log_dir:
            moves.lines.append(f"Reassignment of replica {replica} completed successfully.")
        else:
            moves.failed = True
            moves.lines.append(f"{where} is not being moved from log dir {info.current} to {log_dir}.")
    return moves


def verify(client: Client, targets: list[PartitionTarget], out: TextIO, *, preserve_throttles: bool = False,
           zk: AdminZkClient | None = None, steps_running: frozenset[tuple[str, int]] = frozenset()) -> int:
    """Exit: 0 all done, 3 some replica still moving, 1 something failed (Kafka's tool exits 0 in every case). When
    all is done the throttles are cleared, as Kafka does (unless `preserve_throttles`). With --bootstrap-server the
    lines are Kafka 3.x's, with --zookeeper Kafka 2.3's; `steps_running` (--zookeeper): partitions a running
    mover-reassign request still moves in steps, in progress even between two batches' znodes."""
    if zk is not None:
        return _verify_zookeeper(client, targets, out, preserve_throttles, zk, steps_running)
    failed = False
    topics = sorted({t.topic for t in targets})
    assignment = partition_assignment(client, topics)
    lines = ["Status of partition reassignment:"]
    for t in sorted(targets, key=lambda t: (t.topic, t.partition)):
        current = assignment.get((t.topic, t.partition), [])
        if current == list(t.replicas):
            lines.append(f"Reassignment of partition {t.name} is completed.")
        else:
            failed = True
            lines.append(f"There is no active reassignment of partition {t.name}, but replica set is "
                         f"{','.join(map(str, current))} rather than {','.join(map(str, t.replicas))}.")
    print("\n".join(lines), file=out)
    moves = log_dir_moves(client, targets)
    # Kafka prints the replicas' block even when empty: the blank line before its throttle lines.
    print("\n".join(moves.lines), file=out)
    # Kafka clears the throttles once no copy is running, whatever else it found (a replica in another dir, a
    # partition on other brokers): only a running copy still needs them.
    if not moves.copying and not preserve_throttles:
        clear_throttles(client, targets, out)
    if failed or moves.failed or moves.missing:
        return EXIT_ERROR
    return EXIT_IN_PROGRESS if moves.in_progress else EXIT_OK


def clear_throttles(client: Client, targets: list[PartitionTarget], out: TextIO) -> None:
    """Kafka 3.x's clearAllThrottles: its two lines, and the keys deleted wherever they are set."""
    brokers, names = throttled_resources(client, targets)
    print_clearing_brokers(brokers, out)
    throttle.clear_broker_throttles(client, [b for b in brokers if b in client.brokers])
    print_clearing_topics(names, out)
    throttle.clear_topic_throttles(client, names)


def throttled_resources(client: Client, targets: list[PartitionTarget]) -> tuple[list[int], list[str]]:
    """The brokers and topics Kafka 3.x's --verify clears, in its order: the cluster's brokers plus every replica of
    the file (a Java HashSet), the file's topics (another)."""
    cluster = java_order.order(dict.fromkeys(client.brokers), java_order.int_hash)
    brokers = java_order.order(dict.fromkeys([*cluster, *(b for t in targets for b in t.replicas)]),
                               java_order.int_hash)
    return brokers, java_order.order(dict.fromkeys(t.topic for t in targets), java_order.string_hash)


def print_clearing_brokers(brokers: list[int], out: TextIO) -> None:
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
          f"{','.join(map(str, brokers))}", file=out)


def print_clearing_topics(names: list[str], out: TextIO) -> None:
    print(f"Clearing topic-level throttles on topic{'' if len(names) == 1 else 's'} {','.join(names)}", file=out)


def _verify_zookeeper(client: Client, targets: list[PartitionTarget], out: TextIO, preserve_throttles: bool,
                      zk: AdminZkClient, steps_running: frozenset[tuple[str, int]] = frozenset()) -> int:
    """Kafka 2.3's --verify (its verifyAssignment): a partition still in /admin/reassign_partitions is in progress;
    otherwise its replicas in /brokers/topics must be the file's, in order (the first is the preferred leader). As
    Kafka's, it finds every status first, printing what is wrong as it goes (`ERROR: ...` per partition, then the
    replicas' reasons), and then prints the statuses: the partitions in the file's order (Kafka's map keeps that
    order up to four partitions), then the replicas with a log dir."""
    print("Status of partition reassignment: ", file=out)
    assignment = zk.assignment(sorted({t.topic for t in targets}))
    pending = zk.pending() | steps_running
    partitions: list[tuple[str, str]] = []
    for t in targets:
        if (t.topic, t.partition) in pending:
            partitions.append((t.name, "is still in progress"))
            continue
        current = assignment.get((t.topic, t.partition), [])  # Kafka reads a partition it lacks as no replicas
        if current == list(t.replicas):
            partitions.append((t.name, "completed successfully"))
            continue
        print(f"ERROR: Assigned replicas ({','.join(map(str, current))}) don't match the list of replicas for "
              f"reassignment ({','.join(map(str, t.replicas))}) for partition {t.name}", file=out)
        partitions.append((t.name, "failed"))

    wanted = {r: d for t in targets for r, d in t.replica_dirs().items()}
    state = describe_replicas(client, {r: d for r, d in wanted.items() if r.broker in client.brokers})
    found = {r: state[r.broker][1].get(r) if r.broker in state else None for r in wanted}
    replicas = [(r, _replica_status(r, log_dir, found[r], out)) for r, log_dir in wanted.items()]
    for name, status in partitions:
        print(f"Reassignment of partition {name} {status}", file=out)
    for replica, status in replicas:
        print(f"Reassignment of replica {replica} {status}", file=out)
    # Kafka's "failed" for a replica a pending move between brokers has not brought yet: in progress here.
    arriving = {r for r, info in found.items()
                if (info is None or info.current is None) and (r.topic, r.partition) in pending}
    statuses = {status for _, status in partitions} | {
        "is still in progress" if r in arriving else status for r, status in replicas}
    if "failed" in statuses:
        return EXIT_ERROR
    if "is still in progress" in statuses:
        return EXIT_IN_PROGRESS
    if not preserve_throttles and throttle.remove_if_set(client, sorted(client.brokers)):
        print("Throttle was removed.", file=out)
    return EXIT_OK


def _replica_status(replica: TopicPartitionReplica, log_dir: str, info: ReplicaDirs | None, out: TextIO) -> str:
    """Kafka 2.3's judgement of one replica's dir. Its AdminClient answers a replica its broker does not hold as one
    in no dir, so that line always blames an offline dir."""
    where = f"Partition {replica.partition_name} on broker {replica.broker}"
    if info is None or info.current is None:
        print(f"Partition {replica.partition_name} is not found in any live log dir on broker {replica.broker}. "
              f"There is likely offline log directory on the broker.", file=out)
        return "failed"
    if info.future == log_dir:
        return "is still in progress"
    if info.future is not None:
        print(f"{where} is being moved to log dir {info.future} instead of {log_dir}", file=out)
        return "failed"
    if info.current == log_dir:
        return "completed successfully"
    print(f"{where} is not being moved from log dir {info.current} to {log_dir}", file=out)
    return "failed"


# ---------------------------------------------------------------------------------------------------- cancel


def cancel(client: Client, targets: list[PartitionTarget], out: TextIO) -> int:
    """Cancel the moves of the file's replicas: AlterReplicaLogDirs to each one's current dir (Kafka semantics:
    the destination is where it already is, so the running copy is dropped)."""
    wanted, state = check_cancel(client, targets)
    back: dict[TopicPartitionReplica, str] = {}
    for replica in wanted:
        info = state[replica.broker][1].get(replica)
        if info is None or info.current is None:
            print(f"Replica {replica} is not in any live log dir of broker {replica.broker}: nothing to cancel",
                  file=out)
        elif info.future is None:
            print(f"Replica {replica} is not being moved (it is in {info.current})", file=out)
        else:
            back[replica] = info.current
    if back:
        cancel_moves(client, back, DEFAULT_TIMEOUT_S)
        for replica, log_dir in back.items():
            future = state[replica.broker][1][replica].future
            print(f"Cancelled the move of replica {replica} to {future}; it stays in {log_dir}", file=out)
    return EXIT_OK
