"""Authorization of every API, as Kafka's KafkaApis checks it, wrapped around the handlers.

Each guard takes the request, answers the parts the session's principal may not touch with Kafka's error code,
hands the rest to the API's handler, and merges both answers. Handlers stay unaware of principals; with no
authorizer configured (`authorizer.class.name` unset) the routes are not wrapped at all.

What each API needs (Kafka's checks):
    Produce                  Write on TOPIC                     TOPIC_AUTHORIZATION_FAILED per partition
    Fetch                    Read on TOPIC                      TOPIC_AUTHORIZATION_FAILED per partition
    ListOffsets              Describe on TOPIC                  TOPIC_AUTHORIZATION_FAILED per partition
    Metadata                 Describe on TOPIC                  all-topics lists only those; named ones get
                                                                TOPIC_AUTHORIZATION_FAILED; auto-creation needs
                                                                Create on CLUSTER or the TOPIC
    CreateTopics             Create on CLUSTER or TOPIC         TOPIC_AUTHORIZATION_FAILED per topic
    CreatePartitions         Alter on TOPIC                     TOPIC_AUTHORIZATION_FAILED per topic
    DeleteTopics             Delete on TOPIC                    TOPIC_AUTHORIZATION_FAILED per topic
    DescribeConfigs          DescribeConfigs on CLUSTER/TOPIC   CLUSTER_/TOPIC_AUTHORIZATION_FAILED per resource
    (Incremental)AlterConfigs AlterConfigs on CLUSTER/TOPIC     CLUSTER_/TOPIC_AUTHORIZATION_FAILED per resource
    InitProducerId           IdempotentWrite on CLUSTER, or     CLUSTER_AUTHORIZATION_FAILED
                             Write on any topic (Kafka 2.8+)
    AlterReplicaLogDirs      Alter on CLUSTER                   CLUSTER_AUTHORIZATION_FAILED per partition
    DescribeLogDirs          Describe on CLUSTER                CLUSTER_AUTHORIZATION_FAILED (v3+), else no dirs
    DescribeReplicaMoves     Describe on CLUSTER                CLUSTER_AUTHORIZATION_FAILED
The ACL APIs and AlterUserScramCredentials check their own (mover/api/acls.py, mover/api/scram_users.py).

Every API key says how it is authorized, in AUTHORIZATION below: a guard, `ChecksItself` (its handler asks the
authorizer) or `BeforeAuthorization` (ApiVersions and SASL: answered by the server and the connection's gate, never
routed). A route whose key says none of these is a bug that would serve it unguarded, so `check_declared` refuses
the whole route table (moverd does not start), with or without an authorizer configured: the mistake fails every
test that starts a broker instead of failing open on a secured one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mover.security import session as sessions
from mover.security.acls import CLUSTER_NAME, Operation, Permission, ResourceType
from mover.security.authorizer import Authorizer
from mover.server import Route, run_blocking
from mover.server.routes import Handler, is_async_handler
from mover.wire import ErrorCode
from mover.wire.messages import (
    ALTER_CONFIGS,
    ALTER_REPLICA_LOG_DIRS,
    ALTER_USER_SCRAM_CREDENTIALS,
    API_BY_KEY,
    API_VERSIONS,
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
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)

if TYPE_CHECKING:
    from mover.wire import RequestHeader

Body = dict[str, Any]
Call = Callable[[Body], Awaitable[Body | None]]

TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
CLUSTER_DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

# DescribeConfigs / IncrementalAlterConfigs resource types (Kafka's ConfigResource.Type).
CONFIG_TOPIC = 2
CONFIG_BROKER = 4
CONFIG_BROKER_LOGGER = 8


class Access:
    """The authorizer seen from one request: `topic(op, name)`, `cluster(op)` for the current session."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer
        self.session = sessions.current()

    def topic(self, op: Operation, name: str, *, log_denial: bool = True) -> bool:
        return self.authorizer.authorize(self.session, op, ResourceType.TOPIC, name, log_denial=log_denial)

    def cluster(self, op: Operation, *, log_denial: bool = True) -> bool:
        return self.authorizer.authorize(self.session, op, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=log_denial)

    def any_topic(self, op: Operation) -> bool:
        """Kafka's authorizeByResourceType: some ALLOW for the op on a topic and no DENY that covers every topic."""
        authz = self.authorizer
        principal = self.session.principal if self.session is not None else "User:ANONYMOUS"
        if principal in authz.super_users:
            return True
        acls = authz.store.snapshot()
        host = self.session.client_host if self.session is not None else ""
        for r, entries in acls.items():
            if r.type != ResourceType.TOPIC:
                continue
            if any(e.permission == Permission.DENY and e.applies(principal, host, op) and r.name == "*"
                   for e in entries):
                return False
        return any(
            r.type == ResourceType.TOPIC and e.permission == Permission.ALLOW and e.applies(principal, host, op)
            for r, entries in acls.items()
            for e in entries
        )


