from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from mover.config.broker import BrokerConfig, ConfigError, default_config, parse_properties
from mover.testing import prefork

REPO = Path(__file__).resolve().parents[2]


def test_parse_properties_java_syntax() -> None:
    text = "# comment\n! also\nbroker.id = 3\nlog.dirs: /a,\\\n   /b\nlisteners PLAINTEXT://h:1\n\n"
    assert parse_properties(text) == {"broker.id": "3", "log.dirs": "/a,/b", "listeners": "PLAINTEXT://h:1"}


def test_both_throttle_names_and_defaults() -> None:
    cfg = BrokerConfig.from_properties({"log.dirs": "/d1,/d2", "intra.broker.throttled.rate": "100"})
    assert cfg.throttle_rate == 100
    cfg = BrokerConfig.from_properties(
        {"log.dirs": "/d1", "replica.alter.log.dirs.io.max.bytes.per.second": "9223372036854775807"})
    assert cfg.throttle_rate is None  # Kafka's Long.MAX_VALUE default means unlimited
    assert cfg.move_threads == 1
    assert BrokerConfig.from_properties({"log.dirs": "/a,/b,/c"}).move_threads == 3
    assert cfg.log_segment_delete_delay_ms == 60000


def test_unknown_key_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        BrokerConfig.from_properties({"log.dirs": "/d", "num.network.threads": "5"})
    assert "num.network.threads" in caplog.text


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"log.dirs": "/d", "broker.id": "x"}, "broker.id"),
        ({"log.dirs": "/d", "log.segment.bytes": "1"}, "log.segment.bytes"),
        ({"log.dirs": "/d", "num.replica.alter.log.dirs.threads": "0"}, "num.replica.alter.log.dirs.threads"),
        ({"log.dirs": "/d", "intra.broker.throttled.rate": "-1"}, "intra.broker.throttled.rate"),
        ({"log.dirs": "/d", "listeners": "SSL://h:1"}, "ssl.keystore.location"),
        ({"log.dirs": "/d", "listeners": "PLAIN TEXT://h:1"}, "listener name"),
        ({"log.dirs": "/d,/d"}, "twice"),
        ({}, "log.dirs is required"),
    ],
)
def test_invalid_values(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties(props)


def test_relative_dirs_are_refused() -> None:
    with pytest.raises(ConfigError, match="'var/a' is not an absolute path"):
        BrokerConfig.from_properties({"log.dirs": "/srv/b,var/a"})


@pytest.mark.parametrize("dirs", ["/d/p1,/d/p1/t-0", "/d/p1/t-0,/d/p1", "/d/p1,/d/x/../p1/t-0"])
def test_nested_dirs_are_refused(dirs: str) -> None:
    with pytest.raises(ConfigError, match="is inside log dir /d/p1"):
        BrokerConfig.from_properties({"log.dirs": dirs})


def test_sibling_dirs_with_a_common_prefix_are_not_nested() -> None:
    assert BrokerConfig.from_properties({"log.dirs": "/d/p1,/d/p10"}).log_dirs == [Path("/d/p1"), Path("/d/p10")]


def test_duplicate_keys_warn_naming_every_line(caplog: pytest.LogCaptureFixture) -> None:
    text = "broker.id=1\nlog.dirs=/d\n# the spare broker's line, pasted\nbroker.id = 2\n"
    with caplog.at_level(logging.WARNING):
        props = parse_properties(text, source="server.properties")
    assert props["broker.id"] == "2"
    assert caplog.messages == ["server.properties sets broker.id 2 times (line 1: broker.id=1, line 4: broker.id=2); "
                               "using the last value, '2'"]


def test_embedded_default(tmp_path: Path) -> None:
    cfg = default_config(tmp_path)
    assert cfg.log_dirs == [tmp_path / "var" / "log-dir-1", tmp_path / "var" / "log-dir-2"]
    assert str(cfg.listeners[0]) == "PLAINTEXT://127.0.0.1:9092"


def test_example_configuration_is_valid() -> None:
    cfg = BrokerConfig.from_file(REPO / "systemd" / "server.properties")
    assert cfg.throttle_rate == 52428800


def test_moverd_exits_2_with_one_line_on_bad_config(tmp_path: Path) -> None:
    conf = tmp_path / "server.properties"
    conf.write_text(f"log.dirs={tmp_path}/d\nlog.retention.ms=soon\n")
    r = prefork.run([sys.executable, "-m", "mover.daemon", "--config", str(conf)], capture_output=True,
                    text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["moverd: invalid value for log.retention.ms: 'soon' is not an integer"]


def test_moverd_exits_2_on_missing_config_file(tmp_path: Path) -> None:
    r = prefork.run([sys.executable, "-m", "mover.daemon", "--config", str(tmp_path / "nope")],
                    capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "cannot read configuration file" in r.stderr
    assert "Traceback" not in r.stderr
