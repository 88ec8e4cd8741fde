"""The throttles of a run. The log-dir throttle (replica.alter.log.dirs.io.max.bytes.per.second) is the run's only
while it runs: each broker's own per-broker value is read before the first change, kept in PLANDIR/execute-state.json
(mover/audit/execute_state.py) and put back at the end, by this run or, if this one was killed, by the next on the
same plan. The replication throttle of moves between brokers is the step engine's (mover/admin/
reassign/replication_throttle.py), its originals kept in the cluster with mover-reassign's (mover/admin/
reassign/request_store.py: a request of this plan's, holding throttles only), so a mover-reassign run throttling the
same broker never takes this run's value for the broker's own, nor this run its; the last to leave restores.

Disk budgets (`--disk-budget DIR=RATE`, docs/audit.md): Kafka has one log-dir move quota per broker, shared by all
the broker's moves, so a broker whose running moves touch a budgeted dir gets the smallest such budget as its quota
(when below the run's throttle), set before the move starts and raised again once no running move needs it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mover.admin import throttle
from mover.admin.client import ClientError
from mover.admin.common import AdminError
from mover.admin.limits import RunLimits, rate_text
from mover.admin.reassign.replication_throttle import ReplicationThrottle
from mover.admin.reassign.request_store import ClusterRequestStore
from mover.audit.execute_state import SavedThrottles
from mover.audit.executor.clusters import ClusterRun
from mover.audit.executor.moves import OPEN, Move, State

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


class LogDirThrottles:
    def __init__(self, plan: Path, say: Callable[[str], None]) -> None:
        # Each broker's own throttle from before this run (or an earlier, interrupted one) changed it.
        self.saved = SavedThrottles(plan)
        self.say = say
        # What this run last set on each broker (cluster, broker): fit changes only what differs.
        self.current: dict[tuple[str, int], int | None] = {}

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
        """Every broker whose throttle this run (or an interrupted one on this plan) changed gets its own back."""
        for r in runs:
            name = r.name
            removed: list[int] = []
            restored: list[tuple[int, dict[str, str]]] = []
            for broker in self.saved.brokers(name):
                original = self.saved.original(name, broker) or {}
                try:
                    throttle.restore_throttle(r.client, broker, original)
                    self.saved.forget(name, broker)
                except (ClientError, AdminError) as e:
                    action = "restore" if original else "remove"
                    self.say(f"cannot {action} the throttle on broker {broker} of {name}: {e} (running execute "
                             f"again on this plan retries; {self.saved.path} keeps the original)")
                    continue
                if original:
                    restored.append((broker, original))
                else:
                    removed.append(broker)
            if removed:
                self.say(f"throttle removed on brokers {','.join(map(str, removed))} of {name}")
            for broker, original in restored:
                self.say(f"throttle of broker {broker} of {name} restored to its own: {config_text(original)}")

    def _ensure_original(self, r: ClusterRun, broker: int) -> bool:
        """Read and keep the broker's own throttle before the first change; False: leave the broker alone."""
        if self.saved.original(r.name, broker) is not None:
            return True
        try:
            original = throttle.dynamic_throttle(r.client, broker)
            self.saved.record(r.name, broker, original)
        except (ClientError, AdminError) as e:
            # Without its original kept, the broker's own throttle could not be put back: do not touch it.
            self.say(f"leaving the throttle of broker {broker} of {r.name} unchanged: {e}")
            return False
        if original:
            self.say(f"broker {broker} of {r.name} has its own throttle, restored at the end: "
                     f"{config_text(original)}")
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
