"""Reassignment between brokers through the brokers (KIP-455, Kafka 2.4+): the cluster's view of partitions, the
reassignments in progress, starting and cancelling them, electing preferred leaders, topic configs.

KIP-455's requests and ElectLeaders go to the controller Metadata names, as Kafka's AdminClient sends them: a broker
of a ZooKeeper-mode cluster (Kafka 2.4-3.x) that is not the controller answers NOT_CONTROLLER, while a KRaft broker
forwards them to the controller quorum and Metadata names any live broker. The rest (Metadata, configs) goes to
some live broker. A broker that is down (killed mid-step) is skipped for the next; a request taken and not answered
within the client's timeout means the controller is gone (KRaft: every broker forwards to it), so that is said at
once instead of after each broker's timeout in turn (docs/cli.md#through-the-brokers).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mover.admin.client import Client, ClientError, RequestTimedOut
from mover.admin.common import AdminError, BrokersUnreachable, ClusterUnavailable, error_name
from mover.wire import Api
from mover.wire.errors import RETRIABLE, ErrorCode
from mover.wire.messages import (
    ALTER_PARTITION_REASSIGNMENTS,
    DESCRIBE_CONFIGS,
    ELECT_LEADERS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_PARTITION_REASSIGNMENTS,
    METADATA,
)
from mover.wire.messages.reassignment import ELECTION_PREFERRED

TopicPartition = tuple[str, int]
TOPIC_RESOURCE = 2  # Kafka's ConfigResource.Type.TOPIC
BROKER_RESOURCE = 4
OP_SET = 0
OP_DELETE = 1
MIN_INSYNC_KEY = "min.insync.replicas"
# Kafka's broker default of min.insync.replicas, when DescribeConfigs does not say.
DEFAULT_MIN_INSYNC = 1
# DescribeConfigs' ConfigSource: a value set for this one resource (topic or broker).
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
# The APIs a broker must offer for mover-reassign --bootstrap-server (Kafka 2.4+).
REQUIRED_APIS: tuple[Api, ...] = (ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS, ELECT_LEADERS,
                                  DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS)


@dataclass(frozen=True)
class PartitionState:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # -1: none


@dataclass(frozen=True)
class Ongoing:
    """A reassignment in progress (ListPartitionReassignments): all replicas, and which are coming and going."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(b for b in self.replicas if b not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(b for b in self.replicas if b not in self.adding)


# What a broker hands to the controller: taken and not answered in time, it says the controller is down, and every
# other broker would time out the same way (Kafka 3.7, KRaft, its only controller killed: docs/kafka-compat.md).
FORWARDED_API_KEYS = frozenset(api.key for api in (ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS,
                                                   ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS))
# Answers of NOT_CONTROLLER (a controller elected since Metadata was read) before the caller gets the last one.
CONTROLLER_ATTEMPTS = 3


def call_any(client: Client, api: Api, body: dict[str, Any]) -> dict[str, Any]:
    """`api` on the first broker that answers, starting with the lowest id; a broker that is down is skipped, and one
    that timed out before is asked last. A forwarded request that times out raises ClusterUnavailable at once."""
    errors: list[str] = []
    for broker in sorted(client.brokers, key=lambda b: (client.timed_out.get(b, 0.0), b)):
        try:
            return client.connection(broker).call(api, body)
        except RequestTimedOut as e:
            client.timed_out[broker] = time.monotonic()
            if api.key in FORWARDED_API_KEYS:
                raise ClusterUnavailable(f"{e} (a broker hands {api.name} to the cluster's controller: it is "
                                         "down or moving)") from None
            errors.append(str(e))
        except ClientError as e:
            errors.append(str(e))
            try:
                client.reconnect(broker)
            except ClientError:
                pass
    raise BrokersUnreachable(f"no broker answered {api.name}: {'; '.join(errors)}")


def call_controller(client: Client, api: Api, body: dict[str, Any], code: Callable[[dict[str, Any]], int]
                    ) -> dict[str, Any]:
    """`api` on the controller Metadata names (`code(reply)` is the answer's error code). NOT_CONTROLLER reads
    Metadata again and asks the one it names now; a controller that cannot be reached, or none named (-1), hands
    the request to any broker (a KRaft broker forwards it; a ZooKeeper-mode one answers NOT_CONTROLLER)."""
    reply: dict[str, Any] = {}
    for _ in range(CONTROLLER_ATTEMPTS):
        if client.controller_id is None:
            client.controller_id = _cluster_metadata(client).get("controller_id", -1)
        controller = client.controller_id
        try:
            if controller not in client.brokers:
                raise ClientError(f"no controller known (Metadata names {controller})")
            reply = client.connection(controller).call(api, body)
        except RequestTimedOut as e:
            client.controller_id = None
            client.timed_out[controller] = time.monotonic()
            raise ClusterUnavailable(f"{e} (the cluster's controller, or the one it forwards to, is down or "
                                     "moving)") from None
        except ClientError:
            client.controller_id = None
            reply = call_any(client, api, body)
        if code(reply) != ErrorCode.NOT_CONTROLLER:
            return reply
        client.controller_id = None
    return reply


