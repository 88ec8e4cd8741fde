"""mover-reassign's actions on reassignments between brokers (KIP-455 APIs), run by the step engine
(mover/admin/reassign/step_engine.py): --generate, --execute (KIP-435 steps), --verify, --progress (KIP-179), --cancel,
--list. Output lines are Kafka 3.7 kafka-reassign-partitions.sh's where Kafka has the verb (docs/cli.md,
"mover-reassign").
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from mover.admin.assignment import ANY_LOG_DIR, PartitionTarget, reassignment_json
from mover.admin.client import Client, join_ids
from mover.admin.common import TopicPartitionReplica, format_bytes, some
from mover.admin.limits import RunLimits
from mover.admin.reassign.kip455 import (
    TopicPartition,
    check_apis,
    list_reassignments,
    partition_states,
)
from mover.admin.reassign.progress import progress_line
from mover.admin.reassign.replication_throttle import ConfigAccess
from mover.admin.reassign.request_progress import list_reassignments_if_moving, request_progress, running_request
from mover.admin.reassign.request_store import ClusterRequestStore as RequestStore
from mover.admin.reassign.run import (
    CANCELLED,
    STOPPED,
    ReassignmentRun,
    cancel_steps,
    check_plan,
    estimate_line,
    plan_schedule,
    restore_throttles,
)
from mover.admin.reassign.schedule import format_duration
from mover.admin.reassign.status_store import FINAL, RUNNING, where
from mover.admin.reassign.step_engine import DEFAULT_LOG_DIR_TIMEOUT_S, DEFAULT_POLL_S, DEFAULT_STALL_S, ClusterView
from mover.admin.replica_assignment import AssignmentError, assign_replicas
from mover.cli.common import EXIT_ERROR, EXIT_IN_PROGRESS, EXIT_INTERRUPTED, EXIT_OK, CliError, handling_sigint
from mover.cli.reassign_log_dirs import (
    log_dir_moves,
    print_clearing_brokers,
    print_clearing_topics,
    throttled_resources,
)
from mover.zk import bounded_json

# The tool the cluster's store names as the owner of the requests these verbs run.
PROG = "mover-reassign"


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


# ------------------------------------------------------------------------------------------------- --dry-run


def dry_run(client: Client, targets: list[PartitionTarget], out: TextIO, *, limits: RunLimits,
            cluster: ClusterView | None = None, poll_s: float = DEFAULT_POLL_S) -> int:
    """What --execute would do, changing nothing: each partition's KIP-435 steps in the batches the limits allow,
    the bytes each copies and, with a throttle, when each would start and end (mover/admin/reassign/schedule.py)."""
    checked = check_plan(client, targets, cluster)
    print("Dry run: nothing is changed in the cluster.", file=out)
    print(f"Limits: {limits.describe()}", file=out)
    sch, problems = plan_schedule(client, targets, checked, limits, poll_s)
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


def request_store(client: Client, out: TextIO) -> RequestStore:
    """The cluster's reassignment requests (docs/cli.md, "Where the requests live"); what the store has to say is
    printed as it comes."""
    return RequestStore.open(client, tool=PROG, say=lambda line: print(line, file=out, flush=True))


class Interrupt:
    """First SIGINT: start no more steps, let the running ones end. Second: leave now."""

    def __init__(self, stop: threading.Event, out: TextIO) -> None:
        self.stop = stop
        self.out = out

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.stop.is_set():
            raise KeyboardInterrupt
        self.stop.set()
        print("Interrupted: starting no more steps; waiting for the running ones (Ctrl-C again to leave now). "
              "Run the same --execute again to resume, or --cancel with the same file.", file=self.out, flush=True)


def execute(client: Client, targets: list[PartitionTarget], out: TextIO, *, limits: RunLimits, store: RequestStore,
            limits_path: Path | None = None, poll_s: float = DEFAULT_POLL_S, stall_s: float = DEFAULT_STALL_S,
            log_dir_timeout_s: float = DEFAULT_LOG_DIR_TIMEOUT_S, cluster: ClusterView | None = None,
            configs: ConfigAccess | None = None) -> int:
    """--execute of a file that moves replicas between brokers (mover-reassign, and mover-log-dirs for such a
    file): the library's run (mover/admin/reassign/run.py), its lines printed as they come, Ctrl-C turned into its
    stop, then Kafka 3.7's end lines and the exit code. `cluster` and `configs`: ZooKeeper's for --zookeeper
    (brokers before 2.4), else the brokers' APIs."""
    def say(line: str) -> None:
        print(line, file=out, flush=True)

    stop = threading.Event()
    run = ReassignmentRun(client, targets, limits=limits, store=store, say=say, limits_path=limits_path,
                          poll_s=poll_s, stall_s=stall_s, log_dir_timeout_s=log_dir_timeout_s, cluster=cluster,
                          configs=configs, stop=stop)
    checked = run.check()
    print("Current partition replica assignment\n", file=out)
    print(reassignment_json(checked.current) + "\n", file=out)
    print("Save this to use as the --reassignment-json-file option during rollback", file=out, flush=True)
    try:
        with handling_sigint(Interrupt(stop, out)):
            result = run.execute()
    except KeyboardInterrupt:
        print(f"Interrupted: the running steps go on in the cluster; their throttles stay. Run the same --execute "
              f"again to resume (request {run.request_id}), or --cancel with the same file to stop them.", file=out)
        return EXIT_INTERRUPTED
    rid = result.request_id
    if result.outcome == CANCELLED:
        print(f"Stopped: request {rid} was cancelled; {len(result.done)} partitions done, "
              f"{len(result.remaining)} not.", file=out)
        return EXIT_ERROR
    if result.outcome == STOPPED:
        print(f"Stopped: {len(result.done)} partitions done, {len(result.remaining)} not started or not finished "
              f"({some(result.remaining)}). Run the same "
              f"--execute again to resume (request {rid}), or --cancel with the same file.", file=out)
        return EXIT_INTERRUPTED
    for name, error in sorted(result.failed.items()):
        print(f"Reassignment of partition {name} failed: {error}", file=out)
    if result.failed:
        return EXIT_ERROR
    print(f"Successfully reassigned partitions {','.join(result.done)} (request {rid})", file=out)
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
        restore_throttles(client, store, lambda line: print(line, file=out), wait_s=0)
        brokers, names = throttled_resources(client, targets)
        print_clearing_brokers(brokers, out)
        print_clearing_topics(names, out)
    if failed:
        return EXIT_ERROR
    return EXIT_IN_PROGRESS if in_progress else EXIT_OK


