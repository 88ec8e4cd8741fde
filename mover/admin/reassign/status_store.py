"""Reassignment requests (KIP-179's ids and status) kept in the cluster, in the status log (status_log.py), so every
operator on every machine sees the same ids, states, progress and throttle owners (docs/cli.md,
"Where the requests live").

    store = StatusStore(client, tool="mover-reassign")
    rid, resumed = store.claim(partitions)     # AdminError naming the live run holding one of them
    store.heartbeat(rid); store.record_progress(rid, [...]); store.finish(rid, COMPLETED)
    store.list(); store.get(rid)               # from any machine

Records (JSON values, keyed per request by a random key K chosen by the run that started it):
* K: the request: its partitions and targets, where it was started (host, user, pid, tool) and who runs it now,
  its state, and the replication throttles it holds; written whole at each change, so compaction keeps the last.
* K/hb: the heartbeat, every `heartbeat_s`; K/progress: the latest per-replica progress; K/cancel: a cancel asked
  of a run that is alive elsewhere.
The request id is the offset of the request's first record: the log orders two claims written at the same moment,
so no two runs get one id. Later records carry the id (compaction removes the first).

One run per partition: a claim is written, then the log is read to its end; a live run (heartbeat within
3 x its period) at a lower offset holding one of the partitions refuses the claim (closed as "refused"). A run whose
heartbeat stopped ("dead": killed -9) or that left unfinished ("stopped") is resumed only by a claim of the same
partitions and targets, which takes it over, or cancelled.

Throttle owners: a run holding a throttled resource (broker or topic) writes its hold, reads the log, and only then
reads the resource's own value, unless an earlier hold overlaps its own: then it takes that chain's original (the
resource may hold the other run's value now). A run leaving writes its release and restores the original only if no
other run in the chain still holds it; a run joining while one is restoring waits for that restore to end.
"""

from __future__ import annotations

import getpass
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mover.admin.client import Client
from mover.admin.common import AdminError, ClusterUnavailable
from mover.admin.reassign.status_log import Entry, StatusLog

FORMAT_VERSION = 1
HEARTBEAT_S = 10.0
# A run is dead once this many of its heartbeats are missing.
STALE_HEARTBEATS = 3
RUNNING = "running"
STOPPED = "stopped"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
DEAD = "dead"
REFUSED = "refused"
MERGED = "merged"
# A file that only moves replicas between log dirs: the moves were sent, the brokers carry them out, the run is over.
LOG_DIRS_STARTED = "log dir moves started"
# States that no longer hold their partitions.
FINAL = frozenset({COMPLETED, FAILED, CANCELLED, REFUSED, MERGED, LOG_DIRS_STARTED})
# How long a hold waits for an earlier run to say what the resource's own value was, or to end its restore.
THROTTLE_WAIT_S = 30.0
NOTE_PREFIX = "note/"  # keys of the notes (write_note): fold() finds no request of that key and skips them
_SELF = -1  # in a record: "the offset of this record" (unknown until the broker assigns it)
_FOREVER = 1 << 62

Say = Callable[[str], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


def origin(tool: str) -> dict[str, Any]:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"host": socket.gethostname(), "user": user, "pid": os.getpid(), "tool": tool}


def where(o: dict[str, Any]) -> str:
    return f"{o.get('tool', '?')} pid {o.get('pid', '?')} of {o.get('user', '?')} on {o.get('host', '?')}"


def process_gone(owner: dict[str, Any]) -> bool:
    """Whether the run `owner` names has ended for sure: on this host, no process with its pid (killed -9, the host
    rebooted). Elsewhere only its heartbeat can tell (3 periods late)."""
    if owner.get("host") != socket.gethostname():
        return False
    try:
        pid = int(owner.get("pid", 0))
        if pid <= 0:  # 0 and below name process groups, not a process
            return False
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError, TypeError):
        return False
    return False


def signature(partitions: Iterable[dict[str, Any]]) -> tuple[tuple[str, int, tuple[int, ...]], ...]:
    return tuple(sorted((p["topic"], int(p["partition"]), tuple(p.get("replicas") or ())) for p in partitions))


@dataclass
class Hold:
    """A run's hold on one throttled resource: offsets in the status log of its hold, release and end."""

    held_at: int
    original: dict[str, str] | None = None
    released_at: int | None = None
    ended_at: int | None = None

    def doc(self) -> dict[str, Any]:
        return {"held_at": self.held_at, "original": self.original, "released_at": self.released_at,
                "ended_at": self.ended_at}


