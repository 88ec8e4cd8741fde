"""Replication throttles for moves between brokers, set as Kafka's kafka-reassign-partitions.sh sets them, but per
step: the rate (`leader.replication.throttled.rate`, `follower.replication.throttled.rate`) on every broker a running
step involves, and on each topic `leader.replication.throttled.replicas` (the step's current replicas, which serve the
copies) and `follower.replication.throttled.replicas` (the step's new replicas, which fetch), as `partition:broker`
lists. Each resource's own value is recorded before it is first changed and put back at the end, by the last run to
leave it (ThrottleOwners: the cluster's record, mover/admin/reassign/request_store.py, where a run holding a resource
another run throttles takes that run's record of the original, never its value). An operator's `*` (every replica
throttled) is left as it is."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, ClusterUnavailable
from mover.admin.reassign.kip455 import BROKER_RESOURCE, TOPIC_RESOURCE, alter_configs, own_configs

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BROKER_KEYS = [LEADER_RATE, FOLLOWER_RATE]
TOPIC_KEYS = [LEADER_REPLICAS, FOLLOWER_REPLICAS]
ALL = "*"
# How long the end of a run keeps asking a broker that is down to take its own throttle back.
RESTORE_WAIT_S = 60.0


def _resource(kind: int, name: str) -> str:
    return f"{'broker' if kind == BROKER_RESOURCE else 'topic'}:{name}"


def _entries(value: str | None) -> list[str]:
    return [e.strip() for e in (value or "").split(",") if e.strip()]


class ThrottleOwners(Protocol):
    """Who holds which throttled resource and its own value (mover/admin/reassign/request_store.py)."""

    def original(self, resource: str) -> dict[str, str] | None: ...

    def originals(self) -> dict[str, dict[str, str]]: ...

    def hold(self, resource: str, describe: Callable[[], dict[str, str]]) -> dict[str, str]: ...

    def release(self, resource: str) -> dict[str, str] | None: ...

    def ended(self, resource: str) -> None: ...


class ConfigAccess(Protocol):
    def own(self, kind: int, names: Iterable[str], keys: list[str]) -> dict[str, dict[str, str]]: ...

    def alter(self, kind: int, changes: Mapping[str, Mapping[str, str | None]]) -> None: ...


class BrokerConfigs:
    """Configs through the brokers (DescribeConfigs, IncrementalAlterConfigs)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def own(self, kind: int, names: Iterable[str], keys: list[str]) -> dict[str, dict[str, str]]:
        return own_configs(self.client, kind, names, keys)

    def alter(self, kind: int, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        alter_configs(self.client, kind, changes)


class ReplicationThrottle:
    """What the run has set: rates per broker, throttled replicas per topic."""

    def __init__(self, client: Client, store: ThrottleOwners, configs: ConfigAccess | None = None) -> None:
        self.client = client
        self.store = store
        # Where configs are read and changed: the brokers (Describe/IncrementalAlterConfigs), or ZooKeeper for
        # brokers before Kafka 2.3 (mover/admin/reassign/zookeeper_view.py ZkConfigs).
        self.configs: ConfigAccess = configs or BrokerConfigs(client)
        self.rate: int | None = None
        self._brokers: set[int] = set()
        self._topics: dict[str, tuple[str, str]] = {}  # what we last wrote: (leader value, follower value)

    def _originals(self, kind: int, names: Iterable[str]) -> dict[str, dict[str, str]]:
        keys = BROKER_KEYS if kind == BROKER_RESOURCE else TOPIC_KEYS
        for name in names:
            if self.store.original(_resource(kind, name)) is None:
                # Read only once the hold is recorded (the store calls it): see ThrottleOwners.
                self.store.hold(_resource(kind, name),
                                lambda name=name: self.configs.own(kind, [name], keys).get(name, {}))  # type: ignore[misc]
        return {}

    def set_rate(self, brokers: Iterable[int], rate: int | None) -> None:
        """The rate on `brokers` (and, when it changes, on every broker already throttled)."""
        if rate is None:
            return
        new = set(brokers) - self._brokers
        targets = self._brokers | new if rate != self.rate else new
        for broker in sorted(targets):
            # One at a time: a broker takes its own configs only itself, and one that is down (killed mid-run) is
            # simply tried again when the next step starts.
            try:
                self._originals(BROKER_RESOURCE, [str(broker)])
                self.configs.alter(BROKER_RESOURCE, {str(broker): {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)}})
            except (AdminError, ClientError):
                continue
            self._brokers.add(broker)
        self.rate = rate

    def set_replicas(self, moving: Mapping[tuple[str, int], tuple[Iterable[int], Iterable[int]]]) -> None:
        """`moving`: every running step, {(topic, partition): (its current replicas, its new replicas)}; topics
        whose lists change are rewritten, topics no step moves any more get their own value back."""
        if self.rate is None:
            return
        leaders: dict[str, set[str]] = defaultdict(set)
        followers: dict[str, set[str]] = defaultdict(set)
        for (topic, partition), (current, adding) in moving.items():
            leaders[topic].update(f"{partition}:{b}" for b in current)
            followers[topic].update(f"{partition}:{b}" for b in adding)
        topics = set(leaders)
        self._originals(TOPIC_RESOURCE, sorted(topics - set(self._topics)))
        changes: dict[str, dict[str, str | None]] = {}
        for topic in sorted(topics):
            original = self.store.original(_resource(TOPIC_RESOURCE, topic)) or {}
            values = []
            for key, ours in ((LEADER_REPLICAS, leaders[topic]), (FOLLOWER_REPLICAS, followers[topic])):
                theirs = original.get(key)
                if theirs is not None and theirs.strip() == ALL:
                    values.append(ALL)
                else:
                    merged = sorted(set(_entries(theirs)) | ours, key=_entry_key)
                    values.append(",".join(merged))
            pair = (values[0], values[1])
            if self._topics.get(topic) != pair:
                changes[topic] = {LEADER_REPLICAS: pair[0] or None, FOLLOWER_REPLICAS: pair[1] or None}
                self._topics[topic] = pair
        self.configs.alter(TOPIC_RESOURCE, changes)
        for topic in sorted(set(self._topics) - topics):
            self._restore(TOPIC_RESOURCE, topic)
            del self._topics[topic]

    def restore_all(self, wait_s: float = RESTORE_WAIT_S, say: Callable[[str], None] | None = None) -> list[str]:
        """Every resource this or an earlier run changed gets its own value back. Returns what was restored.

        A broker takes changes to its own configs only itself: one that is down (killed mid-step) is asked again
        every second for `wait_s`, and so is a topic while the cluster cannot answer (no broker, or a retriable
        code: a KRaft controller restarting); what is still pending then stays recorded for --verify or the next
        run."""
        restored = []
        deadline = time.monotonic() + wait_s
        # Only the replication throttle's own resources: the store also holds others' (mover-audit execute's
        # log-dir throttle, "broker-log-dirs:N"), which their tool puts back.
        pending = sorted(r for r in self.store.originals() if r.partition(":")[0] in ("broker", "topic"))
        while pending:
            failed: dict[str, str] = {}
            for resource in pending:
                kind_name, _, name = resource.partition(":")
                try:
                    self._restore(BROKER_RESOURCE if kind_name == "broker" else TOPIC_RESOURCE, name)
                    restored.append(resource)
                except (AdminError, ClientError) as e:
                    # A topic's config is refused for good unless the cluster is only away for now (its controller
                    # restarting: topic configs go through it); a broker's may wait for that broker to come back.
                    if kind_name != "broker" and not isinstance(e, (ClientError, ClusterUnavailable)):
                        raise
                    failed[resource] = str(e)
            pending = sorted(failed)
            if pending and time.monotonic() >= deadline:
                if say is not None:
                    say(f"warning: could not restore the throttle of {', '.join(pending)} "
                        f"({next(iter(failed.values()))}); --verify or the next run restores it")
                break
            if pending:
                time.sleep(1.0)
        self._brokers.clear()
        self._topics.clear()
        return restored

    def _restore(self, kind: int, name: str) -> None:
        resource = _resource(kind, name)
        original = self.store.release(resource)
        if original is not None:  # None: not held, or another run still holds it and restores it when it leaves
            keys = BROKER_KEYS if kind == BROKER_RESOURCE else TOPIC_KEYS
            self.configs.alter(kind, {name: {k: original.get(k) for k in keys}})
        self.store.ended(resource)


def _entry_key(entry: str) -> tuple[int, int, str]:
    p, _, b = entry.partition(":")
    return (int(p), int(b), "") if p.isdigit() and b.isdigit() else (1 << 31, 0, entry)
