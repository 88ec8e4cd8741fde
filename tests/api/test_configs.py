"""DescribeConfigs and IncrementalAlterConfigs for the broker, against a real moverd; persistence over restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from mover.testing.moverd import Moverd
from mover.testing.raw import raw_call
from mover.wire.messages import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from tests.api.helpers import admin

THROTTLE = "intra.broker.throttled.rate"
KAFKA_THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"
THREADS = "num.replica.alter.log.dirs.threads"
LONG_MAX = str(2**63 - 1)
SET, DELETE, APPEND = 0, 1, 2


def _broker(name: str = "0", configs: dict | None = None) -> ConfigResource:
    return ConfigResource(ConfigResourceType.BROKER, name, configs=configs)


def _describe(d: Moverd, name: str = "0", keys: list[str] | None = None, version: int = 4) -> dict[str, dict]:
    body = raw_call(d.port, DESCRIBE_CONFIGS, version, {"resources": [
        {"resource_type": 4, "resource_name": name, "configuration_keys": keys}], "include_synonyms": True})
    (res,) = body["results"]
    assert res["error_code"] == 0, res
    return {c["name"]: c for c in res["configs"]}


def _alter(d: Moverd, ops: list[tuple[str, int, str | None]], name: str = "0", resource_type: int = 4,
           validate_only: bool = False) -> tuple[int, str | None]:
    body = raw_call(d.port, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": resource_type, "resource_name": name,
        "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}],
        "validate_only": validate_only})
    (res,) = body["responses"]
    return res["error_code"], res["error_message"]


@pytest.mark.parametrize("version", range(DESCRIBE_CONFIGS.valid.lo, DESCRIBE_CONFIGS.valid.hi + 1))
def test_describe_every_version(tmp_path: Path, version: int) -> None:
    with Moverd(tmp_path, props={"log.segment.bytes": 1048576}) as d:
        got = _describe(d, version=version)
        assert (got[THROTTLE]["value"], got[THROTTLE]["read_only"]) == (LONG_MAX, False)
        assert (got[THREADS]["value"], got[THREADS]["read_only"]) == ("2", False)  # one per log dir
        assert (got["log.dirs"]["value"], got["log.dirs"]["read_only"]) == (",".join(map(str, d.dirs)), True)
        assert got["log.segment.bytes"]["value"] == "1048576"
        if version >= 1:
            assert got[THROTTLE]["config_source"] == 5  # DEFAULT_CONFIG
            assert got["log.segment.bytes"]["config_source"] == 4  # STATIC_BROKER_CONFIG
        else:
            assert got[THROTTLE]["is_default"] and not got["log.segment.bytes"]["is_default"]
        only = _describe(d, keys=[THREADS, "nope"], version=version)
        assert list(only) == [THREADS]


def test_kafka_python_alters_the_throttle_and_it_survives_restart(tmp_path: Path) -> None:
    d = Moverd(tmp_path, props={THREADS: 3})
    with d, admin(d) as a:
        dynamic = a.describe_configs([_broker()], config_filter="dynamic")["broker"]["0"]
        assert set(dynamic) == {THROTTLE, KAFKA_THROTTLE, THREADS, "cordoned.log.dirs",
                                "mover.log.dir.io.max.bytes.per.second"}
        res = a.alter_configs([_broker(configs={THROTTLE: "5000000", THREADS: "1"})])
        assert res == {"broker": {"0": "OK"}}
        modified = a.describe_configs([_broker()], include_synonyms=True)["broker"]["0"]
        assert {k: (v["value"], v["config_source"]) for k, v in modified.items()} == {
            THROTTLE: ("5000000", "DYNAMIC_BROKER_CONFIG"),
            KAFKA_THROTTLE: ("5000000", "DYNAMIC_BROKER_CONFIG"),
            THREADS: ("1", "DYNAMIC_BROKER_CONFIG"),
        }
        assert [(s["value"], s["source"]) for s in modified[THREADS]["synonyms"]] == [
            ("1", "DYNAMIC_BROKER_CONFIG"), ("3", "STATIC_BROKER_CONFIG"), ("2", "DEFAULT_CONFIG")]
    for p in d.dirs:
        saved = json.loads((p / "dynamic-broker-config.json").read_text())
        assert saved["broker"] == {THROTTLE: "5000000", THREADS: "1"}
    with d:
        got = _describe(d)
        assert (got[KAFKA_THROTTLE]["value"], got[KAFKA_THROTTLE]["config_source"]) == ("5000000", 2)
        # DELETE falls back to server.properties (3 threads), not to the built-in default.
        assert _alter(d, [(THREADS, DELETE, None)]) == (0, None)
        assert (_describe(d)[THREADS]["value"], _describe(d)[THREADS]["config_source"]) == ("3", 4)
        # Setting one throttle name replaces its synonym rather than hiding under it.
        assert _alter(d, [(KAFKA_THROTTLE, SET, "7000")]) == (0, None)
        got = _describe(d)
        assert got[THROTTLE]["value"] == got[KAFKA_THROTTLE]["value"] == "7000"
    with d:
        assert _describe(d)[THROTTLE]["value"] == "7000"


def test_cluster_default_layer_and_precedence(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        assert _alter(d, [(THROTTLE, SET, "1000")], name="") == (0, None)
        got = _describe(d)[THROTTLE]
        assert (got["value"], got["config_source"]) == ("1000", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
        assert _alter(d, [(THROTTLE, SET, "2000")]) == (0, None)
        assert _describe(d)[THROTTLE]["value"] == "2000"  # the per-broker value wins
        assert _alter(d, [(THROTTLE, DELETE, None)]) == (0, None)
        assert _describe(d)[THROTTLE]["value"] == "1000"


def test_invalid_alterations_change_nothing(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        cases = [
            ([("log.dirs", SET, "/x")], 42),  # static: cannot change at run time
            ([("no.such.key", SET, "1")], 40),
            ([(THROTTLE, SET, "fast")], 40),
            ([(THROTTLE, SET, "0")], 40),
            ([(THREADS, SET, "-1")], 40),
            ([(THROTTLE, SET, None)], 40),
            ([(THROTTLE, APPEND, "1")], 40),
            ([(THROTTLE, 9, "1")], 42),
            ([(THROTTLE, SET, "1"), (THROTTLE, SET, "2")], 42),
            ([(THROTTLE, SET, "123"), ("log.dirs", SET, "/x")], 42),  # all or nothing
        ]
        for ops, code in cases:
            got, message = _alter(d, ops)
            assert got == code and message, (ops, got, message)
        assert _alter(d, [(THROTTLE, SET, "1")], name="5")[0] == 42  # another broker's id
        assert _alter(d, [(THROTTLE, SET, "1")], validate_only=True) == (0, None)
        assert _describe(d)[THROTTLE]["value"] == LONG_MAX


def test_topic_and_other_resources(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        with admin(d) as a:
            a.create_topics([NewTopic("t", 1, 1)])
        body = raw_call(d.port, DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
            {"resource_type": 2, "resource_name": "ghost", "configuration_keys": None},
            {"resource_type": 8, "resource_name": "0", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "9", "configuration_keys": None},
        ]})
        t, ghost, logger, other = body["results"]
        assert t["error_code"] == 0
        assert {c["name"]: c["value"] for c in t["configs"]}["segment.bytes"] == "1073741824"
        assert (ghost["error_code"], logger["error_code"], other["error_code"]) == (3, 42, 42)
        assert _alter(d, [("retention.ms", SET, "1")], name="t", resource_type=2)[0] == 42
        assert _alter(d, [("retention.ms", SET, "1")], name="ghost", resource_type=2)[0] == 3


def _replace(d: Moverd, configs: dict[str, str | None], version: int, name: str = "0",
             validate_only: bool = False) -> tuple[int, str | None]:
    body = raw_call(d.port, ALTER_CONFIGS, version, {"resources": [{
        "resource_type": 4, "resource_name": name,
        "configs": [{"name": k, "value": v} for k, v in configs.items()]}], "validate_only": validate_only})
    (res,) = body["responses"]
    return res["error_code"], res["error_message"]


def _dynamic(d: Moverd) -> dict[str, str]:
    from mover.config.dynamic import ConfigSource

    return {k: c["value"] for k, c in _describe(d).items() if c["config_source"] == ConfigSource.DYNAMIC_BROKER_CONFIG}


@pytest.mark.parametrize("version", range(ALTER_CONFIGS.valid.lo, ALTER_CONFIGS.valid.hi + 1))
def test_legacy_alter_configs_replaces_the_layer(tmp_path: Path, version: int) -> None:
    """AlterConfigs (kafka-configs.sh up to 3.7 on brokers) sets the layer to exactly the keys it names, and takes
    back the set DescribeConfigs showed (a held key under both of its names) as the same layer."""
    with Moverd(tmp_path) as d:
        assert _replace(d, {KAFKA_THROTTLE: "1000000"}, version) == (0, None)
        assert _dynamic(d) == {THROTTLE: "1000000", KAFKA_THROTTLE: "1000000"}
        # What the tool sends for --add-config of the threads: the dynamic keys it read, plus the new one.
        assert _replace(d, {**_dynamic(d), THREADS: "3"}, version) == (0, None)
        assert _dynamic(d) == {THROTTLE: "1000000", KAFKA_THROTTLE: "1000000", THREADS: "3"}
        # A changed value under one name wins over the echo of the old one under the other.
        assert _replace(d, {**_dynamic(d), THROTTLE: "2000000"}, version) == (0, None)
        assert _dynamic(d)[KAFKA_THROTTLE] == "2000000"
        # --delete-config of either name: the echo left under the other one does not keep it.
        assert _replace(d, {k: v for k, v in _dynamic(d).items() if k != THROTTLE}, version) == (0, None)
        assert _dynamic(d) == {THREADS: "3"}
        # A key left out is removed; validate_only and bad input change nothing.
        assert _replace(d, {THREADS: "4"}, version, validate_only=True) == (0, None)
        assert _replace(d, {"log.retention.ms": "5"}, version)[0] == 42
        assert _replace(d, {THREADS: "abc"}, version)[0] == 40
        assert _replace(d, {THREADS: "3"}, version, name="7")[0] == 42
        assert _dynamic(d) == {THREADS: "3"}
        assert _replace(d, {}, version) == (0, None)
        assert _dynamic(d) == {}


def test_kafka_configs_sh_alters_the_throttle(tmp_path: Path) -> None:
    """The real kafka-configs.sh 3.7: --add-config and --delete-config on a broker (AlterConfigs) and on the
    cluster-wide default."""
    import os
    import subprocess

    from mover.testing.kafka_home import kafka_home

    home = kafka_home()
    if home is None:
        pytest.skip("no Apache Kafka here")
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx128m", "LOG_DIR": str(tmp_path / "tool-logs")}
    with Moverd(tmp_path) as d:
        def tool(*args: str) -> str:
            done = subprocess.run([str(home / "bin" / "kafka-configs.sh"), "--bootstrap-server", d.bootstrap,
                                   "--entity-type", "brokers", *args], capture_output=True, text=True, env=env,
                                  timeout=120, stdin=subprocess.DEVNULL)
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout

        assert "Completed updating config for broker 0" in tool("--entity-name", "0", "--alter", "--add-config",
                                                                f"{KAFKA_THROTTLE}=1000000")
        tool("--entity-name", "0", "--alter", "--add-config", f"{THREADS}=3")
        assert _dynamic(d) == {THROTTLE: "1000000", KAFKA_THROTTLE: "1000000", THREADS: "3"}
        assert f"{KAFKA_THROTTLE}=1000000" in tool("--entity-name", "0", "--describe")
        tool("--entity-name", "0", "--alter", "--delete-config", KAFKA_THROTTLE)
        assert _dynamic(d) == {THREADS: "3"}
        tool("--entity-default", "--alter", "--add-config", f"{KAFKA_THROTTLE}=5000000")
        assert _describe(d)[KAFKA_THROTTLE]["value"] == "5000000"
