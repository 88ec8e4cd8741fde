"""The throttles of a run. The log-dir throttle (replica.alter.log.dirs.io.max.bytes.per.second) is the run's only
while it runs: each broker's own per-broker value is recorded in the cluster before the first change (LogDirThrottles:
a hold in the status log mover-reassign keeps its requests and throttle owners in, mover/admin/reassign/
request_store.py) and put back at the end, by this run, by the next run of the same plan if this one was killed,
or by the last run still throttling that broker. The replication throttle of moves between brokers is the step
engine's (mover/admin/reassign/replication_throttle.py), its originals kept in the same place, so a mover-reassign
run throttling the same broker never takes this run's value for the broker's own, nor this run its; the last to
leave restores.

Disk budgets (`--disk-budget DIR=RATE`, docs/audit.md): Kafka has one log-dir move quota per broker, shared by all
the broker's moves, so a broker whose running moves touch a budgeted dir gets the smallest such budget as its quota
(when below the run's throttle), set before the move starts and raised again once no running move needs it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mover.admin import throttle
from mover.admin.client import ClientError
from mover.admin.common import AdminError
from mover.admin.limits import RunLimits, rate_text
from mover.admin.reassign import status_store
from mover.admin.reassign.replication_throttle import ReplicationThrottle
from mover.admin.reassign.request_store import ClusterRequestStore
from mover.admin.reassign.status_store import FINAL, STALE_HEARTBEATS, Request, where
from mover.audit.errors import AuditError
from mover.audit.execute_state import SavedThrottles
from mover.audit.executor.clusters import ClusterRun
from mover.audit.executor.moves import OPEN, Move, State, read_moves

TOOL = "mover-audit execute"


def config_text(config: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items()))


def broker_rates(moves: list[Move], starting: list[Move], limits: RunLimits) -> dict[tuple[str, int],
                                                                                   tuple[int | None, str | None]]:
    """Each broker with log-dir moves to carry out: its quota, and the dir whose budget set it (None: the run's
    throttle). The dirs that count are those of its running moves and of `starting` (about to start)."""
    out: dict[tuple[str, int], tuple[int | None, str | None]] = {}
    for m in moves:
        if not m.between_brokers and m.state in OPEN:
            out.setdefault((m.cluster, m.broker), (limits.throttle, None))
    if limits.disks is None or not limits.disks.budgets:
        return out
    for m in [m for m in moves if m.state is State.RUNNING] + starting:
        if m.between_brokers:
            continue
        for d in (m.from_dir, m.to_dir):
            budget = limits.disks.budget(d)
            rate, _ = out.get((m.cluster, m.broker), (limits.throttle, None))
            if budget is not None and (rate is None or budget < rate):
                out[(m.cluster, m.broker)] = (budget, d)
    return out


def replication_store(run: ClusterRun, plan: Path) -> ClusterRequestStore:
    """The replication throttle's owners in the cluster; this plan's label lets execute run again on the plan find
    (and restore) what a killed run of it left."""
    return ClusterRequestStore.open(run.client, tool=TOOL, label=str(plan.resolve()))


RESOURCE_KIND = "broker-log-dirs"  # a hold of a broker's log-dir throttle in the status log, apart from "broker:N"


def resource(broker: int) -> str:
    return f"{RESOURCE_KIND}:{broker}"


def plan_label(moves: list[Move]) -> str:
    """What the cluster knows a plan by: a digest of its moves, so a run of the same plan from any machine (or a
    copy of its directory) is the same plan, and one of another plan is not."""
    digest = hashlib.sha256()
    for m in sorted(moves, key=lambda m: (m.cluster, m.topic, m.partition, m.broker)):
        digest.update(repr((m.cluster, m.topic, m.partition, m.broker, m.from_dir, m.to_dir, m.to_broker)).encode())
    return f"plan {digest.hexdigest()[:20]}"


class LogDirThrottles:
    """Each broker's own log-dir throttle, recorded in the cluster before the run first changes it and put back at
    the end (docs/audit.md, execute, "Throttle"): held in the status log (mover/admin/reassign/status_store.py,
    one request per cluster holding throttles only, labelled with the plan), as mover-reassign holds the replication
    throttle's. So a run never takes another's throttle for a broker's own, on this machine or any other: a broker
    another run throttles too gets that run's record of its own value, and the last run to leave puts it back. A run
    that was killed leaves its record in the cluster: the next run of the same plan, from anywhere, takes it over
    (at once on the same host, once its heartbeat is 3 periods late elsewhere); any later run throttling that
    broker restores it when it leaves. A plan directory's execute-state.json, where mover-audit kept the originals
    before, is still put back and removed."""

    def __init__(self, plan: Path | None, say: Callable[[str], None], tool: str = TOOL) -> None:
        """`plan` None: no plan of its own, only what runs that are over left (orphans(): a balancer taking a
        cluster over from one that died)."""
        self.plan = plan
        self.legacy = SavedThrottles(plan) if plan is not None else None
        self.say = say
        self.tool = tool  # what the cluster's record names as the run (mover-audit execute, or the balancer)
        # What this run last set on each broker (cluster, broker): fit changes only what differs.
        self.current: dict[tuple[str, int], int | None] = {}
        self.unrestored: dict[str, list[int]] = {}  # cluster -> brokers whose own throttle is not back yet
        self._label: str | None = None
        self._stores: dict[str, ClusterRequestStore] = {}

    @property
    def label(self) -> str | None:
        if self._label is None and self.plan is not None:
            self._label = plan_label(read_moves(self.plan))
        return self._label

    @classmethod
    def orphans(cls, say: Callable[[str], None], tool: str = TOOL) -> LogDirThrottles:
        """For restore(): the holds of every run that is over (killed, stopped), whatever its plan, taken over
        and put back unless a live run still throttles the broker. Runs alive are left alone."""
        return cls(None, say, tool)

    def start(self, runs: list[ClusterRun]) -> None:
        """Before the run changes any throttle: what an older mover-audit left in the plan directory put back, and
        the holds of an earlier run of this plan that is over taken over. An earlier run of it that is alive
        refuses this one (AuditError): two runs of one plan would each start its moves."""
        for r in runs:
            self._restore_legacy(r)
            self._take_over(r)

    def left_by_earlier(self, r: ClusterRun) -> list[int]:
        """Brokers whose throttle an earlier run of this plan has not put back (read only: --dry-run)."""
        brokers = set(self.legacy.brokers(r.name)) if self.legacy is not None else set()
        try:
            with ClusterRequestStore.open(r.client, tool=self.tool, label=self.label) as store:
                for req in store.requests():
                    if req.origin.get("label") == self.label:
                        brokers.update(_held_brokers(_unended(req)))
        except (ClientError, AdminError) as e:
            self.say(f"cannot read the throttles held in {r.name}: {e}")
        return sorted(brokers)

    def fit(self, runs: list[ClusterRun], limits: RunLimits, starting: list[Move]) -> None:
        """The run's throttle on every broker with log-dir moves still to carry out, lowered to the smallest budget
        of the disks its running and `starting` moves touch: at the start (moves an earlier run left running
        included), before `starting` start, and at every step (moves end). Only what changed is sent."""
        for r in runs:
            changed: dict[tuple[int | None, str | None], list[int]] = {}
            wanted = broker_rates(r.moves, [m for m in starting if m.cluster == r.name], limits)
            for (_, broker), (rate, budget_dir) in sorted(wanted.items()):
                if broker in r.unreachable or ((r.name, broker) in self.current
                                               and self.current[(r.name, broker)] == rate):
                    continue
                if self._throttle_each(r, [broker], rate):
                    self.current[(r.name, broker)] = rate
                    changed.setdefault((rate, budget_dir), []).append(broker)
            for (rate, budget_dir), brokers in changed.items():
                what = "removed" if rate is None else f"set to {rate_text(rate)}"
                why = f" (the budget of {budget_dir})" if budget_dir is not None else ""
                self.say(f"throttle {what} on brokers {','.join(map(str, brokers))} of {r.name}{why}")

    def restore(self, runs: list[ClusterRun]) -> None:
        """Every broker whose throttle this run, or a run of this plan that is over, changed gets its own back,
        unless another live run still throttles it: that run puts it back when it leaves. Its request in the cluster
        ends (completed), or stops with what could not be put back, for the next run to take over."""
        for r in runs:
            self._restore_legacy(r)
            if r.name not in self._stores:
                # Nothing held by this object (a run that left, or a restore of what another left): what the
                # cluster holds for this plan is taken over first.
                try:
                    self._take_over(r)
                except AuditError as e:
                    self.say(str(e))
                    continue
            store = self._stores.pop(r.name, None)
            if store is None:
                continue
            removed: list[int] = []
            restored: list[tuple[int, dict[str, str]]] = []
            shared: list[int] = []
            left: list[int] = []
            for broker in sorted(_held_brokers(store.holding())):
                original = None
                try:
                    original = store.release(resource(broker))
                    if original is not None:
                        throttle.restore_throttle(r.client, broker, original)
                    store.ended(resource(broker))
                except (ClientError, AdminError) as e:
                    action = "remove" if original == {} else "restore"
                    self.say(f"cannot {action} the throttle on broker {broker} of {r.name}: {e} (its own stays "
                             f"recorded in the cluster: execute of this plan again, or the next run throttling "
                             f"that broker, puts it back)")
                    left.append(broker)
                    continue
                self.current.pop((r.name, broker), None)
                if original is None:
                    shared.append(broker)
                elif original:
                    restored.append((broker, original))
                else:
                    removed.append(broker)
            try:
                if not left:
                    store.done()
            finally:
                store.close()
            if left:
                self.unrestored[r.name] = left
            else:
                self.unrestored.pop(r.name, None)
            if removed:
                self.say(f"throttle removed on brokers {','.join(map(str, removed))} of {r.name}")
            for broker, original in restored:
                self.say(f"throttle of broker {broker} of {r.name} restored to its own: {config_text(original)}")
            if shared:
                self.say(f"throttle left on brokers {','.join(map(str, shared))} of {r.name}: another run throttles "
                         f"them too and puts back their own when it leaves")

    def leave(self) -> None:
        """The run ends with its throttle in place (interrupted with moves still running): its requests stop, so the
        next run of this plan takes them over at once."""
        for store in self._stores.values():
            store.close()
        self._stores.clear()

    def _store(self, r: ClusterRun) -> ClusterRequestStore:
        store = self._stores.get(r.name)
        if store is None:
            store = self._stores[r.name] = ClusterRequestStore.open(r.client, tool=self.tool, say=self.say,
                                                                    label=self.label)
        return store

    def _take_over(self, r: ClusterRun) -> None:
        try:
            store = self._store(r)
            requests = store.requests()
        except (ClientError, AdminError) as e:
            self.say(f"cannot read the throttles held in {r.name}: {e}")
            return
        for req in requests:
            ours = self.plan is None or req.origin.get("label") == self.label
            if not ours or req.state in FINAL or req.owner.get("run") == store.me_run:
                continue
            if req.alive() and not status_store.process_gone(req.owner):
                if self.plan is None:
                    continue  # a live run elsewhere puts back its own
                raise AuditError(f"plan {self.plan} is being carried out on {r.name} by {where(req.owner)} "
                                 f"(request {req.id}): one run of a plan at a time; a run that was killed on "
                                 f"another host is taken over {STALE_HEARTBEATS} heartbeats after its last")
            held = [resource(b) for b in _held_brokers(_unended(req))]
            if held:
                taken = store.take_over(req, held)
                if taken:
                    whose = "an earlier run of this plan" if self.plan is not None else "a run that is over"
                    self.say(f"taking over the throttle of brokers {','.join(sorted(t.split(':')[1] for t in taken))}"
                             f" of {r.name} from {whose} ({where(req.owner)}): their own is put back at the end")

    def _restore_legacy(self, r: ClusterRun) -> None:
        """A plan directory's execute-state.json (mover-audit before the originals were kept in the cluster)."""
        if self.legacy is None:
            return
        for broker in self.legacy.brokers(r.name):
            original = self.legacy.original(r.name, broker) or {}
            try:
                throttle.restore_throttle(r.client, broker, original)
                self.legacy.forget(r.name, broker)
            except (ClientError, AdminError) as e:
                self.say(f"cannot put back the throttle of broker {broker} of {r.name}: {e} (execute of this plan "
                         f"again retries; {self.legacy.path} keeps its own)")
                continue
            self.say(f"throttle of broker {broker} of {r.name} put back to its own as an earlier run kept it in "
                     f"{self.legacy.path}: {config_text(original) or 'none'}")

    def _ensure_original(self, r: ClusterRun, broker: int) -> bool:
        """The broker's own throttle recorded in the cluster before the first change; False: leave it alone."""
        store = self._store(r)
        if resource(broker) in store.holding():
            return True
        read: list[dict[str, str]] = []

        def describe() -> dict[str, str]:
            read.append(throttle.dynamic_throttle(r.client, broker))
            return read[-1]

        try:
            store.hold(resource(broker), describe)
        except (ClientError, AdminError) as e:
            # Without its own value recorded, the broker's throttle could not be put back: do not touch it.
            self.say(f"leaving the throttle of broker {broker} of {r.name} unchanged: {e}")
            return False
        if read and read[0]:
            self.say(f"broker {broker} of {r.name} has its own throttle, restored at the end: "
                     f"{config_text(read[0])}")
        return True

    def _throttle_each(self, r: ClusterRun, brokers: list[int], rate: int | None) -> list[int]:
        """One broker at a time, so one that does not answer leaves the others' throttle right."""
        done = []
        for broker in brokers:
            if not self._ensure_original(r, broker):
                continue
            try:
                throttle.set_throttle(r.client, [broker], rate)
                done.append(broker)
            except (ClientError, AdminError) as e:
                action = "remove" if rate is None else "set"
                self.say(f"cannot {action} the throttle on broker {broker} of {r.name}: {e}")
        return done


