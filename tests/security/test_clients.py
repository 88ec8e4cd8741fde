"""mover-log-dirs --command-config against a real moverd on SSL (mutual TLS), SASL_PLAINTEXT and SASL_SSL listeners:
describe, execute, verify and throttle over each; wrong passwords, untrusted CAs and the wrong protocol refused with
one line and a non-zero exit; the client config file checked before any broker is contacted."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from mover.admin.client import AuthenticationFailed, BrokerConnection, Client
from mover.audit.collect import query_broker
from mover.audit.fleet import FleetError, discover, load_fleet
from mover.cli.log_dirs import main as log_dirs_main
from mover.config.broker import ConfigError
from mover.security.client_config import ClientSecurity
from mover.testing.batches import make_batch
from mover.testing.certs import Issued, Pki
from mover.testing.log_dirs_tool import VERIFY_DONE, VERIFY_IN_PROGRESS, cli, create_topics
from mover.testing.raw import RawClient, produce
from mover.testing.wait import wait_for
from mover.wire.messages import DESCRIBE_LOG_DIRS
from tests.security.helpers import SCRAM_JAAS, SecureBroker, add_scram_user

SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-secret"
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="{}" password="{}";'
# The SASL_PLAINTEXT listener makes sessions re-authenticate this often, so the tools' re-authentication runs.
REAUTH_MS = 1500


@pytest.fixture(scope="module")
def client_cert(pki: Pki) -> Issued:
    return pki.issue("ops", organization="acme", password="key-secret")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, pki: Pki, server_cert: Issued) -> Iterator[SecureBroker]:
    """PLAINTEXT, SSL (client certificate required), SASL_PLAINTEXT (sessions of REAUTH_MS) and SASL_SSL listeners;
    a SCRAM user for both SCRAM mechanisms; a topic with records to move."""
    b = SecureBroker(tmp_path_factory.mktemp("broker"), pki, server_cert, props={
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.sasl_plaintext.connections.max.reauth.ms": REAUTH_MS,
    })
    b.start()
    try:
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            add_scram_user(b, SCRAM_USER, SCRAM_PASSWORD, mechanism)
        create_topics(b.address("PLAINTEXT"), {"t": 3})
        with RawClient(b.ports["PLAINTEXT"]) as c:
            for p in range(3):
                produce(c, "t", p, make_batch([b"x" * 1000] * 50))
        yield b
    finally:
        b.stop()


def write_config(path: Path, **props: object) -> Path:
    path.write_text("".join(f"{k.replace('_', '.')}={v}\n" for k, v in props.items()))
    return path


def config_for(b: SecureBroker, listener: str, tmp: Path, cert: Issued | None = None, *, mechanism: str = "PLAIN",
               password: str | None = None) -> Path:
    """The client properties an operator would write for `listener`."""
    lines = [f"security.protocol={listener}"]
    if listener in ("SSL", "SASL_SSL"):
        lines += [f"ssl.truststore.location={b.pki.ca_file}", "ssl.truststore.type=PEM"]
    if cert is not None:
        lines += [f"ssl.keystore.location={cert.keystore}", "ssl.keystore.type=PEM", "ssl.key.password=key-secret"]
    if listener.startswith("SASL"):
        user, default = ("alice", "alice-secret") if mechanism == "PLAIN" else (SCRAM_USER, SCRAM_PASSWORD)
        jaas = (PLAIN_JAAS if mechanism == "PLAIN" else SCRAM_JAAS).format(user, password or default)
        lines += [f"sasl.mechanism={mechanism}", f"sasl.jaas.config={jaas}"]
    path = tmp / f"{listener.lower()}-{mechanism.lower()}.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


def one_line_error(r: object, prefix: str = "mover-log-dirs: error: ") -> str:
    """The refusal: non-zero exit, nothing on stdout, exactly one line on stderr."""
    assert r.returncode != 0, r.stdout  # type: ignore[attr-defined]
    lines = r.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith(prefix), r.stderr  # type: ignore[attr-defined]
    return lines[0]


def describe(b: SecureBroker, listener: str, config: Path) -> dict:
    r = cli("--bootstrap-server", b.address(listener), "--command-config", str(config), "--describe")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[2])["brokers"][0]


# ------------------------------------------------------------------------------------------------ every listener


@pytest.mark.parametrize(("listener", "mechanism"), [
    ("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-512"),
])
def test_describe_over_each_listener(secure: SecureBroker, tmp_path: Path, client_cert: Issued, listener: str,
                                     mechanism: str | None) -> None:
    config = config_for(secure, listener, tmp_path, client_cert if listener == "SSL" else None,
                        mechanism=mechanism or "PLAIN")
    dirs = describe(secure, listener, config)["logDirs"]
    partitions = sorted(p["partition"] for d in dirs for p in d["partitions"])
    assert partitions == ["t-0", "t-1", "t-2"]


@pytest.mark.parametrize("listener", ["SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_execute_verify_throttle_over_each_listener(secure: SecureBroker, tmp_path: Path, client_cert: Issued,
                                                    listener: str) -> None:
    config = config_for(secure, listener, tmp_path, client_cert if listener == "SSL" else None,
                        mechanism="SCRAM-SHA-256")
    sec = ("--bootstrap-server", secure.address(listener), "--command-config", str(config))
    before = {p["partition"]: d["logDir"] for d in describe(secure, listener, config)["logDirs"]
              for p in d["partitions"] if not p["isFuture"]}
    other = {str(d): str(next(x for x in secure.d.dirs if x != d)) for d in secure.d.dirs}
    target = {name: other[path] for name, path in before.items()}
    plan = tmp_path / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": int(name.rsplit("-", 1)[1]), "replicas": [0], "log_dirs": [d]}
        for name, d in sorted(target.items())]}))

    r = cli(*sec, "--throttle", "50000000")
    assert r.returncode == 0, r.stderr
    r = cli(*sec, "--execute", "--reassignment-json-file", str(plan))
    assert r.returncode == 0, r.stderr
    assert "Successfully started partition reassignment" in r.stdout

    def verified() -> bool:
        v = cli(*sec, "--verify", "--reassignment-json-file", str(plan))
        assert v.returncode in (VERIFY_DONE, VERIFY_IN_PROGRESS), v.stderr
        return v.returncode == VERIFY_DONE

    wait_for(verified, message=f"the moves over {listener} to be verified")
    after = {p["partition"]: d["logDir"] for d in describe(secure, listener, config)["logDirs"]
             for p in d["partitions"] if not p["isFuture"]}
    assert after == target
    r = cli(*sec, "--remove-throttle")
    assert r.returncode == 0, r.stderr


def test_pkcs12_key_and_trust_stores(secure: SecureBroker, tmp_path: Path, client_cert: Issued) -> None:
    ca = x509.load_pem_x509_certificate(secure.pki.ca_file.read_bytes())
    truststore = tmp_path / "truststore.p12"
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca], serialization.BestAvailableEncryption(b"trust-secret")))
    config = write_config(tmp_path / "p12.properties", **{
        "security_protocol": "SSL",
        "ssl_truststore_location": truststore, "ssl_truststore_type": "PKCS12",
        "ssl_truststore_password": "trust-secret",
        "ssl_keystore_location": client_cert.pkcs12, "ssl_keystore_type": "PKCS12",
        "ssl_keystore_password": "key-secret",
    })
    assert describe(secure, "SSL", config)["broker"] == 0


# ------------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(("listener", "mechanism"), [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256")])
def test_wrong_password_is_one_line(secure: SecureBroker, tmp_path: Path, listener: str, mechanism: str) -> None:
    config = config_for(secure, listener, tmp_path, mechanism=mechanism, password="wrong")
    r = cli("--bootstrap-server", secure.address(listener), "--command-config", str(config), "--describe")
    line = one_line_error(r)
    assert line.startswith("mover-log-dirs: error: authentication failed: ") and mechanism in line, line
    assert secure.alive()


def test_untrusted_ca_is_one_line(secure: SecureBroker, tmp_path: Path) -> None:
    other = Pki(tmp_path / "other", "Other CA")
    config = write_config(tmp_path / "c.properties", security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
                          ssl_truststore_location=other.ca_file,
                          sasl_jaas_config=PLAIN_JAAS.format("alice", "alice-secret"))
    line = one_line_error(cli("--bootstrap-server", secure.address("SASL_SSL"), "--command-config", str(config),
                              "--describe"))
    assert "certificate verify failed" in line and "ssl.truststore.location" in line, line


def test_missing_client_certificate_is_one_line(secure: SecureBroker, tmp_path: Path) -> None:
    config = config_for(secure, "SSL", tmp_path)
    line = one_line_error(cli("--bootstrap-server", secure.address("SSL"), "--command-config", str(config),
                              "--describe"))
    assert "ssl.keystore.location" in line, line


def test_tls_to_a_plaintext_port_is_one_line(secure: SecureBroker, tmp_path: Path) -> None:
    config = config_for(secure, "SSL", tmp_path)
    line = one_line_error(cli("--bootstrap-server", secure.address("PLAINTEXT"), "--command-config", str(config),
                              "--describe"))
    assert "TLS handshake" in line and "PLAINTEXT" in line, line


def test_plaintext_to_a_tls_port_is_one_line(secure: SecureBroker) -> None:
    line = one_line_error(cli("--bootstrap-server", secure.address("SASL_SSL"), "--describe"))
    assert "security.protocol" in line, line


def test_plaintext_to_a_sasl_port_is_one_line(secure: SecureBroker) -> None:
    line = one_line_error(cli("--bootstrap-server", secure.address("SASL_PLAINTEXT"), "--describe"))
    assert "SASL_PLAINTEXT or SASL_SSL" in line, line


def test_sasl_to_a_plaintext_port_is_one_line(secure: SecureBroker, tmp_path: Path) -> None:
    config = config_for(secure, "SASL_PLAINTEXT", tmp_path)
    line = one_line_error(cli("--bootstrap-server", secure.address("PLAINTEXT"), "--command-config", str(config),
                              "--describe"))
    assert "does not offer SASL" in line, line


def test_a_mechanism_the_listener_does_not_enable(tmp_path: Path, pki: Pki, server_cert: Issued) -> None:
    with SecureBroker(tmp_path, pki, server_cert,
                      props={"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512"}) as b:
        config = config_for(b, "SASL_PLAINTEXT", tmp_path)
        line = one_line_error(cli("--bootstrap-server", b.address("SASL_PLAINTEXT"), "--command-config",
                                  str(config), "--describe"))
    assert "does not enable SASL mechanism PLAIN (enabled: SCRAM-SHA-512)" in line, line


def test_reauthenticates_before_the_session_ends(secure: SecureBroker, tmp_path: Path) -> None:
    """connections.max.reauth.ms: the broker closes a session past its lifetime on the next request; the client
    re-authenticates on the same connection first, so a long --watch keeps working."""
    security = ClientSecurity.from_file(config_for(secure, "SASL_PLAINTEXT", tmp_path, mechanism="SCRAM-SHA-512"))
    conn = BrokerConnection("127.0.0.1", secure.ports["SASL_PLAINTEXT"], security=security)
    try:
        first = conn._reauth_at
        assert first is not None
        ended = time.monotonic() + REAUTH_MS / 1000
        wait_for(lambda: time.monotonic() > ended, message="the broker's session lifetime to pass")
        assert conn.call(DESCRIBE_LOG_DIRS, {"topics": None})["results"]
        assert conn._reauth_at is not None and conn._reauth_at > first
        assert conn.call(DESCRIBE_LOG_DIRS, {"topics": None})["results"]
    finally:
        conn.close()


def test_authentication_failure_is_not_retried_on_other_bootstrap_servers(secure: SecureBroker,
                                                                          tmp_path: Path) -> None:
    security = ClientSecurity.from_file(config_for(secure, "SASL_PLAINTEXT", tmp_path, password="wrong"))
    with pytest.raises(AuthenticationFailed, match="^authentication failed: broker 127.0.0.1:"):
        Client(f"{secure.address('SASL_PLAINTEXT')},{secure.address('SASL_PLAINTEXT')}", security=security)


# ------------------------------------------------------------------------------------------------ the config file


@pytest.mark.parametrize(("props", "message"), [
    ({"security.protocol": "TLS"}, "security.protocol 'TLS' is not one of"),
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanism is not set"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, "GSSAPI is not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "needs sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="a";'},
     'no password="..."'),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
     "names com.sun.security.auth.module.Krb5LoginModule"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "JKS is not supported"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem"}, "cannot load"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"}, "use https"),
])
def test_bad_config_is_a_usage_error_before_any_connection(tmp_path: Path, props: dict[str, str],
                                                           message: str) -> None:
    config = tmp_path / "bad.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    # Port 1: nothing listens there; the file's error must come first.
    r = cli("--bootstrap-server", "127.0.0.1:1", "--command-config", str(config), "--describe")
    assert r.returncode == 2
    line = one_line_error(r)
    assert str(config) in line and message in line, line


def test_wrong_pkcs12_password_is_a_usage_error(tmp_path: Path, client_cert: Issued, pki: Pki) -> None:
    config = write_config(tmp_path / "c.properties", security_protocol="SSL", ssl_truststore_location=pki.ca_file,
                          ssl_keystore_location=client_cert.pkcs12, ssl_keystore_type="PKCS12",
                          ssl_keystore_password="wrong")
    r = cli("--bootstrap-server", "127.0.0.1:1", "--command-config", str(config), "--describe")
    assert r.returncode == 2 and "cannot load the TLS key or trust store" in one_line_error(r)


def test_parsing_follows_kafka() -> None:
    s = ClientSecurity.from_properties({
        "security.protocol": "sasl_ssl", "sasl.mechanism": "scram-sha-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required\n'
                            '  username="ops" password="p\\"w";',
        "ssl.endpoint.identification.algorithm": "",
        "request.timeout.ms": "30000",
    })
    assert (s.protocol, s.mechanism, s.username, s.password) == ("SASL_SSL", "SCRAM-SHA-512", "ops", 'p"w')
    assert s.tls is not None and s.tls.check_hostname is False  # empty: Kafka turns the host name check off
    assert s.warnings == ("request.timeout.ms is not a setting this tool uses; ignored",)
    assert "p\\\"w" not in repr(s) and 'p"w' not in repr(s)  # the password never shows in a repr
    assert ClientSecurity.from_properties({"security.protocol": "SSL"}).tls.check_hostname is True  # type: ignore
    plain = ClientSecurity.from_properties({"sasl.mechanism": "PLAIN"})
    assert plain.protocol == "PLAINTEXT" and plain.warnings == ("sasl.mechanism ignored: security.protocol is "
                                                                "PLAINTEXT",)
    with pytest.raises(ConfigError):
        ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12"})


def test_unused_keys_are_warned_about(secure: SecureBroker, tmp_path: Path) -> None:
    config = config_for(secure, "SASL_PLAINTEXT", tmp_path)
    with config.open("a") as f:
        f.write("ssl.truststore.locaton=/typo\n")
    r = cli("--bootstrap-server", secure.address("SASL_PLAINTEXT"), "--command-config", str(config), "--describe")
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [f"mover-log-dirs: warning: {config}: ssl.truststore.locaton is not a setting "
                                     "this tool uses; ignored"]


# ------------------------------------------------------------------------------------------------ in process


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
    """The shared broker of tests/security (SSL client certificates requested, not required), with carol."""
    add_scram_user(broker, "carol", "carol-secret", "SCRAM-SHA-512")
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
    assert rc == 1 and "authentication failed: broker" in err and "Invalid username or password" in err
    assert err.count("\n") == 1
    untrusted = Pki(tmp_path / "other", name="Other CA")
    foreign = props_file(tmp_path, "foreign", {"security.protocol": "SSL",
                                               "ssl.truststore.location": str(untrusted.ca_file)})
    rc = log_dirs_main(["--bootstrap-server", with_scram.address("SSL"), "--command-config", str(foreign),
                        "--describe"])
    err = capsys.readouterr().err
    assert rc == 1 and "TLS handshake" in err and "certificate verify failed" in err
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
