"""Authorization: every API allowed for a principal with the ACLs Kafka requires, refused with Kafka's error code
for one without; ACLs managed through kafka-python's admin client and kept across a restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import SecurityDisabledError

from mover.config.security import SecurityConfig
from mover.security.acls import AclEntry, AclFilter, Operation, PatternType, Permission, Resource
from mover.security.acls import ResourceType as RT
from mover.security.authorizer import Authorizer, FileAclStore
from mover.security.session import Session
from mover.testing.batches import make_batch
from mover.testing.certs import Issued, Pki
from mover.wire import ErrorCode
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
from tests.security.helpers import ACLS_ON, PASSWORDS, SecureBroker, client_kwargs, session_as

OK = ErrorCode.NONE
TOPIC = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def admin_client(b: SecureBroker, user: str = "admin") -> KafkaAdminClient:
    return KafkaAdminClient(**client_kwargs(b, "SASL_PLAINTEXT", user=user, password=PASSWORDS[user]))


def acl(principal: str, op: ACLOperation, rtype: ResourceType, name: str,
        pattern: ACLResourcePatternType = ACLResourcePatternType.LITERAL,
        permission: ACLPermissionType = ACLPermissionType.ALLOW) -> ACL:
    return ACL(principal, "*", op, permission, ResourcePattern(rtype, name, pattern))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki, server_cert: Issued) -> Iterator[SecureBroker]:
    b = SecureBroker(tmp_path_factory.mktemp("authz"), pki, server_cert, props=ACLS_ON)
    b.start()
    try:
        admin = admin_client(b)
        try:
            from kafka.admin import NewTopic
            admin.create_topics([NewTopic("alice-data", 1, 1), NewTopic("alice-secret", 1, 1)])
            result = admin.create_acls([
                acl("User:alice", ACLOperation.ALL, ResourceType.CLUSTER, "kafka-cluster"),
                acl("User:alice", ACLOperation.ALL, ResourceType.TOPIC, "alice-", ACLResourcePatternType.PREFIXED),
                acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, "alice-secret",
                    permission=ACLPermissionType.DENY),
            ])
            assert not result["failed"], result
        finally:
            admin.close()
        yield b
    finally:
        b.stop()


def _produce(topic: str) -> tuple[Any, int, dict, Callable[[dict], int]]:
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": make_batch([b"a", b"b", b"c"])}]}]}
    return PRODUCE, 7, body, lambda r: r["responses"][0]["partition_responses"][0]["error_code"]


def _fetch(topic: str) -> tuple[Any, int, dict, Callable[[dict], int]]:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    return FETCH, 11, body, lambda r: r["responses"][0]["partitions"][0]["error_code"]


CASES: list[tuple[str, Callable[[], tuple[Any, int, dict, Callable[[dict], int]]], ErrorCode]] = [
    ("Produce", lambda: _produce("alice-data"), TOPIC),
    ("Fetch", lambda: _fetch("alice-data"), TOPIC),
    ("ListOffsets", lambda: (LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "alice-data", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        lambda r: r["topics"][0]["partitions"][0]["error_code"]), TOPIC),
    ("Metadata", lambda: (METADATA, 9, {"topics": [{"name": "alice-data"}], "allow_auto_topic_creation": False},
                          lambda r: r["topics"][0]["error_code"]), TOPIC),
    ("CreateTopics", lambda: (CREATE_TOPICS, 5, {"topics": [
        {"name": "alice-new", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 5000, "validate_only": True}, lambda r: r["topics"][0]["error_code"]), TOPIC),
    ("CreatePartitions", lambda: (CREATE_PARTITIONS, 3, {"topics": [
        {"name": "alice-data", "count": 1, "assignments": None}], "timeout_ms": 5000, "validate_only": True},
        lambda r: r["results"][0]["error_code"]), TOPIC),
    ("DeleteTopics", lambda: (DELETE_TOPICS, 5, {"topic_names": ["alice-gone"], "timeout_ms": 5000},
                              lambda r: r["responses"][0]["error_code"]), TOPIC),
    ("DescribeConfigs broker", lambda: (DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 4, "resource_name": "0", "configuration_keys": None}], "include_synonyms": False,
        "include_documentation": False}, lambda r: r["results"][0]["error_code"]), CLUSTER),
    ("DescribeConfigs topic", lambda: (DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": "alice-data", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False},
        lambda r: r["results"][0]["error_code"]), TOPIC),
    ("IncrementalAlterConfigs", lambda: (INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 4, "resource_name": "0", "configs": [
            {"name": "intra.broker.throttled.rate", "config_operation": 0, "value": "100000000"}]}],
        "validate_only": True}, lambda r: r["responses"][0]["error_code"]), CLUSTER),
    ("AlterConfigs", lambda: (ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 4, "resource_name": "0", "configs": [
            {"name": "intra.broker.throttled.rate", "value": "100000000"}]}],
        "validate_only": True}, lambda r: r["responses"][0]["error_code"]), CLUSTER),
    ("InitProducerId", lambda: (INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                     "producer_id": -1, "producer_epoch": -1},
                                lambda r: r["error_code"]), CLUSTER),
    ("DescribeLogDirs", lambda: (DESCRIBE_LOG_DIRS, 4, {"topics": None}, lambda r: r["error_code"]), CLUSTER),
    ("AlterReplicaLogDirs", lambda: (ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
        {"path": "/nowhere", "topics": [{"name": "alice-data", "partitions": [0]}]}]},
        lambda r: r["results"][0]["partitions"][0]["error_code"]), CLUSTER),
    ("DescribeReplicaMoves", lambda: (DESCRIBE_REPLICA_MOVES, 0, {"request_id": -1}, lambda r: r["error_code"]),
     CLUSTER),
    ("DescribeAcls", lambda: (DESCRIBE_ACLS, 1, {"resource_type_filter": 1, "resource_name_filter": None,
                                                 "pattern_type_filter": 1, "principal_filter": None,
                                                 "host_filter": None, "operation": 1, "permission_type": 1},
                              lambda r: r["error_code"]), CLUSTER),
    ("CreateAcls", lambda: (CREATE_ACLS, 1, {"creations": [
        {"resource_type": 2, "resource_name": "x", "resource_pattern_type": 3, "principal": "User:bob",
         "host": "*", "operation": 3, "permission_type": 3}]}, lambda r: r["results"][0]["error_code"]), CLUSTER),
    ("AlterUserScramCredentials", lambda: (ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [], "upsertions": [
        {"name": "zed", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}]},
        lambda r: r["results"][0]["error_code"]), CLUSTER),
    ("DeleteAcls", lambda: (DELETE_ACLS, 1, {"filters": [
        {"resource_type_filter": 2, "resource_name_filter": "nothing-here", "pattern_type_filter": 3,
         "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]},
        lambda r: r["filter_results"][0]["error_code"]), CLUSTER),
]


@pytest.mark.parametrize(("name", "make", "denied_code"), CASES, ids=[c[0] for c in CASES])
def test_allowed_and_denied_principals(secured: SecureBroker, name: str,
                                       make: Callable[[], tuple[Any, int, dict, Callable[[dict], int]]],
                                       denied_code: ErrorCode) -> None:
    api, version, body, code_of = make()
    with session_as(secured, "bob") as bob:
        assert code_of(bob.call(api, version, body)) == denied_code
    with session_as(secured, "alice") as alice:
        code = code_of(alice.call(api, version, body))
        # Allowed means the request got past authorization: the API's own answer (for AlterReplicaLogDirs to a dir
        # that does not exist, LOG_DIR_NOT_FOUND; deleting a topic that is not there, UNKNOWN_TOPIC_OR_PARTITION).
        assert code not in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED), code
    log = secured.d.log()
    assert "DENIED principal=User:bob" in log and "client=127.0.0.1:" in log


def test_deny_wins_and_metadata_is_filtered(secured: SecureBroker) -> None:
    with session_as(secured, "alice") as alice:
        api, version, body, code_of = _fetch("alice-secret")
        assert code_of(alice.call(api, version, body)) == TOPIC  # ALLOW All on alice-*, DENY Read here
        api, version, body, code_of = _produce("alice-secret")
        assert code_of(alice.call(api, version, body)) == OK  # the DENY is for Read only
    with session_as(secured, "bob") as bob:
        everything = bob.call(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
        assert everything["topics"] == []
    with session_as(secured, "admin") as admin:
        everything = admin.call(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})
        assert {"alice-data", "alice-secret"} <= {t["name"] for t in everything["topics"]}


def test_acls_managed_with_kafka_python_and_kept_across_restart(tmp_path: Path, pki: Pki,
                                                                server_cert: Issued) -> None:
    b = SecureBroker(tmp_path, pki, server_cert, props={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"})
    with b:
        admin = admin_client(b)
        try:
            created = admin.create_acls([
                acl("User:bob", ACLOperation.READ, ResourceType.TOPIC, "logs-", ACLResourcePatternType.PREFIXED),
                acl("User:bob", ACLOperation.DESCRIBE, ResourceType.GROUP, "g1"),
            ])
            assert len(created["succeeded"]) == 2 and not created["failed"]
        finally:
            admin.close()
        b.restart()
        admin = admin_client(b)
        try:
            everything = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                   ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
            found, error = admin.describe_acls(everything)
            assert error.errno == 0
            assert {(a.resource_pattern.resource_name, a.operation) for a in found} == {
                ("logs-", ACLOperation.READ), ("g1", ACLOperation.DESCRIBE)}
            deleted = admin.delete_acls([ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                   ResourcePatternFilter(ResourceType.GROUP, "g1",
                                                                         ACLResourcePatternType.LITERAL))])
            assert len(deleted[0][1]) == 1
            found, _ = admin.describe_acls(everything)
            assert [a.resource_pattern.resource_name for a in found] == ["logs-"]
        finally:
            admin.close()
        # Kafka's JSON per resource, in every log dir.
        for d in b.d.dirs:
            assert '"permissionType": "Allow"' in (d / "acls.json").read_text()


def test_acl_apis_without_an_authorizer_say_security_disabled(broker: SecureBroker) -> None:
    admin = KafkaAdminClient(**client_kwargs(broker, "PLAINTEXT"))
    try:
        everything = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                               ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
        with pytest.raises(SecurityDisabledError):
            found, error = admin.describe_acls(everything)
            if error.errno:
                raise error
    finally:
        admin.close()


def test_authorizer_decisions(tmp_path: Path) -> None:
    """Kafka's rules, directly: super users, DENY wins, implied Describe, wildcard and prefixed patterns, hosts."""
    config = SecurityConfig(super_users=frozenset({"User:root"}))
    authz = Authorizer(config, FileAclStore([tmp_path]))
    alice = Session("User:alice", "L", "10.0.0.1", 1)
    other_host = Session("User:alice", "L", "10.0.0.2", 1)
    authz.create([
        (Resource(RT.TOPIC, "*"), AclEntry("User:alice", "*", Operation.WRITE, Permission.ALLOW)),
        (Resource(RT.TOPIC, "pay", PatternType.PREFIXED), AclEntry("User:*", "10.0.0.2", Operation.ALL,
                                                                      Permission.DENY)),
        (Resource(RT.GROUP, "g"), AclEntry("User:alice", "*", Operation.READ, Permission.ALLOW)),
    ])
    assert authz.authorize(alice, Operation.WRITE, RT.TOPIC, "anything")
    assert authz.authorize(alice, Operation.DESCRIBE, RT.TOPIC, "anything")  # Write implies Describe
    assert not authz.authorize(alice, Operation.READ, RT.TOPIC, "anything")
    assert authz.authorize(alice, Operation.WRITE, RT.TOPIC, "payments")
    assert not authz.authorize(other_host, Operation.WRITE, RT.TOPIC, "payments")  # DENY for that host wins
    assert authz.authorize(Session("User:root"), Operation.ALTER, RT.CLUSTER, "kafka-cluster")
    assert authz.authorize(alice, Operation.READ, RT.GROUP, "g")
    assert not authz.authorize(alice, Operation.READ, RT.GROUP, "h")  # ACLs exist for groups? not for h: none
    assert not authz.authorize(alice, Operation.DESCRIBE, RT.CLUSTER, "kafka-cluster")
    open_authz = Authorizer(SecurityConfig(allow_everyone_if_no_acl_found=True), FileAclStore([tmp_path / "x"]))
    assert open_authz.authorize(alice, Operation.ALTER, RT.CLUSTER, "kafka-cluster")
    f = AclFilter(RT.TOPIC, "payments", PatternType.MATCH, None, None, Operation.ANY, Permission.ANY)
    assert set(authz.describe(f)) == {Resource(RT.TOPIC, "*"), Resource(RT.TOPIC, "pay", PatternType.PREFIXED)}
    # Persisted and reloaded.
    assert Authorizer(config, FileAclStore([tmp_path])).authorize(alice, Operation.WRITE, RT.TOPIC, "x")
