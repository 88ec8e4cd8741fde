"""KIP-179 progress of the log-dir moves a broker carries out (mover-log-dirs --progress [--request N] [--watch]):
per replica a ReplicaStatus (mover/admin/reassign/progress.py: the move's state as its status, its source and
destination dirs, KIP-179's Progress with the error as a Kafka code and its message).

From our DescribeReplicaMoves (api key 32100) when the broker offers it. A broker that does not (a real Kafka: not in
its ApiVersions, and it hangs up if asked anyway) is asked DescribeLogDirs instead (`moving_replicas`), and each
future replica's size is compared with its current copy's: no request ids, no errors, but a fair fraction. What it
has to say (that a broker's progress is estimated) goes to a callback; a request id no broker knows is an AdminError.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from mover.admin.client import Client, ConnectionClosed, UnsupportedApi
from mover.admin.common import AdminError, TopicPartitionReplica, error_name, some
from mover.admin.reassign.progress import Progress, ReplicaStatus, moving_replicas
from mover.wire.errors import ErrorCode
from mover.wire.messages import DESCRIBE_REPLICA_MOVES
from mover.wire.messages.log_dirs import LATEST_REQUEST_ID

Say = Callable[[str], None]
FINISHED_STATES = frozenset({"completed", "cancelled", "failed"})


def finished(m: ReplicaStatus) -> bool:
    return m.status in FINISHED_STATES


@dataclass
class BrokerMoves:
    """One broker's move request as it stands (or, without request ids, the copies DescribeLogDirs shows)."""

    broker: int
    request_id: int | None  # None: the broker has no request ids (DescribeLogDirs fallback)
    start_ms: int
    end_ms: int
    replicas: list[ReplicaStatus]  # status: the move's state; log_dir -> future_dir: its source -> destination


class MoveSource:
    """Fetches the progress of one broker's moves, choosing the API once (AdminError: a request id it does not know)."""

    def __init__(self, client: Client, broker: int, request_id: int | None, say: Say) -> None:
        self.client = client
        self.broker = broker
        self.requested = request_id  # what the user asked for (--request)
        self.request_id = request_id  # what is followed: --request, or the latest request once seen
        conn = client.connection(broker)
        self.native = conn.supports(DESCRIBE_REPLICA_MOVES)
        self.say = say  # the one note: this broker's progress is estimated
        if not self.native:
            self._fall_back()
        self._seen: dict[TopicPartitionReplica, ReplicaStatus] = {}

    def _fall_back(self) -> None:
        self.native = False
        if self.requested is not None:
            raise AdminError(f"broker {self.broker} does not support DescribeReplicaMoves (api key "
                             f"{DESCRIBE_REPLICA_MOVES.key}), so it keeps no request ids: --request needs a mover "
                             f"broker")
        self.say(f"note: broker {self.broker} does not support DescribeReplicaMoves (api key "
                 f"{DESCRIBE_REPLICA_MOVES.key}); estimating progress from DescribeLogDirs")

    def fetch(self) -> BrokerMoves | None:
        """None: the broker has no move request at all."""
        if self.native:
            for attempt in range(2):
                try:
                    return self._fetch_native()
                except (UnsupportedApi, ConnectionClosed):
                    # A hang-up is how Kafka answers an API it does not know, but also what a restart looks like:
                    # ask again on a fresh connection (client.connection reconnects) if the broker still offers it.
                    if attempt == 1 or not self.client.connection(self.broker).supports(DESCRIBE_REPLICA_MOVES):
                        break
            self._fall_back()
        return self._fetch_fallback()

    def _fetch_native(self) -> BrokerMoves | None:
        wanted = LATEST_REQUEST_ID if self.request_id is None else self.request_id
        reply = self.client.connection(self.broker).call(DESCRIBE_REPLICA_MOVES, {"request_id": wanted})
        code = reply["error_code"]
        if code != ErrorCode.NONE:
            if self.request_id is not None:
                raise AdminError(f"Request id {self.request_id} is not known to broker {self.broker} "
                                 f"({error_name(code)})")
            raise AdminError(f"broker {self.broker} answered DescribeReplicaMoves with {error_name(code)}")
        requests = reply["requests"]
        if self.request_id is not None:
            requests = [r for r in requests if r["request_id"] == self.request_id]
            if not requests:
                raise AdminError(f"Request id {self.request_id} is not known to broker {self.broker}")
        if not requests:
            return None
        req = max(requests, key=lambda r: r["request_id"])
        # Later polls must follow this request even if another one starts meanwhile.
        self.request_id = req["request_id"]
        return BrokerMoves(self.broker, req["request_id"], req["start_ms"], req["end_ms"], [
            _move(self.broker, r) for r in req["replicas"]])

    def _fetch_fallback(self) -> BrokerMoves | None:
        copying, where = moving_replicas(self.client, self.broker)
        now = {m.replica: m for m in copying}
        # A future copy that vanished was swapped in (the replica is now in its destination) or dropped.
        for replica, before in self._seen.items():
            if replica not in now and not finished(before):
                info = where.get(replica)
                landed = info is not None and info.log_dir == before.future_dir
                total = before.progress.denominator if before.progress.denominator is not None \
                    else before.progress.numerator
                now[replica] = replace(before, status="completed" if landed else "cancelled", progress=Progress(
                    total if landed else before.progress.numerator, before.progress.denominator, complete=landed))
            elif replica not in now:
                now[replica] = before
        self._seen = now
        if not now:
            return None
        return BrokerMoves(self.broker, None, 0, -1, list(now.values()))


def _move(broker: int, r: dict[str, Any]) -> ReplicaStatus:
    """One replica of a DescribeReplicaMoves answer (the wire's -1 or 0 total: unknown)."""
    progress = Progress(r["bytes_copied"], r["bytes_total"], complete=r["state"] == "completed")
    if r["error_code"] != ErrorCode.NONE:
        progress.fail(r["error_code"], r["error_message"])
    return ReplicaStatus(r["topic"], r["partition"], broker, r["state"], log_dir=r["source_dir"],
                         future_dir=r["destination_dir"], progress=progress)


class FollowedBrokers:
    """The MoveSources of the brokers followed, opened one broker at a time and kept once open: a watch that
    retries after a lost connection resumes where it stopped, so no broker's fallback note is said twice."""

    def __init__(self, request_id: int | None, say: Say) -> None:
        self.request_id = request_id
        self.say = say
        self.sources: list[MoveSource] | None = None  # set once every broker's is open (and filtered)
        self._opened: dict[int, MoveSource] = {}

    def open(self, client: Client, brokers: list[int]) -> list[MoveSource]:
        if self.sources is not None:
            return self.sources
        for b in brokers:
            if b not in self._opened:
                self._opened[b] = MoveSource(client, b, self.request_id, self.say)
        sources = [self._opened[b] for b in brokers]
        if self.request_id is not None:
            # A request id belongs to one broker's sequence; keep the brokers that know it.
            known = []
            for s in sources:
                try:
                    s.fetch()
                    known.append(s)
                except AdminError:
                    if len(sources) == 1:
                        raise
            if not known:
                raise AdminError(f"Request id {self.request_id} is not known to brokers {some(brokers, ',')}")
            sources = known
        self.sources = sources
        return sources
