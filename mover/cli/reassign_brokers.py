"""mover-reassign's actions on reassignments between brokers (KIP-455 APIs), run by the step engine
(mover/admin/reassign/step_engine.py): --generate, --execute (KIP-435 steps), --verify, --progress (KIP-179), --cancel,
--list. Output lines are Kafka 3.7 kafka-reassign-partitions.sh's where Kafka has the verb (docs/cli.md#mover-reassign).
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from mover.admin.alter_log_dirs import by_broker
from mover.admin.assignment import ANY_LOG_DIR, PartitionTarget, reassignment_json
from mover.admin.client import Client, ClientError, join_ids
from mover.admin.common import TopicPartitionReplica, format_bytes, some
from mover.admin.log_dir_state import describe_broker
from mover.admin.reassign.kip455 import (
    Ongoing,
    PartitionState,
    TopicPartition,
    alter_reassignments,
    check_apis,
    list_reassignments,
    min_insync_replicas,
    partition_states,
)
from mover.admin.reassign.replication_throttle import ConfigAccess, ReplicationThrottle
from mover.admin.reassign.request_store import ClusterRequestStore as RequestStore
from mover.admin.reassign.schedule import PartitionPlan, Schedule, format_duration, leader_sizes, schedule
from mover.admin.reassign.status_store import FINAL, RUNNING, where
from mover.admin.reassign.step_engine import (
    DEFAULT_POLL_S,
    DEFAULT_STALL_S,
    ClusterView,
    KafkaApis,
    PartitionRun,
    ReplicaProgress,
    RunLimits,
    StepEngine,
    adopt,
)
from mover.admin.reassign.steps import StepError, check_target
from mover.admin.replica_assignment import AssignmentError, assign_replicas
from mover.cli.common import EXIT_ERROR, EXIT_IN_PROGRESS, EXIT_OK, CliError
from mover.cli.reassign import (
    describe_replicas,
    log_dir_moves,
    print_clearing_brokers,
    print_clearing_topics,
    throttled_resources,
)
from mover.wire.errors import ErrorCode
from mover.zk import bounded_json

EXIT_INTERRUPTED = 130


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _ids(ids: Any) -> str:
    return ",".join(map(str, ids))


# ------------------------------------------------------------------------------------------------- --generate


def load_topics_to_move(path: str) -> list[str]:
    try:
        doc = bounded_json.loads(Path(path).read_bytes())
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise CliError(f"{path} is not valid JSON: {bounded_json.reason(e)}") from None
    topics = doc.get("topics") if isinstance(doc, dict) else None
    if not isinstance(topics, list) or not all(isinstance(t, dict) and isinstance(t.get("topic"), str)
                                               for t in topics):
        raise CliError(f'{path}: expected {{"version":1,"topics":[{{"topic":"name"}},...]}}')
    names = [t["topic"] for t in topics]
    if len(set(names)) != len(names):
        raise CliError(f"{path}: duplicate topic in the topics to move")
    return names


def generate(client: Client, topics: list[str], brokers: list[int], out: TextIO, *, rack_aware: bool = True,
             rng: random.Random | None = None) -> int:
    """Kafka's --generate: the current assignment of `topics` and Kafka's proposal for them on `brokers`
    (AdminUtils.assignReplicasToBrokers, mover/admin/replica_assignment.py: round robin from a random broker with a
    random follower shift, rack-aware when the brokers have racks), one draw per topic as Kafka's tool does."""
    duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
    if duplicates:
        raise CliError(f"Broker list contains duplicate entries: {_ids(duplicates)}")
    unknown = sorted(set(brokers) - set(client.brokers))
    if unknown:
        raise CliError(f"Unknown broker id {some(unknown, ',')}")
    states, missing = partition_states(client, topics)
    if missing:
        raise CliError(f"Topic {sorted(missing)[0]} not found.")
    # Kafka takes the brokers in the cluster's order (by id) whatever the order of --broker-list.
    chosen = sorted(brokers)
    racks = {b: client.racks.get(b) if rack_aware else None for b in chosen}
    if rack_aware and any(racks.values()) and not all(racks.values()):
        raise CliError("Not all brokers have rack information. Add --disable-rack-aware in command line to make "
                       "replica assignment without rack information.")
    rng = rng or random.Random()
    current, proposed = [], []
    for topic in topics:
        parts = sorted(p for (t, p) in states if t == topic)
        if not parts:
            continue
        rf = len(states[(topic, parts[0])].replicas)
        try:
            placed = assign_replicas(chosen, racks, len(parts), rf, rng)
        except AssignmentError as e:
            raise CliError(str(e)) from None
        for p in parts:
            replicas = states[(topic, p)].replicas
            current.append(PartitionTarget(topic, p, replicas, (ANY_LOG_DIR,) * len(replicas)))
        # As Kafka's: the proposal numbers the topic's partitions 0..n-1.
        proposed += [PartitionTarget(topic, p, tuple(r), (ANY_LOG_DIR,) * rf) for p, r in sorted(placed.items())]
    print("Current partition replica assignment", file=out)
    print(reassignment_json(current) + "\n", file=out)
    print("Proposed partition reassignment configuration", file=out)
    print(reassignment_json(proposed), file=out)
    return EXIT_OK


