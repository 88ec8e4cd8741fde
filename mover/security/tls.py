"""TLS contexts from Kafka's ssl.* keys (PEM files, inline PEM, PKCS12), and Kafka's principal for a certificate.

TLS 1.2 is the floor whatever the configuration says: older versions have known attacks and Kafka itself dropped
them from its defaults (KIP-553). The standard library's `ssl` needs key and certificates as files, so inline PEM
and PKCS12 key stores are written to a private temporary file (mode 0600) that is removed as soon as it is loaded.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mover.config.broker import ConfigError
from mover.config.security import TlsSettings

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}

# RFC 2253 short names, as Java's X500Principal.getName() writes them (Kafka's default principal is that string).
_RDN_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def server_context(tls: TlsSettings, listener: str) -> ssl.SSLContext:
    """The SSLContext a listener serves with. Raises ConfigError when a key store or trust store cannot be loaded."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _restrict_versions(ctx, tls.enabled_protocols)
    try:
        _load_keystore(ctx, tls)
        if tls.cipher_suites:
            ctx.set_ciphers(tls.cipher_suites.replace(",", ":"))
        _load_truststore(ctx, tls)
    except (OSError, ssl.SSLError, ValueError) as e:
        raise ConfigError(f"listener {listener}: cannot load TLS key or trust store: {e}") from None
    ctx.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[tls.client_auth]
    if tls.client_auth != "none" and not (tls.truststore_location or tls.truststore_certificates):
        raise ConfigError(f"listener {listener}: ssl.client.auth={tls.client_auth} needs ssl.truststore.location")
    # No session tickets to resume from: a resumed session would skip the client certificate check the principal
    # comes from, and brokers gain little from resumption.
    ctx.options |= ssl.OP_NO_TICKET
    return ctx


def client_context(
    *,
    truststore_location: str | None = None,
    truststore_certificates: str | None = None,
    truststore_type: str = "PEM",
    truststore_password: str | None = None,
    keystore_location: str | None = None,
    keystore_type: str = "PEM",
    keystore_password: str | None = None,
    key_password: str | None = None,
    keystore_certificate_chain: str | None = None,
    keystore_key: str | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """The SSLContext a client (mover-log-dirs, mover-audit) connects with, from Kafka's client ssl.* keys."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _restrict_versions(ctx, ("TLSv1.2", "TLSv1.3"))
    ctx.check_hostname = check_hostname
    settings = TlsSettings(
        keystore_type=keystore_type.upper(),
        keystore_location=Path(keystore_location) if keystore_location else None,
        keystore_password=keystore_password,
        key_password=key_password,
        keystore_certificate_chain=keystore_certificate_chain,
        keystore_key=keystore_key,
        truststore_type=truststore_type.upper(),
        truststore_location=Path(truststore_location) if truststore_location else None,
        truststore_password=truststore_password,
        truststore_certificates=truststore_certificates,
    )
    try:
        if settings.truststore_location or settings.truststore_certificates:
            _load_truststore(ctx, settings)
        else:
            ctx.load_default_certs()
        if keystore_location or (keystore_certificate_chain and keystore_key):
            _load_keystore(ctx, settings)
    except (OSError, ssl.SSLError, ValueError) as e:
        raise ConfigError(f"cannot load the TLS key or trust store: {e}") from None
    return ctx


def principal_name(peercert: dict | None) -> str | None:
    """Kafka's default principal for a client certificate: its subject as RFC 2253 (`CN=alice,O=acme`)."""
    if not peercert:
        return None
    rdns = peercert.get("subject") or ()
    parts = []
    # RFC 2253 lists the most specific RDN first: the reverse of the certificate's order.
    for rdn in reversed(rdns):
        parts.append("+".join(f"{_RDN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(parts) or None


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def normalize_pem(text: str) -> str:
    """PEM blocks as OpenSSL reads them, from a properties value: Kafka accepts inline PEM whose line breaks were
    lost to `\\` continuations or written as `\\n`, so we re-wrap the base64 at 64 columns."""
    out = []
    for label, body in _PEM_BLOCK.findall(text.replace("\\n", "\n")):
        b64 = "".join(body.split())
        lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
        out.append(f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n")
    if not out:
        raise ValueError("no PEM block (-----BEGIN ...-----) in the inline value")
    return "".join(out)


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _restrict_versions(ctx: ssl.SSLContext, protocols: tuple[str, ...]) -> None:
    versions = sorted(_VERSIONS[p] for p in protocols if p in _VERSIONS)
    ctx.minimum_version = versions[0] if versions else ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = versions[-1] if versions else ssl.TLSVersion.TLSv1_3


def _load_keystore(ctx: ssl.SSLContext, tls: TlsSettings) -> None:
    password = tls.key_password or tls.keystore_password
    if tls.keystore_type == "PKCS12":
        if tls.keystore_location is None:
            raise ValueError("ssl.keystore.type=PKCS12 needs ssl.keystore.location")
        chain, key = _pkcs12_to_pem(tls.keystore_location.read_bytes(), tls.keystore_password)
        with _private_file(chain + key) as path:
            ctx.load_cert_chain(path)
        return
    if tls.keystore_certificate_chain and tls.keystore_key:
        pem = normalize_pem(tls.keystore_certificate_chain) + normalize_pem(tls.keystore_key)
        with _private_file(pem.encode()) as path:
            ctx.load_cert_chain(path, password=password)
        return
    assert tls.keystore_location is not None
    # A PEM key store is one file holding the private key and the certificate chain (Kafka's PEM key store file).
    ctx.load_cert_chain(str(tls.keystore_location), password=password)


def _load_truststore(ctx: ssl.SSLContext, tls: TlsSettings) -> None:
    if tls.truststore_certificates:
        ctx.load_verify_locations(cadata=normalize_pem(tls.truststore_certificates))
    if tls.truststore_location is None:
        return
    if tls.truststore_type == "PKCS12":
        from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

        store = pkcs12.load_pkcs12(tls.truststore_location.read_bytes(), _pw(tls.truststore_password))
        certs = [c.certificate for c in store.additional_certs]
        if store.cert is not None:
            certs.append(store.cert.certificate)
        ctx.load_verify_locations(cadata="".join(c.public_bytes(Encoding.PEM).decode() for c in certs))
        return
    ctx.load_verify_locations(cafile=str(tls.truststore_location))


def _pkcs12_to_pem(data: bytes, password: str | None) -> tuple[bytes, bytes]:
    # cryptography is only needed for PKCS12 key stores; PEM deployments do not import it.
    try:
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
            pkcs12,
        )
    except ImportError:  # pragma: no cover - depends on the installation
        raise ValueError("ssl.keystore.type=PKCS12 needs the cryptography package; use PEM instead") from None
    key, cert, extra = pkcs12.load_key_and_certificates(data, _pw(password))
    if key is None or cert is None:
        raise ValueError("the PKCS12 key store holds no private key and certificate")
    chain = b"".join(c.public_bytes(Encoding.PEM) for c in [cert, *extra])
    return chain, key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def _pw(password: str | None) -> bytes | None:
    return password.encode() if password else None


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="mover-tls-", suffix=".pem")
    try:
        os.write(fd, data)
        os.close(fd)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
