"""ReplicationThrottle.restore_all while the cluster is away: a topic's throttle restore that meets a retriable
answer or no broker (a KRaft controller restarting: topic configs go through it) is asked again, as a broker's is,
until it passes or the wait ends; a topic refused for good still ends the run. An in-memory config store stands in
for the brokers; the real cluster's outage is in tests/kafka/reassign/test_reassign_interrupted.py."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path

import pytest

from mover.admin.client import ClientError
from mover.admin.common import AdminError, BrokersUnreachable, ClusterUnavailable
from mover.admin.reassign.replication_throttle import LEADER_RATE, LEADER_REPLICAS, ReplicationThrottle
from mover.testing.file_request_store import RequestStore


class Configs:
    """Each alter fails with the next of `failures[name]` (None: it passes and is kept)."""

    def __init__(self, failures: dict[str, list[Exception]]) -> None:
        self.failures = failures
        self.kept: dict[str, dict[str, str | None]] = {}

    def own(self, kind: int, names: object, keys: object) -> dict[str, dict[str, str]]:
        return {}

    def alter(self, kind: int, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        for name, entries in changes.items():
            pending = self.failures.get(name)
            if pending:
                raise pending.pop(0)
            self.kept[name] = dict(entries)


def throttle_with(tmp_path: Path, configs: Configs) -> ReplicationThrottle:
    store = RequestStore("c", tmp_path)
    store.record("broker:1", {LEADER_RATE: "5"})
    store.record("topic:t", {LEADER_REPLICAS: "0:1"})
    return ReplicationThrottle(None, store, configs)  # type: ignore[arg-type]


def test_a_topic_restore_waits_out_the_controllers_outage(tmp_path: Path) -> None:
    configs = Configs({"t": [ClusterUnavailable("topic t refused ...: REQUEST_TIMED_OUT"),
                             BrokersUnreachable("no broker answered IncrementalAlterConfigs")],
                       "1": [ClientError("broker 1 (127.0.0.1:1) did not answer IncrementalAlterConfigs within 10 s")]})
    out = io.StringIO()
    restored = throttle_with(tmp_path, configs).restore_all(wait_s=30, say=lambda line: print(line, file=out))
    assert sorted(restored) == ["broker:1", "topic:t"] and out.getvalue() == ""
    assert configs.kept["t"][LEADER_REPLICAS] == "0:1" and configs.kept["1"][LEADER_RATE] == "5"


def test_what_is_still_away_when_the_wait_ends_stays_recorded(tmp_path: Path) -> None:
    away = ClusterUnavailable("topic t refused ...: NOT_CONTROLLER")
    configs = Configs({"t": [away] * 10})
    out = io.StringIO()
    throttle = throttle_with(tmp_path, configs)
    assert throttle.restore_all(wait_s=0, say=lambda line: print(line, file=out)) == ["broker:1"]
    assert "could not restore the throttle of topic:t (topic t refused ...: NOT_CONTROLLER)" in out.getvalue()
    assert throttle.store.original("topic:t") == {LEADER_REPLICAS: "0:1"}  # for --verify or the next run


def test_a_topic_refused_for_good_ends_the_run(tmp_path: Path) -> None:
    configs = Configs({"t": [AdminError("topic t refused ...: TOPIC_AUTHORIZATION_FAILED")]})
    with pytest.raises(AdminError, match="TOPIC_AUTHORIZATION_FAILED"):
        throttle_with(tmp_path, configs).restore_all(wait_s=30)
