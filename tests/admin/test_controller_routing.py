"""Where mover-reassign sends KIP-455's requests: to the controller Metadata names, as Kafka's AdminClient does.

Two in-process brokers (mover.server on 127.0.0.1) answer Metadata with a controller id of the test's choosing; the
one that is not the controller answers NOT_CONTROLLER, as a ZooKeeper-mode Kafka 2.4-3.x broker does (the real one:
tests/kafka/test_reassign_zookeeper.py). A controller that takes a request and never answers (a KRaft broker whose
controller quorum is gone) is reported at once as ClusterUnavailable, not after every broker's timeout in turn."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from mover.admin.client import Client
from mover.admin.common import ClusterUnavailable
from mover.admin.reassign.kip455 import TOPIC_RESOURCE, alter_configs, list_reassignments
from mover.api import with_api_defaults
from mover.testing.server import serve
from mover.wire.errors import ErrorCode
from mover.wire.messages import INCREMENTAL_ALTER_CONFIGS, LIST_PARTITION_REASSIGNMENTS, METADATA

ONGOING = {"name": "t", "partitions": [{"partition_index": 0, "replicas": [1, 2, 3], "adding_replicas": [3],
                                        "removing_replicas": [1]}]}


class Cluster:
    """Brokers 1 and 2; `controller` is what Metadata names; `hang` brokers never answer the forwarded APIs."""

    def __init__(self, controller: int) -> None:
        self.controller = controller
        self.hang: set[int] = set()
        self.ports: dict[int, int] = {}
        self.calls: list[tuple[int, str]] = []

    def handlers(self, node: int) -> dict[int, Any]:
        def metadata(header: object, request: dict[str, Any]) -> dict[str, Any]:
            self.calls.append((node, "Metadata"))
            return {"brokers": [{"node_id": b, "host": "127.0.0.1", "port": p} for b, p in self.ports.items()],
                    "cluster_id": "c", "controller_id": self.controller, "topics": []}

        async def list_reassignments(header: object, request: dict[str, Any]) -> dict[str, Any]:
            self.calls.append((node, "ListPartitionReassignments"))
            if node in self.hang:
                await asyncio.sleep(3600)
            if node != self.controller:
                return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_CONTROLLER, "error_message": None,
                        "topics": []}
            return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": [ONGOING]}

        async def alter_configs(header: object, request: dict[str, Any]) -> dict[str, Any]:
            self.calls.append((node, "IncrementalAlterConfigs"))
            if node in self.hang:
                await asyncio.sleep(3600)
            return {"throttle_time_ms": 0, "responses": [
                {"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                 "resource_name": r["resource_name"]} for r in request["resources"]]}

        return {METADATA.key: metadata, LIST_PARTITION_REASSIGNMENTS.key: list_reassignments,
                INCREMENTAL_ALTER_CONFIGS.key: alter_configs}

    def asked(self, api: str) -> list[int]:
        return [node for node, name in self.calls if name == api]


@pytest.fixture
def started() -> Iterator[tuple[Cluster, str]]:
    cluster = Cluster(controller=2)
    with ExitStack() as stack:
        for node in (1, 2):
            running = stack.enter_context(serve(with_api_defaults(cluster.handlers(node))))
            cluster.ports[node] = running.port
        yield cluster, f"127.0.0.1:{cluster.ports[1]}"


def test_goes_to_the_controller_metadata_names(started: tuple[Cluster, str]) -> None:
    cluster, bootstrap = started
    with Client(bootstrap, timeout=5) as client:
        ongoing = list_reassignments(client)
    assert ongoing[("t", 0)].target == (2, 3)
    assert set(cluster.asked("ListPartitionReassignments")) == {2}


def test_not_controller_reads_metadata_again(started: tuple[Cluster, str]) -> None:
    """The controller moved after the client read Metadata: the broker it named answers NOT_CONTROLLER."""
    cluster, bootstrap = started
    cluster.controller = 1
    with Client(bootstrap, timeout=5) as client:
        assert client.controller_id == 1
        cluster.controller = 2
        ongoing = list_reassignments(client)
    assert ongoing[("t", 0)].adding == (3,)
    assert cluster.asked("ListPartitionReassignments") == [1, 2]


def test_a_controller_that_never_answers_is_said_at_once(started: tuple[Cluster, str]) -> None:
    cluster, bootstrap = started
    cluster.hang = {1, 2}
    with Client(bootstrap, timeout=0.5) as client:
        with pytest.raises(ClusterUnavailable, match="did not answer ListPartitionReassignments.*controller"):
            list_reassignments(client)
    assert cluster.asked("ListPartitionReassignments") == [2]


def test_a_forwarded_request_that_times_out_is_not_asked_of_every_broker(started: tuple[Cluster, str]) -> None:
    """Topic configs go to any broker (a KRaft broker forwards them): one broker's timeout ends the call, and the
    broker that timed out is asked last next time."""
    cluster, bootstrap = started
    cluster.hang = {1}
    with Client(bootstrap, timeout=0.5) as client:
        with pytest.raises(ClusterUnavailable, match="did not answer IncrementalAlterConfigs"):
            alter_configs(client, TOPIC_RESOURCE, {"t": {"retention.ms": "1000"}})
        assert cluster.asked("IncrementalAlterConfigs") == [1]
        alter_configs(client, TOPIC_RESOURCE, {"t": {"retention.ms": "1000"}})
    assert cluster.asked("IncrementalAlterConfigs") == [1, 2]
