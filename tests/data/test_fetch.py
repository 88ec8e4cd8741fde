"""Fetch and ListOffsets against a real moverd with raw requests; a failed log dir under a DAC-less daemon."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from mover.testing.batches import make_batch
from mover.testing.broker import InProcessBroker
from mover.testing.moverd import SETPRIV, Moverd
from mover.testing.raw import RawClient, fetch, fetch_partitions, list_offsets, produce, produce_many, records_of
from mover.testing.records import dir_of
from mover.testing.wait import wait_for

# A long poll that returns this long after the produce woke it did not wait for max_wait_ms (5 s): a generous
# bound that a busy machine still meets, not a latency target.
WOKEN_WITHIN_S = 4.0


def test_fetch_reads_what_was_produced(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        for i in range(5):
            assert produce(c, "f", 0, make_batch([f"{i}a".encode(), f"{i}b".encode()]))["error_code"] == 0
        for version in (4, 5, 7, 11, 12):
            p = fetch_partitions(fetch(c, [("f", 0, 0)], version=version))[("f", 0)]
            assert p["error_code"] == 0 and p["high_watermark"] == 10 and p["last_stable_offset"] == 10
            assert [o for o, _ in records_of(p["records"])] == list(range(10))
        p = fetch_partitions(fetch(c, [("f", 0, 5)]))[("f", 0)]
        # Whole batches: the batch holding offset 5 starts at 4; clients skip what they did not ask for.
        assert [o for o, _ in records_of(p["records"])] == list(range(4, 10))
        assert p["log_start_offset"] == 0
        # At the log end: no records, no error.
        p = fetch_partitions(fetch(c, [("f", 0, 10)]))[("f", 0)]
        assert p["error_code"] == 0 and not p["records"]
        # read_committed: the same records, an empty aborted transaction list (no transactions here).
        p = fetch_partitions(fetch(c, [("f", 0, 0)], isolation_level=1))[("f", 0)]
        assert len(records_of(p["records"])) == 10 and p["aborted_transactions"] == []


def test_fetch_errors(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        produce(c, "e", 0, make_batch([b"x"]))
        parts = fetch_partitions(fetch(c, [("e", 0, 2), ("e", 1, 0), ("nope", 0, 0), ("e", 0, -1)]))
        assert parts[("e", 0)]["error_code"] == 1  # OFFSET_OUT_OF_RANGE (the dict keeps the last of e-0)
        assert parts[("e", 1)]["error_code"] == 3
        assert parts[("nope", 0)]["error_code"] == 3
        assert fetch_partitions(fetch(c, [("e", 0, 2)]))[("e", 0)]["error_code"] == 1
        # An incremental fetch of a session never created.
        resp = fetch(c, [("e", 0, 0)], session_id=1234, session_epoch=3)
        assert resp["error_code"] == 70 and resp["responses"] == []
        # Sessionless: a request to create a session (epoch 0) is served in full, with session id 0.
        resp = fetch(c, [("e", 0, 0)], session_epoch=0)
        assert resp["error_code"] == 0 and resp["session_id"] == 0
        # An error answers at once, even with max_wait_ms and min_bytes to wait for.
        t0 = time.monotonic()
        fetch(c, [("e", 0, 0), ("nope", 0, 0)], max_wait_ms=5000, min_bytes=1 << 20)
        assert time.monotonic() - t0 < WOKEN_WITHIN_S


def test_max_bytes_and_partition_max_bytes(tmp_path: Path) -> None:
    with Moverd(tmp_path, props={"num.partitions": 2}) as d, RawClient(d.port) as c:
        one = make_batch([b"x" * 1000])
        for _ in range(10):
            produce_many(c, [("b", 0, one), ("b", 1, one)])
        size = len(one)
        # partition_max_bytes of 2.5 batches: two whole batches per partition.
        parts = fetch_partitions(fetch(c, [("b", 0, 0), ("b", 1, 0)], partition_max_bytes=size * 5 // 2))
        assert [len(records_of(parts[("b", p)]["records"])) for p in (0, 1)] == [2, 2]
        # The response limit: three batches in all, the first partition served first.
        parts = fetch_partitions(fetch(c, [("b", 0, 0), ("b", 1, 0)], max_bytes=size * 3))
        assert [len(records_of(parts[("b", p)]["records"])) for p in (0, 1)] == [3, 0]
        # Limits smaller than one batch still return one batch to the first partition with data (KIP-74).
        parts = fetch_partitions(fetch(c, [("b", 0, 0), ("b", 1, 0)], max_bytes=10, partition_max_bytes=10))
        assert [len(records_of(parts[("b", p)]["records"])) for p in (0, 1)] == [1, 0]


def test_long_poll_wakes_on_produce(tmp_path: Path) -> None:
    # In-process, so the test sees the broker's fetch purgatory: it produces only once the fetch has parked.
    with InProcessBroker(tmp_path) as b, RawClient(b.port) as c, RawClient(b.port) as producer:
        purgatory = b.broker.fetch_purgatory
        produce(producer, "lp", 0, make_batch([b"first"]))
        # Nothing new: the fetch waits max_wait_ms, then answers empty.
        t0 = time.monotonic()
        p = fetch_partitions(fetch(c, [("lp", 0, 1)], max_wait_ms=300, min_bytes=1))[("lp", 0)]
        assert time.monotonic() - t0 >= 0.25 and not p["records"]
        assert purgatory.parked == 0
        # A produce during the wait answers it at once.
        got: dict[str, object] = {}

        def poll() -> None:
            t = time.monotonic()
            got["resp"] = fetch(c, [("lp", 0, 1)], max_wait_ms=5000, min_bytes=1)
            got["returned"] = time.monotonic() - t

        th = threading.Thread(target=poll)
        th.start()
        wait_for(lambda: purgatory.parked == 1, message="the fetch to park in the purgatory")
        t_produce = time.monotonic()
        assert produce(producer, "lp", 0, make_batch([b"second"]))["base_offset"] == 1
        th.join(10)
        assert not th.is_alive()
        # It returned soon after the produce, not at max_wait_ms (5 s after it started).
        assert time.monotonic() - t_produce < WOKEN_WITHIN_S
        assert float(got["returned"]) < WOKEN_WITHIN_S
        assert purgatory.parked == 0
        p = fetch_partitions(got["resp"])[("lp", 0)]  # type: ignore[arg-type]
        assert records_of(p["records"]) == [(1, b"second")]


def test_min_bytes_waits_for_enough(tmp_path: Path) -> None:
    with InProcessBroker(tmp_path) as b, RawClient(b.port) as c, RawClient(b.port) as producer:
        purgatory = b.broker.fetch_purgatory
        produce(producer, "mb", 0, make_batch([b"seed"]))
        small = make_batch([b"s"])
        done = threading.Event()
        got: dict[str, object] = {}

        def poll() -> None:
            got["resp"] = fetch(c, [("mb", 0, 1)], max_wait_ms=10000, min_bytes=len(small) * 3)
            done.set()

        th = threading.Thread(target=poll)
        th.start()
        wait_for(lambda: purgatory.parked == 1, message="the fetch to park")
        for n in range(2):
            parkings = purgatory.parked_total
            produce(producer, "mb", 0, small)
            # Woken, it reads again, finds too few bytes and parks again: it keeps waiting.
            wait_for(lambda parkings=parkings: purgatory.parked_total > parkings and purgatory.parked == 1,
                     message=f"the fetch to park again after small batch {n + 1}")
            assert not done.is_set()
        t0 = time.monotonic()
        produce(producer, "mb", 0, small)
        assert done.wait(WOKEN_WITHIN_S)
        assert time.monotonic() - t0 < WOKEN_WITHIN_S
        th.join()
        p = fetch_partitions(got["resp"])[("mb", 0)]  # type: ignore[arg-type]
        assert [o for o, _ in records_of(p["records"])] == [1, 2, 3]


def test_list_offsets(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        base = 1_700_000_000_000
        produce(c, "lo", 0, make_batch([b"a", b"b"], timestamps=[base, base + 10]))
        produce(c, "lo", 0, make_batch([b"c", b"d"], timestamps=[base + 50, base + 20]))
        for version in (1, 2, 4, 6, 7):
            assert list_offsets(c, "lo", 0, -2, version=version)["offset"] == 0
            latest = list_offsets(c, "lo", 0, -1, version=version)
            assert (latest["error_code"], latest["offset"], latest["timestamp"]) == (0, 4, -1)
        by_ts = list_offsets(c, "lo", 0, base + 5)
        assert (by_ts["offset"], by_ts["timestamp"]) == (1, base + 10)
        by_ts = list_offsets(c, "lo", 0, base + 15)
        assert (by_ts["offset"], by_ts["timestamp"]) == (2, base + 50)
        assert list_offsets(c, "lo", 0, base)["offset"] == 0
        none = list_offsets(c, "lo", 0, base + 1000)
        assert (none["error_code"], none["offset"], none["timestamp"]) == (0, -1, -1)
        top = list_offsets(c, "lo", 0, -3)  # v7: the record with the largest timestamp
        assert (top["offset"], top["timestamp"]) == (2, base + 50)
        assert list_offsets(c, "lo", 3, -1)["error_code"] == 3
        assert list_offsets(c, "missing", 0, -1)["error_code"] == 3


def test_failed_dir_answers_56_while_the_other_partition_works(tmp_path: Path) -> None:
    props = {"log.dir.health.check.interval.ms": 50, "num.partitions": 2}
    with Moverd(tmp_path, props=props, prefix=SETPRIV) as d, RawClient(d.port) as c:
        produce_many(c, [("x", 0, make_batch([b"x0"])), ("x", 1, make_batch([b"x1"]))])
        homes = {p: dir_of(d.dirs, "x", p) for p in (0, 1)}
        assert homes[0] != homes[1], "auto-creation spreads the two partitions over the two dirs"
        bad = homes[1]
        os.chmod(bad, 0)
        try:
            def failed() -> bool:
                return produce(c, "x", 1, make_batch([b"probe"]))["error_code"] == 56

            wait_for(failed, message="the chmod-000 dir to be noticed")
            got = produce_many(c, [("x", 0, make_batch([b"ok"])), ("x", 1, make_batch([b"lost"]))])
            assert (got[("x", 0)]["error_code"], got[("x", 1)]["error_code"]) == (0, 56)
            assert got[("x", 0)]["base_offset"] == 1
            parts = fetch_partitions(fetch(c, [("x", 0, 0), ("x", 1, 0)]))
            assert parts[("x", 1)]["error_code"] == 56
            assert parts[("x", 0)]["error_code"] == 0
            assert [v for _, v in records_of(parts[("x", 0)]["records"])] == [b"x0", b"ok"]
            assert list_offsets(c, "x", 1, -1)["error_code"] == 56
            assert list_offsets(c, "x", 0, -1)["offset"] == 2
        finally:
            os.chmod(bad, 0o755)


def test_fetch_answers_release_their_file_descriptors(tmp_path: Path) -> None:
    """Each Fetch answer owns a dup of a segment fd until it is sent: none may outlive its answer."""
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        produce(c, "fd", 0, make_batch([b"x"] * 10))
        assert d.proc is not None
        fds = f"/proc/{d.proc.pid}/fd"
        before = len(os.listdir(fds))
        for _ in range(500):
            p = fetch_partitions(fetch(c, [("fd", 0, 0)]))[("fd", 0)]
            assert len(records_of(p["records"])) == 10
        # A handful of fds may come and go (index files opened lazily, sockets); 500 answers' worth may not stay.
        assert len(os.listdir(fds)) < before + 20
