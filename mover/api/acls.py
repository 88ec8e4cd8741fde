"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31): ACL management as kafka-acls.sh and admin clients use it.

Describe on CLUSTER to list, Alter on CLUSTER to change (Kafka's checks). Without an authorizer configured the
broker has nothing to manage: SECURITY_DISABLED, as Kafka answers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from mover.security import session as sessions
from mover.security.acls import (
    CLUSTER_NAME,
    AclEntry,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    validate_binding,
)
from mover.server import Handler, Route
from mover.wire import ErrorCode, RequestHeader
from mover.wire.messages import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS

if TYPE_CHECKING:
    from mover.api.broker import Broker

log = logging.getLogger(__name__)

Body = dict[str, Any]
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def routes(broker: Broker) -> dict[int, Handler | Route]:
    def authorizer():  # noqa: ANN202 - Authorizer | None
        return broker.security.authorizer if broker.security is not None else None

    def allowed(op: Operation) -> bool:
        authz = authorizer()
        assert authz is not None
        return authz.authorize(sessions.current(), op, ResourceType.CLUSTER, CLUSTER_NAME)

    def describe(header: RequestHeader, req: Body) -> Body:
        authz = authorizer()
        if authz is None:
            return _describe_error(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
        if not allowed(Operation.DESCRIBE):
            return _describe_error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
        try:
            flt = _filter(req, header.api_version)
        except ValueError as e:
            return _describe_error(ErrorCode.INVALID_REQUEST, str(e))
        found = authz.describe(flt)
        return {
            "error_code": 0,
            "error_message": None,
            "resources": [
                {"resource_type": int(r.type), "resource_name": r.name, "pattern_type": int(r.pattern),
                 "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                           "permission_type": int(e.permission)} for e in sorted(es)]}
                for r, es in sorted(found.items())
            ],
        }

    def create(header: RequestHeader, req: Body) -> Body:
        authz = authorizer()
        creations = req["creations"]
        if authz is None:
            return {"results": [_result(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER) for _ in creations]}
        if not allowed(Operation.ALTER):
            return {"results": [_result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for _ in creations]}
        results: list[Body] = []
        good: list[tuple[Resource, AclEntry]] = []
        for c in creations:
            try:
                resource = Resource(ResourceType(c["resource_type"]), c["resource_name"],
                                    PatternType(c["resource_pattern_type"]))
                entry = AclEntry(c["principal"], c["host"], Operation(c["operation"]), Permission(c["permission_type"]))
                problem = validate_binding(resource, entry)
            except ValueError as e:
                problem = f"invalid ACL: {e}"
            if problem is not None:
                results.append(_result(ErrorCode.INVALID_REQUEST, problem))
                continue
            good.append((resource, entry))
            results.append(_result(ErrorCode.NONE, None))
        if good:
            authz.create(good)
            log.info("ACLs created by %s: %s", _who(), ", ".join(f"{r} {e}" for r, e in good))
        return {"results": results}

    def delete(header: RequestHeader, req: Body) -> Body:
        authz = authorizer()
        filters = req["filters"]
        if authz is None:
            return {"filter_results": [_filter_result(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER) for _ in filters]}
        if not allowed(Operation.ALTER):
            return {"filter_results": [_filter_result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
                                       for _ in filters]}
        parsed: list[AclFilter | None] = []
        for f in filters:
            try:
                parsed.append(_filter(f, header.api_version))
            except ValueError:
                parsed.append(None)
        removed = authz.delete([f for f in parsed if f is not None])
        out = []
        it = iter(removed)
        for f in parsed:
            if f is None:
                out.append(_filter_result(ErrorCode.INVALID_REQUEST, "invalid ACL filter"))
                continue
            gone = next(it)
            out.append({"error_code": 0, "error_message": None, "matching_acls": [
                {"error_code": 0, "error_message": None, "resource_type": int(r.type), "resource_name": r.name,
                 "pattern_type": int(r.pattern), "principal": e.principal, "host": e.host,
                 "operation": int(e.operation), "permission_type": int(e.permission)} for r, e in gone]})
        if any(removed):
            log.info("ACLs deleted by %s: %d", _who(), sum(len(g) for g in removed))
        return {"filter_results": out}

    return {DESCRIBE_ACLS.key: describe, CREATE_ACLS.key: create, DELETE_ACLS.key: delete}


def _filter(req: Body, version: int) -> AclFilter:
    """Raises ValueError for codes outside Kafka's enums (and UNKNOWN, which a filter may not use)."""
    rtype = ResourceType(req["resource_type_filter"])
    pattern = PatternType(req["pattern_type_filter"]) if version >= 1 else PatternType.LITERAL
    op = Operation(req["operation"])
    perm = Permission(req["permission_type"])
    if ResourceType.UNKNOWN in (rtype,) or pattern == PatternType.UNKNOWN or op == Operation.UNKNOWN or (
        perm == Permission.UNKNOWN
    ):
        raise ValueError("UNKNOWN in an ACL filter")
    return AclFilter(rtype, req["resource_name_filter"], pattern, req["principal_filter"], req["host_filter"], op, perm)


def _describe_error(code: ErrorCode, message: str | None) -> Body:
    return {"error_code": int(code), "error_message": message, "resources": []}


def _result(code: ErrorCode, message: str | None) -> Body:
    return {"error_code": int(code), "error_message": message}


def _filter_result(code: ErrorCode, message: str | None) -> Body:
    return {"error_code": int(code), "error_message": message, "matching_acls": []}


def _who() -> str:
    s = sessions.current()
    return f"{s.principal} from {s.address}" if s is not None else "-"
