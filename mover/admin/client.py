"""A small blocking Kafka client over mover.wire's sans-IO codec, for the command-line tools.

    with Client("127.0.0.1:9092", timeout=10) as client:
        client.brokers                                   # {node_id: (host, port)} from Metadata
        conn = client.connection(0)                      # one connection per broker, versions negotiated
        conn.call(DESCRIBE_LOG_DIRS, {"topics": None})   # -> response dict; version min(ours, broker's)

Every failure a user can cause (nothing listening, a broker that hangs up, an API the broker lacks) is a
`ClientError` whose message is one line fit for stderr.

Security (`security=ClientSecurity`, from `--command-config`, mover/security/client_config.py): TLS wraps the socket
before the first byte (SSL, SASL_SSL); SASL runs after ApiVersions, as Kafka's clients do: SaslHandshake v1 with the
mechanism, then SaslAuthenticate rounds (KIP-152) carrying PLAIN's one token or SCRAM's two (scramp's client side).
When the broker announces a session lifetime (KIP-368, `connections.max.reauth.ms`), the connection re-authenticates
before the next request once 85% of it has passed, so a long `--progress --watch` or `mover-audit execute` keeps its
connections. A wrong password is `AuthenticationFailed` ("authentication failed: ..."); TLS failures say which check
failed and what to change.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterable
from typing import Any

from mover.config.broker import ConfigError
from mover.config.security import PLAIN
from mover.security.client_config import ClientSecurity
from mover.wire import Api, DecodeError, FrameDecoder, Versions, decode_response, encode_request, join_chunks
from mover.wire.errors import ErrorCode, error_name
from mover.wire.messages.core import API_VERSIONS, METADATA
from mover.wire.messages.security import SASL_AUTHENTICATE, SASL_HANDSHAKE

CLIENT_ID = "mover-log-dirs"
# Kafka's request.timeout.ms is 30 s; a CLI waiting that long on one broker is already broken, so less.
DEFAULT_TIMEOUT_S = 10.0
# Answers of an admin tool are small, but DescribeLogDirs of 10,000 partitions is ~1 MB; Kafka's
# socket.request.max.bytes bounds what a sane broker sends.
MAX_RESPONSE_BYTES = 104857600
RECV_CHUNK = 65536
# Re-authenticate once this share of the session lifetime the broker announced has passed (Kafka's clients pick a
# random point between 85% and 95%; the earliest leaves the most room for a slow round trip).
REAUTH_FRACTION = 0.85
PLAINTEXT_SECURITY = ClientSecurity()
# The first bytes of a TLS record (alert or handshake, TLS 1.x): what a TLS listener answers a plaintext request with.
_TLS_RECORD_STARTS = (b"\x15\x03", b"\x16\x03")


class ClientError(Exception):
    """Anything that went wrong talking to a broker; str() is one line."""


class UnsupportedApi(ClientError):
    """The broker does not offer the API (or no version we speak), or hung up on it as Kafka does."""


class RequestTimedOut(ClientError):
    """The broker took the request but sent no answer within the client's timeout (the connection is closed)."""


class ConnectionClosed(ClientError):
    """The broker closed the connection before answering."""


class AuthenticationFailed(ClientError):
    """The broker refused the SASL credentials (SASL_AUTHENTICATION_FAILED)."""