# ------------------------------------------------------------------------------------------------- checks


@dataclass
class Checked:
    states: dict[TopicPartition, PartitionState]
    min_insync: dict[str, int]
    adopted: dict[TopicPartition, Any]


def check_reassignment(client: Client, targets: list[PartitionTarget], cluster: ClusterView | None = None) -> Checked:
    """Everything that makes the file impossible, before anything starts: one line each (CliError). `cluster`:
    where partitions and running reassignments are read (default KIP-455's APIs; ZooKeeper for --zookeeper)."""
    view = cluster or KafkaApis(client)
    # Kafka 3.7's order: brokers, then topics and partitions.
    unknown = sorted({b for t in targets for b in t.replicas} - set(client.brokers))
    if unknown:
        raise CliError(f"Unknown broker id {some(unknown, ',')}")
    topics = sorted({t.topic for t in targets})
    states, missing_topics = view.partition_states(topics)
    if missing_topics:
        raise CliError(f"Topic {sorted(missing_topics)[0]} not found.")
    missing = [t.name for t in targets if (t.topic, t.partition) not in states]
    if missing:
        raise CliError(f"Unable to find partition: {some(missing)}")
    if cluster is None:
        check_apis(client)
    min_insync = min_insync_replicas(client, topics)
    for t in targets:
        try:
            check_target(t.replicas, min_insync[t.topic])
        except StepError as e:
            raise CliError(f"Partition {t.name}: {e}") from None
    ongoing = view.list_reassignments([(t.topic, t.partition) for t in targets])
    adopted = {}
    for t in targets:
        tp = (t.topic, t.partition)
        if tp in ongoing:
            step = adopt(ongoing[tp], t.replicas)
            if step is None:
                raise CliError(f"Partition {t.name} is already being reassigned to "
                               f"{list(ongoing[tp].target)} by someone else: wait for it, or cancel it first")
            adopted[tp] = step
    return Checked(states, min_insync, adopted)


# ------------------------------------------------------------------------------------------------- --dry-run


def _schedule(client: Client, targets: list[PartitionTarget], checked: Checked, limits: RunLimits
              ) -> tuple[Schedule, list[str]]:
    states = checked.states
    sizes, problems = leader_sizes(client, {(t.topic, t.partition): states[(t.topic, t.partition)].leader
                                            for t in targets})
    plans = [PartitionPlan((t.topic, t.partition), tuple(states[(t.topic, t.partition)].replicas), tuple(t.replicas),
                           checked.min_insync[t.topic], sizes.get((t.topic, t.partition), 0),
                           states[(t.topic, t.partition)].leader) for t in targets]
    return schedule(plans, limits.steps, limits.throttle), problems


def estimate_line(sch: Schedule, limits: RunLimits) -> str:
    """One line: steps, batches, bytes and (with a throttle) the time the copies take at it."""
    head = f"Estimate: {len(sch.steps)} steps in {sch.batches} batches, {format_bytes(sch.total_bytes)} to copy"
    eta = sch.eta_s
    if limits.throttle is None or eta is None:
        return head + "; no time without a throttle (the copies go as fast as the brokers allow)"
    return head + f", about {format_duration(eta)} at the throttle of {limits.throttle} B/s per broker"


