"""Consume throughput from a real moverd against reading the same segment files straight from disk.

A partition of --mib MiB (1 KiB records in 512 KiB batches) is written through raw Produce requests. Then:
1. disk: read the partition's .log files in 1 MiB chunks (the ceiling: no protocol, no socket);
2. loopback sendfile: the same files sent with os.sendfile over a loopback TCP socket to a client that receives
   them as the raw Fetch client does (a fresh FETCH_BYTES buffer each time): the ceiling for that client with no
   protocol at all, so "raw Fetch / loopback" is the share of it the daemon delivers;
3. raw Fetch: a blocking-socket client fetching 8 MiB per request and discarding the bytes (the daemon's path:
   Fetch handling, os.sendfile from the segment file, loopback TCP);
4. kafka-python: a KafkaConsumer with assign() reading every record (a real client; its own decoding dominates).
Prints MB/s of each and the ratios to the disk read and to the loopback ceiling.
Warm page cache throughout (the files were just written), so this compares software paths, not devices.
Usage: python bench/consume_vs_disk.py [--mib 256]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaConsumer, TopicPartition  # noqa: E402

from bench.common import bench_root  # noqa: E402
from mover.testing.batches import make_batch  # noqa: E402
from mover.testing.moverd import Moverd  # noqa: E402
from mover.testing.raw import (  # noqa: E402
    RawClient,  # noqa: E402
    fetch_partitions,
    produce,
)
from mover.testing.records import dir_of  # noqa: E402
from mover.wire import decode_response  # noqa: E402
from mover.wire.messages import FETCH  # noqa: E402

TOPIC = "consume"
FETCH_BYTES = 8 * 2**20  # per-partition limit of each raw fetch; kafka-python's default fetch_max_bytes is 50 MiB
READ_CHUNK = 2**20  # the disk side's read size: large enough that syscalls do not dominate


def disk_read(partition_dir: Path) -> int:
    total = 0
    for path in sorted(partition_dir.glob("*.log")):
        fd = os.open(path, os.O_RDONLY)
        try:
            while chunk := os.read(fd, READ_CHUNK):
                total += len(chunk)
        finally:
            os.close(fd)
    return total


def loopback_sendfile(partition_dir: Path) -> int:
    """Send the .log files over loopback with os.sendfile, as the daemon does, with no protocol at all."""
    paths = sorted(partition_dir.glob("*.log"))
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def send() -> None:
            conn, _ = server.accept()
            with conn:
                for path in paths:
                    with open(path, "rb") as f:
                        size, sent = os.fstat(f.fileno()).st_size, 0
                        while sent < size:
                            sent += os.sendfile(conn.fileno(), f.fileno(), sent, size - sent)

        sender = threading.Thread(target=send)
        sender.start()
        total = 0
        with socket.create_connection(("127.0.0.1", port)) as c:
            while True:
                # A fresh response-sized buffer, as a client holding one fetch response at a time has: page
                # faults on new memory bound loopback throughput as much as the sender does.
                view = memoryview(bytearray(FETCH_BYTES))
                got = 0
                while got < FETCH_BYTES and (n := c.recv_into(view[got:])):
                    got += n
                total += got
                if got < FETCH_BYTES:
                    break
        sender.join()
    return total


def _recv_frame(sock: socket.socket) -> bytearray:
    """One response frame, received straight into its buffer (recv_into): the client must not be the bottleneck
    of a measurement of the server."""
    head = bytearray(4)
    view = memoryview(head)
    got = 0
    while got < 4:
        got += sock.recv_into(view[got:])
    size = int.from_bytes(head, "big")
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        assert n, "connection closed"
        got += n
    return buf


def raw_fetch(c: RawClient, end_offset: int) -> int:
    """Fetch everything; counts record bytes. Offsets come from the batch headers (8-byte base offset, then the
    4-byte length), so no record is decoded."""
    offset = 0
    total = 0
    while offset < end_offset:
        c.send(c.request_bytes(FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 0x7FFFFFFF, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": FETCH_BYTES}]}]}))
        _, resp = decode_response(FETCH, 12, _recv_frame(c.sock))
        p = fetch_partitions(resp)[(TOPIC, 0)]
        data = p["records"]
        assert p["error_code"] == 0 and data, p["error_code"]
        total += len(data)
        pos = 0
        while pos + 61 <= len(data):
            base = int.from_bytes(data[pos:pos + 8], "big")
            length = int.from_bytes(data[pos + 8:pos + 12], "big")
            last_delta = int.from_bytes(data[pos + 23:pos + 27], "big")
            offset = base + last_delta + 1
            pos += 12 + length
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    args = ap.parse_args()
    root = bench_root()
    try:
        with Moverd(root) as d:
            chunk = make_batch([b"x" * 1024] * 512)
            with RawClient(d.port) as c:
                for _ in range(args.mib * 2):
                    assert produce(c, TOPIC, 0, chunk, acks=1)["error_code"] == 0
                end = produce(c, TOPIC, 0, make_batch([b"x" * 1024]), acks=1)["base_offset"] + 1
            pdir = dir_of(d.dirs, TOPIC, 0) / f"{TOPIC}-0"

            t = time.perf_counter()
            n_disk = disk_read(pdir)
            disk = n_disk / (time.perf_counter() - t) / 1e6
            print(f"disk read:   {disk:8.0f} MB/s ({n_disk / 1e6:.0f} MB)")

            t = time.perf_counter()
            n_lo = loopback_sendfile(pdir)
            lo = n_lo / (time.perf_counter() - t) / 1e6
            print(f"loopback sendfile: {lo:8.0f} MB/s ({n_lo / 1e6:.0f} MB)  ratio to disk {lo / disk:.2f}")

            with RawClient(d.port) as c:
                t = time.perf_counter()
                n_raw = raw_fetch(c, end)
                raw = n_raw / (time.perf_counter() - t) / 1e6
            print(f"raw Fetch:   {raw:8.0f} MB/s ({n_raw / 1e6:.0f} MB)  ratio to disk {raw / disk:.2f}, "
                  f"to loopback {raw / lo:.2f}")

            consumer = KafkaConsumer(bootstrap_servers=d.bootstrap, enable_auto_commit=False, group_id=None,
                                     max_partition_fetch_bytes=FETCH_BYTES)
            tp = TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            t = time.perf_counter()
            n_records = 0
            n_bytes = 0
            while n_records < end:
                for recs in consumer.poll(1000, max_records=100000).values():
                    n_records += len(recs)
                    n_bytes += sum(len(r.value) for r in recs)
            kp = n_bytes / (time.perf_counter() - t) / 1e6
            consumer.close()
            print(f"kafka-python:{kp:8.0f} MB/s of values ({n_records} records)  ratio to disk {kp / disk:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