@dataclass
class Request:
    id: int
    key: str
    partitions: list[dict[str, Any]]
    origin: dict[str, Any]
    owner: dict[str, Any]
    state: str
    started_ms: int
    ended_ms: int = -1
    heartbeat_ms: int = 0
    heartbeat_every_ms: int = int(HEARTBEAT_S * 1000)
    throttles: dict[str, Hold] = field(default_factory=dict)
    progress: list[dict[str, Any]] = field(default_factory=list)
    progress_ms: int = -1
    cancel_asked: dict[str, Any] | None = None
    updated_ms: int = 0  # the newest record of the request (what expiry goes by)

    @property
    def shared_claim(self) -> bool:
        """A shared claim of a lease (claim_lease); a claim written before shared ones existed is a sole one."""
        return self.origin.get("shared") is True

    @property
    def tps(self) -> set[tuple[str, int]]:
        return {(p["topic"], int(p["partition"])) for p in self.partitions}

    def status(self, now_ms: int | None = None) -> str:
        """The state, with a run whose heartbeat stopped as "dead"."""
        now_ms = _now_ms() if now_ms is None else now_ms
        if self.state == RUNNING and now_ms - self.heartbeat_ms > STALE_HEARTBEATS * self.heartbeat_every_ms:
            return DEAD
        return self.state

    def alive(self, now_ms: int | None = None) -> bool:
        return self.status(now_ms) == RUNNING

    def doc(self) -> dict[str, Any]:
        """What the status log's record of the request holds (and `get` answers)."""
        return {"v": FORMAT_VERSION, "id": self.id, "partitions": self.partitions, "origin": self.origin,
                "owner": self.owner, "state": self.state, "started_ms": self.started_ms, "ended_ms": self.ended_ms,
                "heartbeat_ms": self.heartbeat_ms, "heartbeat_every_ms": self.heartbeat_every_ms,
                "throttles": {r: h.doc() for r, h in sorted(self.throttles.items())}}


@dataclass
class _Interval:
    request: Request
    resource: str
    hold: Hold

    @property
    def end(self) -> int:
        return self.hold.ended_at if self.hold.ended_at is not None else _FOREVER


