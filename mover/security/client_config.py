"""ClientSecurity: a Kafka client's security keys (`--command-config FILE`), parsed and checked in one place.

The tools (mover-log-dirs, mover-audit) take the file an operator already gives kafka-log-dirs.sh or
kafka-reassign-partitions.sh: Java properties with Kafka's client keys (docs/security.md, "Clients"):

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-256
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="ops" password="pw";
    ssl.truststore.location=/etc/kafka/ca.pem
    ssl.truststore.type=PEM

Everything is checked here, before any broker is contacted: an unknown protocol or mechanism, a JAAS line without a
user, a trust store that does not load (wrong PKCS12 password) is one ConfigError line. Keys this client does not
use are returned as warnings (Kafka's clients log "supplied but isn't a known config" too), so a typo in a key name
is seen rather than silently ignored.

The result is a frozen, picklable value (it travels to Spark executors with the brokers they query); the SSLContext
is built from it on first use in each process, from the same files, as a Kafka client on every host reads its own
copies of the stores.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mover.config.broker import ConfigError, parse_properties, read_properties_text
from mover.config.security import (
    MECHANISMS,
    PLAINTEXT,
    PROTOCOLS,
    SASL_PROTOCOLS,
    TLS_PROTOCOLS,
    ProtocolKind,
    parse_jaas,
)
from mover.security.tls import client_context

SSL_KEYS = frozenset({
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.endpoint.identification.algorithm",
})
SASL_KEYS = frozenset({"sasl.mechanism", "sasl.jaas.config"})
# The login modules whose `username`/`password` options Kafka's PLAIN and SCRAM client callbacks read.
LOGIN_MODULES = ("PlainLoginModule", "ScramLoginModule")
STORE_TYPES = ("PEM", "PKCS12")


@dataclass(frozen=True)
class ClientTls:
    """The ssl.* keys a client uses, as given (paths are resolved against the config file's directory)."""

    truststore_location: str | None = None
    truststore_type: str = "PEM"
    truststore_password: str | None = field(default=None, repr=False)
    truststore_certificates: str | None = None
    keystore_location: str | None = None
    keystore_type: str = "PEM"
    keystore_password: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = field(default=None, repr=False)
    # ssl.endpoint.identification.algorithm: "https" (Kafka's default since 2.0) checks the broker's certificate
    # names the host we connect to; empty turns only that check off, the chain is still verified.
    check_hostname: bool = True


@dataclass(frozen=True)
class ClientSecurity(ProtocolKind):
    protocol: str = PLAINTEXT
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: ClientTls | None = None
    # The file it came from, for messages and for the command lines tools print ("--command-config PATH").
    source: str | None = None
    # Keys given but not used by this client: one line each, for the tool to print as warnings.
    warnings: tuple[str, ...] = ()

    def ssl_context(self) -> ssl.SSLContext:
        """The client SSLContext (built once per process). Raises ConfigError when a store cannot be loaded."""
        assert self.tls is not None, f"security.protocol {self.protocol} does not use TLS"
        try:
            return _context(self.tls)
        except ConfigError as e:
            raise ConfigError(f"{self.source or 'client config'}: {e}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> ClientSecurity:
        """Read and check a command config file. Raises ConfigError (one line naming the file)."""
        text = read_properties_text(path)
        return cls.from_properties(parse_properties(text, source=str(path)), source=str(path))

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, source: str | None = None) -> ClientSecurity:
        where = source or "client config"
        try:
            return _parse(props, source)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None


def _parse(props: Mapping[str, str], source: str | None) -> ClientSecurity:
    def get(key: str) -> str | None:
        value = props.get(key)
        return value.strip() if value is not None and value.strip() else None

    protocol = (get("security.protocol") or PLAINTEXT).upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"security.protocol {protocol!r} is not one of {', '.join(sorted(PROTOCOLS))}")
    warnings = [f"{key} is not a setting this tool uses; ignored"
                for key in sorted(props) if key != "security.protocol" and key not in SSL_KEYS | SASL_KEYS]
    used = {"security.protocol"}
    mechanism = username = password = None
    if protocol in SASL_PROTOCOLS:
        mechanism, username, password = _sasl(get("sasl.mechanism"), get("sasl.jaas.config"))
        used |= SASL_KEYS
    tls = None
    if protocol in TLS_PROTOCOLS:
        tls = _tls(props, Path(source).parent if source else None)
        used |= SSL_KEYS
    ignored = sorted(k for k in props if k in (SSL_KEYS | SASL_KEYS) - used)
    if ignored:
        warnings.append(f"{', '.join(ignored)} ignored: security.protocol is {protocol}")
    if tls is not None:
        _context(tls)  # load the stores now: a wrong path or password is reported before any connection
    return ClientSecurity(protocol, mechanism, username, password, tls, source, tuple(warnings))