def dry_run(client: Client, targets: list[PartitionTarget], out: TextIO, *, limits: RunLimits,
            cluster: ClusterView | None = None) -> int:
    """What --execute would do, changing nothing: each partition's KIP-435 steps in the batches the limits allow,
    the bytes each copies and, with a throttle, when each would start and end (mover/admin/reassign/schedule.py)."""
    checked = check_reassignment(client, targets, cluster)
    print("Dry run: nothing is changed in the cluster.", file=out)
    print(f"Limits: {limits.describe()}", file=out)
    sch, problems = _schedule(client, targets, checked, limits)
    for line in problems:
        print(f"Warning: {line}; its partitions count as empty", file=out)
    for batch in range(1, sch.batches + 1):
        steps = [s for s in sch.steps if s.batch == batch]
        start = steps[0].start_s
        print(f"Batch {batch}" + ("" if start is None else f", starting at {format_duration(start)}") + ":", file=out)
        for s in steps:
            moves = [f"+{b}" for b in s.step.adding] + [f"-{b}" for b in s.step.removing]
            what = " ".join(moves) or "reorder"
            print(f"  {s.tp[0]}-{s.tp[1]} step {s.index}: {list(s.step.current)} -> {list(s.step.target)} ({what}"
                  + (", new leader" if s.step.leader_movement else "") + f"), {format_bytes(s.bytes)}"
                  + ("" if s.end_s is None else f", ends at {format_duration(s.end_s)}"), file=out)
    print(estimate_line(sch, limits), file=out)
    return EXIT_OK


# ------------------------------------------------------------------------------------------------- --execute


def execute(client: Client, targets: list[PartitionTarget], out: TextIO, *, limits: RunLimits,
            limits_path: Path | None, store: RequestStore, stop: threading.Event, poll_s: float = DEFAULT_POLL_S,
            stall_s: float = DEFAULT_STALL_S, log_dir_timeout_s: float = 10.0, cluster: ClusterView | None = None,
            configs: ConfigAccess | None = None) -> int:
    """KIP-435 steps on the step engine. `cluster` and `configs`: ZooKeeper's for --zookeeper (brokers before 2.4),
    else the brokers' APIs."""
    checked = check_reassignment(client, targets, cluster)
    current = [PartitionTarget(t.topic, t.partition, checked.states[(t.topic, t.partition)].replicas,
                               (ANY_LOG_DIR,) * len(checked.states[(t.topic, t.partition)].replicas))
               for t in targets]
    print("Current partition replica assignment\n", file=out)
    print(reassignment_json(current) + "\n", file=out)
    print("Save this to use as the --reassignment-json-file option during rollback", file=out, flush=True)
    # One run at a time per partition: a live run holding one of them refuses this one (AdminError naming it).
    request_id, resumed = store.claim(request_partitions(targets))
    print(f"Request id: {request_id}" + (" (resumed from what the cluster says)" if resumed else ""), file=out)
    throttle = ReplicationThrottle(client, store, configs)
    if limits.throttle is not None:
        print("Warning: the throttle is removed when the reassignment completes, or by --verify or --cancel if "
              "this run is stopped.", file=out)
        print(f"The inter-broker throttle limit is {limits.throttle} B/s on the brokers of each running step",
              file=out)
    print(f"Limits: {limits.describe()}", file=out, flush=True)
    print(estimate_line(_schedule(client, targets, checked, limits)[0], limits), file=out, flush=True)
    runs = [PartitionRun((t.topic, t.partition), t.replicas, checked.min_insync[t.topic]) for t in targets]
    engine = StepEngine(client, runs, limits, throttle, out=out, limits_path=limits_path, poll_s=poll_s,
                        stall_s=stall_s, stop=stop, should_stop=lambda: store.reloaded_state(request_id) != RUNNING,
                        cluster=cluster, on_tick=lambda e: store.progress_tick(request_id, e.running()),
                        log_dirs={r: d for t in targets for r, d in t.replica_dirs().items()},
                        log_dir_timeout_s=log_dir_timeout_s)
    try:
        result = engine.run()
        if result.samples:
            # What ran at once, as the engine counted it at each poll: the limits were never exceeded.
            print(f"Most at once: {max(x.partitions for x in result.samples)} partition movements, "
                  f"{max(x.leaders for x in result.samples)} leader movements, "
                  f"{max(x.max_replicas_added for x in result.samples)} replicas added to one partition", file=out)
    except KeyboardInterrupt:
        print(f"Interrupted: the running steps go on in the cluster; their throttles stay. Run the same --execute "
              f"again to resume (request {request_id}), or --cancel with the same file to stop them.", file=out)
        return EXIT_INTERRUPTED
    if result.remaining and (result.stopped or engine.external_stop):
        restored = throttle.restore_all(out=out) if not engine.running() else []
        if restored:
            print("Throttles restored: " + ", ".join(restored), file=out)
        if engine.external_stop:
            print(f"Stopped: request {request_id} was cancelled; {len(result.done)} partitions done, "
                  f"{len(result.remaining)} not.", file=out)
            return EXIT_ERROR
        print(f"Stopped: {len(result.done)} partitions done, {len(result.remaining)} not started or not finished "
              f"({some(result.remaining)}). Run the same "
              f"--execute again to resume (request {request_id}), or --cancel with the same file.", file=out)
        return EXIT_INTERRUPTED
    restored = throttle.restore_all(out=out)
    if restored:
        print("Throttles removed: " + ", ".join(restored), file=out)
    for name, error in sorted(result.failed.items()):
        print(f"Reassignment of partition {name} failed: {error}", file=out)
    store.finish(request_id, "failed" if result.failed else "completed")
    if result.failed:
        return EXIT_ERROR
    print(f"Successfully reassigned partitions {','.join(result.done)} (request {request_id})", file=out)
    return EXIT_OK


