"""KIP-179 progress of one reassignment request, as anyone with the right to read the cluster's store sees it
(mover-reassign --progress [--request N] [--watch]): per partition where it stands, per replica the request moves
its ReplicaStatus from the one per-replica call (mover/admin/reassign/progress.py).

A partition's new replicas are followed while its step runs (their bytes of the leader's); its `log_dirs` once it is
on its final brokers (a future copy's bytes of the current copy's, complete once in the wanted dir with no future copy
left). Where the partitions stand is asked of the cluster, never taken from the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mover.admin.assignment import PartitionTarget
from mover.admin.client import Client
from mover.admin.common import AdminError, TopicPartitionReplica
from mover.admin.reassign.kip455 import (
    Ongoing,
    PartitionState,
    TopicPartition,
    check_apis,
    list_reassignments,
    partition_states,
)
from mover.admin.reassign.progress import UNREACHABLE, ReplicaStatus, replica_statuses
from mover.admin.reassign.request_store import ClusterRequestStore
from mover.admin.reassign.status_store import FINAL
from mover.wire.errors import ErrorCode

COMPLETED_ROW = "completed"
STEP_RUNNING_ROW = "step running"


@dataclass
class RequestProgress:
    request_id: int
    request: dict[str, Any]  # the request as the store describes it (state, partitions, owner...)
    rows: list[tuple[str, str]]  # (partition, where it stands), by partition
    replicas: list[ReplicaStatus]  # the new replicas of running steps, then the replicas given a log dir

    @property
    def partitions_done(self) -> int:
        return sum(text.startswith(COMPLETED_ROW) for _, text in self.rows)

    @property
    def steps_running(self) -> int:
        return sum(text.startswith(STEP_RUNNING_ROW) for _, text in self.rows)

    @property
    def done(self) -> bool:
        """Every partition on its target, every replica in its dir (a request's log-dir moves are part of it)."""
        return self.partitions_done == len(self.rows) and all(s.progress.complete for s in self.replicas)


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _ids(ids: Any) -> str:
    return ",".join(map(str, ids))


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


def running_request(store: ClusterRequestStore, tp: TopicPartition) -> bool:
    """The latest request is not over and moves `tp`: --verify counts the partition in progress even between two of
    the request's steps."""
    latest = store.latest()
    if latest is None:
        return False
    req = store.request(latest)
    return req["state"] not in FINAL and any((p["topic"], p["partition"]) == tp for p in req["partitions"])


def request_progress(client: Client, store: ClusterRequestStore, request_id: int | None) -> RequestProgress:
    """The request `request_id` (None: the latest) as it stands now. Raises AdminError when there is none."""
    if request_id is None:
        request_id = store.latest()
        if request_id is None:
            raise AdminError(f"no reassignment request is recorded in {store.where}")
    req = store.request(request_id)
    final = {(p["topic"], p["partition"]): tuple(p["replicas"]) for p in req["partitions"]}
    states, _ = partition_states(client, sorted({tp[0] for tp in final}))
    ongoing = list_reassignments_if_moving(client, states, final)
    rows: list[tuple[str, str]] = []
    adding: list[TopicPartitionReplica] = []
    for tp, target in sorted(final.items()):
        state = states.get(tp)
        if state is None:
            rows.append((_name(tp), "the partition no longer exists"))
        elif state.replicas == target:
            rows.append((_name(tp), f"{COMPLETED_ROW}, replicas {_ids(target)}"))
        elif tp in ongoing:
            og = ongoing[tp]
            rows.append((_name(tp), f"{STEP_RUNNING_ROW}: {_ids(og.original)} -> {_ids(og.target)} "
                                    f"(adding {_ids(og.adding) or '-'}, removing {_ids(og.removing) or '-'})"))
            adding += [TopicPartitionReplica(tp[0], tp[1], b) for b in og.adding]
        else:
            rows.append((_name(tp), f"waiting for its next step, replicas {_ids(state.replicas)} "
                                    f"(target {_ids(target)})"))
    # A partition's log dirs are looked at once it is on its brokers: before that its steps are the news.
    placed = [p for p in req["partitions"] if (tp := (p["topic"], p["partition"])) in states
              and states[tp].replicas == final[tp]]
    wanted = {r: d for p in placed if p.get("log_dirs")
              for r, d in PartitionTarget(p["topic"], p["partition"], tuple(p["replicas"]),
                                          tuple(p["log_dirs"])).replica_dirs().items()}
    in_dirs = sorted(wanted, key=lambda r: (r.broker, r.topic, r.partition))
    seen = replica_statuses(client, adding + in_dirs, lag=False, states=states)
    copies = [_new_replica(s) for s in seen[:len(adding)]]
    return RequestProgress(request_id, req, rows, copies + [_in_dir(s, wanted[s.replica]) for s in seen[len(adding):]])


def _unreachable(s: ReplicaStatus) -> bool:
    return s.progress.error_code == ErrorCode.BROKER_NOT_AVAILABLE


def _new_replica(s: ReplicaStatus) -> ReplicaStatus:
    """A replica a running step adds: its bytes of the leader's; complete only once the step is over (its row)."""
    s.progress.complete = False
    if _unreachable(s):
        s.progress.fail(ErrorCode.BROKER_NOT_AVAILABLE, UNREACHABLE)
    else:
        s.progress.error = None  # not listed yet by this broker's metadata: nothing copied, no error
    return s


def _in_dir(s: ReplicaStatus, log_dir: str) -> ReplicaStatus:
    """A replica the request gives a log dir: the bytes its future copy holds of its current copy's, complete once it
    is in that dir with no future copy left."""
    p = s.progress
    p.complete, p.error, p.numerator, p.denominator = False, None, 0, None
    if _unreachable(s):
        p.fail(ErrorCode.BROKER_NOT_AVAILABLE, UNREACHABLE)
    elif s.log_dir is None:
        p.fail(ErrorCode.REPLICA_NOT_AVAILABLE, "not on the broker")
    elif s.future_dir is not None:
        p.numerator, p.denominator = s.future_bytes, s.bytes
        if s.future_dir != log_dir:
            p.fail(ErrorCode.REASSIGNMENT_IN_PROGRESS, f"moving to {s.future_dir}, not {log_dir}")
    else:
        p.numerator = p.denominator = s.bytes or 0
        p.complete = s.log_dir == log_dir
        if not p.complete:
            p.fail(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"in {s.log_dir}, not moving")
    return s
