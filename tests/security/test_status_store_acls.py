"""The cluster-held reassignment requests (mover/admin/reassign/status_store.py) with ACLs on, on a real moverd:
the grants docs/cli.md names are enough to start, list and read runs; without them each call is one AdminError naming
what to grant, and nothing is written; a principal who may only read sees the runs but cannot start one, and is told
that the write was refused (not, as before, that the existing topic could not be created)."""

from __future__ import annotations

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

from mover.admin.client import Client
from mover.admin.common import AdminError
from mover.admin.reassign.status_log import TOPIC
from mover.admin.reassign.status_store import StatusStore
from mover.security.client_config import ClientSecurity
from mover.testing.certs import Issued, Pki
from tests.security.helpers import ACLS_ON, PASSWORDS, SecureBroker, client_kwargs

PARTS = [{"topic": "orders", "partition": 0, "replicas": [0]}]


def grant(b: SecureBroker, user: str, *ops: ACLOperation) -> None:
    admin = KafkaAdminClient(**client_kwargs(b, "SASL_PLAINTEXT", user="admin", password=PASSWORDS["admin"]))
    try:
        result = admin.create_acls([
            ACL(f"User:{user}", "*", op, ACLPermissionType.ALLOW,
                ResourcePattern(ResourceType.TOPIC, TOPIC, ACLResourcePatternType.LITERAL)) for op in ops])
        assert not result["failed"], result
    finally:
        admin.close()


def client_as(b: SecureBroker, user: str) -> Client:
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                             f'username="{user}" password="{PASSWORDS[user]}";')})
    return Client(b.address("SASL_PLAINTEXT"), security=security)


@pytest.fixture
def secured(tmp_path: Path, pki: Pki, server_cert: Issued) -> Iterator[SecureBroker]:
    b = SecureBroker(tmp_path, pki, server_cert, props=ACLS_ON)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_the_documented_grants_are_enough_and_their_absence_is_one_line_naming_them(secured: SecureBroker) -> None:
    # bob has no ACL at all: his first run would create the topic, and is refused before anything is written.
    with client_as(secured, "bob") as client:
        with pytest.raises(AdminError) as refused:
            StatusStore(client, tool="test").claim(PARTS)
    message = str(refused.value)
    assert "\n" not in message and TOPIC in message and "grant" in message, message

    # alice gets docs/cli.md's grants: her run is started, listed and read back by another connection of hers.
    grant(secured, "alice", ACLOperation.WRITE, ACLOperation.READ, ACLOperation.DESCRIBE, ACLOperation.CREATE)
    with client_as(secured, "alice") as client:
        rid, resumed = StatusStore(client, tool="test").claim(PARTS)
    assert not resumed
    with client_as(secured, "alice") as client:
        assert [r.id for r in StatusStore(client, tool="test").list()] == [rid]

    # Still nothing for bob, now that the topic exists: reading is refused too, in one line naming the grant.
    with client_as(secured, "bob") as client, pytest.raises(AdminError) as unread:
        StatusStore(client, tool="test").list()
    assert "\n" not in str(unread.value) and "grant" in str(unread.value), unread.value

    # bob may read (Read and Describe): he sees alice's run and its owner, but his own claim is refused.
    grant(secured, "bob", ACLOperation.READ, ACLOperation.DESCRIBE)
    with client_as(secured, "bob") as client:
        store = StatusStore(client, tool="test")
        seen = store.get(rid)
        assert seen.owner["tool"] == "test" and seen.state == "running"
        with pytest.raises(AdminError) as unwritten:
            store.claim([{"topic": "other", "partition": 0, "replicas": [0]}])
    # The topic exists: a write refused is said as one (Kafka answers CreateTopics of it with the same code).
    assert "\n" not in str(unwritten.value) and "Write" in str(unwritten.value), unwritten.value
    assert "Produce" in str(unwritten.value) and "create" not in str(unwritten.value), unwritten.value
    with client_as(secured, "alice") as client:
        assert [r.id for r in StatusStore(client, tool="test").list()] == [rid], "bob's refused claim wrote nothing"