Guard = Callable[[Access, int, Body, Call], Awaitable[Body | None]]


@dataclass(frozen=True)
class ChecksItself:
    """The route's handler asks the authorizer itself; `where` names the module that does, for the reader."""

    where: str


@dataclass(frozen=True)
class BeforeAuthorization:
    """Answered by the server or the connection's SASL gate before any route, so never a route: registering one
    would bypass the gate on a listener without SASL."""

    why: str


Declaration = Guard | ChecksItself | BeforeAuthorization


class UndeclaredAuthorization(ValueError):
    """A route table holds an API whose authorization AUTHORIZATION does not declare, or one never to be routed."""


def check_declared(keys: Iterable[int]) -> None:
    """Raise UndeclaredAuthorization unless every routed key has a guard or checks itself (AUTHORIZATION)."""
    missing, unroutable = [], []
    for key in sorted(keys):
        declared = AUTHORIZATION.get(key)
        if declared is None:
            missing.append(key)
        elif isinstance(declared, BeforeAuthorization):
            unroutable.append(key)
    if missing:
        raise UndeclaredAuthorization(
            f"routes for {_names(missing)} declare no authorization: add a guard or ChecksItself to "
            "AUTHORIZATION in mover/api/authz.py (an undeclared API would be served unguarded with ACLs on)")
    if unroutable:
        raise UndeclaredAuthorization(f"{_names(unroutable)} are answered before any route (mover/api/authz.py "
                                      "AUTHORIZATION): do not register routes for them")


def _names(keys: list[int]) -> str:
    return ", ".join(f"{API_BY_KEY[k].name} ({k})" if k in API_BY_KEY else f"api key {k}" for k in keys)


def guard_routes(routes: dict[int, Handler | Route], authorizer: Authorizer) -> dict[int, Handler | Route]:
    """Wrap every route in its API's guard; those declared ChecksItself pass as they are. Raises
    UndeclaredAuthorization for a route that declares neither (see check_declared): never served unguarded."""
    check_declared(routes)
    out: dict[int, Handler | Route] = {}
    for key, entry in routes.items():
        declared = AUTHORIZATION[key]
        route = entry if isinstance(entry, Route) else Route(entry)
        out[key] = route if isinstance(declared, ChecksItself) else _wrap(route, declared, authorizer)
    return out


def _wrap(route: Route, guard: Guard, authorizer: Authorizer) -> Route:
    handler = route.handler
    is_async = is_async_handler(handler)

    async def guarded(header: RequestHeader, request: Body) -> Body | None:
        async def call(body: Body) -> Body | None:
            if is_async:
                return await handler(header, body)  # type: ignore[misc]
            return await run_blocking(handler, header, body)  # type: ignore[arg-type]

        return await guard(Access(authorizer), header.api_version, request, call)

    # `encode` and `repeats` only encode and decode, so they stay; `fast` would skip the check.
    return Route(guarded, versions=route.versions, concurrent=route.concurrent, error_response=route.error_response,
                 encode=route.encode, repeats=route.repeats)


# ------------------------------------------------------------------------------------------------------ data path


async def _produce(access: Access, version: int, req: Body, call: Call) -> Body | None:
    allowed, denied = [], []
    for t in req["topic_data"]:
        (allowed if access.topic(Operation.WRITE, t["name"]) else denied).append(t)
    if not denied:
        return await call(req)
    resp = (await call({**req, "topic_data": allowed}) if allowed else None) or {"responses": []}
    resp.setdefault("responses", []).extend(
        {"name": t["name"], "partition_responses": [
            {"index": p["index"], "error_code": TOPIC_DENIED, "base_offset": -1} for p in t["partition_data"]]}
        for t in denied
    )
    return resp


async def _fetch(access: Access, version: int, req: Body, call: Call) -> Body | None:
    allowed, denied = [], []
    for t in req["topics"]:
        (allowed if access.topic(Operation.READ, t["topic"]) else denied).append(t)
    if not denied:
        return await call(req)
    if allowed:
        resp = await call({**req, "topics": allowed}) or {}
    else:
        resp = {"error_code": 0, "session_id": 0, "responses": []}
    resp.setdefault("responses", []).extend(
        {"topic": t["topic"], "partitions": [
            {"partition_index": p["partition"], "error_code": TOPIC_DENIED, "high_watermark": -1, "records": None}
            for p in t["partitions"]]}
        for t in denied
    )
    return resp