def check_apis(client: Client) -> None:
    """A broker that lacks KIP-455's APIs (Kafka before 2.4, or moverd) cannot do this: say so before anything."""
    conn = None
    errors = []
    for broker in sorted(client.brokers):
        try:
            conn = client.connection(broker)
            break
        except ClientError as e:
            errors.append(str(e))
    if conn is None:
        raise BrokersUnreachable(f"no broker answered: {'; '.join(errors)}")
    missing = [f"{api.name} (api key {api.key})" for api in REQUIRED_APIS if not conn.supports(api)]
    if missing:
        raise AdminError(f"broker {conn.name} does not support {', '.join(missing)}: reassignment between brokers "
                         f"through --bootstrap-server needs Kafka 2.4 or later (use --zookeeper for older brokers)")


def partition_states(client: Client, topics: Iterable[str]) -> tuple[dict[TopicPartition, PartitionState],
                                                                      set[str]]:
    """Metadata of `topics`: per partition its replicas, ISR and leader; and the topics the cluster does not know.
    Brokers are refreshed from the same answer (a restarted broker comes back under its id)."""
    names = sorted(set(topics))
    reply = call_any(client, METADATA, {"topics": [{"name": t} for t in names], "allow_auto_topic_creation": False})
    if reply["brokers"]:
        client.brokers.update({b["node_id"]: (b["host"], b["port"]) for b in reply["brokers"]})
    states: dict[TopicPartition, PartitionState] = {}
    unknown: set[str] = set()
    for t in reply["topics"]:
        if t["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            unknown.add(t["name"])
            continue
        if t["error_code"] != ErrorCode.NONE:
            raise AdminError(f"Metadata of topic {t['name']}: {error_name(t['error_code'])}")
        for p in t["partitions"]:
            states[(t["name"], p["partition_index"])] = PartitionState(
                tuple(p["replica_nodes"]), tuple(p["isr_nodes"]), p["leader_id"])
    return states, unknown


def live_brokers(client: Client) -> set[int]:
    return {b["node_id"] for b in _cluster_metadata(client)["brokers"]}


def _cluster_metadata(client: Client) -> dict[str, Any]:
    """Metadata without topics: the live brokers and the controller id, from any broker."""
    return call_any(client, METADATA, {"topics": [], "allow_auto_topic_creation": False})


def _top_level_code(reply: dict[str, Any]) -> int:
    return int(reply["error_code"])


def _election_code(reply: dict[str, Any]) -> int:
    """ElectLeaders' top-level code (v1+), else NOT_CONTROLLER when a ZooKeeper-mode broker that is not the
    controller put it on every partition (its answer before v1 has no top-level code)."""
    if reply.get("error_code", ErrorCode.NONE) != ErrorCode.NONE:
        return int(reply["error_code"])
    codes = {p["error_code"] for r in reply["replica_election_results"] for p in r["partition_result"]}
    return ErrorCode.NOT_CONTROLLER if codes == {ErrorCode.NOT_CONTROLLER} else ErrorCode.NONE


def refusal(what: str, code: int, message: str | None) -> AdminError:
    """The error for `what` answered with `code`: ClusterUnavailable for Kafka's retriable codes (the controller the
    broker forwards to moving or restarting, say), which the step loop and the watches wait out; AdminError, the
    command's one line, for any other."""
    error = ClusterUnavailable if code in RETRIABLE else AdminError
    return error(f"{what}: {error_name(code)}" + (f": {message}" if message else ""))


def list_reassignments(client: Client, partitions: Iterable[TopicPartition] | None = None
                       ) -> dict[TopicPartition, Ongoing]:
    """The reassignments in progress (of `partitions`, or all)."""
    topics: dict[str, list[int]] | None = None
    if partitions is not None:
        topics = defaultdict(list)
        for t, p in sorted(partitions):
            topics[t].append(p)
    body = {"timeout_ms": 30000,
            "topics": None if topics is None else [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}
    reply = call_controller(client, LIST_PARTITION_REASSIGNMENTS, body, _top_level_code)
    if reply["error_code"] != ErrorCode.NONE:
        # NOT_CONTROLLER while the controller restarts, say: a watch polls again (ClusterUnavailable).
        raise refusal("ListPartitionReassignments", reply["error_code"], reply["error_message"])
    return {(t["name"], p["partition_index"]): Ongoing(tuple(p["replicas"]), tuple(p["adding_replicas"]),
                                                        tuple(p["removing_replicas"]))
            for t in reply["topics"] for p in t["partitions"]}


def alter_reassignments(client: Client, targets: Mapping[TopicPartition, tuple[int, ...] | None]
                        ) -> dict[TopicPartition, tuple[int, str | None]]:
    """AlterPartitionReassignments: each partition to its replicas (None cancels). Returns the partitions the
    controller refused: {tp: (error code, message)}."""
    if not targets:
        return {}
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (t, p), replicas in sorted(targets.items()):
        topics[t].append({"partition_index": p, "replicas": None if replicas is None else list(replicas)})
    reply = call_controller(client, ALTER_PARTITION_REASSIGNMENTS, {
        "timeout_ms": 30000, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}, _top_level_code)
    if reply["error_code"] != ErrorCode.NONE:
        raise refusal("AlterPartitionReassignments", reply["error_code"], reply["error_message"])
    return {(t["name"], p["partition_index"]): (p["error_code"], p["error_message"])
            for t in reply["responses"] for p in t["partitions"] if p["error_code"] != ErrorCode.NONE}


def elect_preferred(client: Client, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """ElectLeaders (preferred): returns the partitions whose election failed with something other than
    ELECTION_NOT_NEEDED (already the leader), {tp: error code}."""
    topics: dict[str, list[int]] = defaultdict(list)
    for t, p in sorted(partitions):
        topics[t].append(p)
    if not topics:
        return {}
    reply = call_controller(client, ELECT_LEADERS, {
        "election_type": ELECTION_PREFERRED, "timeout_ms": 30000,
        "topic_partitions": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}, _election_code)
    failed = {}
    for r in reply["replica_election_results"]:
        for p in r["partition_result"]:
            if p["error_code"] not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED):
                failed[(r["topic"], p["partition_id"])] = p["error_code"]
    return failed


# ------------------------------------------------------------------------------------------------ configs


def describe_configs(client: Client, resource_type: int, names: Iterable[str], keys: list[str] | None,
                     ) -> dict[str, list[dict[str, Any]]]:
    """DescribeConfigs of several resources of one type: {name: [config entries]}."""
    resources = [{"resource_type": resource_type, "resource_name": n, "configuration_keys": keys}
                 for n in sorted(set(names))]
    if not resources:
        return {}
    reply = call_any(client, DESCRIBE_CONFIGS, {"resources": resources})
    out: dict[str, list[dict[str, Any]]] = {}
    for r in reply["results"]:
        if r["error_code"] != ErrorCode.NONE:
            raise AdminError(f"DescribeConfigs of {r['resource_name']}: {error_name(r['error_code'])}"
                             + (f": {r['error_message']}" if r["error_message"] else ""))
        out[r["resource_name"]] = r["configs"]
    return out


def min_insync_replicas(client: Client, topics: Iterable[str]) -> dict[str, int]:
    configs = describe_configs(client, TOPIC_RESOURCE, topics, [MIN_INSYNC_KEY])
    out = {}
    for topic, entries in configs.items():
        value = next((e["value"] for e in entries if e["name"] == MIN_INSYNC_KEY and e["value"] is not None), None)
        out[topic] = int(value) if value is not None else DEFAULT_MIN_INSYNC
    return out


def own_configs(client: Client, resource_type: int, names: Iterable[str], keys: list[str]
                ) -> dict[str, dict[str, str]]:
    """The values of `keys` set on each resource itself (not defaults): {name: {key: value}}."""
    source = DYNAMIC_TOPIC_CONFIG if resource_type == TOPIC_RESOURCE else DYNAMIC_BROKER_CONFIG
    if resource_type == BROKER_RESOURCE:
        # A broker describes only its own configs ("Unexpected broker id"): ask each one itself.
        configs = {}
        for name in sorted(set(names)):
            reply = client.connection(int(name)).call(DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}]})
            for r in reply["results"]:
                if r["error_code"] != ErrorCode.NONE:
                    raise AdminError(f"DescribeConfigs of broker {name}: {error_name(r['error_code'])}"
                                     + (f": {r['error_message']}" if r["error_message"] else ""))
                configs[name] = r["configs"]
    else:
        configs = describe_configs(client, resource_type, names, keys)
    return {name: {e["name"]: e["value"] for e in entries
                   if e["name"] in keys and e["config_source"] == source and e["value"] is not None}
            for name, entries in configs.items()}


