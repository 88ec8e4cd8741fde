"""`MoveWatcher` polls DescribeLogDirs (in process, mover.testing.placement) for future copies, of a moverd or of
each broker of a Kafka cluster, and tells which acknowledged records were sent and acknowledged while their own
partition was being moved: the proof that a test's traffic really overlapped its moves, not just the run of the
command that started them. It can also poll one broker key (DescribeConfigs) alongside, to show what a broker was set
to while it moved replicas (the log-dir throttle)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError
from mover.admin.throttle import BROKER_RESOURCE
from mover.testing.history import TP, Acked
from mover.testing.placement import describe_placement
from mover.testing.worker import Worker
from mover.wire.messages import DESCRIBE_CONFIGS


def broker_config(client: Client, broker: int, key: str) -> str | None:
    """The value of one broker key as DescribeConfigs gives it for this broker (whatever its source), or None."""
    reply = client.connection(broker).call(DESCRIBE_CONFIGS, {"resources": [{
        "resource_type": BROKER_RESOURCE, "resource_name": str(broker), "configuration_keys": [key]}]})
    for result in reply["results"]:
        assert result["error_code"] == 0, f"broker {broker} refused DescribeConfigs: {result}"
        for entry in result["configs"]:
            if entry["name"] == key:
                return entry["value"]
    return None


@dataclass(frozen=True)
class MoveWindow:
    """A stretch of time during which `tp` had a future copy on `broker` throughout: from the answer of the first
    poll that saw it to the request of the last one. A future copy lives from the move's start to its swap and a
    plan moves a replica once, so two polls seeing it bracket one move that ran in between."""

    tp: TP
    start: float
    end: float
    broker: int | None = None


@dataclass(frozen=True)
class Sample:
    """One poll of one broker: when it was asked and answered (time.monotonic()), the replicas with a future copy,
    and the value of the watched config key (None: not watched, or not set). The key is read before and after
    DescribeLogDirs; `config_held` says both reads agreed, so the value held while the copies were seen."""

    broker: int | None
    asked: float
    answered: float
    moving: frozenset[TP]
    config: str | None = None
    config_held: bool = True


class MoveWatcher(Worker):
    """Polls DescribeLogDirs every `interval` seconds and keeps which replicas had a future copy, so a test can show
    that records were written to a partition while that very partition was being moved. `brokers` None: a moverd
    (its Metadata names only itself); else each of these brokers of a cluster, a broker that does not answer (killed
    by the test) being skipped until it does. `config_key`: also DescribeConfigs of that key on each broker at each
    poll, to show what a broker was set to while it moved replicas (Sample.config)."""

    kind = "move-watcher"

    def __init__(self, name: str, bootstrap: str, *, interval: float = 0.05, brokers: list[int] | None = None,
                 config_key: str | None = None) -> None:
        super().__init__(name)
        self.bootstrap = bootstrap
        self.interval = interval
        self.brokers = brokers
        self.config_key = config_key
        self.samples: list[Sample] = []
        self._lock = threading.Lock()

    def _run(self) -> None:
        with Client(self.bootstrap, timeout=5) as client:
            while not self._stop.is_set():
                for broker in self.brokers or [None]:
                    asked = time.monotonic()
                    try:
                        before = self._config(client, broker)
                        placement = describe_placement(client, broker)
                        after = self._config(client, broker)
                    except (ClientError, AdminError):
                        if broker is None:
                            raise
                        try:
                            client.reconnect(broker)
                        except ClientError:
                            pass  # still down: asked again at the next poll
                        continue
                    moving = frozenset(tp for tp, info in placement.items() if info.future is not None)
                    with self._lock:
                        self.samples.append(Sample(broker, asked, time.monotonic(), moving, after, before == after))
                # A poll cadence, not a condition to wait for.
                self._stop.wait(self.interval)

    def _config(self, client: Client, broker: int | None) -> str | None:
        if self.config_key is None or broker is None:
            return None
        return broker_config(client, broker, self.config_key)

    def stop(self) -> None:
        self.close()
        self._check_stopped()

    def moved(self, broker: int | None = None) -> set[TP]:
        """Every replica seen with a future copy (on `broker`, or on any)."""
        with self._lock:
            return {tp for s in self.samples if broker is None or s.broker == broker for tp in s.moving}

    def configs_while_moving(self, broker: int) -> set[str | None]:
        """The values the watched key held on `broker` in the polls where it had a future copy (a poll during which
        the value changed is left out: it cannot tell which value the copies saw)."""
        with self._lock:
            return {s.config for s in self.samples if s.broker == broker and s.moving and s.config_held}

    def windows(self) -> list[MoveWindow]:
        with self._lock:
            samples = list(self.samples)
        out: list[MoveWindow] = []
        open_: dict[tuple[int | None, TP], list[float]] = {}  # (broker, tp) -> [first answer, last request]
        for s in samples:
            for key in [k for k in open_ if k[0] == s.broker]:
                if key[1] not in s.moving:
                    out.append(MoveWindow(key[1], *open_.pop(key), broker=key[0]))
            for tp in s.moving:
                key = (s.broker, tp)
                if key in open_:
                    open_[key][1] = s.asked
                else:
                    open_[key] = [s.answered, s.answered]  # one poll alone brackets nothing
        out += [MoveWindow(tp, *span, broker=broker) for (broker, tp), span in open_.items()]
        return [w for w in out if w.end > w.start]

    def written_while_moving(self, acked: Iterable[Acked]) -> list[Acked]:
        """The records whose partition had a future copy (on some watched broker) from before they were sent until
        after they were acknowledged: a broker appended them while their partition was being copied to another
        dir."""
        by_tp: dict[TP, list[MoveWindow]] = defaultdict(list)
        for w in self.windows():
            by_tp[w.tp].append(w)
        return [a for a in acked if a.sent is not None
                and any(w.start <= a.sent and a.at <= w.end for w in by_tp.get((a.topic, a.partition), ()))]