async def _list_offsets(access: Access, version: int, req: Body, call: Call) -> Body | None:
    allowed, denied = [], []
    for t in req["topics"]:
        (allowed if access.topic(Operation.DESCRIBE, t["name"]) else denied).append(t)
    if not denied:
        return await call(req)
    resp = (await call({**req, "topics": allowed}) if allowed else None) or {"topics": []}
    resp.setdefault("topics", []).extend(
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": TOPIC_DENIED} for p in t["partitions"]]}
        for t in denied
    )
    return resp


async def _init_producer_id(access: Access, version: int, req: Body, call: Call) -> Body | None:
    if req.get("transactional_id") is None and not (
        access.cluster(Operation.IDEMPOTENT_WRITE, log_denial=False) or access.any_topic(Operation.WRITE)
    ):
        access.cluster(Operation.IDEMPOTENT_WRITE)  # logs the denial
        return {"error_code": CLUSTER_DENIED, "producer_id": -1, "producer_epoch": -1}
    return await call(req)


# ------------------------------------------------------------------------------------------------------- metadata


async def _metadata(access: Access, version: int, req: Body, call: Call) -> Body | None:
    wanted = req["topics"]
    all_topics = wanted is None or (version == 0 and not wanted)
    if all_topics:
        resp = await call(req)
        if resp is not None:
            # Kafka lists only the topics the principal may describe, silently (no denial logged per topic).
            resp["topics"] = [t for t in resp["topics"]
                              if access.topic(Operation.DESCRIBE, t["name"], log_denial=False)]
        return resp
    allowed, denied = [], []
    for t in wanted:
        name = t["name"]
        (allowed if name is None or access.topic(Operation.DESCRIBE, name) else denied).append(t)
    body = {**req, "topics": allowed}
    if allowed and (req.get("allow_auto_topic_creation", True) or version < 4):
        # Auto-creation is a Create: without it an unknown topic is UNKNOWN_TOPIC_OR_PARTITION, as in Kafka.
        # (v0-3 have no such flag: those old clients keep Kafka 0.10's create-on-metadata.)
        if not (access.cluster(Operation.CREATE, log_denial=False)
                or all(t["name"] is None or access.topic(Operation.CREATE, t["name"], log_denial=False)
                       for t in allowed)):
            body["allow_auto_topic_creation"] = False
    if not allowed and denied:
        # Asking for nothing we may show: answer the brokers without listing anything.
        resp = await call({**req, "topics": [], "allow_auto_topic_creation": False}) or {}
        resp["topics"] = []
    else:
        resp = await call(body) or {}
    resp.setdefault("topics", []).extend(
        {"name": t["name"], "topic_id": t["topic_id"], "error_code": TOPIC_DENIED, "is_internal": False,
         "partitions": []}
        for t in denied
    )
    return resp


# ---------------------------------------------------------------------------------------------------------- admin


async def _per_topic(req: Body, call: Call, allowed_topic: Callable[[Body], bool], result_key: str,
                     denied_result: Callable[[Body], Body]) -> Body | None:
    """The admin APIs that take a list of topics under "topics": the allowed ones are asked, each denied one gets
    `denied_result` in the answer's `result_key` list."""
    allowed, denied = [], []
    for t in req["topics"]:
        (allowed if allowed_topic(t) else denied).append(t)
    if not denied:
        return await call(req)
    resp = (await call({**req, "topics": allowed}) if allowed else None) or {result_key: []}
    resp.setdefault(result_key, []).extend(denied_result(t) for t in denied)
    return resp


def _denied_topic(t: Body) -> Body:
    return {"name": t["name"], "error_code": TOPIC_DENIED, "error_message": "Authorization failed."}


async def _create_topics(access: Access, version: int, req: Body, call: Call) -> Body | None:
    cluster_create = access.cluster(Operation.CREATE, log_denial=False)
    return await _per_topic(req, call, lambda t: cluster_create or access.topic(Operation.CREATE, t["name"]),
                            "topics", _denied_topic)


async def _create_partitions(access: Access, version: int, req: Body, call: Call) -> Body | None:
    # ALTER on each topic, as Kafka's ControllerApis asks for CreatePartitions.
    return await _per_topic(req, call, lambda t: access.topic(Operation.ALTER, t["name"]), "results", _denied_topic)


async def _delete_topics(access: Access, version: int, req: Body, call: Call) -> Body | None:
    if version >= 6:
        return await _per_topic(
            req, call, lambda t: t["name"] is None or access.topic(Operation.DELETE, t["name"]), "responses",
            lambda t: {"name": t["name"], "topic_id": t["topic_id"], "error_code": TOPIC_DENIED})
    names_ok = [n for n in req["topic_names"] if access.topic(Operation.DELETE, n)]
    names_no = [n for n in req["topic_names"] if n not in names_ok]
    if not names_no:
        return await call(req)
    resp = (await call({**req, "topic_names": names_ok}) if names_ok else None) or {"responses": []}
    resp.setdefault("responses", []).extend({"name": n, "error_code": TOPIC_DENIED} for n in names_no)
    return resp