# ------------------------------------------------------------------------------------------------- --verify


def verify(client: Client, targets: list[PartitionTarget], out: TextIO, *, store: RequestStore,
           preserve_throttles: bool = False) -> int:
    """Kafka 3.7's --verify: the partitions (sorted), then the file's `log_dirs` judged as mover-log-dirs judges
    them; throttles are put back once nothing is moving. Exit 1 when something failed, else 3 while something
    moves, else 0."""
    states, _ = partition_states(client, sorted({t.topic for t in targets}))
    ongoing = list_reassignments_if_moving(client, states, {(t.topic, t.partition): t.replicas for t in targets})
    print("Status of partition reassignment:", file=out)
    failed = False
    moving: set[TopicPartition] = set()
    for t in sorted(targets, key=lambda t: (t.topic, t.partition)):
        tp = (t.topic, t.partition)
        state = states.get(tp)
        if tp in ongoing or (state is not None and state.replicas != t.replicas
                             and running_request(store, tp)):
            print(f"Reassignment of partition {t.name} is still in progress.", file=out)
            moving.add(tp)
        elif state is not None and list(state.replicas) == list(t.replicas):
            print(f"Reassignment of partition {t.name} is completed.", file=out)
        else:
            # Kafka's line for a partition it cannot find names no replicas.
            current = _ids(state.replicas) if state is not None else ""
            print(f"There is no active reassignment of partition {t.name}, but replica set is {current} rather "
                  f"than {_ids(t.replicas)}.", file=out)
            failed = True
    moves = log_dir_moves(client, targets)
    # Kafka prints the replicas' block even when the file has none: the blank line before its throttle lines.
    print("\n".join(moves.lines), file=out)
    # Kafka's line for a replica a running move between brokers has not brought yet is its "not found" one; it is
    # still in progress, not failed.
    arriving = [r for r in moves.missing if (r.topic, r.partition) in moving]
    failed |= moves.failed or len(arriving) < len(moves.missing)
    in_progress = bool(moving) or moves.in_progress
    if not (moving or moves.copying) and not preserve_throttles:
        # Kafka's lines; what is done is better than Kafka's delete: each resource's own value is put back.
        ReplicationThrottle(client, store).restore_all(wait_s=0, out=out)
        brokers, names = throttled_resources(client, targets)
        print_clearing_brokers(brokers, out)
        print_clearing_topics(names, out)
    if failed:
        return EXIT_ERROR
    return EXIT_IN_PROGRESS if in_progress else EXIT_OK


def settled(state: PartitionState | None, target: tuple[int, ...]) -> bool:
    """On its target's brokers in the target's order, every replica in the ISR: no reassignment between brokers can
    be running for it (one adding a replica has it out of the ISR, one removing lists it among the replicas)."""
    return state is not None and state.replicas == target and set(target) <= set(state.isr)