def parse_host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClientError(f"invalid broker address {text.strip()!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class BrokerConnection:
    """One TCP connection to one broker: ApiVersions first, then request/response with correlation ids."""

    def __init__(self, host: str, port: int, *, timeout: float = DEFAULT_TIMEOUT_S, name: str | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.name = name or f"{host}:{port}"
        self.timeout = timeout
        self.security = security or PLAINTEXT_SECURITY
        self._correlation_id = 0
        self._decoder = FrameDecoder(max_size=MAX_RESPONSE_BYTES)
        self._frames: list[bytes] = []
        self._received = False  # any byte from the broker yet (a TLS record as the first answer is recognised)
        self._answered = 0  # requests answered after ApiVersions (a close on the first hints at SASL)
        self._reauth_at: float | None = None
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except TimeoutError:
            raise ClientError(f"cannot connect to broker {self.name}: timed out after {timeout:g} s") from None
        except OSError as e:
            raise ClientError(f"cannot connect to broker {self.name}: {e.strerror or e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock: socket.socket | None = sock
        try:
            if self.security.uses_tls:
                self._sock = self._start_tls(sock)
            self.api_versions: dict[int, Versions] = self._negotiate()
            if self.security.uses_sasl:
                self._authenticate()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def supports(self, api: Api) -> bool:
        offered = self.api_versions.get(api.key)
        return offered is not None and bool(offered.intersect(api.valid))

    def version_for(self, api: Api) -> int:
        offered = self.api_versions.get(api.key)
        if offered is None:
            raise UnsupportedApi(f"broker {self.name} does not support {api.name} (api key {api.key})")
        common = offered.intersect(api.valid)
        if not common:
            raise UnsupportedApi(
                f"broker {self.name} supports {api.name} versions {offered.lo}-{offered.hi}, "
                f"this tool speaks {api.valid.lo}-{api.valid.hi}")
        return common.hi

    def call(self, api: Api, body: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        if version is None:
            version = self.version_for(api)
        if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
            self._authenticate()
        try:
            reply = self._roundtrip(api, version, body)
        except ConnectionClosed as e:
            if self._answered == 0 and not self.security.uses_sasl:
                # What a SASL listener does to a request before authentication (and nothing else does to the first).
                raise ConnectionClosed(f"{e} (if the listener is SASL_PLAINTEXT or SASL_SSL, set security.protocol "
                                       "and sasl.* in --command-config)") from None
            raise
        self._answered += 1
        return reply

    # ------------------------------------------------------------------ security

    def _start_tls(self, sock: socket.socket) -> ssl.SSLSocket:
        try:
            context = self.security.ssl_context()
        except ConfigError as e:
            raise ClientError(str(e)) from None
        try:
            return context.wrap_socket(sock, server_hostname=self.host)
        except ssl.SSLCertVerificationError as e:
            raise ClientError(f"TLS handshake with broker {self.name} failed: {_verify_hint(e)}") from None
        except TimeoutError:
            raise ClientError(f"TLS handshake with broker {self.name} timed out after {self.timeout:g} s "
                              "(is the listener PLAINTEXT or SASL_PLAINTEXT? security.protocol says "
                              f"{self.security.protocol})") from None
        except (ssl.SSLEOFError, ConnectionError) as e:
            raise ClientError(f"TLS handshake with broker {self.name} failed: the broker closed the connection "
                              f"({_reason(e)}); is the listener PLAINTEXT or SASL_PLAINTEXT? security.protocol "
                              f"says {self.security.protocol}") from None
        except ssl.SSLError as e:
            raise ClientError(f"TLS handshake with broker {self.name} failed: {_alert_hint(e)}") from None
        except OSError as e:
            raise ClientError(f"TLS handshake with broker {self.name} failed: {e.strerror or e}") from None

    def _authenticate(self) -> None:
        """SaslHandshake v1 + SaslAuthenticate (KIP-152); again on re-authentication (KIP-368)."""
        security = self.security
        mechanism, user = security.mechanism, security.username
        assert mechanism is not None and user is not None and security.password is not None
        if not (self.supports(SASL_HANDSHAKE) and self.supports(SASL_AUTHENTICATE)):
            raise ClientError(f"broker {self.name} does not offer SASL here (no SaslHandshake v1 and "
                              f"SaslAuthenticate in its ApiVersions): is the listener PLAINTEXT or SSL? "
                              f"security.protocol says {security.protocol}")
        if self.version_for(SASL_HANDSHAKE) < 1:
            # v0 sends the tokens as bare frames (Kafka before 1.0); only KIP-152's SaslAuthenticate is spoken here.
            raise ClientError(f"broker {self.name} offers only SaslHandshake v0 (Kafka before 1.0): this tool "
                              "authenticates with SaslHandshake v1 and SaslAuthenticate")
        reply = self._roundtrip(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if reply["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            raise ClientError(f"broker {self.name} does not enable SASL mechanism {mechanism} "
                              f"(enabled: {', '.join(reply['mechanisms']) or 'none'})")
        if reply["error_code"] != ErrorCode.NONE:
            raise ClientError(f"broker {self.name} refused SaslHandshake: {error_name(reply['error_code'])}")
        version = self.version_for(SASL_AUTHENTICATE)
        if mechanism == PLAIN:
            # RFC 4616: authzid (empty) NUL authcid NUL password.
            final = self._sasl_round(version, f"\0{user}\0{security.password}".encode())
        else:
            # Imported here: scramp costs ~90 ms of start-up that PLAINTEXT and PLAIN users need not pay.
            from scramp import ScramClient, ScramException

            scram = ScramClient([mechanism], user, security.password)
            first = self._sasl_round(version, scram.get_client_first().encode())
            try:
                scram.set_server_first(first["auth_bytes"].decode("utf-8", "replace"))
                final = self._sasl_round(version, scram.get_client_final().encode())
                # The broker proves it knows the credential too: a server that does not is an impostor.
                scram.set_server_final(final["auth_bytes"].decode("utf-8", "replace"))
            except ScramException as e:
                self.close()
                raise ClientError(f"broker {self.name} failed SCRAM's checks ({e}): it does not hold {user}'s "
                                  "credentials; refusing to talk to it") from None
        lifetime_ms = final.get("session_lifetime_ms") or 0
        self._reauth_at = time.monotonic() + lifetime_ms / 1000 * REAUTH_FRACTION if lifetime_ms > 0 else None

    def _sasl_round(self, version: int, token: bytes) -> dict[str, Any]:
        reply = self._roundtrip(SASL_AUTHENTICATE, version, {"auth_bytes": token})
        code = reply["error_code"]
        if code == ErrorCode.NONE:
            return reply
        self.close()
        message = (reply.get("error_message") or "").removeprefix("Authentication failed: ").strip()
        if code == ErrorCode.SASL_AUTHENTICATION_FAILED:
            raise AuthenticationFailed(f"authentication failed: broker {self.name} refused {self.security.username} "
                                       f"({self.security.mechanism}): {message or 'invalid credentials'}")
        raise ClientError(f"broker {self.name} answered SaslAuthenticate with {error_name(code)}"
                          + (f": {message}" if message else ""))

    # ------------------------------------------------------------------ internals

    def _negotiate(self) -> dict[int, Versions]:
        version = API_VERSIONS.valid.hi
        for _ in range(2):
            frame = self._exchange(API_VERSIONS, version, {
                "client_software_name": CLIENT_ID, "client_software_version": "1"})
            # The error code comes first in every version; a broker that does not know our version answers
            # with a v0 body (docs/kafka-compat.md#apiversions), so read it before choosing how to decode the rest.
            if len(frame) >= 6 and struct.unpack_from(">h", frame, 4)[0] == ErrorCode.UNSUPPORTED_VERSION:
                _, reply = self._decode(API_VERSIONS, 0, frame)
                theirs = [k["max_version"] for k in reply["api_keys"] if k["api_key"] == API_VERSIONS.key]
                if not theirs:
                    # Brokers before Kafka 2.4 (KIP-511) send an empty list: every broker speaks v0, so ask again
                    # in v0 as kafka-python and librdkafka do (docs/kafka-compat.md, ApiVersions).
                    if version == 0:
                        break
                    version = 0
                    continue
                if theirs[0] >= version:
                    break
                version = min(theirs[0], API_VERSIONS.valid.hi)
                continue
            _, reply = self._decode(API_VERSIONS, version, frame)
            if reply["error_code"] != ErrorCode.NONE:
                raise ClientError(f"broker {self.name} answered ApiVersions with {error_name(reply['error_code'])}")
            return {k["api_key"]: Versions(k["min_version"], k["max_version"]) for k in reply["api_keys"]}
        raise ClientError(f"broker {self.name} supports no ApiVersions version this tool speaks")

    def _roundtrip(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        frame = self._exchange(api, version, body)
        _, reply = self._decode(api, version, frame)
        return reply

    def _decode(self, api: Api, version: int, frame: bytes) -> tuple[Any, dict[str, Any]]:
        try:
            header, reply = decode_response(api, version, frame)
        except DecodeError as e:
            raise ClientError(f"broker {self.name} sent a malformed {api.name} v{version} response: {e}") from None
        if header.correlation_id != self._correlation_id:
            raise ClientError(f"broker {self.name} answered correlation id {header.correlation_id}, "
                              f"expected {self._correlation_id}")
        return header, reply

    def _exchange(self, api: Api, version: int, body: dict[str, Any]) -> bytes:
        if self._sock is None:
            raise ConnectionClosed(f"connection to broker {self.name} is closed")
        self._correlation_id += 1
        data = join_chunks(encode_request(api, version, self._correlation_id, body, client_id=CLIENT_ID))
        try:
            self._sock.sendall(data)
            return self._next_frame(api)
        except TimeoutError:
            self.close()
            raise RequestTimedOut(f"broker {self.name} did not answer {api.name} within {self.timeout:g} s") from None
        except ssl.SSLError as e:
            self.close()
            # TLS 1.3 reports a refused client certificate on the first read, not in the handshake.
            raise ConnectionClosed(f"broker {self.name} ended the TLS session on {api.name} v{version}: "
                                   f"{_alert_hint(e)}") from None
        except OSError as e:
            self.close()
            # A reset is how some brokers hang up on a request they refuse; treat it like EOF.
            raise ConnectionClosed(f"broker {self.name} closed the connection on {api.name} v{version}: "
                                   f"{e.strerror or e}") from None

    def _next_frame(self, api: Api) -> bytes:
        assert self._sock is not None
        while not self._frames:
            chunk = self._sock.recv(RECV_CHUNK)
            if not chunk:
                self.close()
                hint = ""
                if not self._received and not self.security.uses_tls:
                    hint = " (if the listener is SSL or SASL_SSL, set security.protocol in --command-config)"
                raise ConnectionClosed(f"broker {self.name} closed the connection instead of answering "
                                       f"{api.name}{hint}")
            if not self._received and not self.security.uses_tls and chunk[:2] in _TLS_RECORD_STARTS:
                self.close()
                raise ClientError(f"broker {self.name} answered with TLS: the listener is SSL or SASL_SSL; set "
                                  f"security.protocol in --command-config (it is {self.security.protocol})")
            self._received = True
            try:
                self._frames.extend(self._decoder.feed(chunk))
            except DecodeError as e:
                self.close()
                raise ClientError(f"broker {self.name} sent a bad frame: {e}") from None
        return self._frames.pop(0)


class Client:
    """Bootstrap through any of the given brokers, then one BrokerConnection per node id, opened on demand."""

    def __init__(self, bootstrap: str, *, timeout: float = DEFAULT_TIMEOUT_S,
                 security: ClientSecurity | None = None) -> None:
        self.timeout = timeout
        self.security = security
        addresses = [parse_host_port(a) for a in bootstrap.split(",") if a.strip()]
        if not addresses:
            raise ClientError("no bootstrap server given")
        self._connections: dict[int, BrokerConnection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.racks: dict[int, str | None] = {}
        self.cluster_id: str | None = None
        # Metadata's controller_id (-1 or absent: none known): where KIP-455's requests go
        # (mover/admin/reassign/kip455.py).
        self.controller_id: int | None = None
        # When each broker last took a request and did not answer it: such a broker is asked last next time.
        self.timed_out: dict[int, float] = {}
        errors: list[str] = []
        for host, port in addresses:
            try:
                conn = BrokerConnection(host, port, timeout=timeout, security=security)
            except AuthenticationFailed:
                raise  # the same credentials fail on every broker: say it once
            except ClientError as e:
                errors.append(str(e))
                continue
            try:
                self._bootstrap(conn)
            except ClientError as e:
                conn.close()
                errors.append(str(e))
                continue
            conn.close()
            return
        raise ClientError("; ".join(errors))

    def _bootstrap(self, conn: BrokerConnection) -> None:
        reply = conn.call(METADATA, {"topics": [], "allow_auto_topic_creation": False})
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in reply["brokers"]}
        self.racks = {b["node_id"]: b.get("rack") for b in reply["brokers"]}  # None: no broker.rack set
        self.cluster_id = reply["cluster_id"]
        self.controller_id = reply.get("controller_id")
        if not self.brokers:
            raise ClientError(f"broker {conn.name} advertised no brokers in its Metadata")

    def connection(self, node_id: int) -> BrokerConnection:
        conn = self._connections.get(node_id)
        if conn is None or conn._sock is None:
            if node_id not in self.brokers:
                raise ClientError(f"broker {node_id} is not in the cluster (brokers: {join_ids(self.brokers)})")
            host, port = self.brokers[node_id]
            conn = BrokerConnection(host, port, timeout=self.timeout, name=f"{node_id} ({host}:{port})",
                                    security=self.security)
            self._connections[node_id] = conn
        return conn

    def reconnect(self, node_id: int) -> BrokerConnection:
        old = self._connections.pop(node_id, None)
        if old is not None:
            old.close()
        return self.connection(node_id)

    def any_connection(self) -> BrokerConnection:
        return self.connection(min(self.brokers))

    def metadata(self, topics: list[str] | None) -> dict[str, Any]:
        """Metadata for `topics` (None = all), from any broker; never creates topics."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
        # Any broker answers Metadata: one that is down (it stopped; the cluster has not fenced it yet) must not
        # leave the tool blind while the others answer. An API the broker lacks is the same on every broker.
        brokers = sorted(self.brokers)
        for broker in brokers[:-1]:
            try:
                return self.connection(broker).call(METADATA, body)
            except UnsupportedApi:
                raise
            except ClientError:
                continue
        return self.connection(brokers[-1]).call(METADATA, body)

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def join_ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(ids))


def _reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError):
        return e.reason or e.strerror or str(e)
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _verify_hint(e: ssl.SSLCertVerificationError) -> str:
    """The broker's certificate was refused: which check, and the key that decides it."""
    message = e.verify_message or _reason(e)
    if e.verify_code in (2, 19, 20, 21):  # no issuer found, self-signed in chain, local issuer unknown
        return (f"certificate verify failed: {message} (the broker's certificate is not signed by a CA in "
                "ssl.truststore.location)")
    if e.verify_code == 10:
        return f"certificate verify failed: {message} (the broker's certificate has expired)"
    if e.verify_code in (62, 64) or "mismatch" in message:
        return (f"certificate verify failed: {message} (the certificate does not name the host connected to: "
                "fix the certificate or advertised.listeners, or set ssl.endpoint.identification.algorithm= "
                "to skip the host name check)")
    return f"certificate verify failed: {message}"


def _alert_hint(e: ssl.SSLError) -> str:
    reason = _reason(e)
    upper = reason.upper()
    if "CERTIFICATE_REQUIRED" in upper or ("HANDSHAKE_FAILURE" in upper and "ALERT" in upper):
        return (f"{reason} (the listener requires a client certificate: set ssl.keystore.location to one signed "
                "by a CA the broker trusts)")
    if "UNKNOWN_CA" in upper or "BAD_CERTIFICATE" in upper or "CERTIFICATE_EXPIRED" in upper:
        return f"{reason} (the broker refused the client certificate of ssl.keystore.location)"
    if "WRONG_VERSION_NUMBER" in upper or "RECORD_LAYER_FAILURE" in upper:
        return f"{reason} (not a TLS listener: is it PLAINTEXT or SASL_PLAINTEXT?)"
    if "UNSUPPORTED_PROTOCOL" in upper or "PROTOCOL_VERSION" in upper:
        return f"{reason} (no TLS version in common: this client speaks TLS 1.2 and 1.3)"
    return reason