def alter_configs(client: Client, resource_type: int, changes: Mapping[str, Mapping[str, str | None]]) -> None:
    """IncrementalAlterConfigs: {resource name: {key: value, or None to delete}}. A broker's own resource goes to
    that broker only: every Kafka broker refuses another's id (INVALID_REQUEST "Unexpected broker id", docs/
    kafka-compat.md), so when it cannot be reached its ClientError is the error, not another broker's refusal. The
    cluster default (an empty name) and topics go to any broker."""
    for name, entries in sorted(changes.items()):
        if not entries:
            continue
        body = {"validate_only": False, "resources": [{
            "resource_type": resource_type, "resource_name": name,
            "configs": [{"name": k, "config_operation": OP_DELETE if v is None else OP_SET, "value": v}
                        for k, v in sorted(entries.items())]}]}
        if resource_type == BROKER_RESOURCE and name:
            # A broker missing from the metadata raises here too ("broker N is not in the cluster").
            reply = client.connection(int(name)).call(INCREMENTAL_ALTER_CONFIGS, body)
        else:
            reply = call_any(client, INCREMENTAL_ALTER_CONFIGS, body)
        for r in reply["responses"]:
            if r["error_code"] != ErrorCode.NONE:
                kind = "topic" if resource_type == TOPIC_RESOURCE else "broker"
                what = f"{kind} {name} refused {', '.join(sorted(entries))}"
                raise refusal(what, r["error_code"], r["error_message"])