def list_reassignments_if_moving(client: Client, states: dict[TopicPartition, PartitionState],
                                 targets: dict[TopicPartition, tuple[int, ...]]) -> dict[TopicPartition, Ongoing]:
    """ListPartitionReassignments of the targets' partitions, asked only when one of them is not settled: a file
    that only moves replicas between log dirs needs no KIP-455 request, which moverd (single-node, log dirs only)
    and brokers before 2.4 do not have."""
    if all(settled(states.get(tp), target) for tp, target in targets.items()):
        return {}
    check_apis(client)
    return list_reassignments(client, list(targets))


def request_partitions(targets: list[PartitionTarget]) -> list[dict[str, Any]]:
    """A request's partitions as the state file keeps them; `log_dirs` only where the file names a dir."""
    return [{"topic": t.topic, "partition": t.partition, "replicas": list(t.replicas)}
            | ({"log_dirs": list(t.log_dirs)} if t.replica_dirs() else {}) for t in targets]


def running_request(store: RequestStore, tp: TopicPartition) -> bool:
    latest = store.latest()
    if latest is None:
        return False
    req = store.request(latest)
    return req["state"] not in FINAL and any((p["topic"], p["partition"]) == tp for p in req["partitions"])


# ------------------------------------------------------------------------------------------------- --cancel


def cancel(client: Client, targets: list[PartitionTarget], out: TextIO, *, store: RequestStore,
           preserve_throttles: bool = False, poll_s: float = DEFAULT_POLL_S) -> int:
    """KIP-455 cancel of the file's partitions' running steps (each goes back to where its step started), after
    telling a running --execute of the same request to start nothing more; reports where each partition is left."""
    check_apis(client)
    tps = [(t.topic, t.partition) for t in targets]
    request_id = store.running_for(set(tps))
    if request_id is not None:
        store.finish(request_id, "cancelled")
    cancelled: set[TopicPartition] = set()
    # A running --execute reads the cancel at its next poll; a step it started just before is cancelled in the next
    # round here.
    for _ in range(3):
        ongoing = list_reassignments(client, tps)
        mine = {tp: None for tp in tps if tp in ongoing}
        if not mine:
            break
        refused = alter_reassignments(client, mine)
        refused = {tp: e for tp, e in refused.items() if e[0] != ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}
        if refused:
            tp, (code, message) = next(iter(refused.items()))
            raise CliError(f"Error cancelling partition {_name(tp)}: {code}" + (f": {message}" if message else ""))
        cancelled |= set(mine)
        time.sleep(poll_s)
    if cancelled:
        print(f"Successfully cancelled partition reassignments for: {','.join(_name(tp) for tp in sorted(cancelled))}",
              file=out)
    else:
        print("None of the specified partition reassignments are active.", file=out)
    states, _ = partition_states(client, sorted({t.topic for t in targets}))
    for t in targets:
        state = states.get((t.topic, t.partition))
        if state is None:
            # Kafka's --cancel lists only running reassignments, so a partition that is not there is no error.
            print(f"Partition {t.name} does not exist", file=out)
            continue
        done = state.replicas == t.replicas
        print(f"Partition {t.name} is left on replicas {_ids(state.replicas)}" + (" (its target)" if done else ""),
              file=out)
    if not preserve_throttles:
        restored = ReplicationThrottle(client, store).restore_all(out=out)
        if restored:
            print("Throttles removed: " + ", ".join(restored), file=out)
    return EXIT_OK


# ------------------------------------------------------------------------------------------------- --list


def list_command(client: Client, out: TextIO, store: RequestStore | None = None) -> int:
    check_apis(client)
    ongoing = list_reassignments(client)
    if store is not None:
        requests = [r for r in store.requests() if r.state not in FINAL]
    if not ongoing:
        print("No partition reassignments found.", file=out)
        _list_requests(requests if store is not None else [], out)
        return EXIT_OK
    print("Current partition reassignments:", file=out)
    for tp, og in sorted(ongoing.items()):
        # Kafka's line: "adding"/"removing" only when there are some (a step that only reorders has neither).
        print(f"{_name(tp)}: replicas: {_ids(og.replicas)}."
              + (f" adding: {_ids(og.adding)}." if og.adding else "")
              + (f" removing: {_ids(og.removing)}." if og.removing else ""), file=out)
    _list_requests(requests if store is not None else [], out)
    return EXIT_OK


