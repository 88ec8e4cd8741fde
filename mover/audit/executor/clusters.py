"""A cluster as execute talks to it: one client, where the plan's replicas are now (DescribeLogDirs per broker, a
broker that does not answer remembered as unreachable), and the resume check at start (`classify`): what is done is
asked of the brokers, never taken from a local file, so running execute again after an interruption resumes."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, TopicPartitionReplica, error_name
from mover.admin.common import format_bytes as _size
from mover.admin.log_dir_state import describe_broker
from mover.admin.reassign.kip455 import list_reassignments
from mover.admin.reassign.progress import ReplicaStatus, broker_replicas
from mover.audit.errors import AuditError
from mover.audit.executor.moves import Move, State
from mover.audit.fleet import ClusterView

Say = Callable[[str], None]


@dataclass
class ClusterRun:
    view: ClusterView
    client: Client
    moves: list[Move]
    brokers: list[int] = field(default_factory=list)  # those the plan's log-dir moves touch
    unreachable: dict[int, float] = field(default_factory=dict)  # broker -> since when (monotonic)
    assignment: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    dirs: dict[int, list[str]] = field(default_factory=dict)  # each answering broker's log dirs, online or not

    @property
    def name(self) -> str:
        return self.view.source.name

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{b.host}:{b.port}" for b in self.view.brokers)


def connect(view: ClusterView, moves: list[Move], timeout: float) -> ClusterRun:
    name = view.source.name
    if view.error is not None and not view.brokers:
        raise AuditError(f"cluster {name}: {view.error}")
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in view.brokers)
    try:
        client = Client(bootstrap, timeout=timeout, security=view.source.security)
    except ClientError as e:
        raise AuditError(f"cluster {name}: {e}") from None
    # The brokers discovery found (ZooKeeper's registrations among them) are reachable too, not only those the
    # bootstrap broker's Metadata names: a moverd names only itself.
    for b in view.brokers:
        client.brokers.setdefault(b.broker, (b.host, b.port))
    run = ClusterRun(view, client, moves, sorted({m.broker for m in moves if not m.between_brokers}))
    run.assignment = {(t, p): replicas for t, p, replicas in view.partitions}
    return run


def observe(run: ClusterRun, brokers: list[int], moves: list[Move], say: Say) -> dict[int, dict[TopicPartitionReplica,
                                                                                             ReplicaStatus]]:
    """Where the replicas of `moves` are now, per broker; a broker that does not answer is left out (and said)."""
    seen: dict[int, dict[TopicPartitionReplica, ReplicaStatus]] = {}
    for broker in brokers:
        topics: dict[str, set[int]] = defaultdict(set)
        for m in moves:
            if m.broker == broker:
                topics[m.topic].add(m.partition)
        if not topics:
            continue
        try:
            held, dirs = broker_replicas(run.client, broker, {t: sorted(ps) for t, ps in topics.items()})
        except (ClientError, AdminError) as e:
            if broker not in run.unreachable:
                say(f"broker {broker} of {run.name} does not answer: {e}")
            run.unreachable.setdefault(broker, time.monotonic())
            try:
                run.client.reconnect(broker)
            except ClientError:
                pass
            continue
        if broker in run.unreachable:
            say(f"broker {broker} of {run.name} answers again")
            del run.unreachable[broker]
        seen[broker] = held
        run.dirs[broker] = [d.path for d in dirs]
    return seen


def dir_trouble(run: ClusterRun, broker: int, path: str, needs: int = 0) -> str | None:
    """Why a move into (or out of) `path` cannot go on, as the broker's DescribeLogDirs says now: the dir offline
    (an I/O error, chmod 000), cordoned, or with less usable space than the `needs` bytes of the replica; None when
    it says none of those, or does not answer. Asked once a move has failed, so the failure line says why."""
    try:
        dirs = describe_broker(run.client, broker, {})
    except (ClientError, AdminError):
        return None
    for d in dirs:
        if d.path != path:
            continue
        if d.error_code:
            return f"log dir {path} of broker {broker} is offline ({error_name(d.error_code)})"
        if d.is_cordoned:
            return f"log dir {path} of broker {broker} is cordoned"
        if 0 <= d.usable_bytes < needs:  # -1: a broker before DescribeLogDirs v4 does not say
            return (f"log dir {path} of broker {broker} is full ({_size(d.usable_bytes)} usable, the replica is "
                    f"{_size(needs)})")
    return None


def known_brokers(run: ClusterRun) -> set[int]:
    """The cluster's brokers: those Metadata or discovery lists, and those its partitions name as replicas (a broker
    that is down is still one of the cluster's: its moves wait for it, as unreachable)."""
    return set(run.client.brokers) | {b.broker for b in run.view.brokers} | set(run.view.missing) | {
        b for replicas in run.assignment.values() for b in replicas}


