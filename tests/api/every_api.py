"""A request for every API moverd routes, valid at each version it serves, and what Kafka answers it when the
principal may do nothing at all (KafkaApis' checks). Shared by the walk against a secured moverd
(tests/security/test_authorization_walk.py) and the error-answer check (tests/api/test_authorization_declared.py).

A new routed API needs a case here: both tests fail for an API without one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mover.testing.batches import make_batch
from mover.wire import Api, ErrorCode
from mover.wire.messages import (
    ALTER_CONFIGS,
    ALTER_REPLICA_LOG_DIRS,
    ALTER_USER_SCRAM_CREDENTIALS,
    CREATE_ACLS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_ACLS,
    DELETE_TOPICS,
    DESCRIBE_ACLS,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_REPLICA_MOVES,
    FETCH,
    INCREMENTAL_ALTER_CONFIGS,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
)

Body = dict[str, Any]
TOPIC = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
CLUSTER = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
# DescribeConfigs / AlterConfigs resource types (Kafka's ConfigResource.Type).
CONFIG_TOPIC, CONFIG_BROKER = 2, 4


@dataclass(frozen=True)
class Case:
    """`body` is sent at every version (fields a version lacks are not encoded); `denied(version, response)`
    asserts the answer is the refusal Kafka gives a principal without rights."""

    name: str
    api: Api
    body: Body
    denied: Callable[[int, Body], None]
    versions: tuple[int, int] | None = None  # None: every version the API is served at

    def applies(self, version: int) -> bool:
        return self.versions is None or self.versions[0] <= version <= self.versions[1]


def _codes(rows: list[Body], expected: int | Callable[[Body], int]) -> None:
    assert rows, "no rows in the answer"
    for row in rows:
        want = expected(row) if callable(expected) else expected
        assert row["error_code"] == want, row


def _per_partition(topics_key: str, partitions_key: str, code: int) -> Callable[[int, Body], None]:
    def check(version: int, resp: Body) -> None:
        _codes([p for t in resp[topics_key] for p in t[partitions_key]], code)
        assert resp.get("error_code", 0) == 0, resp  # Fetch: the refusal is per partition, not the whole answer

    return check


def _per_row(rows_key: str, code: int | Callable[[Body], int]) -> Callable[[int, Body], None]:
    return lambda version, resp: _codes(resp[rows_key], code)


def _top_level(code: int) -> Callable[[int, Body], None]:
    def check(version: int, resp: Body) -> None:
        assert resp["error_code"] == code, resp

    return check


def _describe_log_dirs(version: int, resp: Body) -> None:
    # Kafka answers no dirs; only v3+ has the field that says why.
    assert resp["results"] == [], resp
    if version >= 3:
        assert resp["error_code"] == CLUSTER, resp


def _all_topics_listed_none(version: int, resp: Body) -> None:
    assert resp["topics"] == [], resp


def _by_resource_type(row: Body) -> int:
    return CLUSTER if row["resource_type"] == CONFIG_BROKER else TOPIC


def every_api(topic: str, log_dir: str, broker_id: int = 0) -> dict[int, list[Case]]:
    """Cases per api key, about `topic` (which should exist) and the broker's `log_dir`."""
    no_uuid = uuid.UUID(int=0)
    config_resources = [{"resource_type": CONFIG_BROKER, "resource_name": str(broker_id)},
                        {"resource_type": CONFIG_TOPIC, "resource_name": topic}]
    acl_filter = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    cases = [
        Case("Produce", PRODUCE, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": make_batch([b"walk"])}]}]},
             _per_partition("responses", "partition_responses", TOPIC)),
        Case("Fetch", FETCH, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                  {"topic": topic, "partitions": [
                                      {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
                              "forgotten_topics_data": [], "rack_id": ""},
             _per_partition("responses", "partitions", TOPIC)),
        Case("ListOffsets", LIST_OFFSETS, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
             _per_partition("topics", "partitions", TOPIC)),
        Case("Metadata of a named topic", METADATA,
             {"topics": [{"name": topic, "topic_id": no_uuid}], "allow_auto_topic_creation": False},
             _per_row("topics", TOPIC)),
        # v0 says "all topics" with an empty list, later versions with null.
        Case("Metadata of all topics (v0)", METADATA, {"topics": []}, _all_topics_listed_none, (0, 0)),
        Case("Metadata of all topics", METADATA, {"topics": None, "allow_auto_topic_creation": False},
             _all_topics_listed_none, (1, METADATA.valid.hi)),
        Case("CreateTopics", CREATE_TOPICS, {"topics": [
            {"name": f"{topic}-new", "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": []}], "timeout_ms": 5000, "validate_only": False}, _per_row("topics", TOPIC)),
        Case("DeleteTopics", DELETE_TOPICS, {"topic_names": [topic], "topics": [{"name": topic, "topic_id": no_uuid}],
                                             "timeout_ms": 5000}, _per_row("responses", TOPIC)),
        Case("InitProducerId", INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                  "producer_id": -1, "producer_epoch": -1}, _top_level(CLUSTER)),
        Case("DescribeAcls", DESCRIBE_ACLS, acl_filter, _top_level(CLUSTER)),
        Case("CreateAcls", CREATE_ACLS, {"creations": [
            {"resource_type": 2, "resource_name": topic, "resource_pattern_type": 3, "principal": "User:*",
             "host": "*", "operation": 2, "permission_type": 3}]}, _per_row("results", CLUSTER)),
        Case("DeleteAcls", DELETE_ACLS, {"filters": [acl_filter]}, _per_row("filter_results", CLUSTER)),
        Case("DescribeConfigs", DESCRIBE_CONFIGS,
             {"resources": [{**r, "configuration_keys": None} for r in config_resources], "include_synonyms": False,
              "include_documentation": False}, _per_row("results", _by_resource_type)),
        Case("AlterConfigs", ALTER_CONFIGS, {"resources": [
            {**config_resources[0], "configs": [{"name": "intra.broker.throttled.rate", "value": "1000"}]},
            {**config_resources[1], "configs": [{"name": "retention.ms", "value": "1000"}]}],
            "validate_only": False}, _per_row("responses", _by_resource_type)),
        Case("AlterReplicaLogDirs", ALTER_REPLICA_LOG_DIRS, {"dirs": [
            {"path": log_dir, "topics": [{"name": topic, "partitions": [0]}]}]},
             _per_partition("results", "partitions", CLUSTER)),
        Case("DescribeLogDirs", DESCRIBE_LOG_DIRS, {"topics": None}, _describe_log_dirs),
        Case("CreatePartitions", CREATE_PARTITIONS, {"topics": [{"name": topic, "count": 2, "assignments": None}],
                                                     "timeout_ms": 5000, "validate_only": False},
             _per_row("results", TOPIC)),
        Case("IncrementalAlterConfigs", INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {**config_resources[0], "configs": [
                {"name": "intra.broker.throttled.rate", "config_operation": 0, "value": "1000"}]},
            {**config_resources[1], "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}]}],
            "validate_only": False}, _per_row("responses", _by_resource_type)),
        Case("AlterUserScramCredentials", ALTER_USER_SCRAM_CREDENTIALS, {"deletions": [], "upsertions": [
            {"name": "walker", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}]},
             _per_row("results", CLUSTER)),
        Case("DescribeReplicaMoves", DESCRIBE_REPLICA_MOVES, {"request_id": -1}, _top_level(CLUSTER)),
    ]
    out: dict[int, list[Case]] = {}
    for case in cases:
        out.setdefault(case.api.key, []).append(case)
    return out