def _sasl(mechanism: str | None, jaas: str | None) -> tuple[str, str, str]:
    if mechanism is None:
        raise ConfigError(f"sasl.mechanism is not set (Kafka's default, GSSAPI, is not supported: use "
                          f"{', '.join(MECHANISMS)})")
    mechanism = mechanism.upper()
    if mechanism not in MECHANISMS:
        raise ConfigError(f"sasl.mechanism {mechanism} is not supported (supported: {', '.join(MECHANISMS)})")
    if jaas is None:
        raise ConfigError(f"sasl.mechanism={mechanism} needs sasl.jaas.config, e.g. "
                          f"{_example_module(mechanism)} required username=\"NAME\" password=\"PASSWORD\";")
    module, options = parse_jaas(jaas)
    if module.rsplit(".", 1)[-1] not in LOGIN_MODULES:
        raise ConfigError(f"sasl.jaas.config names {module}: use {_example_module(mechanism)} "
                          "(PLAIN and SCRAM take username and password)")
    for option in ("username", "password"):
        if not options.get(option):
            raise ConfigError(f"sasl.jaas.config has no {option}=\"...\"")
    return mechanism, options["username"], options["password"]


def _example_module(mechanism: str) -> str:
    if mechanism == "PLAIN":
        return "org.apache.kafka.common.security.plain.PlainLoginModule"
    return "org.apache.kafka.common.security.scram.ScramLoginModule"


def _tls(props: Mapping[str, str], base: Path | None) -> ClientTls:
    def get(key: str) -> str | None:
        value = props.get(key)
        return value.strip() if value is not None and value.strip() else None

    def path(key: str) -> str | None:
        value = get(key)
        if value is None:
            return None
        p = Path(value)
        return str(p if p.is_absolute() or base is None else base / p)

    types = {}
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        value = (get(key) or "PEM").upper()
        if value not in STORE_TYPES:
            raise ConfigError(f"{key} {value} is not supported (PEM or PKCS12; convert a JKS store with "
                              "keytool -importkeystore -deststoretype PKCS12)")
        types[key] = value
    # Kafka: absent means the default, https; given but empty turns the check off.
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip()
    if algorithm and algorithm.lower() != "https":
        raise ConfigError(f"ssl.endpoint.identification.algorithm {algorithm!r}: use https (check the broker's host "
                          "name, the default) or an empty value (do not)")
    tls = ClientTls(
        truststore_location=path("ssl.truststore.location"),
        truststore_type=types["ssl.truststore.type"],
        truststore_password=get("ssl.truststore.password"),
        truststore_certificates=get("ssl.truststore.certificates"),
        keystore_location=path("ssl.keystore.location"),
        keystore_type=types["ssl.keystore.type"],
        keystore_password=get("ssl.keystore.password"),
        key_password=get("ssl.key.password"),
        keystore_certificate_chain=get("ssl.keystore.certificate.chain"),
        keystore_key=get("ssl.keystore.key"),
        check_hostname=bool(algorithm),
    )
    if bool(tls.keystore_certificate_chain) != bool(tls.keystore_key):
        raise ConfigError("ssl.keystore.certificate.chain and ssl.keystore.key go together (inline PEM key store)")
    if tls.keystore_type == "PKCS12" and tls.keystore_location is None and tls.keystore_key is None:
        raise ConfigError("ssl.keystore.type=PKCS12 needs ssl.keystore.location")
    return tls


@functools.lru_cache(maxsize=16)
def _context(tls: ClientTls) -> ssl.SSLContext:
    return client_context(
        truststore_location=tls.truststore_location,
        truststore_certificates=tls.truststore_certificates,
        truststore_type=tls.truststore_type,
        truststore_password=tls.truststore_password,
        keystore_location=tls.keystore_location,
        keystore_type=tls.keystore_type,
        keystore_password=tls.keystore_password,
        key_password=tls.key_password,
        keystore_certificate_chain=tls.keystore_certificate_chain,
        keystore_key=tls.keystore_key,
        check_hostname=tls.check_hostname,
    )
