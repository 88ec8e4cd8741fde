"""Every API a secured moverd advertises, at every version it serves, asked by an authenticated principal with no
rights at all: each answer decodes and carries Kafka's refusal for that API (tests/api/every_api.py says which),
and nothing changed. ApiVersions, SaslHandshake and SaslAuthenticate are answered before authorization matters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mover.testing.certs import Issued, Pki
from mover.wire.messages import (
    API_VERSIONS,
    CREATE_ACLS,
    CREATE_TOPICS,
    DESCRIBE_ACLS,
    METADATA,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from tests.api.every_api import every_api
from tests.security.helpers import ACLS_ON, Raw, SecureBroker, session_as

TOPIC = "walk-data"
BEFORE_AUTHORIZATION = {API_VERSIONS.key, SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key}
SOFTWARE = {"client_software_name": "walk", "client_software_version": "1.0"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki, server_cert: Issued) -> Iterator[SecureBroker]:
    """ACLs on, one topic, and ACLs for alice only: bob, authenticated, may do nothing."""
    b = SecureBroker(tmp_path_factory.mktemp("walk"), pki, server_cert, props=ACLS_ON)
    b.start()
    try:
        with session_as(b, "admin") as admin:
            created = admin.call(CREATE_TOPICS, 5, {"topics": [
                {"name": TOPIC, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout_ms": 5000, "validate_only": False})
            assert created["topics"][0]["error_code"] == 0, created
            granted = admin.call(CREATE_ACLS, 1, {"creations": [
                {"resource_type": rtype, "resource_name": name, "resource_pattern_type": 3,
                 "principal": "User:alice", "host": "*", "operation": 2, "permission_type": 3}
                for rtype, name in ((2, TOPIC), (4, "kafka-cluster"))]})  # ALL on the topic and the cluster
            assert [r["error_code"] for r in granted["results"]] == [0, 0], granted
        yield b
    finally:
        b.stop()


def _versions(raw: Raw, version: int) -> dict[int, tuple[int, int]]:
    answer = raw.call(API_VERSIONS, version, SOFTWARE)
    assert answer["error_code"] == 0, answer
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in answer["api_keys"]}


def test_apis_answered_before_authorization(secured: SecureBroker) -> None:
    port = secured.ports["SASL_PLAINTEXT"]
    with Raw(port) as raw:
        advertised = _versions(raw, 0)
        lo, hi = advertised[API_VERSIONS.key]
        for v in range(lo, hi + 1):
            assert _versions(raw, v) == advertised, f"ApiVersions v{v}"
    lo, hi = advertised[SASL_HANDSHAKE.key]
    for v in range(lo, hi + 1):
        with Raw(port) as raw:
            answer = raw.call(SASL_HANDSHAKE, v, {"mechanism": "PLAIN"})
            assert answer["error_code"] == 0 and "PLAIN" in answer["mechanisms"], (v, answer)
    lo, hi = advertised[SASL_AUTHENTICATE.key]
    for v in range(lo, hi + 1):
        with Raw(port) as raw:
            assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            answer = raw.call(SASL_AUTHENTICATE, v, {"auth_bytes": b"\0bob\0bob-secret"})
            assert answer["error_code"] == 0, (v, answer)


def test_every_api_at_every_version_refuses_a_principal_without_rights(secured: SecureBroker) -> None:
    cases = every_api(TOPIC, str(secured.d.dirs[0]))
    failures: list[str] = []
    asked: set[str] = set()
    with session_as(secured, "bob") as bob:
        advertised = _versions(bob, API_VERSIONS.valid.hi)
        unknown = sorted(advertised.keys() - cases.keys() - BEFORE_AUTHORIZATION)
        assert not unknown, f"moverd serves api keys {unknown} without a case in tests/api/every_api.py: add one"
        for key, (lo, hi) in sorted(advertised.items()):
            for case in cases.get(key, []):
                for v in range(lo, hi + 1):
                    if not case.applies(v):
                        continue
                    asked.add(case.name)
                    answer: Any = bob.call(case.api, v, case.body)  # decoded by our codec: well-formed
                    try:
                        case.denied(v, answer)
                    except AssertionError as e:
                        failures.append(f"{case.name} v{v}: {e}")
    assert not failures, "\n".join(failures)
    assert asked == {c.name for cs in cases.values() for c in cs}
    # Nothing happened: the topic is as created, nothing else exists, the ACLs are alice's two.
    with session_as(secured, "admin") as admin:
        topics = admin.call(METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})["topics"]
        assert [(t["name"], len(t["partitions"])) for t in topics] == [(TOPIC, 1)]
        acls = admin.call(DESCRIBE_ACLS, 1, {"resource_type_filter": 1, "resource_name_filter": None,
                                             "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                             "operation": 1, "permission_type": 1})
        assert {a["principal"] for r in acls["resources"] for a in r["acls"]} == {"User:alice"}