def refusals(run: ClusterRun) -> list[str]:
    """After `classify`: the moves that name what the cluster does not have, a broker (`broker`, `to_broker`) or a
    log dir of an answering broker (`from_dir`, `to_dir`), one text each. No run can carry them out, and starting the
    rest first would set throttles and moves for a plan that then fails half way; a partition deleted or a replica
    moved since the plan is not among them (`classify` says those: a plan ages, and resuming depends on it)."""
    known = known_brokers(run)
    problems, dirs = [], []  # the brokers first: one wrong id explains many rows
    for m in run.moves:
        missing = [b for b in dict.fromkeys((m.broker, m.to_broker)) if b is not None and b not in known]
        if missing:
            problems.append(f"{m}: broker {' and '.join(map(str, missing))} {'is' if len(missing) == 1 else 'are'} "
                            f"not in the cluster")
            continue
        if m.between_brokers or m.broker not in run.dirs:
            continue  # a move between brokers lets the new broker choose its dir (docs/audit.md)
        lacking = [d for d in dict.fromkeys((m.from_dir, m.to_dir)) if d not in run.dirs[m.broker]]
        if lacking:
            dirs.append(f"{m}: {' and '.join(lacking)} {'is' if len(lacking) == 1 else 'are'} not a log dir of "
                        f"broker {m.broker}")
    return problems + dirs


def classify(run: ClusterRun, say: Say) -> None:
    """At start: what each move's replica says about it (replica in to_dir: done; copy being built in to_dir:
    running, adopted; in from_dir: to do; partition gone: skipped; anywhere else: the plan no longer matches)."""
    seen = observe(run, run.brokers, [m for m in run.moves if not m.between_brokers], say)
    _classify_broker_moves(run, [m for m in run.moves if m.between_brokers])
    for m in run.moves:
        if m.between_brokers:
            continue
        replicas = run.assignment.get((m.topic, m.partition))
        if replicas is None or m.broker not in replicas:
            m.state, m.note = State.GONE, ("the partition no longer exists" if replicas is None
                                           else f"broker {m.broker} no longer holds a replica of it")
            continue
        if m.broker not in seen:
            m.state, m.note = State.UNREACHABLE, f"broker {m.broker} does not answer"
            continue
        info = seen[m.broker].get(m.replica)
        if info is None or info.log_dir is None:
            m.state, m.note = State.MISMATCH, "the replica is in no online log dir of its broker"
        elif info.log_dir == m.to_dir and info.future_dir is None:
            m.state, m.copied = State.ALREADY_DONE, m.size_bytes
        elif info.log_dir == m.from_dir and info.future_dir == m.to_dir:
            m.state, m.copied = State.RUNNING, info.future_bytes  # started by an earlier run: adopted
            m.started_at = m.progress_at = time.monotonic()
        elif info.log_dir == m.from_dir and info.future_dir is None:
            m.state = State.PENDING
        elif info.log_dir == m.from_dir:
            m.state, m.note = State.MISMATCH, f"it is being moved to {info.future_dir}, not {m.to_dir}"
        else:
            m.state, m.note = State.MISMATCH, f"it is in {info.log_dir}, the plan expected {m.from_dir}"


def _classify_broker_moves(run: ClusterRun, moves: list[Move]) -> None:
    """At start, for the moves between brokers: each partition's replicas now (those it started from when a
    reassignment is running, which the step engine then follows) and the ones its moves head to."""
    if not moves:
        return
    tps = sorted({(m.topic, m.partition) for m in moves})
    try:
        ongoing = list_reassignments(run.client, tps)
    except (ClientError, AdminError) as e:
        for m in moves:
            m.state, m.note = State.UNREACHABLE, f"the cluster does not list its reassignments: {e}"
        return
    for tp in tps:
        mine = [m for m in moves if (m.topic, m.partition) == tp]
        listed = run.assignment.get(tp)
        base = tuple(ongoing[tp].original) if tp in ongoing else tuple(listed or ())
        if listed is None:
            for m in mine:
                m.state, m.note = State.GONE, "the partition no longer exists"
            continue
        final = list(base)
        for m in mine:
            if m.broker in final and m.to_broker not in final:
                final[final.index(m.broker)] = m.to_broker  # type: ignore[call-overload]
        for m in mine:
            m.replicas_from, m.replicas_to = base, tuple(final)
            if m.broker in base and m.to_broker not in base:
                m.state = State.PENDING  # a running reassignment to the same target is adopted by the engine
            elif m.to_broker in base and m.broker not in base:
                m.state, m.copied = State.ALREADY_DONE, m.size_bytes
            elif m.broker not in base:
                m.state, m.note = State.GONE, f"broker {m.broker} no longer holds a replica of it"
            else:
                m.state, m.note = State.MISMATCH, f"broker {m.to_broker} already holds a replica of it"