# ------------------------------------------------------------------------------------------------- --cancel


def cancel(client: Client, targets: list[PartitionTarget], out: TextIO, *, store: RequestStore,
           preserve_throttles: bool = False, poll_s: float = DEFAULT_POLL_S) -> int:
    """KIP-455 cancel of the file's partitions' running steps (the library's cancel_steps), then where each partition
    is left, and the throttles back."""
    cancelled = cancel_steps(client, targets, store, poll_s)
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
        restored = restore_throttles(client, store, lambda line: print(line, file=out))
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
    """After Kafka's lines: the requests the cluster records as not over (docs/cli.md, "Where the requests live")."""
    if not requests:
        return
    print("Reassignment requests not over:", file=out)
    for r in requests:
        print(f"Request {r.id}: {r.status()}, {len(r.partitions)} partitions, run by {where(r.owner)}{_what(r)}",
              file=out)


def _what(r: Any) -> str:
    """What a request with no partitions holds: the balancer's lease of the cluster (a share of it: a plan being
    executed), or the throttle holds of a plan (docs/cli.md, "Where the requests live")."""
    if r.origin.get("lease") is not None:
        kind = "a share of" if r.shared_claim else "holding"
        return f" ({kind} the {r.origin['lease']} lease)"
    label = r.origin.get("label")
    return f" ({label})" if label and not r.partitions else ""


# ------------------------------------------------------------------------------------------------- --progress


def progress(client: Client, store: RequestStore, request_id: int | None, out: TextIO) -> int:
    """--progress without --watch: one look (run() hands --watch to `watch`, which connects by itself)."""
    rp = request_progress(client, store, request_id)
    print(f"Request {rp.request_id}: {rp.request['state']}, {len(rp.rows)} partitions", file=out)
    for name, text in rp.rows:
        print(f"Partition {name}: {text}", file=out)
    for s in rp.replicas:
        print(progress_line(s), file=out)
    running = [s.progress for s in rp.replicas if not s.progress.complete]
    copied = sum(p.numerator for p in running)
    total = None if any(p.denominator is None for p in running) else sum(p.denominator or 0 for p in running)
    print(f"Total: {rp.partitions_done} of {len(rp.rows)} partitions done, {rp.steps_running} with a step running; "
          f"running steps {copied} of {'unknown' if total is None else total} bytes", file=out)
    return EXIT_OK if rp.done else EXIT_IN_PROGRESS


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
            rp = request_progress(client, store, request_id)
            request_id = rp.request_id
            bars.bar("overall", f"request {rp.request_id}: partitions done", rp.partitions_done, len(rp.rows))
            for s in rp.replicas:
                totals[s.replica] = s.progress.denominator
                bars.bar(s.replica, f"replica {s.replica}", s.progress.numerator, s.progress.denominator)
            # A replica no longer listed finished its step: its bar shows it whole.
            for replica, total in totals.items():
                if replica not in {s.replica for s in rp.replicas} and total is not None:
                    bars.bar(replica, f"replica {replica}", total, total)
            if rp.done:
                return EXIT_OK
            # Nothing more will happen: the run ended and no copy runs (a log-dir move that failed or was never
            # started has an error and never completes).
            if rp.request["state"] not in (RUNNING,) and all(s.progress.complete or s.progress.error
                                                            for s in rp.replicas):
                return EXIT_IN_PROGRESS
            return None

        return poll_until_done(poll, interval)


def known_brokers(client: Client) -> str:
    return join_ids(client.brokers)
