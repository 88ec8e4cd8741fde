"""A fake broker on the wire: it listens, takes frames and answers each as its Kafka release does, quirks included
(ApiVersions at a version it does not know answered in v0, with 2.3's empty list; any other API at such a version
answered by closing the connection), or misbehaves as the test set it to (slow, refusing, far away, canned answers for
benches, alters carried out but unanswered). Kept apart from the APIs' answers so the hang-ups and misbehaviours, which
are what the tools' error paths are tested against, are in one place: every request passes `_answer`."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from mover.testing.fake_kafka.broker_state import REFUSE, SLOW
from mover.testing.fake_kafka.configs import BrokerConfigs
from mover.testing.fake_kafka.log_dirs import LogDirApis
from mover.testing.fake_kafka.reassignments import ControllerRequests
from mover.wire import API_BY_KEY, DecodeError, FrameDecoder, UnsupportedRequest, encode_response, join_chunks
from mover.wire.codec import decode_struct
from mover.wire.errors import ErrorCode
from mover.wire.header import decode_request_header
from mover.wire.messages import (
    ALTER_PARTITION_REASSIGNMENTS,
    ALTER_REPLICA_LOG_DIRS,
    API_VERSIONS,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_PARTITION_REASSIGNMENTS,
    METADATA,
)


class FakeBroker(LogDirApis, BrokerConfigs, ControllerRequests):
    """One broker of a FakeCluster, one thread per connection. Its fields (BrokerState's) are what a test sets."""

    def start(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self._sock = sock
        self.port = sock.getsockname()[1]
        threading.Thread(target=self._accept, args=(sock,), name=f"fake-kafka-{self.node_id}", daemon=True).start()

    def fence(self) -> None:
        """Down and fenced: what a real cluster shows of a broker that died ~10 s ago."""
        self.stop()
        self.fenced = True

    def stop(self) -> None:
        """Stop listening (the broker is down); connections already open are closed too."""
        if self._sock is not None:
            # close() alone leaves a thread blocked in accept() holding the socket open (and accepting); shutdown
            # wakes it.
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
            self._sock = None
        for conn in self.cluster.take_connections(self):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            self.cluster.keep_connection(self, conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                for frame in decoder.feed(data):
                    reply = self._answer(frame)
                    if reply is None:
                        return
                    conn.sendall(reply)
        except (OSError, DecodeError):
            return
        finally:
            conn.close()

    def _answer(self, frame: bytes) -> bytes | None:
        """The framed answer, or None to close the connection as the real broker does."""
        version_of = self.cluster.version
        try:
            header, api, offset = decode_request_header(frame, API_BY_KEY)
        except UnsupportedRequest as e:
            header, api, offset = e.header, None, 0
        key, version = header.api_key, header.api_version
        if key == API_VERSIONS.key:
            if api is None or not version_of.offers(key, version):
                own = [] if version_of.empty_api_keys_on_unknown_version else [
                    {"api_key": key, "min_version": version_of.apis[key][0], "max_version": version_of.apis[key][1]}]
                return join_chunks(encode_response(API_VERSIONS, 0, header.correlation_id, {
                    "error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_keys": own}))
            keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                    for k, (lo, hi) in sorted(version_of.apis.items())]
            return join_chunks(encode_response(API_VERSIONS, version, header.correlation_id,
                                               {"error_code": 0, "api_keys": keys}))
        if api is None or not version_of.offers(key, version):
            return None
        handler: Callable[[int, dict[str, Any]], dict[str, Any]] | None = {
            METADATA.key: self.cluster.metadata,
            DESCRIBE_LOG_DIRS.key: self.describe_log_dirs,
            ALTER_REPLICA_LOG_DIRS.key: self.alter_replica_log_dirs,
            INCREMENTAL_ALTER_CONFIGS.key: self.incremental_alter_configs,
            DESCRIBE_CONFIGS.key: self.describe_configs,
            LIST_PARTITION_REASSIGNMENTS.key: self.list_partition_reassignments,
            ALTER_PARTITION_REASSIGNMENTS.key: self.alter_partition_reassignments,
            ELECT_LEADERS.key: self.elect_leaders,
            19: self.cluster.logs.create_topics, 0: self.cluster.logs.produce, 1: self.cluster.logs.fetch,
            2: self.cluster.logs.list_offsets,
        }.get(key)
        if handler is None:
            return None
        if key == DESCRIBE_LOG_DIRS.key and self.behaviour == SLOW:
            self.cluster.released.wait()
            return None
        if key == DESCRIBE_LOG_DIRS.key and self.behaviour == REFUSE:
            return None
        if key == DESCRIBE_LOG_DIRS.key and self.latency:
            self.cluster.released.wait(self.latency)
        if key == DESCRIBE_LOG_DIRS.key and self.canned:
            cache_key = (version, bytes(frame[offset:]))
            reply = self._canned.get(cache_key)
            if reply is None:
                body = decode_struct(api.request, version, api.is_flexible(version), frame, offset)
                reply = self._canned[cache_key] = join_chunks(encode_response(api, version, 0,
                                                                             handler(version, body)))
            # Frame: int32 size, then the response header's int32 correlation id.
            return reply[:4] + header.correlation_id.to_bytes(4, "big", signed=True) + reply[8:]
        body = decode_struct(api.request, version, api.is_flexible(version), frame, offset)
        answer = handler(version, body)
        if key == ALTER_REPLICA_LOG_DIRS.key and self.unanswered_alters > 0:
            self.unanswered_alters -= 1
            return None
        return join_chunks(encode_response(api, version, header.correlation_id, answer))
