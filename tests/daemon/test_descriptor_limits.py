"""A real moverd under a low descriptor limit (prlimit): a process limit fails requests, never takes a dir offline,
and partitions past the limit work because idle files are closed and reopened on demand."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from mover.testing.batches import make_batch
from mover.testing.moverd import Moverd
from mover.testing.raw import RawClient, fetch, fetch_partitions, produce_many, records_of
from mover.testing.wait import wait_for
from mover.wire.messages import CREATE_TOPICS, DESCRIBE_LOG_DIRS, METADATA

KEYS_CREATE_ERROR = 56  # KAFKA_STORAGE_ERROR: retriable; the message names the limit


def _prlimit(n: int) -> tuple[str, ...]:
    return ("prlimit", f"--nofile={n}:{n}", "--")


def _topic(name: str, partitions: int) -> dict[str, Any]:
    return {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}


def _dirs_online(c: RawClient) -> list[int]:
    body = c.call(DESCRIBE_LOG_DIRS, 1, {"topics": None})[1]
    return [r["error_code"] for r in body["results"]]


def test_idle_connections_at_the_limit_fail_a_create_and_leave_dirs_online(tmp_path: Path) -> None:
    with Moverd(tmp_path, prefix=_prlimit(1024)) as d, RawClient(d.port) as c:
        idle: list[socket.socket] = []
        try:
            for _ in range(1100):
                idle.append(socket.create_connection(("127.0.0.1", d.port)))
            # The daemon accepts until its table is full; the rest wait in the listen backlog.
            wait_for(lambda: "accept failed" in d.log(), message="the daemon to run out of descriptors")
            body = c.call(CREATE_TOPICS, 4, {"topics": [_topic("big", 200)], "timeout_ms": 60000,
                                             "validate_only": False})[1]
            (result,) = body["topics"]
            assert result["error_code"] == KEYS_CREATE_ERROR
            assert "EMFILE" in result["error_message"] and "open file limit" in result["error_message"]
            assert _dirs_online(c) == [0, 0]
            assert "RLIMIT_NOFILE" in d.log()
            assert "is now offline" not in d.log()
        finally:
            for s in idle:
                s.close()
        # Once the idle clients go, the daemon accepts again and the same create works.
        wait_for(lambda: _try_metadata(d), message="the daemon to accept a new connection")
        with RawClient(d.port) as c2:
            body = c2.call(CREATE_TOPICS, 4, {"topics": [_topic("after", 20)], "timeout_ms": 60000,
                                              "validate_only": False})[1]
            assert [t["error_code"] for t in body["topics"]] == [0]
            assert _dirs_online(c2) == [0, 0]
        assert d.log().count("accept failed") == 1  # one line per streak, not one a second


def _try_metadata(d: Moverd) -> bool:
    try:
        with RawClient(d.port) as c:
            c.sock.settimeout(2)
            c.call(METADATA, 1, {"topics": []})
        return True
    except OSError:
        return False


def test_more_partitions_than_descriptors(tmp_path: Path) -> None:
    n = 600  # three files each when written to: far past a limit of 256
    with Moverd(tmp_path, prefix=_prlimit(256)) as d:
        with RawClient(d.port) as c:
            for i in range(0, n, 200):
                body = c.call(CREATE_TOPICS, 4, {"topics": [_topic(f"t{i}", 200)], "timeout_ms": 60000,
                                                 "validate_only": False})[1]
                assert [t["error_code"] for t in body["topics"]] == [0]
            parts = [(f"t{i}", p) for i in range(0, n, 200) for p in range(200)]
            for _round in range(2):
                got = produce_many(c, [(t, p, make_batch([f"{t}/{p}".encode() * 300])) for t, p in parts])
                assert {r["error_code"] for r in got.values()} == {0}
            # Every partition's files were closed by the LRU since its write: fetches reopen them.
            resp = fetch_partitions(fetch(c, [(t, p, 0) for t, p in parts], max_bytes=1 << 30))
            for t, p in parts:
                values = [v for _, v in records_of(resp[(t, p)]["records"])]
                assert values == [f"{t}/{p}".encode() * 300] * 2
            assert _dirs_online(c) == [0, 0]
        d.restart()
        with RawClient(d.port) as c:
            assert len(c.call(METADATA, 1, {"topics": None})[1]["topics"]) == 3
        assert "open file limit 256 is below" in d.log()