def _list_requests(requests: list[Any], out: TextIO) -> None:
    """After Kafka's lines: the requests the cluster records as not over (docs/cli.md#where-the-requests-live)."""
    if not requests:
        return
    print("Reassignment requests not over:", file=out)
    for r in requests:
        print(f"Request {r.id}: {r.status()}, {len(r.partitions)} partitions, run by {where(r.owner)}", file=out)


# ------------------------------------------------------------------------------------------------- --progress


def request_progress(client: Client, store: RequestStore, request_id: int | None
                     ) -> tuple[int, dict[str, Any], list[tuple[str, str]], list[ReplicaProgress]]:
    """KIP-179 --progress of a request: per partition where it stands, per new replica of a running step its
    Progress (bytes it holds of the bytes the leader holds; null denominator when the leader cannot be asked)."""
    if request_id is None:
        request_id = store.latest()
        if request_id is None:
            raise CliError(f"no reassignment request is recorded in {store.where}")
    req = store.request(request_id)
    final = {(p["topic"], p["partition"]): tuple(p["replicas"]) for p in req["partitions"]}
    states, _ = partition_states(client, sorted({tp[0] for tp in final}))
    ongoing = list_reassignments_if_moving(client, states, final)
    rows: list[tuple[str, str]] = []
    wanted: dict[int, dict[str, list[int]]] = defaultdict(dict)
    replicas: list[tuple[TopicPartition, int, int]] = []
    for tp, target in sorted(final.items()):
        state = states.get(tp)
        if state is None:
            rows.append((_name(tp), "the partition no longer exists"))
        elif state.replicas == target:
            rows.append((_name(tp), f"completed, replicas {_ids(target)}"))
        elif tp in ongoing:
            og = ongoing[tp]
            rows.append((_name(tp), f"step running: {_ids(og.original)} -> {_ids(og.target)} "
                                    f"(adding {_ids(og.adding) or '-'}, removing {_ids(og.removing) or '-'})"))
            for b in og.adding:
                replicas.append((tp, b, state.leader))
                wanted[b].setdefault(tp[0], []).append(tp[1])
            if state.leader >= 0:
                wanted[state.leader].setdefault(tp[0], []).append(tp[1])
        else:
            rows.append((_name(tp), f"waiting for its next step, replicas {_ids(state.replicas)} "
                                    f"(target {_ids(target)})"))
    sizes: dict[tuple[int, TopicPartition], int] = {}
    down: set[int] = set()
    for broker, topics in wanted.items():
        try:
            for d in describe_broker(client, broker, topics):
                for p in d.partitions:
                    if not p.is_future:
                        sizes[(broker, (p.topic, p.partition))] = p.size
        except (ClientError, CliError):
            down.add(broker)
    progress = []
    for tp, b, leader in replicas:
        p = ReplicaProgress(TopicPartitionReplica(tp[0], tp[1], b))
        p.numerator = sizes.get((b, tp), 0)
        p.denominator = sizes.get((leader, tp)) if leader >= 0 and leader not in down else None
        if b in down:
            p.error = "broker unreachable"
        progress.append(p)
    # A partition's log dirs are looked at once it is on its brokers: before that its steps are the news.
    placed = [p for p in req["partitions"] if (tp := (p["topic"], p["partition"])) in states
              and states[tp].replicas == final[tp]]
    return request_id, req, rows, progress + log_dir_progress(client, placed)


def log_dir_progress(client: Client, partitions: list[dict[str, Any]]) -> list[ReplicaProgress]:
    """Per replica the request gives a log dir: the bytes its future copy holds of its current copy's, complete once
    it is in that dir with no future copy left (a replica its broker does not hold, or the broker down: an
    error)."""
    wanted = {r: d for p in partitions if p.get("log_dirs")
              for r, d in PartitionTarget(p["topic"], p["partition"], tuple(p["replicas"]),
                                          tuple(p["log_dirs"])).replica_dirs().items()}
    out = []
    for broker, group in sorted(by_broker(wanted).items()):
        try:
            where = describe_replicas(client, group)[broker][1]
        except (ClientError, CliError):
            where = None
        for replica in sorted(group, key=lambda r: (r.topic, r.partition)):
            p = ReplicaProgress(replica)
            info = where.get(replica) if where is not None else None
            if where is None:
                p.error = "broker unreachable"
            elif info is None or info.current is None:
                p.error = "not on the broker"
            elif info.future is not None:
                p.numerator, p.denominator = info.future_size, info.current_size
                if info.future != wanted[replica]:
                    p.error = f"moving to {info.future}, not {wanted[replica]}"
            else:
                p.numerator = p.denominator = info.current_size
                p.complete = info.current == wanted[replica]
                if not p.complete:
                    p.error = f"in {info.current}, not moving"
            out.append(p)
    return out


