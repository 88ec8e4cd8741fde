"""SecurityConfig: the security keys of server.properties, with Kafka's names, defaults and listener overrides.

Kafka resolves most security keys per listener: `listener.name.<listener>.<key>` (the listener name in lower case)
wins over `<key>`. SASL JAAS settings exist only per listener and mechanism:
`listener.name.<listener>.<mechanism>.sasl.jaas.config`. Every value is checked here, at start-up, so a typo is a
one-line error (moverd exit 2) rather than a refused client at run time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mover.config.properties import ConfigError, Listener

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
PROTOCOLS = frozenset({PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL})
TLS_PROTOCOLS = frozenset({SSL, SASL_SSL})
SASL_PROTOCOLS = frozenset({SASL_PLAINTEXT, SASL_SSL})

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

# Kafka's default map: each protocol name is also a listener name.
DEFAULT_PROTOCOL_MAP = {p: p for p in PROTOCOLS}

# Kafka's defaults (SocketServerConfigs, BrokerSecurityConfigs).
DEFAULT_FAILED_AUTH_DELAY_MS = 100
DEFAULT_SASL_MAX_RECEIVE_SIZE = 524288
DEFAULT_IDLE_MS = 600000
DEFAULT_QUEUED_MAX_REQUEST_BYTES = -1

# Keys whose value may be given per listener (`listener.name.<l>.<key>`).
_PER_LISTENER = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.cipher.suites",
    "sasl.enabled.mechanisms",
    "connections.max.reauth.ms",
)

GLOBAL_KEYS = frozenset(
    _PER_LISTENER
    + (
        "listener.security.protocol.map",
        "security.inter.broker.protocol",
        "inter.broker.listener.name",
        "sasl.mechanism.inter.broker.protocol",
        "ssl.endpoint.identification.algorithm",
        "connection.failed.authentication.delay.ms",
        "sasl.server.max.receive.size",
        "authorizer.class.name",
        "super.users",
        "allow.everyone.if.no.acl.found",
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "connections.max.idle.ms",
        "queued.max.request.bytes",
    )
)

_LISTENER_KEY = re.compile(r"listener\.name\.([a-z0-9_]+)\.(.+)")


def is_security_key(key: str) -> bool:
    return key in GLOBAL_KEYS or _LISTENER_KEY.fullmatch(key) is not None


@dataclass(frozen=True)
class TlsSettings:
    """What mover.security.tls needs to build a server SSLContext for one listener."""

    keystore_type: str = "PEM"
    keystore_location: Path | None = None
    keystore_password: str | None = None
    key_password: str | None = None
    keystore_certificate_chain: str | None = None  # PEM text inline
    keystore_key: str | None = None  # PEM text inline
    truststore_type: str = "PEM"
    truststore_location: Path | None = None
    truststore_password: str | None = None
    truststore_certificates: str | None = None  # PEM text inline
    client_auth: str = "none"  # none | requested | required
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: str | None = None


class ProtocolKind:
    """What a security.protocol implies, for a listener's settings and a client's alike."""

    protocol: str

    @property
    def uses_tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS


@dataclass(frozen=True)
class ListenerSecurity(ProtocolKind):
    """One listener: its name, protocol, TLS settings (SSL, SASL_SSL) and SASL settings (SASL_*)."""

    listener: Listener
    protocol: str
    tls: TlsSettings | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    # PLAIN users from the listener's PlainLoginModule JAAS config: {user: password}.
    plain_users: Mapping[str, str] = field(default_factory=dict)
    reauth_ms: int = 0


@dataclass(frozen=True)
class SecurityConfig:
    listeners: tuple[ListenerSecurity, ...] = ()
    failed_auth_delay_ms: int = DEFAULT_FAILED_AUTH_DELAY_MS
    sasl_max_receive_size: int = DEFAULT_SASL_MAX_RECEIVE_SIZE
    authorizer: str | None = None
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    max_connections: int | None = None
    max_connections_per_ip: int | None = None
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    idle_ms: int = DEFAULT_IDLE_MS
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES

    @property
    def protocol_map(self) -> dict[str, str]:
        """Listener name -> security protocol, in listener order: listener.security.protocol.map as resolved."""
        return {ls.listener.name: ls.protocol for ls in self.listeners}

    def for_listener(self, name: str) -> ListenerSecurity:
        for ls in self.listeners:
            if ls.listener.name == name:
                return ls
        raise KeyError(name)

    @classmethod
    def parse(cls, props: Mapping[str, str], listeners: list[Listener]) -> SecurityConfig:
        """Validate and resolve `props` (only security keys) for `listeners`. Raises ConfigError."""
        protocol_map = _protocol_map(props.get("listener.security.protocol.map"))
        for key in props:
            m = _LISTENER_KEY.fullmatch(key)
            if m and m.group(1).upper() not in {ls.name for ls in listeners}:
                raise ConfigError(f"{key}: no listener named {m.group(1).upper()} in listeners")
        names = [ls.name for ls in listeners]
        if len(set(names)) != len(names):
            raise ConfigError("listeners: each listener name may appear once")
        resolved = tuple(_listener(props, ls, protocol_map) for ls in listeners)
        delay = _int(props, "connection.failed.authentication.delay.ms", DEFAULT_FAILED_AUTH_DELAY_MS, 0)
        authorizer = props.get("authorizer.class.name", "").strip() or None
        super_users = frozenset(
            p.strip() for p in props.get("super.users", "").split(";") if p.strip()
        )
        for p in super_users:
            if ":" not in p:
                raise ConfigError(f"super.users: {p!r} is not a principal TYPE:NAME (e.g. User:admin)")
        overrides: dict[str, int] = {}
        for part in (p.strip() for p in props.get("max.connections.per.ip.overrides", "").split(",") if p.strip()):
            host, sep, n = part.rpartition(":")
            if not sep or not host:
                raise ConfigError(f"max.connections.per.ip.overrides: {part!r} is not HOST:COUNT")
            overrides[host.strip()] = _int({"v": n}, "v", 0, 0)
        return cls(
            listeners=resolved,
            failed_auth_delay_ms=delay,
            sasl_max_receive_size=_int(props, "sasl.server.max.receive.size", DEFAULT_SASL_MAX_RECEIVE_SIZE, 1),
            authorizer=authorizer,
            super_users=super_users,
            allow_everyone_if_no_acl_found=_bool(props, "allow.everyone.if.no.acl.found", False),
            max_connections=_optional_int(props, "max.connections"),
            max_connections_per_ip=_optional_int(props, "max.connections.per.ip"),
            max_connections_per_ip_overrides=overrides,
            idle_ms=_int(props, "connections.max.idle.ms", DEFAULT_IDLE_MS, 1),
            queued_max_request_bytes=_int(props, "queued.max.request.bytes", DEFAULT_QUEUED_MAX_REQUEST_BYTES, -1),
        )


def _protocol_map(raw: str | None) -> dict[str, str]:
    if raw is None or not raw.strip():
        return dict(DEFAULT_PROTOCOL_MAP)
    out: dict[str, str] = {}
    for part in (p.strip() for p in raw.split(",") if p.strip()):
        name, sep, proto = part.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name:
            raise ConfigError(f"listener.security.protocol.map: {part!r} is not LISTENER:PROTOCOL")
        if proto not in PROTOCOLS:
            raise ConfigError(
                f"listener.security.protocol.map: protocol {proto!r} of {name} is not one of {sorted(PROTOCOLS)}"
            )
        out[name] = proto
    return out


def _get(props: Mapping[str, str], listener: str, key: str) -> str | None:
    value = props.get(f"listener.name.{listener.lower()}.{key}")
    if value is None:
        value = props.get(key)
    return value.strip() if value is not None else None


def _listener(props: Mapping[str, str], ls: Listener, protocol_map: Mapping[str, str]) -> ListenerSecurity:
    protocol = protocol_map.get(ls.name)
    if protocol is None:
        raise ConfigError(
            f"listener {ls.name} has no security protocol: add {ls.name}:<PROTOCOL> to listener.security.protocol.map"
        )
    tls = _tls(props, ls.name) if protocol in TLS_PROTOCOLS else None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = {}
    if protocol in SASL_PROTOCOLS:
        raw = _get(props, ls.name, "sasl.enabled.mechanisms")
        mechanisms = tuple(m.strip().upper() for m in (raw or ",".join(MECHANISMS)).split(",") if m.strip())
        for m in mechanisms:
            if m not in MECHANISMS:
                raise ConfigError(
                    f"sasl.enabled.mechanisms of listener {ls.name}: {m} is not supported (supported: "
                    f"{', '.join(MECHANISMS)})"
                )
        if not mechanisms:
            raise ConfigError(f"sasl.enabled.mechanisms of listener {ls.name} is empty")
        if PLAIN in mechanisms:
            jaas = props.get(f"listener.name.{ls.name.lower()}.plain.sasl.jaas.config")
            if jaas is None:
                raise ConfigError(
                    f"listener {ls.name} enables PLAIN: set listener.name.{ls.name.lower()}.plain.sasl.jaas.config "
                    'to org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>="<password>";'
                )
            plain_users = parse_plain_jaas(jaas)
    reauth = _int({"v": _get(props, ls.name, "connections.max.reauth.ms") or "0"}, "v", 0, 0)
    return ListenerSecurity(ls, protocol, tls, mechanisms, plain_users, reauth)


def _tls(props: Mapping[str, str], name: str) -> TlsSettings:
    def get(key: str) -> str | None:
        return _get(props, name, key)

    keystore_type = (get("ssl.keystore.type") or "PEM").upper()
    truststore_type = (get("ssl.truststore.type") or "PEM").upper()
    for key, value in (("ssl.keystore.type", keystore_type), ("ssl.truststore.type", truststore_type)):
        if value not in ("PEM", "PKCS12"):
            raise ConfigError(f"{key} of listener {name}: {value} is not supported (PEM or PKCS12; convert JKS with "
                              "keytool -importkeystore -deststoretype PKCS12)")
    location = get("ssl.keystore.location")
    chain, key_pem = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if not location and not (chain and key_pem):
        raise ConfigError(
            f"listener {name} uses TLS: set ssl.keystore.location, or ssl.keystore.certificate.chain and "
            "ssl.keystore.key (ssl.keystore.type=PEM)"
        )
    client_auth = (get("ssl.client.auth") or "none").lower()
    if client_auth not in ("none", "requested", "required"):
        raise ConfigError(f"ssl.client.auth of listener {name}: {client_auth!r} is not none, requested or required")
    protocols = tuple(p.strip() for p in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if p.strip())
    for p in protocols:
        if p not in ("TLSv1.2", "TLSv1.3"):
            raise ConfigError(f"ssl.enabled.protocols of listener {name}: {p} is not allowed (TLSv1.2, TLSv1.3 only)")
    truststore = get("ssl.truststore.location")
    return TlsSettings(
        keystore_type=keystore_type,
        keystore_location=Path(location) if location else None,
        keystore_password=get("ssl.keystore.password"),
        key_password=get("ssl.key.password"),
        keystore_certificate_chain=chain,
        keystore_key=key_pem,
        truststore_type=truststore_type,
        truststore_location=Path(truststore) if truststore else None,
        truststore_password=get("ssl.truststore.password"),
        truststore_certificates=get("ssl.truststore.certificates"),
        client_auth=client_auth,
        enabled_protocols=protocols or ("TLSv1.2", "TLSv1.3"),
        cipher_suites=get("ssl.cipher.suites"),
    )


_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """`<LoginModule class> required k="v" k2=v2;` -> (class, options). Raises ConfigError on anything else."""
    text = text.strip()
    m = re.match(r"([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)", text)
    if m is None:
        raise ConfigError("sasl.jaas.config is not '<LoginModule> required key=\"value\" ...;'")
    rest = text[m.end():]
    options: dict[str, str] = {}
    while True:
        om = _JAAS_OPTION.match(rest)
        if om is None:
            break
        value = om.group(2) if om.group(2) is not None else om.group(3)
        options[om.group(1)] = re.sub(r"\\(.)", r"\1", value)
        rest = rest[om.end():]
    if rest.strip() != ";":
        raise ConfigError(f"sasl.jaas.config: cannot parse {rest.strip()[:40]!r} (options are key=\"value\", then ;)")
    return m.group(1), options


def parse_plain_jaas(text: str) -> dict[str, str]:
    module, options = parse_jaas(text)
    if module.rsplit(".", 1)[-1] != "PlainLoginModule":
        raise ConfigError(f"plain.sasl.jaas.config names {module}, not PlainLoginModule")
    return {k[len("user_"):]: v for k, v in options.items() if k.startswith("user_")}


def _int(props: Mapping[str, str], key: str, default: int, lo: int) -> int:
    raw = props.get(key)
    if raw is None or not raw.strip():
        return default
    try:
        v = int(raw.strip())
    except ValueError:
        raise ConfigError(f"invalid value for {key}: {raw.strip()!r} is not an integer") from None
    if v < lo:
        raise ConfigError(f"invalid value for {key}: {v} is below {lo}")
    return v


def _optional_int(props: Mapping[str, str], key: str) -> int | None:
    if props.get(key) is None:
        return None
    return _int(props, key, 0, 0)


def _bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    raw = props.get(key)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise ConfigError(f"invalid value for {key}: {raw.strip()!r} is not true or false")
    return raw.strip().lower() == "true"
