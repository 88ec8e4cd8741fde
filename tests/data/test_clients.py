"""Real clients, unmodified: kafka-python 3.0.12 and kcat (librdkafka) against a real moverd.

Every record acknowledged is consumed exactly once and in order, including while the partition's replica is moved
back and forth between the log dirs under the producer and the consumer.
"""

from __future__ import annotations

import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from mover.testing.moverd import Moverd
from mover.testing.raw import RawClient, move
from mover.testing.records import dir_of, read_records, segment_logs
from mover.wire.framing import LARGE_FRAME

# Bounds for client operations that take milliseconds here; they only bound a hang.
CLIENT_TIMEOUT_S = 30.0


def consume(bootstrap: str, topic: str, n: int, partition: int = 0) -> list[tuple[int, bytes]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      consumer_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            for recs in c.poll(500).values():
                got += [(r.offset, r.value) for r in recs]
        # A little longer: anything beyond n would be a duplicate.
        for recs in c.poll(300).values():
            got += [(r.offset, r.value) for r in recs]
        return got
    finally:
        c.close()


@pytest.mark.parametrize(
    "settings",
    [
        {},  # the default: idempotent, acks=all, InitProducerId first
        {"acks": 1, "enable_idempotence": False},
        {"acks": 0, "enable_idempotence": False},
    ],
    ids=["idempotent", "acks1", "acks0"],
)
def test_kafka_python_produce_consume(tmp_path: Path, settings: dict[str, Any]) -> None:
    n = 500
    with Moverd(tmp_path) as d:
        p = KafkaProducer(bootstrap_servers=d.bootstrap, linger_ms=2, **settings)
        futures = [p.send("kp", f"value-{i}".encode()) for i in range(n)]
        p.flush(CLIENT_TIMEOUT_S)
        metas = [f.get(CLIENT_TIMEOUT_S) for f in futures]
        p.close(CLIENT_TIMEOUT_S)
        if settings.get("acks") != 0:
            assert [m.offset for m in metas] == list(range(n))
        got = consume(d.bootstrap, "kp", n)
        assert got == [(i, f"value-{i}".encode()) for i in range(n)]


def test_kcat_produce_consume(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        lines = [f"line-{i}" for i in range(200)]
        r = subprocess.run(["kcat", "-b", d.bootstrap, "-P", "-t", "kc"], input="\n".join(lines).encode() + b"\n",
                           capture_output=True, timeout=CLIENT_TIMEOUT_S)
        assert r.returncode == 0, r.stderr
        r = subprocess.run(["kcat", "-b", d.bootstrap, "-C", "-t", "kc", "-o", "beginning", "-e", "-f", "%o %s\n"],
                           capture_output=True, timeout=CLIENT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        assert r.stdout.decode().splitlines() == [f"{i} {v}" for i, v in enumerate(lines)]
        # And kafka-python reads what librdkafka wrote.
        assert [v for _, v in consume(d.bootstrap, "kc", len(lines))] == [v.encode() for v in lines]


def test_kcat_big_batches_are_stored_in_place_and_read_back(tmp_path: Path) -> None:
    # librdkafka's default batching makes requests of up to 1 MB: frames the server assembles as its own bytearrays
    # and appends with their offsets written in place (docs/data-path.md). Two runs, so the second run's batches get
    # offsets after the first's: a base offset not written into the stored batch would show as offsets restarting.
    with Moverd(tmp_path) as d:
        values = [f"{i:08d}".encode() + b"v" * 292 for i in range(12000)]
        for half in (values[:6000], values[6000:]):
            r = subprocess.run(["kcat", "-b", d.bootstrap, "-P", "-t", "kb", "-p", "0"],
                               input=b"\n".join(half) + b"\n", capture_output=True, timeout=CLIENT_TIMEOUT_S)
            assert r.returncode == 0, r.stderr
        part = dir_of(d.dirs, "kb", 0) / "kb-0"
        sizes = []
        for path in segment_logs(part):
            data = path.read_bytes()
            pos = 0
            while pos < len(data):
                sizes.append(12 + struct.unpack_from(">i", data, pos + 8)[0])
                pos += sizes[-1]
        assert max(sizes) > LARGE_FRAME, sizes  # the path under test was taken
        assert read_records(part) == list(enumerate(values))  # CRCs checked, offsets 0..n-1, values exact
        r = subprocess.run(["kcat", "-b", d.bootstrap, "-C", "-t", "kb", "-o", "beginning", "-e", "-f", "%o %s\n"],
                           capture_output=True, timeout=CLIENT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == [f"{i} ".encode() + v for i, v in enumerate(values)]


def test_produce_and_consume_while_the_replica_moves_back_and_forth(tmp_path: Path) -> None:
    """An idempotent producer and an assign()ed consumer keep working through repeated swaps; the consumer sees
    every acknowledged record exactly once, in order."""
    # Small segments: each move copies several segments and the producer rolls new ones while it runs.
    with Moverd(tmp_path, props={"log.segment.bytes": 64 * 1024}) as d:
        producer = KafkaProducer(bootstrap_servers=d.bootstrap, linger_ms=1)
        producer.send("mv", b"first").get(CLIENT_TIMEOUT_S)
        home = dir_of(d.dirs, "mv", 0)
        stop = threading.Event()
        acked: list[int] = []
        errors: list[BaseException] = []

        def produce_loop() -> None:
            i = 0
            try:
                while not stop.is_set():
                    futs = [producer.send("mv", f"m-{i + k}".encode() * 10) for k in range(50)]
                    producer.flush(CLIENT_TIMEOUT_S)
                    for k, f in enumerate(futs):
                        assert f.get(CLIENT_TIMEOUT_S).offset == len(acked) + 1
                        acked.append(i + k)
                    i += 50
            except BaseException as e:  # surfaced in the main thread
                errors.append(e)

        consumer = KafkaConsumer(bootstrap_servers=d.bootstrap, enable_auto_commit=False, group_id=None,
                                 fetch_max_wait_ms=100)
        tp = TopicPartition("mv", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        seen: list[tuple[int, bytes]] = []

        def drain(ms: int = 50) -> None:
            for recs in consumer.poll(ms).values():
                seen.extend((r.offset, r.value) for r in recs)

        th = threading.Thread(target=produce_loop)
        th.start()
        swaps = 0
        try:
            with RawClient(d.port) as admin:
                other = next(p for p in d.dirs if p != home)
                for dest in [other, home] * 3:
                    move(admin, d.dirs, "mv", 0, dest)
                    swaps += 1
                    drain()
        finally:
            stop.set()
            th.join(CLIENT_TIMEOUT_S)
        assert not errors, errors
        producer.close(CLIENT_TIMEOUT_S)
        want = [(0, b"first")] + [(j + 1, f"m-{j}".encode() * 10) for j in acked]
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(seen) < len(want) and time.monotonic() < deadline:
            drain(200)
        drain(300)
        consumer.close()
        print(f"{swaps} swaps, {len(acked)} records acknowledged during them")
        assert swaps == 6 and len(acked) > 0
        assert seen == want


def test_the_harness_producer_lives_through_a_broker_gone_from_the_metadata(tmp_path: Path) -> None:
    """kafka-python 3.0.12's sender, asked to connect to a node the metadata no longer lists (a leader killed -9
    and gone), raises UnknownBrokerIdError where it does not catch it, before the poll that would fetch the new
    metadata: a loop that never recovers (mover.testing.producers.survive_unknown_brokers). The harness's producer
    takes such a node as not ready and asks for metadata again, and goes on producing."""
    from kafka.errors import UnknownBrokerIdError

    from mover.testing.producers import survive_unknown_brokers

    with Moverd(tmp_path) as d:
        plain = KafkaProducer(bootstrap_servers=d.bootstrap)
        try:
            plain.send("gone", b"first").get(CLIENT_TIMEOUT_S)
            with pytest.raises(UnknownBrokerIdError):  # the client's own behaviour, which the harness works around
                plain._sender._client.maybe_connect(999, wakeup=False)
        finally:
            plain.close(timeout=CLIENT_TIMEOUT_S)
        producer = survive_unknown_brokers(KafkaProducer(bootstrap_servers=d.bootstrap))
        try:
            producer.send("gone", b"second").get(CLIENT_TIMEOUT_S)
            assert producer._sender._client.maybe_connect(999, wakeup=False) is None
            assert producer._metadata._need_update  # the poll that follows fetches the metadata again
            assert producer.send("gone", b"third").get(CLIENT_TIMEOUT_S).offset == 2
        finally:
            producer.close(timeout=CLIENT_TIMEOUT_S)
