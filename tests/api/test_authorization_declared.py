"""Every route moverd builds says how it is authorized and has an error answer; a route that says nothing stops the
broker from starting (mover/api/authz.py AUTHORIZATION, mover/api/error_responses.py BUILDERS)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from mover import api
from mover.api.authz import AUTHORIZATION, BeforeAuthorization, UndeclaredAuthorization
from mover.api.error_responses import BUILDERS
from mover.server import Route
from mover.testing.broker import InProcessBroker
from mover.wire import (
    ErrorCode,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    join_chunks,
)
from mover.wire.messages import DESCRIBE_LOG_DIRS, ELECT_LEADERS, METADATA, SASL_HANDSHAKE
from tests.api.every_api import every_api
from tests.security.helpers import ACLS_ON

CODE = int(ErrorCode.UNKNOWN_SERVER_ERROR)


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Route]:
    """The route table a moverd with ACLs on serves, as `collect_routes` builds it for the listeners."""
    with InProcessBroker(tmp_path_factory.mktemp("routes"), props=ACLS_ON) as b:
        built = api.collect_routes(b.broker)
    assert all(isinstance(r, Route) for r in built.values())
    return built  # type: ignore[return-value]


def test_every_route_declares_its_authorization(routes: dict[int, Route]) -> None:
    for key in routes:
        assert key in AUTHORIZATION and not isinstance(AUTHORIZATION[key], BeforeAuthorization), key


def test_every_route_has_an_error_answer_of_its_apis_shape(routes: dict[int, Route], tmp_path: Path) -> None:
    """The builder of each served API gives, for a request of every version, an answer our codec encodes and that
    carries the code (or None where Kafka's shape has no slot for it: then the connection closes)."""
    cases = every_api("t", str(tmp_path))
    for key, route in routes.items():
        assert key in BUILDERS and route.error_response is not None, f"api key {key} has no error answer"
        assert key in cases, f"api key {key} has no case in tests/api/every_api.py"
        for case in cases[key]:
            for v in range(case.api.valid.lo, case.api.valid.hi + 1):
                if not case.applies(v):
                    continue
                request = _as_handler_sees_it(case.api.key, v, case.body)
                answer = route.error_response(v, request, CODE)
                if answer is None:
                    assert (key, v) in _NO_SLOT or (key == METADATA.key and not case.body["topics"]), (case.name, v)
                    continue
                _, decoded = decode_response(case.api, v, join_chunks(encode_response(case.api, v, 1, answer))[4:])
                assert CODE in _codes(decoded), (case.name, v, decoded)


# DescribeLogDirs before v3 has no error field: an empty answer would read as "no log dirs".
_NO_SLOT = {(DESCRIBE_LOG_DIRS.key, v) for v in range(3)}


def _as_handler_sees_it(key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """The request after a round trip through the codec: every field, absent ones at their defaults."""
    header, decoded = decode_request(join_chunks(encode_request(key, version, 1, body, client_id="t"))[4:])
    assert isinstance(header, RequestHeader)
    return decoded


def _codes(value: Any) -> set[int]:
    if isinstance(value, dict):
        found = {value["error_code"]} if "error_code" in value else set()
        return found.union(*(_codes(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_codes(v) for v in value))
    return set()


def _module_routing(monkeypatch: pytest.MonkeyPatch, key: int) -> None:
    """Add an API module to MODULES that routes `key` with no authorization declared, as a new API would."""
    module = types.ModuleType("mover_undeclared_api")

    def routes(broker: object) -> dict[int, Any]:
        return {key: lambda header, request: {"error_code": 0}}

    module.routes = routes  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(api, "MODULES", (*api.MODULES, module.__name__))


@pytest.mark.parametrize("props", [ACLS_ON, {}], ids=["acls-on", "acls-off"])
def test_a_route_without_a_declaration_stops_the_broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        props: dict[str, str]) -> None:
    # ElectLeaders: declared in the codec (mover-reassign sends it), served by no moverd module yet.
    _module_routing(monkeypatch, ELECT_LEADERS.key)
    with pytest.raises(UndeclaredAuthorization, match=r"ElectLeaders \(43\) declare no authorization"):
        InProcessBroker(tmp_path, props=props).start()


def test_a_route_for_an_api_answered_before_authorization_stops_the_broker(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    # On a listener without SASL the gate routes SaslHandshake: a route for it would answer it there.
    _module_routing(monkeypatch, SASL_HANDSHAKE.key)
    with pytest.raises(UndeclaredAuthorization, match=r"SaslHandshake \(17\) are answered before any route"):
        InProcessBroker(tmp_path, props=ACLS_ON).start()
