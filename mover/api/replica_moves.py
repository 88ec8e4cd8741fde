"""DescribeReplicaMoves (key 32100, v0; ours, not Kafka's): KIP-179's progress of the moves of one request.

The request id comes from the AlterReplicaLogDirs v2 response's tagged `request_id`; -1 asks for the latest
request. An id the broker does not know (never handed out, or forgotten after
`reassign.partitions.status.min.retention.ms`) is answered with INVALID_REQUEST and no requests, echoing the id.
With no request at all yet, -1 is answered with NONE and an empty list: "nothing has been moved" is not an error.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from mover.server import Handler, Route
from mover.wire import ErrorCode, RequestHeader
from mover.wire.messages import DESCRIBE_REPLICA_MOVES
from mover.wire.messages.log_dirs import LATEST_REQUEST_ID

if TYPE_CHECKING:
    from mover.api.broker import Broker

Body = dict[str, Any]


def routes(broker: Broker) -> dict[int, Handler | Route]:
    def describe_replica_moves(header: RequestHeader, request: Body) -> Body:
        return describe(broker, request["request_id"])

    # Read-only: may overlap other requests on the connection.
    return {DESCRIBE_REPLICA_MOVES.key: Route(describe_replica_moves, concurrent=True)}


def describe(broker: Broker, request_id: int) -> Body:
    latest = request_id < 0
    found = broker.manager.requests.describe(None if latest else request_id)
    if not found:
        code = ErrorCode.NONE if latest else ErrorCode.INVALID_REQUEST
        echoed = LATEST_REQUEST_ID if latest else request_id
        return {"throttle_time_ms": 0, "error_code": int(code), "request_id": echoed, "requests": []}
    req = found[0]
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "request_id": req.request_id,
        "requests": [{
            "request_id": req.request_id,
            "start_ms": req.start_ms,
            "end_ms": req.end_ms,
            "replicas": [asdict(r) for r in req.replicas],
        }],
    }
