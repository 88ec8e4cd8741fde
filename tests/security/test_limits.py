"""Abuse limits: connections per address and in total, idle connections, and the memory held by requests being
read (queued.max.request.bytes)."""

from __future__ import annotations

import select
import socket
import struct
from pathlib import Path

from mover.testing.batches import make_batch
from mover.testing.certs import Issued, Pki
from mover.testing.wait import wait_for
from mover.wire.messages import API_VERSIONS, PRODUCE
from tests.security.helpers import Raw, SecureBroker

VERSIONS = {"client_software_name": "t", "client_software_version": "1"}


def answers(raw: Raw) -> bool:
    return raw.call(API_VERSIONS, 3, VERSIONS)["error_code"] == 0


def test_connection_limits(tmp_path: Path, pki: Pki, server_cert: Issued) -> None:
    b = SecureBroker(tmp_path, pki, server_cert, props={
        "max.connections.per.ip": 3,
        "max.connections.per.ip.overrides": "10.9.9.9:100",
        "connections.max.idle.ms": 2000,
    })
    with b:
        port = b.ports["PLAINTEXT"]
        held = [Raw(port) for _ in range(3)]
        for r in held:
            assert answers(r)
        with Raw(port) as extra:
            assert extra.closed_by_peer()  # over max.connections.per.ip: closed right after accept
        assert "too many connections from 127.0.0.1" in b.d.log()
        held.pop().close()
        # The slot comes back once the broker has seen the close.
        wait_for(lambda: _answers_fresh(port), message="a connection accepted again after one closed")
        for r in held:
            r.close()
        # connections.max.idle.ms: a silent connection is closed by the broker.
        idle = wait_for(lambda: _accepted(port), message="a connection accepted once the others closed")
        with idle:
            assert idle.closed_by_peer()
        assert "idle for" in b.d.log()
        assert b.alive()


def _accepted(port: int) -> Raw | None:
    """A connection the broker accepted and answered (None when it was refused, e.g. closes not yet seen)."""
    raw = Raw(port)
    try:
        if answers(raw):
            return raw
    except (OSError, AssertionError):
        pass
    raw.close()
    return None


def _answers_fresh(port: int) -> bool:
    try:
        with Raw(port) as r:
            return answers(r)
    except (OSError, AssertionError):
        return False


def test_max_connections_makes_new_ones_wait(tmp_path: Path, pki: Pki, server_cert: Issued) -> None:
    b = SecureBroker(tmp_path, pki, server_cert, props={"max.connections": 2})
    with b:
        port = b.ports["PLAINTEXT"]
        a, c = Raw(port), Raw(port)
        assert answers(a) and answers(c)
        waiting = Raw(port)  # the kernel completes the TCP handshake; moverd does not accept it yet
        waiting.send_request(API_VERSIONS, 3, VERSIONS)
        ready, _, _ = select.select([waiting.sock], [], [], 0.5)
        assert not ready, "a third connection was served while max.connections=2 were open"
        a.close()
        assert waiting.recv_frame() is not None  # served as soon as a slot freed
        for r in (c, waiting):
            r.close()


def test_partial_requests_share_a_bounded_budget(tmp_path: Path, pki: Pki, server_cert: Issued) -> None:
    budget = 1 << 20
    b = SecureBroker(tmp_path, pki, server_cert, props={"queued.max.request.bytes": budget})
    with b:
        port = b.ports["PLAINTEXT"]
        # A frame larger than the whole budget can never be read: closed on its size prefix.
        with Raw(port) as huge:
            huge.sock.sendall(struct.pack(">i", budget + 1))
            assert huge.closed_by_peer()
        assert "exceeds queued.max.request.bytes" in b.d.log()
        # One connection holds most of the budget with a partial frame...
        holder = socket.create_connection(("127.0.0.1", port))
        holder.sendall(struct.pack(">i", 900 * 1024) + b"\0" * 1024)
        # ...so another's 200 KiB request waits for it, unread, rather than growing memory.
        with Raw(port) as other:
            other.send_request(PRODUCE, 7, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": "budget", "partition_data": [{"index": 0, "records": make_batch([b"x" * 200 * 1024])}]}]})
            ready, _, _ = select.select([other.sock], [], [], 0.5)
            assert not ready, "a request was read past queued.max.request.bytes"
            holder.close()  # the partial frame's reservation is released with its connection
            frame = other.recv_frame()
            assert frame is not None
        assert b.alive()
