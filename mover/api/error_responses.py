"""Error answers built from a request, for when its handler failed: Kafka's `AbstractRequest.getErrorResponse`.

Each API's response shape differs, so each gets a small builder that mirrors the request's topics, partitions or
resources with the error code. None means the version has no shape that can carry the error without lying (e.g.
DescribeLogDirs before v3: an empty result list would read as "no log dirs"); the caller then closes the
connection, which clients treat as a retriable network error.
"""

from __future__ import annotations

from typing import Any

from mover.server import Builder
from mover.wire.messages.log_dirs import DESCRIBE_REPLICA_MOVES_KEY

Body = dict[str, Any]


def _metadata(version: int, req: Body, code: int) -> Body | None:
    topics = req.get("topics")
    if not topics:
        return None  # "all topics" or none: no per-topic slot to put the error in
    return {"topics": [{"name": t["name"], "topic_id": t["topic_id"], "error_code": code} for t in topics]}


def _describe_log_dirs(version: int, req: Body, code: int) -> Body | None:
    return {"error_code": code} if version >= 3 else None


def _alter_replica_log_dirs(version: int, req: Body, code: int) -> Body:
    by_topic: dict[str, list[int]] = {}
    for d in req["dirs"]:
        for t in d["topics"]:
            by_topic.setdefault(t["name"], []).extend(t["partitions"])
    return {
        "results": [
            {"topic_name": name, "partitions": [{"partition_index": p, "error_code": code} for p in parts]}
            for name, parts in by_topic.items()
        ]
    }


def _create_topics(version: int, req: Body, code: int) -> Body:
    return {"topics": [{"name": t["name"], "error_code": code, "error_message": None} for t in req["topics"]]}


def _delete_topics(version: int, req: Body, code: int) -> Body:
    if version >= 6:
        results = [{"name": t["name"], "topic_id": t["topic_id"], "error_code": code} for t in req["topics"]]
    else:
        results = [{"name": n, "error_code": code} for n in req["topic_names"]]
    return {"responses": results}


def _describe_configs(version: int, req: Body, code: int) -> Body:
    return {
        "results": [
            {
                "error_code": code,
                "error_message": None,
                "resource_type": r["resource_type"],
                "resource_name": r["resource_name"],
                "configs": [],
            }
            for r in req["resources"]
        ]
    }


def _alter_configs(version: int, req: Body, code: int) -> Body:
    """AlterConfigs and IncrementalAlterConfigs: one answer per resource."""
    return {
        "responses": [
            {
                "error_code": code,
                "error_message": None,
                "resource_type": r["resource_type"],
                "resource_name": r["resource_name"],
            }
            for r in req["resources"]
        ]
    }


def _create_partitions(version: int, req: Body, code: int) -> Body:
    return {"results": [{"name": t["name"], "error_code": code, "error_message": None} for t in req["topics"]]}


def _create_acls(version: int, req: Body, code: int) -> Body:
    return {"results": [{"error_code": code, "error_message": None} for _ in req["creations"]]}


def _delete_acls(version: int, req: Body, code: int) -> Body:
    return {"filter_results": [{"error_code": code, "error_message": None, "matching_acls": []}
                               for _ in req["filters"]]}


def _alter_user_scram_credentials(version: int, req: Body, code: int) -> Body:
    # One result per user named, once, as the handler answers.
    users = dict.fromkeys([d["name"] for d in req["deletions"]] + [u["name"] for u in req["upsertions"]])
    return {"results": [{"user": u, "error_code": code, "error_message": None} for u in users]}


def _produce(version: int, req: Body, code: int) -> Body:
    return {
        "responses": [
            {
                "name": t["name"],
                "partition_responses": [
                    {"index": p["index"], "error_code": code, "base_offset": -1} for p in t["partition_data"]
                ],
            }
            for t in req["topic_data"]
        ]
    }


def _fetch(version: int, req: Body, code: int) -> Body:
    return {
        "error_code": code,
        "responses": [
            {
                "topic": t["topic"],
                "partitions": [
                    {"partition_index": p["partition"], "error_code": code, "high_watermark": -1, "records": None}
                    for p in t["partitions"]
                ],
            }
            for t in req["topics"]
        ],
    }


def _list_offsets(version: int, req: Body, code: int) -> Body:
    return {
        "topics": [
            {
                "name": t["name"],
                "partitions": [{"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]],
            }
            for t in req["topics"]
        ]
    }


def _top_level(version: int, req: Body, code: int) -> Body:
    return {"error_code": code}


def _describe_replica_moves(version: int, req: Body, code: int) -> Body:
    return {"error_code": code, "request_id": req["request_id"]}


# Every API moverd routes has one (tests/api/test_authorization_declared.py checks the route table).
BUILDERS: dict[int, Builder] = {
    0: _produce,
    1: _fetch,
    2: _list_offsets,
    3: _metadata,
    18: _top_level,
    19: _create_topics,
    20: _delete_topics,
    22: _top_level,
    29: _top_level,
    30: _create_acls,
    31: _delete_acls,
    32: _describe_configs,
    33: _alter_configs,
    34: _alter_replica_log_dirs,
    35: _describe_log_dirs,
    37: _create_partitions,
    44: _alter_configs,
    51: _alter_user_scram_credentials,
    DESCRIBE_REPLICA_MOVES_KEY: _describe_replica_moves,
}


def error_response(api_key: int, version: int, request: Body, code: int) -> Body | None:
    """A response to `request` carrying `code` everywhere it can, or None if this API/version has no such shape."""
    builder = BUILDERS.get(api_key)
    return None if builder is None else builder(version, request, code)