def progress(client: Client, store: RequestStore, request_id: int | None, out: TextIO) -> int:
    """--progress without --watch: one look (run() hands --watch to `watch`, which connects by itself)."""
    rid, req, rows, replicas = request_progress(client, store, request_id)
    print(f"Request {rid}: {req['state']}, {len(rows)} partitions", file=out)
    for name, text in rows:
        print(f"Partition {name}: {text}", file=out)
    for p in replicas:
        print(p.describe(), file=out)
    n_done = sum(text.startswith("completed") for _, text in rows)
    n_running = sum(text.startswith("step running") for _, text in rows)
    running = [p for p in replicas if not p.complete]
    copied = sum(p.numerator for p in running)
    total = None if any(p.denominator is None for p in running) else sum(p.denominator or 0 for p in running)
    print(f"Total: {n_done} of {len(rows)} partitions done, {n_running} with a step running; running steps "
          f"{copied} of {'unknown' if total is None else total} bytes", file=out)
    # A request's log-dir moves are part of it: done once each replica is in its dir too.
    done = n_done == len(rows) and all(p.complete for p in replicas)
    return EXIT_OK if done else EXIT_IN_PROGRESS


def watch(connect: Callable[[], Client], request_id: int | None, interval: float, out: TextIO) -> int:
    """--progress --watch. Bootstrapping (`connect`), opening the state file of the cluster it names and the KIP-455
    check (each broker's first handshake, made when a partition is not settled) happen in the watch's polls, so a
    restart landing on any of them is retried by the watches' one loop (mover/cli/progress.py poll_until_done) as
    one landing on a later poll is."""
    client: Client | None = None
    store: RequestStore | None = None

    def session() -> tuple[Client, RequestStore]:
        nonlocal client, store
        if client is None:
            client = connect()  # kept once bootstrapped: later losses reconnect through it (Client.connection)
        if store is None:
            # No KIP-455 check here: a request that only moves log dirs is followed without those APIs
            # (request_progress asks for them only when a partition is not settled).
            store = RequestStore.open(client, tool="mover-reassign")
        return client, store

    try:
        return _watch(session, request_id, interval, out)
    finally:
        if store is not None:
            store.close()
        if client is not None:
            client.close()


def _watch(session: Callable[[], tuple[Client, RequestStore]], request_id: int | None, interval: float,
           out: TextIO) -> int:
    from mover.cli.progress import LiveBars, poll_until_done

    with LiveBars(out) as bars:
        totals: dict[TopicPartitionReplica, int | None] = {}

        def poll() -> int | None:
            nonlocal request_id
            client, store = session()
            rid, req, rows, replicas = request_progress(client, store, request_id)
            request_id = rid
            done = sum(1 for _, text in rows if text.startswith("completed"))
            bars.bar("overall", f"request {rid}: partitions done", done, len(rows))
            for p in replicas:
                totals[p.replica] = p.denominator
                bars.bar(p.replica, f"replica {p.replica}", p.numerator, p.denominator)
            # A replica no longer listed finished its step: its bar shows it whole.
            for replica, total in totals.items():
                if replica not in {p.replica for p in replicas} and total is not None:
                    bars.bar(replica, f"replica {replica}", total, total)
            if done == len(rows) and all(p.complete for p in replicas):
                return EXIT_OK
            # Nothing more will happen: the run ended and no copy runs (a log-dir move that failed or was never
            # started has an error and never completes).
            if req["state"] not in (RUNNING,) and all(p.complete or p.error for p in replicas):
                return EXIT_IN_PROGRESS
            return None

        return poll_until_done(poll, interval)


def known_brokers(client: Client) -> str:
    return join_ids(client.brokers)