class StatusStore:
    """The requests of one cluster. Thread-safe (the heartbeat runs beside the step engine); it talks to the
    cluster through `client`, which nothing else may use at the same time: give it a Client of its own."""

    def __init__(self, client: Client, *, tool: str, say: Say | None = None, heartbeat_s: float = HEARTBEAT_S,
                 retention_ms: int | None = None, log: StatusLog | None = None,
                 clock: Callable[[], int] = _now_ms, throttle_wait_s: float = THROTTLE_WAIT_S) -> None:
        self.log = log or StatusLog(client)
        self.say: Say = say or (lambda _: None)
        self.heartbeat_s = heartbeat_s
        self.me = origin(tool) | {"run": uuid.uuid4().hex}
        self.clock = clock
        self.throttle_wait_s = throttle_wait_s
        self._retention_ms = retention_ms
        self._lock = threading.RLock()
        self._mine: dict[int, Request] = {}  # the requests this store runs: their last written record

    @property
    def retention_ms(self) -> int:
        if self._retention_ms is None:
            self._retention_ms = self.log.retention_ms
        return self._retention_ms

    # ------------------------------------------------------------------------------------------------ reading

    def requests(self) -> dict[int, Request]:
        """Every request the status log holds, by id, without those older than the retention."""
        with self._lock:
            entries = self.log.read()
        return fold(entries, self.clock() - self.retention_ms)

    def list(self) -> list[Request]:
        """The requests still worth showing (not refused claims, not claims merged into the run they resumed)."""
        return [r for _, r in sorted(self.requests().items()) if r.state not in (REFUSED, MERGED)]

    def get(self, request_id: int) -> Request:
        found = self.requests().get(request_id)
        if found is None or found.state in (REFUSED, MERGED):
            raise AdminError(f"unknown request id {request_id}: the cluster keeps no such reassignment request "
                             f"(requests are forgotten {self.retention_ms // 1000} s after their last record)")
        return found

    # ------------------------------------------------------------------------------------------------ a run

    def claim(self, partitions: list[dict[str, Any]]) -> tuple[int, bool]:
        """A request id for a run of `partitions` ([{"topic", "partition", "replicas"}]), and whether it resumes a
        stopped or dead run of the same partitions and targets. AdminError when a live run holds one of them, or a
        stopped one of other targets does."""
        with self._lock:
            now = self.clock()
            mine = Request(_SELF, uuid.uuid4().hex, list(partitions), dict(self.me), dict(self.me), RUNNING, now,
                           heartbeat_ms=now, heartbeat_every_ms=int(self.heartbeat_s * 1000))
            mine.id = self._write(mine)
            others = [r for r in self.requests().values() if r.id < mine.id and r.key != mine.key
                      and r.state not in FINAL and r.tps & mine.tps]
            live = [r for r in others if r.alive(self.clock())]
            stale = [r for r in others if not r.alive(self.clock())]
            foreign = [r for r in stale if signature(r.partitions) != signature(partitions)]
            if live or foreign:
                mine.state = REFUSED
                mine.ended_ms = self.clock()
                self._write(mine)
                blocker = (live or foreign)[0]
                tp = sorted(blocker.tps & mine.tps)[0]
                if live:
                    raise AdminError(f"partition {tp[0]}-{tp[1]} is being reassigned by request {blocker.id} "
                                     f"({where(blocker.owner)}): one run at a time per partition; wait for it or "
                                     "--cancel it with its file")
                raise AdminError(f"partition {tp[0]}-{tp[1]} belongs to request {blocker.id} "
                                 f"({where(blocker.owner)}), {blocker.status(self.clock())}: only --execute of its "
                                 "file resumes it, or --cancel with its file ends it")
            if not stale:
                self._mine[mine.id] = mine
                return mine.id, False
            resumed = max(stale, key=lambda r: r.id)
            self.say(f"request {resumed.id} ({resumed.status(self.clock())}, {where(resumed.owner)}) is resumed "
                     "from here")
            resumed.owner = dict(self.me)
            resumed.state = RUNNING
            resumed.heartbeat_ms = self.clock()
            resumed.heartbeat_every_ms = int(self.heartbeat_s * 1000)
            self._write(resumed)
            self._mine[resumed.id] = resumed
            mine.state = MERGED
            mine.ended_ms = self.clock()
            self._write(mine)
            return resumed.id, True

    def heartbeat(self, request_id: int) -> bool:
        """The run is alive; False when another tool took it over (its own heartbeat had stopped long enough)."""
        with self._lock:
            req = self._own(request_id)
            now = self.clock()
            self.log.append(f"{req.key}/hb", {"v": FORMAT_VERSION, "id": req.id, "hb": now, "run": self.me["run"]})
            req.heartbeat_ms = now
            current = self.requests().get(request_id)
            if current is not None and current.owner.get("run") != self.me["run"]:
                # This run's heartbeats stopped long enough (a frozen host, a partition) for another to resume it.
                self._mine.pop(request_id, None)
                self.say(f"request {request_id} was taken over by {where(current.owner)}: this run stops")
                return False
            if current is not None and current.state in FINAL and req.state == RUNNING:
                # Ended by another run while this one's heartbeats were late (a lease taken over): it is not ours.
                self._mine.pop(request_id, None)
                return False
            return True

    def lease_holders(self, lease: str) -> list[Request]:
        """The live claims of `lease`, oldest first (read only: --dry-run's look)."""
        return [r for r in self._claims(lease) if self._live(r)]

    def _claims(self, lease: str) -> list[Request]:
        """The claims of `lease` not ended, oldest first."""
        return [r for _, r in sorted(self.requests().items()) if r.origin.get("lease") == lease
                and r.state not in FINAL]

    def _live(self, r: Request) -> bool:
        return r.alive(self.clock()) and not process_gone(r.owner)

    def claim_lease(self, lease: str, shared: bool = False) -> tuple[int | None, Request | None]:
        """One holder at a time of `lease` (a name: e.g. the balancer of a cluster), or any number of `shared`
        holders (runs that may go on side by side, e.g. mover-audit execute of different plans) but none of them
        beside a sole one: (request id, None) when this run holds it now, or (None, the holder in the way) when a
        live run does. The claim is written, then the log read: of two claims that exclude each other the live one at
        the lower offset wins, so two started at the same moment never both hold it. Claims of runs that are over
        (killed: heartbeat late; stopped) are ended (merged), so one that comes back learns at its next heartbeat
        that it holds nothing (heartbeat() answers False)."""
        with self._lock:
            now = self.clock()
            mine = Request(_SELF, uuid.uuid4().hex, [], dict(self.me) | {"lease": lease, "shared": shared},
                           dict(self.me), RUNNING, now, heartbeat_ms=now,
                           heartbeat_every_ms=int(self.heartbeat_s * 1000))
            mine.id = self._write(mine)
            others = [r for r in self._claims(lease) if r.id != mine.id]
            live = [r for r in others if self._live(r)]
            earlier = [r for r in live if r.id < mine.id and not (shared and r.shared_claim)]
            if earlier:
                mine.state = REFUSED
                mine.ended_ms = self.clock()
                self._write(mine)
                return None, min(earlier, key=lambda r: r.id)
            for r in others:
                if r not in live:
                    r.state = MERGED
                    r.ended_ms = self.clock()
                    self._write(r)
            self._mine[mine.id] = mine
            return mine.id, None

    def record_progress(self, request_id: int, progress: list[dict[str, Any]]) -> None:
        """The latest per-replica progress (each a dict: topic, partition, broker, numerator, denominator, ...)."""
        with self._lock:
            req = self._own(request_id)
            self.log.append(f"{req.key}/progress", {"v": FORMAT_VERSION, "id": req.id, "ts": self.clock(),
                                                    "progress": progress})

    def finish(self, request_id: int, state: str) -> None:
        """The run ends in `state` (completed, failed, cancelled, stopped). A cancel of a run alive elsewhere is
        asked of it (it stops at its next look); one that is not alive is taken over and closed."""
        with self._lock:
            req = self._mine.get(request_id)
            if req is None:
                req = self.get(request_id)
                if req.alive(self.clock()) and req.owner.get("run") != self.me["run"]:
                    if state != CANCELLED:
                        raise AdminError(f"request {request_id} is run by {where(req.owner)}")
                    self.log.append(f"{req.key}/cancel", {"v": FORMAT_VERSION, "id": req.id, "by": self.me,
                                                          "ts": self.clock()})
                    return
                req.owner = dict(self.me)
                self._mine[request_id] = req
            req.state = state
            req.ended_ms = -1 if state == RUNNING else self.clock()
            self._write(req)

    def current(self, request_id: int) -> Request:
        """The request as the cluster has it now (another tool may have asked for its cancel)."""
        return self.requests().get(request_id) or self._own(request_id)

    def adopt(self, request_id: int) -> Request:
        """Take over a request that is not alive (its throttles to restore), as --cancel and --verify do."""
        with self._lock:
            if request_id in self._mine:
                return self._mine[request_id]
            req = self.get(request_id)
            if req.alive(self.clock()) and req.owner.get("run") != self.me["run"]:
                raise AdminError(f"request {request_id} is run by {where(req.owner)}")
            req.owner = dict(self.me)
            self._mine[request_id] = req
            return req

    # ------------------------------------------------------------------------------------------------ notes

    def write_note(self, name: str, doc: Any) -> None:
        """A record the tools share about the cluster under `name` (key `note/<name>`: compaction keeps the
        last), e.g. the balancer's copies not swapped in; not a request."""
        with self._lock:
            self.log.append(f"{NOTE_PREFIX}{name}", {"v": FORMAT_VERSION, "ts": self.clock(), "by": self.me,
                                                     "doc": doc})

    def read_note(self, name: str) -> Any:
        """The last note written under `name` (its doc, as written: the reader checks it), or None."""
        with self._lock:
            entries = self.log.read()
        found = None
        for e in entries:
            if e.key == f"{NOTE_PREFIX}{name}":
                found = e.value.get("doc")
        return found

    # ------------------------------------------------------------------------------------------------ throttles

    def held(self, request_id: int) -> dict[str, dict[str, str] | None]:
        """Resources the request holds and has not left, with the original each is to get back."""
        req = self._own(request_id)
        return {r: h.original for r, h in req.throttles.items() if h.ended_at is None}

    def hold_throttle(self, request_id: int, resource: str, describe: Callable[[], dict[str, str]]
                      ) -> dict[str, str]:
        """The resource's own value, recorded before the run changes it: `describe()`'s answer when no other run
        holds it, else the original of the earliest run holding it."""
        with self._lock:
            req = self._own(request_id)
            hold = req.throttles.get(resource)
            if hold is not None and hold.ended_at is None and hold.released_at is None and hold.original is not None:
                return hold.original
            hold = req.throttles[resource] = Hold(_SELF)
            self._write(req)
            deadline = time.monotonic() + self.throttle_wait_s
            while True:
                chain = self._chain(resource, req)
                earlier = [i for i in chain if i.hold.held_at < hold.held_at]
                if not earlier:
                    original = describe()
                    break
                waiting = [i for i in earlier if i.request.alive(self.clock()) and _unsettled(i.hold)]
                if not waiting and chain[0].hold.original is not None:
                    original = dict(chain[0].hold.original)
                    self.say(f"{resource} is throttled by request {chain[0].request.id} too: its own value is the "
                             "one that request recorded")
                    break
                if time.monotonic() >= deadline:
                    other = (waiting or earlier)[0].request
                    raise ClusterUnavailable(f"request {other.id} ({where(other.owner)}) did not finish recording "
                                             f"or restoring the throttle of {resource} within "
                                             f"{self.throttle_wait_s:g} s")
                time.sleep(min(0.2, self.throttle_wait_s))
            hold.original = original
            self._write(req)
            return original

    def release_throttle(self, request_id: int, resource: str) -> dict[str, str] | None:
        """The run leaves the resource: the original to put back if no other run holds it, else None (the last
        run to leave restores it). Call throttle_ended after the restore (or at once on None)."""
        with self._lock:
            req = self._own(request_id)
            hold = req.throttles.get(resource)
            if hold is None or hold.ended_at is not None:
                return None
            if hold.released_at is None:
                hold.released_at = _SELF
                self._write(req)
            chain = self._chain(resource, req)
            if self._others_holding(chain, req):
                return None
            return next((dict(i.hold.original) for i in chain if i.hold.original is not None), None)

    def throttle_ended(self, request_id: int, resource: str) -> None:
        """The run's restore of `resource` is done (or left to a run still holding it). When no live run holds
        it any more, the holds of runs that are over (killed, stopped) in its chain end too: the restore just done
        was theirs as well, and a hold left open would send the next --verify restoring it again."""
        with self._lock:
            req = self._own(request_id)
            hold = req.throttles.get(resource)
            if hold is not None and hold.ended_at is None:
                hold.ended_at = _SELF
                self._write(req)
            chain = self._chain(resource, req)
            if self._others_holding(chain, req):
                return
            for i in chain:
                if i.request.id != req.id and i.hold.ended_at is None:
                    if i.hold.released_at is None:
                        i.hold.released_at = _SELF
                    i.hold.ended_at = _SELF
                    self._write(i.request)

    def take_over_holds(self, request_id: int, other: Request, resources: Iterable[str]) -> list[str]:
        """`other`'s holds of `resources` (a run of the same plan that is over: killed, stopped) become this
        run's, with the originals it recorded; `other` ends (merged). Written here first, then there: a crash in
        between leaves both holding, and whichever restore comes later ends the dead one's. A hold whose original
        was never recorded is only ended: that run died before it changed the resource."""
        with self._lock:
            req = self._own(request_id)
            moved = []
            for resource in resources:
                theirs = other.throttles.get(resource)
                if theirs is None or theirs.ended_at is not None or theirs.original is None:
                    continue
                mine = req.throttles.get(resource)
                if mine is None or mine.ended_at is not None:
                    req.throttles[resource] = Hold(_SELF, dict(theirs.original))
                    moved.append(resource)
            if moved:
                self._write(req)
            for resource in resources:
                theirs = other.throttles.get(resource)
                if theirs is not None and theirs.ended_at is None:
                    if theirs.released_at is None:
                        theirs.released_at = _SELF
                    theirs.ended_at = _SELF
            if not any(h.ended_at is None for h in other.throttles.values()) and other.state not in FINAL:
                other.state = MERGED
                other.ended_ms = self.clock()
            self._write(other)
            return moved

    def _others_holding(self, chain: list[_Interval], req: Request) -> bool:
        """Whether a live run other than `req` still holds the chain's resource: the last live one to leave
        restores it. A run that is over (its heartbeat stopped, or it stopped) no longer can, so it holds
        nothing back."""
        now = self.clock()
        return any(i.request.id != req.id and i.hold.released_at is None and i.request.alive(now) for i in chain)

    def _chain(self, resource: str, req: Request) -> list[_Interval]:
        """The holds of `resource` that overlap one another, in log order, among them `req`'s."""
        now = self.clock()
        intervals = []
        for r in self.requests().values():
            hold = req.throttles.get(resource) if r.id == req.id else r.throttles.get(resource)
            if hold is None or (hold.original is None and not r.alive(now) and r.id != req.id):
                continue  # a run that died before recording the original never changed the resource
            intervals.append(_Interval(r, resource, hold))
        intervals.sort(key=lambda i: i.hold.held_at)
        chain: list[_Interval] = []
        end = -1
        for i in intervals:
            if chain and i.hold.held_at >= end:
                if any(c.request.id == req.id for c in chain):
                    return chain
                chain = []
            chain.append(i)
            end = max(end, i.end)
        return chain

    # ------------------------------------------------------------------------------------------------ internals

    def _own(self, request_id: int) -> Request:
        req = self._mine.get(request_id)
        if req is None:
            raise AdminError(f"request {request_id} is not run by this tool")
        return req

    def _write(self, req: Request) -> int:
        """Append the request's record; the offsets it leaves to the broker (_SELF) become the record's."""
        doc = req.doc()
        doc["id"] = None if req.id == _SELF else req.id
        doc["ts"] = self.clock()
        offset = self.log.append(req.key, doc)
        for hold in req.throttles.values():
            for name in ("held_at", "released_at", "ended_at"):
                if getattr(hold, name) == _SELF:
                    setattr(hold, name, offset)
        return offset