def _config_guard(op: Operation, extra: Callable[[Body], Body]) -> Guard:
    async def guard(access: Access, version: int, req: Body, call: Call) -> Body | None:
        allowed, denied = [], []
        for r in req["resources"]:
            rtype = r["resource_type"]
            if rtype == CONFIG_TOPIC:
                ok, code = access.topic(op, r["resource_name"]), TOPIC_DENIED
            elif rtype in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
                ok, code = access.cluster(op), CLUSTER_DENIED
            else:
                ok, code = True, 0  # the handler answers unknown types itself
            (allowed if ok else denied).append((r, code))
        if not denied:
            return await call(req)
        key = _SHAPE[op]
        body = {**req, "resources": [r for r, _ in allowed]}
        resp = (await call(body) if allowed else None) or {key: []}
        resp.setdefault(key, []).extend(
            {"error_code": code, "error_message": "Authorization failed.", "resource_type": r["resource_type"],
             "resource_name": r["resource_name"], **extra(r)}
            for r, code in denied
        )
        return resp

    return guard


_SHAPE = {Operation.DESCRIBE_CONFIGS: "results", Operation.ALTER_CONFIGS: "responses"}


# ---------------------------------------------------------------------------------------------- log dirs (KIP-113)


async def _alter_replica_log_dirs(access: Access, version: int, req: Body, call: Call) -> Body | None:
    if access.cluster(Operation.ALTER):
        return await call(req)
    by_topic: dict[str, list[int]] = {}
    for d in req["dirs"]:
        for t in d["topics"]:
            by_topic.setdefault(t["name"], []).extend(t["partitions"])
    return {"results": [
        {"topic_name": name, "partitions": [{"partition_index": p, "error_code": CLUSTER_DENIED} for p in parts]}
        for name, parts in by_topic.items()
    ]}


async def _describe_log_dirs(access: Access, version: int, req: Body, call: Call) -> Body | None:
    if access.cluster(Operation.DESCRIBE):
        return await call(req)
    # Kafka answers an unauthorized describe with no dirs, and from v3 says why.
    return {"error_code": CLUSTER_DENIED, "results": []}


async def _describe_replica_moves(access: Access, version: int, req: Body, call: Call) -> Body | None:
    if access.cluster(Operation.DESCRIBE):
        return await call(req)
    return {"error_code": CLUSTER_DENIED, "request_id": req.get("request_id", -1), "requests": []}


_ACLS = ChecksItself("mover/api/acls.py: Describe on CLUSTER to list, Alter on CLUSTER to change")
_SASL = BeforeAuthorization("the connection's SASL gate (mover/server/gate.py, auth.py)")

# How each API is authorized; every routed key must be here (check_declared).
AUTHORIZATION: dict[int, Declaration] = {
    PRODUCE.key: _produce,
    FETCH.key: _fetch,
    LIST_OFFSETS.key: _list_offsets,
    INIT_PRODUCER_ID.key: _init_producer_id,
    METADATA.key: _metadata,
    CREATE_TOPICS.key: _create_topics,
    CREATE_PARTITIONS.key: _create_partitions,
    DELETE_TOPICS.key: _delete_topics,
    DESCRIBE_CONFIGS.key: _config_guard(Operation.DESCRIBE_CONFIGS, lambda r: {"configs": []}),
    INCREMENTAL_ALTER_CONFIGS.key: _config_guard(Operation.ALTER_CONFIGS, lambda r: {}),
    ALTER_CONFIGS.key: _config_guard(Operation.ALTER_CONFIGS, lambda r: {}),
    ALTER_REPLICA_LOG_DIRS.key: _alter_replica_log_dirs,
    DESCRIBE_LOG_DIRS.key: _describe_log_dirs,
    DESCRIBE_REPLICA_MOVES.key: _describe_replica_moves,
    DESCRIBE_ACLS.key: _ACLS,
    CREATE_ACLS.key: _ACLS,
    DELETE_ACLS.key: _ACLS,
    ALTER_USER_SCRAM_CREDENTIALS.key: ChecksItself("mover/api/scram_users.py: Alter on CLUSTER"),
    API_VERSIONS.key: BeforeAuthorization("answered by the server from its route table, before and after SASL"),
    SASL_HANDSHAKE.key: _SASL,
    SASL_AUTHENTICATE.key: _SASL,
}
