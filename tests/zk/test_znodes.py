"""/brokers/ids/<id> for custom listener names: the registration moverd writes (Kafka's version 4 JSON) and the one
choice of endpoint by the client's security.protocol that mover-log-dirs --zookeeper and mover-audit share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mover.config.broker import BrokerConfig, Listener
from mover.zk.znodes import NoEndpointError, ZnodeFormatError, decode_broker, encode_broker, registration_address

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


def mixed_config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig.from_properties({
        "log.dirs": str(tmp_path / "d1"),
        "listeners": "PLAINTEXT://0.0.0.0:9092,CLIENT://0.0.0.0:9095",
        "advertised.listeners": "PLAINTEXT://10.0.0.1:9092,CLIENT://broker1.example.com:9095",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SASL_SSL",
        "listener.name.client.ssl.keystore.location": str(tmp_path / "server.pem"),
        "listener.name.client.plain.sasl.jaas.config": JAAS,
    })


def test_registration_of_mixed_listeners_is_kafkas_version_4(tmp_path: Path) -> None:
    config = mixed_config(tmp_path)
    data = encode_broker(config.advertised, config.listener_protocols, rack=None, timestamp_ms=1700000000000)
    assert data == (b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","CLIENT":"SASL_SSL"},'
                    b'"endpoints":["PLAINTEXT://10.0.0.1:9092","CLIENT://broker1.example.com:9095"],'
                    b'"jmx_port":-1,"host":"10.0.0.1","timestamp":"1700000000000","port":9092,"version":4}')
    reg = decode_broker(1, data)
    assert registration_address(reg) == ("10.0.0.1", 9092)
    assert registration_address(reg, "SASL_SSL") == ("broker1.example.com", 9095)


def test_legacy_host_and_port_are_the_plaintext_protocols_whatever_its_listener_name() -> None:
    data = encode_broker([Listener("SECURE", "h", 9093), Listener("INTERNAL", "h", 9092)],
                         {"SECURE": "SSL", "INTERNAL": "PLAINTEXT"}, rack="r1", timestamp_ms=1)
    value = json.loads(data)
    assert (value["host"], value["port"], value["rack"]) == ("h", 9092, "r1")
    only_tls = json.loads(encode_broker([Listener("SECURE", "h", 9093)], {"SECURE": "SSL"}, rack=None,
                                        timestamp_ms=1))
    assert (only_tls["host"], only_tls["port"]) == (None, -1)


def test_no_endpoint_of_the_clients_protocol_names_the_broker_and_what_it_offers() -> None:
    reg = decode_broker(3, json.dumps({
        "listener_security_protocol_map": {"CLIENT": "SASL_SSL", "INTERNAL": "PLAINTEXT"},
        "endpoints": ["INTERNAL://10.0.0.1:9092", "CLIENT://broker1.example.com:9095"],
        "host": "10.0.0.1", "port": 9092, "version": 4}).encode())
    with pytest.raises(NoEndpointError) as e:
        registration_address(reg, "SSL")
    assert str(e.value) == "broker 3 has no SSL endpoint in its registration (it offers PLAINTEXT, SASL_SSL)"


def test_older_registrations() -> None:
    # Version 2/3: no protocol map, each listener name is its protocol's; version 1: only host and port.
    v2 = decode_broker(1, b'{"endpoints":["SSL://h:9093","PLAINTEXT://h:9092"],"host":"h","port":9092,"version":2}')
    assert registration_address(v2, "SSL") == ("h", 9093)
    v1 = decode_broker(2, b'{"jmx_port":-1,"host":"old","timestamp":"1","port":9092,"version":1}')
    assert registration_address(v1) == ("old", 9092)
    with pytest.raises(NoEndpointError, match=r"broker 2 has no SASL_PLAINTEXT endpoint .*\(it offers PLAINTEXT\)"):
        registration_address(v1, "SASL_PLAINTEXT")
    with pytest.raises(ZnodeFormatError, match="listener_security_protocol_map is not an object of strings"):
        decode_broker(4, b'{"listener_security_protocol_map":["PLAINTEXT"],"endpoints":[],"version":4}')
    bad_port = decode_broker(5, b'{"endpoints":["PLAINTEXT://h:99999"],"version":4}')
    with pytest.raises(ZnodeFormatError, match="broker 5: endpoint 'PLAINTEXT://h:99999' is not"):
        registration_address(bad_port)


DEEP = b'{"version":1,"partitions":' + b"[" * 200_000 + b"]" * 200_000 + b"}"


def test_deeply_nested_json_is_a_format_error_not_a_recursion_error() -> None:
    from mover.zk.znodes import decode_config, decode_config_change, decode_reassignment

    for decode in (decode_reassignment, decode_config_change, lambda d: decode_config("0", d)):
        with pytest.raises(ZnodeFormatError, match="nested deeper than"):
            decode(DEEP)


def test_nesting_is_measured_outside_strings() -> None:
    from mover.zk.bounded_json import MAX_DEPTH, depth, loads

    assert depth(b'{"a":"[[[[\\"[[","b":[[1]]}') == 3
    assert depth(b'"\\\\\\\\"[[["') == 3  # an escaped backslash ends nothing; the quote after it closes the string
    # Brackets inside strings do not count: a long list of dirs named with brackets is still read.
    doc = {"version": 1, "config": {f"k{i}": "[" * 3 for i in range(MAX_DEPTH)}}
    assert loads(json.dumps(doc).encode()) == doc
    assert loads(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    with pytest.raises(ValueError, match="nested deeper"):
        loads(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