def _unsettled(hold: Hold) -> bool:
    """Its original not recorded yet, or its restore under way: a run joining waits."""
    return hold.original is None or (hold.released_at is not None and hold.ended_at is None)


def fold(entries: Iterable[Entry], forget_before_ms: int) -> dict[int, Request]:
    """The requests the records describe, by id: each request's latest record, its latest heartbeat and progress;
    requests with no record since `forget_before_ms` are forgotten."""
    by_key: dict[str, Request] = {}
    extra: dict[str, list[tuple[str, Entry]]] = {}
    for e in entries:
        if e.value.get("v") != FORMAT_VERSION:
            continue
        base, _, kind = e.key.partition("/")
        if kind:
            extra.setdefault(base, []).append((kind, e))
            continue
        req = _parse(e)
        if req is not None:
            by_key[base] = req
    out: dict[int, Request] = {}
    for key, req in by_key.items():
        for kind, e in extra.get(key, []):
            stamp = int(e.value.get("hb") or e.value.get("ts") or e.timestamp_ms)
            req.updated_ms = max(req.updated_ms, stamp)
            if kind == "hb" and e.value.get("run") == req.owner.get("run"):
                req.heartbeat_ms = max(req.heartbeat_ms, stamp)
            elif kind == "progress" and stamp >= req.progress_ms:
                req.progress, req.progress_ms = list(e.value.get("progress") or []), stamp
            elif kind == "cancel" and req.state in (RUNNING, STOPPED):
                req.cancel_asked = e.value.get("by") or {}
        if req.cancel_asked is not None and req.state == STOPPED:
            req.state = CANCELLED
        if req.updated_ms >= forget_before_ms:
            out[req.id] = req
    return out


def _parse(e: Entry) -> Request | None:
    v = e.value
    try:
        rid = int(v["id"]) if v.get("id") is not None else e.offset
        throttles = {}
        for resource, h in (v.get("throttles") or {}).items():
            throttles[resource] = Hold(*(e.offset if h.get(n) == _SELF else h.get(n)
                                         for n in ("held_at", "original", "released_at", "ended_at")))
        return Request(rid, e.key, list(v["partitions"]), dict(v["origin"]), dict(v["owner"]), str(v["state"]),
                       int(v["started_ms"]), int(v.get("ended_ms", -1)), int(v.get("heartbeat_ms", 0)),
                       int(v.get("heartbeat_every_ms", HEARTBEAT_S * 1000)), throttles,
                       updated_ms=max(int(v.get("ts") or 0), e.timestamp_ms))
    except (KeyError, TypeError, ValueError):
        return None  # a record this version cannot read
