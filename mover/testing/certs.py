"""Real X.509 certificates for TLS tests and benches: a CA, server and client certificates, expired and untrusted
ones, written as PEM (and PKCS12) files. Uses `cryptography` (a test dependency).

    pki = Pki(tmp_path)
    server = pki.issue("localhost", server=True)     # Issued(cert=..., key=..., keystore=... (key + chain))
    client = pki.issue("alice")
    pki.ca_file                                      # the trust store
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path
    keystore: Path  # key + certificate chain in one PEM file (Kafka's PEM key store file)
    pkcs12: Path
    cert_pem: str
    key_pem: str


class Pki:
    def __init__(self, directory: Path, name: str = "Test CA") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        slug = name.lower().replace(" ", "-")
        self.ca_file = self.dir / f"{slug}.pem"
        self.ca_pem = self._cert.public_bytes(serialization.Encoding.PEM).decode()
        self.ca_file.write_text(self.ca_pem)

    def issue(self, common_name: str, *, server: bool = False, expired: bool = False,
              organization: str | None = None, password: str | None = None) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        if expired:
            start, end = now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)
        else:
            start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=10)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(
                x509.SubjectAlternativeName(names),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        else:
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        slug = f"{common_name}{'-expired' if expired else ''}".replace(" ", "-")
        cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode() + self.ca_pem
        enc = (serialization.BestAvailableEncryption(password.encode()) if password
               else serialization.NoEncryption())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc).decode()
        cert_path, key_path, store_path = (self.dir / f"{slug}.crt", self.dir / f"{slug}.key",
                                           self.dir / f"{slug}.keystore.pem")
        cert_path.write_text(cert_pem)
        key_path.write_text(key_pem)
        store_path.write_text(key_pem + cert_pem)
        p12 = self.dir / f"{slug}.p12"
        p12.write_bytes(pkcs12.serialize_key_and_certificates(
            common_name.encode(), key, cert, [self._cert],
            serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption(),
        ))
        return Issued(cert_path, key_path, store_path, p12, cert_pem, key_pem)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
