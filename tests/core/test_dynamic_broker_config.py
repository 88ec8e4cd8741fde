"""DynamicBrokerConfig on its own: owners register callbacks (BrokerReconfigurable) and hear each change of an
effective value once; layers resolve in Kafka's order; `update` from ZooKeeper or a server.properties reload;
persistence across a restart. No LogManager anywhere."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from mover.config.broker import THREADS_KEY, THROTTLE_KAFKA_KEY, THROTTLE_KEY, BrokerConfig
from mover.config.dynamic import AlterOp, ConfigSource, DynamicBrokerConfig, Scope
from mover.errors import InvalidConfigError, InvalidRequestError


def make(tmp_path: Path, **props: str) -> tuple[BrokerConfig, DynamicBrokerConfig, list[dict[str, object]]]:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    for d in dirs:
        d.mkdir(exist_ok=True)
    config = BrokerConfig.from_properties({"log.dirs": ",".join(map(str, dirs)), **props})
    dynamic = DynamicBrokerConfig(config, lambda: dirs)
    heard: list[dict[str, object]] = []

    def throttle_owner(changed: Mapping[str, object]) -> None:
        heard.append(dict(changed))

    dynamic.register([THROTTLE_KEY, THROTTLE_KAFKA_KEY], throttle_owner)
    return config, dynamic, heard


def test_owners_hear_each_change_of_their_keys_once(tmp_path: Path) -> None:
    config, dynamic, heard = make(tmp_path)
    threads: list[dict[str, object]] = []
    dynamic.register([THREADS_KEY], lambda changed: threads.append(dict(changed)))
    dynamic.alter(Scope.BROKER, [(THROTTLE_KEY, AlterOp.SET, "1000")])
    assert heard == [{THROTTLE_KEY: 1000, THROTTLE_KAFKA_KEY: 1000}]
    assert config.throttle_rate == 1000 and threads == []
    # The same effective value again (through its synonym): nobody is told.
    dynamic.alter(Scope.BROKER, [(THROTTLE_KAFKA_KEY, AlterOp.SET, "1000")])
    assert len(heard) == 1
    dynamic.alter(Scope.BROKER, [(THREADS_KEY, AlterOp.SET, "3")])
    assert threads == [{THREADS_KEY: 3}] and len(heard) == 1
    dynamic.alter(Scope.BROKER, [(THROTTLE_KAFKA_KEY, AlterOp.DELETE, None)])
    assert heard[-1] == {THROTTLE_KEY: None, THROTTLE_KAFKA_KEY: None} and config.throttle_rate is None


def test_layers_resolve_in_kafkas_order(tmp_path: Path) -> None:
    config, dynamic, heard = make(tmp_path, **{THROTTLE_KEY: "500"})
    assert dynamic.effective(THROTTLE_KEY).source is ConfigSource.STATIC_BROKER_CONFIG
    dynamic.alter(Scope.CLUSTER_DEFAULT, [(THROTTLE_KEY, AlterOp.SET, "700")])
    assert config.throttle_rate == 700
    dynamic.alter(Scope.BROKER, [(THROTTLE_KEY, AlterOp.SET, "900")])
    eff = dynamic.effective(THROTTLE_KEY)
    assert (eff.value, eff.source) == ("900", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [source for _, _, source in eff.layers] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG]
    dynamic.alter(Scope.BROKER, [(THROTTLE_KEY, AlterOp.DELETE, None)])
    assert config.throttle_rate == 700
    assert [c[THROTTLE_KEY] for c in heard] == [700, 900, 700]


def test_update_from_zookeeper_and_from_a_properties_reload(tmp_path: Path) -> None:
    config, dynamic, heard = make(tmp_path)
    dynamic.update({THROTTLE_KEY: "2000"}, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert config.throttle_rate == 2000
    # A server.properties reload changes the static layer, which the dynamic one still shadows...
    dynamic.update({THROTTLE_KEY: "3000"}, ConfigSource.STATIC_BROKER_CONFIG)
    assert config.throttle_rate == 2000 and len(heard) == 1
    # ...until the dynamic value goes.
    dynamic.update({THROTTLE_KEY: None}, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert config.throttle_rate == 3000 and heard[-1][THROTTLE_KEY] == 3000
    with pytest.raises(InvalidConfigError):
        dynamic.update({THROTTLE_KEY: "fast"}, ConfigSource.STATIC_BROKER_CONFIG)
    with pytest.raises(InvalidRequestError):
        dynamic.update({"log.dirs": "/x"}, ConfigSource.DYNAMIC_BROKER_CONFIG)
    with pytest.raises(ValueError):
        dynamic.update({THROTTLE_KEY: "1"}, ConfigSource.DEFAULT_CONFIG)
    assert config.throttle_rate == 3000


def test_register_refuses_keys_that_never_change_at_run_time(tmp_path: Path) -> None:
    _, dynamic, _ = make(tmp_path)
    with pytest.raises(ValueError, match="log.dirs"):
        dynamic.register(["log.dirs"], lambda changed: None)


def test_alter_is_all_or_nothing_and_persists(tmp_path: Path) -> None:
    config, dynamic, heard = make(tmp_path)
    with pytest.raises(InvalidConfigError):
        dynamic.alter(Scope.BROKER, [(THROTTLE_KEY, AlterOp.SET, "10"), (THREADS_KEY, AlterOp.SET, "-4")])
    assert heard == [] and config.throttle_rate is None
    dynamic.alter(Scope.BROKER, [(THROTTLE_KEY, AlterOp.SET, "10")], validate_only=True)
    assert heard == []
    dynamic.alter(Scope.BROKER, [(THROTTLE_KEY, AlterOp.SET, "10")])
    # A restart: the layer comes back from the dirs, and the owners hear it at load.
    config2, dynamic2, heard2 = make(tmp_path)
    dynamic2.load([tmp_path / "d1", tmp_path / "d2"])
    assert config2.throttle_rate == 10 and heard2 == [{THROTTLE_KEY: 10, THROTTLE_KAFKA_KEY: 10}]
