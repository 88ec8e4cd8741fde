"""Garbage against a running moverd: it keeps serving other connections and never dies of a request."""

from __future__ import annotations

import random
import socket
import struct
from pathlib import Path

from kafka.admin import NewTopic

from mover.testing.moverd import Moverd
from mover.testing.raw import RawClient
from mover.wire import API_BY_KEY, encode_request, join_chunks
from mover.wire.messages import (
    ALTER_REPLICA_LOG_DIRS,
    API_VERSIONS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_REPLICA_MOVES,
    INCREMENTAL_ALTER_CONFIGS,
    METADATA,
)
from tests.api.helpers import admin
from tests.wire.samples import sample_struct

# Per hostile connection: how long to wait for the daemon to answer or hang up before moving on (it may rightly
# wait for the rest of a truncated frame). Short, since most frames are answered or refused at once.
PEER_WAIT_S = 0.5
FRAMES = 300

# The admin APIs of mover/api plus ApiVersions. CreateTopics is left out: a random partition count is a legitimate,
# if huge, request (capped at Kafka's 10,000 per request, which still takes minutes to create), not garbage.
TARGETS = [API_VERSIONS.key, METADATA.key, DELETE_TOPICS.key, DESCRIBE_CONFIGS.key, ALTER_REPLICA_LOG_DIRS.key,
           DESCRIBE_LOG_DIRS.key, INCREMENTAL_ALTER_CONFIGS.key, DESCRIBE_REPLICA_MOVES.key]


def _hostile_frames(rng: random.Random) -> list[bytes]:
    frames = []
    for i in range(FRAMES):
        api = API_BY_KEY[rng.choice(TARGETS)]
        version = rng.randint(api.valid.lo, api.valid.hi)
        if i % 3 == 0:
            # Well-formed, random values: odd names, negative partitions, bogus paths, random config ops.
            body = sample_struct(rng, api.request, version)
            frames.append(join_chunks(encode_request(api, version, i, body, client_id="fuzz")))
            continue
        good = bytearray(join_chunks(encode_request(api, version, i, sample_struct(rng, api.request, version),
                                                     client_id="fuzz")))
        kind = rng.random()
        if kind < 0.6:
            for _ in range(rng.randint(1, 8)):  # flip bytes after the size prefix, keep the frame whole
                pos = rng.randrange(4, len(good))
                good[pos] = rng.randrange(256)
        elif kind < 0.8:
            del good[rng.randrange(5, len(good) + 1):]  # truncated body, size prefix fixed to match
        else:
            good = bytearray(struct.pack(">i", 0) + bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))))
        struct.pack_into(">i", good, 0, len(good) - 4)
        frames.append(bytes(good))
    return frames


def _throw(port: int, frame: bytes) -> None:
    """Send one frame; return once the daemon answered one whole frame, hung up, or kept quiet PEER_WAIT_S."""
    with socket.create_connection(("127.0.0.1", port), timeout=PEER_WAIT_S) as s:
        got = b""
        try:
            s.sendall(frame)
            while len(got) < 4 or len(got) < 4 + struct.unpack_from(">i", got)[0]:
                chunk = s.recv(65536)
                if not chunk:
                    return
                got += chunk
        except (TimeoutError, ConnectionError):
            pass


def test_random_and_mutated_frames_do_not_kill_the_daemon(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        with admin(d) as a:
            a.create_topics([NewTopic("witness", 2, 1)])
        frames = _hostile_frames(random.Random(20261123))
        with RawClient(d.port) as witness:
            for i, frame in enumerate(frames):
                _throw(d.port, frame)
                if i % 25 == 0:
                    _, body = witness.call(METADATA, 1, {"topics": [{"name": "witness"}]})
                    assert [len(t["partitions"]) for t in body["topics"]] == [2], body
                    assert d.proc is not None and d.proc.poll() is None, d.log()
            # The same connection, after all of it, and a fresh client too.
            _, body = witness.call(METADATA, 1, {"topics": [{"name": "witness"}]})
            assert [len(t["partitions"]) for t in body["topics"]] == [2]
        with admin(d) as a:
            assert "witness" in a.list_topics()
        assert d.proc is not None and d.proc.poll() is None
        # Handlers answered every well-formed request: none raised (the framework would log "handler").
        assert "Traceback" not in d.log(), d.log()
