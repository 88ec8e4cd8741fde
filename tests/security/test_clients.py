"""mover-log-dirs and mover-audit against secured listeners, with Kafka's client properties (--command-config and
the fleet file's command_config)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mover.audit.collect import query_broker
from mover.audit.fleet import FleetError, discover, load_fleet
from mover.cli.log_dirs import main as log_dirs_main
from mover.testing.certs import Pki
from tests.security.helpers import SecureBroker

JAAS = "org.apache.kafka.common.security.{module} required username=\"{user}\" password=\"{password}\";"


def props_file(tmp: Path, name: str, lines: dict[str, str]) -> Path:
    path = tmp / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return path


def configs(b: SecureBroker, tmp: Path) -> dict[str, Path]:
    ca = str(b.pki.ca_file)
    alice = b.pki.issue("tool-user")
    return {
        "SSL": props_file(tmp, "ssl", {"security.protocol": "SSL", "ssl.truststore.location": ca,
                                       "ssl.truststore.type": "PEM"}),
        "SSL-mutual": props_file(tmp, "mtls", {"security.protocol": "SSL", "ssl.truststore.location": ca,
                                               "ssl.keystore.type": "PEM", "ssl.keystore.location":
                                               str(alice.keystore)}),
        "SASL_PLAINTEXT": props_file(tmp, "plain", {
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": JAAS.format(module="plain.PlainLoginModule", user="alice", password="alice-secret")}),
        "SASL_SSL": props_file(tmp, "scram", {
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "ssl.truststore.location": ca,
            "sasl.jaas.config": JAAS.format(module="scram.ScramLoginModule", user="carol",
                                            password="carol-secret")}),
    }


@pytest.fixture(scope="module")
def with_scram(broker: SecureBroker) -> SecureBroker:
    broker.add_scram_user("carol", "carol-secret", "SCRAM-SHA-512")
    return broker


@pytest.mark.parametrize("kind", ["SSL", "SSL-mutual", "SASL_PLAINTEXT", "SASL_SSL"])
def test_mover_log_dirs_describe_over_each_protocol(with_scram: SecureBroker, tmp_path: Path, kind: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    listener = kind.split("-")[0]
    rc = log_dirs_main(["--bootstrap-server", with_scram.address(listener), "--command-config",
                        str(configs(with_scram, tmp_path)[kind]), "--describe"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    described = json.loads(out.out.strip().splitlines()[-1])  # after Kafka's progress lines
    assert described["brokers"][0]["logDirs"]


def test_mover_log_dirs_refusals_are_one_line(with_scram: SecureBroker, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    wrong = props_file(tmp_path, "wrong", {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": JAAS.format(module="plain.PlainLoginModule", user="alice", password="nope")})
    rc = log_dirs_main(["--bootstrap-server", with_scram.address("SASL_PLAINTEXT"), "--command-config", str(wrong),
                        "--describe"])
    err = capsys.readouterr().err
    assert rc == 1 and "authentication with broker" in err and "Invalid username or password" in err
    assert err.count("\n") == 1
    untrusted = Pki(tmp_path / "other", name="Other CA")
    foreign = props_file(tmp_path, "foreign", {"security.protocol": "SSL",
                                               "ssl.truststore.location": str(untrusted.ca_file)})
    rc = log_dirs_main(["--bootstrap-server", with_scram.address("SSL"), "--command-config", str(foreign),
                        "--describe"])
    err = capsys.readouterr().err
    assert rc == 1 and "TLS handshake" in err and "CERTIFICATE_VERIFY_FAILED" in err
    bad = props_file(tmp_path, "bad", {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"})
    rc = log_dirs_main(["--bootstrap-server", with_scram.address("SASL_SSL"), "--command-config", str(bad),
                        "--describe"])
    err = capsys.readouterr().err
    assert rc == 2 and "GSSAPI is not supported" in err


def test_fleet_command_config_per_cluster(with_scram: SecureBroker, tmp_path: Path) -> None:
    cfg = configs(with_scram, tmp_path)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        f'[clusters.secure]\nbootstrap = "{with_scram.address("SASL_SSL")}"\n'
        f'command_config = "{cfg["SASL_SSL"].name}"\n'
        f'[clusters.plain]\nbootstrap = "{with_scram.address("PLAINTEXT")}"\n')
    sources = {s.name: s for s in load_fleet(fleet)}
    assert sources["secure"].security is not None and sources["plain"].security is None
    view = discover(sources["secure"], timeout=10)
    assert view.error is None and view.brokers[0].port == with_scram.ports["SASL_SSL"]
    result = query_broker(view.brokers[0], 10, datetime.now(UTC))
    assert result.broker[4] is None, result.broker  # (cluster, broker, host, port, error, ...)
    assert result.log_dirs
    # The same cluster without its command_config: the SASL listener closes on us, reported, not raised.
    bare = discover(type(sources["secure"])("secure", bootstrap=with_scram.address("SASL_SSL")), timeout=10)
    assert bare.error is not None
    broken = tmp_path / "broken.toml"
    broken.write_text('[clusters.x]\nbootstrap = "h:1"\ncommand_config = "missing.properties"\n')
    with pytest.raises(FleetError, match="missing.properties"):
        load_fleet(broken)
