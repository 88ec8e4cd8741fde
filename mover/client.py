"""A small blocking Kafka client over mover.wire's sans-IO codec, for the command-line tools.

    with Client("127.0.0.1:9092", timeout=10) as client:
        client.brokers                                   # {node_id: (host, port)} from Metadata
        conn = client.connection(0)                      # one connection per broker, versions negotiated
        conn.call(DESCRIBE_LOG_DIRS, {"topics": None})   # -> response dict; version min(ours, broker's)

Every failure a user can cause (nothing listening, a broker that hangs up, an API the broker lacks) is a
`ClientError` whose message is one line fit for stderr.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mover.wire import Api, DecodeError, FrameDecoder, Versions, decode_response, encode_request, join_chunks
from mover.wire.errors import ErrorCode
from mover.wire.messages.core import API_VERSIONS, METADATA

if TYPE_CHECKING:
    from mover.security.client_config import ClientSecurity

CLIENT_ID = "mover-log-dirs"
# Kafka's request.timeout.ms is 30 s; a CLI waiting that long on one broker is already broken, so less.
DEFAULT_TIMEOUT_S = 10.0
# Answers of an admin tool are small, but DescribeLogDirs of 10,000 partitions is ~1 MB; Kafka's
# socket.request.max.bytes bounds what a sane broker sends.
MAX_RESPONSE_BYTES = 104857600
RECV_CHUNK = 65536


class ClientError(Exception):
    """Anything that went wrong talking to a broker; str() is one line."""


class UnsupportedApi(ClientError):
    """The broker does not offer the API (or no version we speak), or hung up on it as Kafka does."""


class ConnectionClosed(ClientError):
    """The broker closed the connection before answering."""


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
        self._correlation_id = 0
        self._decoder = FrameDecoder(max_size=MAX_RESPONSE_BYTES)
        self._frames: list[bytes] = []
        try:
            self._sock: socket.socket | None = socket.create_connection((host, port), timeout=timeout)
        except TimeoutError:
            raise ClientError(f"cannot connect to broker {self.name}: timed out after {timeout:g} s") from None
        except OSError as e:
            raise ClientError(f"cannot connect to broker {self.name}: {e.strerror or e}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if security is not None and security.uses_tls:
            try:
                self._sock = security.wrap(self._sock, host)
            except (ssl.SSLError, OSError) as e:
                self.close()
                reason = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
                raise ClientError(f"TLS handshake with broker {self.name} failed: {reason}") from None
        self.api_versions: dict[int, Versions] = self._negotiate()
        if security is not None and security.uses_sasl:
            from mover.security.client_config import AuthenticationError

            try:
                security.authenticate(self.call)
            except AuthenticationError as e:
                self.close()
                raise ClientError(f"authentication with broker {self.name} failed: {e}") from None

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
        return self._roundtrip(api, version, body)

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
            raise ClientError(f"broker {self.name} did not answer {api.name} within {self.timeout:g} s") from None
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
                raise ConnectionClosed(f"broker {self.name} closed the connection instead of answering {api.name}")
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
        self.cluster_id: str | None = None
        errors: list[str] = []
        for host, port in addresses:
            try:
                conn = BrokerConnection(host, port, timeout=timeout, security=security)
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
        self.cluster_id = reply["cluster_id"]
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
        return self.any_connection().call(METADATA, body)

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


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
