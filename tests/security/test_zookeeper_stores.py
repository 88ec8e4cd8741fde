"""With zookeeper.connect, SCRAM credentials and ACLs live where Kafka keeps them, in Kafka's JSON, so Kafka's tools
and moverd share them: /config/users/<name>, /kafka-acl/<Type>/<name>, /kafka-acl-extended/prefixed/...,
and change notifications that make moverd reload ACLs written by someone else."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourceType,
)
from kazoo.client import KazooClient

from mover.testing.certs import Issued, Pki
from mover.testing.wait import wait_for
from mover.testing.zookeeper import ZooKeeperServer
from mover.wire import ErrorCode
from mover.wire.messages import LIST_OFFSETS
from tests.security.helpers import Raw, SecureBroker, authenticate, client_kwargs


@pytest.fixture
def zk_broker(tmp_path: Path, pki: Pki, server_cert: Issued,
              zookeeper: ZooKeeperServer) -> Iterator[tuple[SecureBroker, KazooClient]]:
    chroot = f"/sec-{uuid.uuid4().hex[:8]}"
    zk = KazooClient(hosts=zookeeper.connect_string)
    zk.start(timeout=15)
    zk.ensure_path(chroot)
    b = SecureBroker(tmp_path, pki, server_cert, props={
        "zookeeper.connect": zookeeper.connect_string + chroot,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
    })
    try:
        b.start()
        yield b, KazooClient(hosts=zookeeper.connect_string + chroot)
    finally:
        b.stop()
        zk.stop()
        zk.close()


def test_scram_credentials_and_acls_in_kafkas_znodes(zk_broker: tuple[SecureBroker, KazooClient]) -> None:
    b, zk = zk_broker
    zk.start(timeout=15)
    try:
        b.add_scram_user("carol", "carol-secret", "SCRAM-SHA-256")
        value = json.loads(zk.get("/config/users/carol")[0])
        assert value["version"] == 1
        fields = dict(p.split("=", 1) for p in value["config"]["SCRAM-SHA-256"].split(","))
        assert set(fields) == {"salt", "stored_key", "server_key", "iterations"} and int(fields["iterations"]) >= 4096
        assert "carol-secret" not in json.dumps(value)
        with Raw(b.ports["SASL_PLAINTEXT"]) as raw:
            assert authenticate(raw, "SCRAM-SHA-256", "carol", "carol-secret")["error_code"] == 0

        admin = KafkaAdminClient(**client_kwargs(b, "SASL_PLAINTEXT", user="admin", password="admin-secret"))
        try:
            created = admin.create_acls([
                ACL("User:carol", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, "t1", ACLResourcePatternType.LITERAL)),
                ACL("User:carol", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, "p-", ACLResourcePatternType.PREFIXED)),
            ])
            assert not created["failed"]
        finally:
            admin.close()
        literal = json.loads(zk.get("/kafka-acl/Topic/t1")[0])
        assert literal == {"version": 1, "acls": [
            {"principal": "User:carol", "permissionType": "Allow", "operation": "Describe", "host": "*"}]}
        prefixed = json.loads(zk.get("/kafka-acl-extended/prefixed/Topic/p-")[0])
        assert prefixed["acls"][0]["operation"] == "Write"
        changes = zk.get_children("/kafka-acl-changes")
        assert any(c.startswith("acl_changes_") for c in changes)
        assert b"Topic:t1" in [zk.get(f"/kafka-acl-changes/{c}")[0] for c in changes]

        # An ACL written by Kafka's own tooling (straight into ZooKeeper, plus its notification) is picked up.
        zk.create("/kafka-acl/Topic/direct", json.dumps({"version": 1, "acls": [
            {"principal": "User:carol", "permissionType": "Allow", "operation": "Describe", "host": "*"}]}).encode(),
            makepath=True)
        zk.create("/kafka-acl-changes/acl_changes_", b"Topic:direct", sequence=True)

        def carol_may_describe_direct() -> bool:
            with Raw(b.ports["SASL_PLAINTEXT"]) as raw:
                assert authenticate(raw, "SCRAM-SHA-256", "carol", "carol-secret")["error_code"] == 0
                reply = raw.call(LIST_OFFSETS, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": "direct", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
                return reply["topics"][0]["partitions"][0]["error_code"] != ErrorCode.TOPIC_AUTHORIZATION_FAILED

        wait_for(carol_may_describe_direct, message="an ACL written to ZooKeeper by another tool took effect")
    finally:
        zk.stop()
        zk.close()