def _held_brokers(resources: Iterable[str]) -> list[int]:
    """The brokers whose log-dir throttle `resources` (status-log resource names) hold."""
    out = []
    for name in resources:
        kind, _, broker = name.partition(":")
        if kind == RESOURCE_KIND and broker.isdigit():
            out.append(int(broker))
    return out


def _unended(req: Request) -> list[str]:
    """The resources `req` holds and has not left."""
    return [name for name, hold in req.throttles.items() if hold.ended_at is None]


def restore_replication(runs: list[ClusterRun], engines: dict[int, ReplicationThrottle], plan: Path,
                        say: Callable[[str], None]) -> None:
    """The replication throttle of the moves between brokers: this run's (`engines`, by id of the cluster's client),
    or one a killed run on this plan left (the cluster keeps its originals until they are back)."""
    for r in runs:
        throttle_ = engines.get(id(r.client))
        try:
            if throttle_ is None:
                store = replication_store(r, plan)
                if not store.originals():
                    store.close()
                    continue
                throttle_ = ReplicationThrottle(r.client, store)
            restored = throttle_.restore_all(say=say)
            _done(throttle_.store)
        except (ClientError, AdminError) as e:
            say(f"cannot restore the replication throttle of {r.name}: {e} (running execute again on this plan "
                f"retries)")
            continue
        if restored:
            say(f"replication throttle of {r.name} restored: {', '.join(restored)}")



def _done(store: Any) -> None:
    """This run's request of the plan ends (completed: what it held is back); its heartbeat stops."""
    if isinstance(store, ClusterRequestStore):
        store.done()
        store.close()
