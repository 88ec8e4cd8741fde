"""Produce and InitProducerId against a real moverd, with raw requests: validation, idempotence, durability."""

from __future__ import annotations

from pathlib import Path

import pytest

from mover.testing.batches import make_batch
from mover.testing.moverd import Moverd
from mover.testing.raw import (
    RawClient,
    fetch,
    fetch_partitions,
    init_producer_id,
    move,
    produce,
    produce_many,
    records_of,
)
from mover.testing.records import dir_of
from mover.wire.messages import PRODUCE


def read_all(c: RawClient, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """Every record, fetching until the high watermark (a fetch returns data from one segment at most)."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        p = fetch_partitions(fetch(c, [(topic, partition, offset)], partition_max_bytes=1 << 24))[(topic, partition)]
        assert p["error_code"] == 0
        got = [r for r in records_of(p["records"]) if r[0] >= offset]
        out += got
        if not got:
            assert offset == p["high_watermark"]
            return out
        offset = got[-1][0] + 1


def test_produce_assigns_offsets_and_auto_creates(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        for version in (3, 5, 7, 9):
            r = produce(c, "auto", 0, make_batch([b"a", b"b"]), version=version)
            assert r["error_code"] == 0, r
        r = produce(c, "auto", 0, make_batch([b"c"]))
        assert (r["base_offset"], r["log_start_offset"], r["log_append_time_ms"]) == (8, 0, -1)
        assert [v for _, v in read_all(c, "auto")] == [b"a", b"b"] * 4 + [b"c"]
        # A partition the topic does not have.
        assert produce(c, "auto", 7, make_batch([b"x"]))["error_code"] == 3


def test_repeated_requests_go_where_each_one_says(tmp_path: Path) -> None:
    # One-partition requests of one size in a row are recognised as repeats of the last one (RequestRepeat): only
    # the correlation id and the records may differ. Requests of that same size to another partition, with
    # other acks, or with a corrupt batch must still be taken for what they are.
    with Moverd(tmp_path, props={"num.partitions": 2}) as d, RawClient(d.port) as c:
        values = [f"v{i:03d}".encode() for i in range(40)]
        where: dict[int, list[bytes]] = {0: [], 1: []}
        for i, v in enumerate(values):
            partition = 1 if i % 10 == 9 else 0  # a same-size request to partition 1 now and then
            r = produce(c, "rep", partition, make_batch([v]))
            assert r["error_code"] == 0 and r["base_offset"] == len(where[partition]), (i, r)
            where[partition].append(v)
        bad = bytearray(make_batch([b"v999"]))
        bad[-1] ^= 1  # a record byte: the CRC no longer matches
        assert produce(c, "rep", 0, bytes(bad))["error_code"] == 2  # CORRUPT_MESSAGE
        r = produce(c, "rep", 0, make_batch([b"v998"]), acks=1)  # another acks, the same size
        assert r["error_code"] == 0, r
        r = produce(c, "rep", 0, make_batch([b"v997"]))
        assert r["error_code"] == 0, r
        assert [v for _, v in read_all(c, "rep", 0)] == [*where[0], b"v998", b"v997"]
        assert [v for _, v in read_all(c, "rep", 1)] == where[1]


def test_produce_without_auto_create(tmp_path: Path) -> None:
    with Moverd(tmp_path, props={"auto.create.topics.enable": "false"}) as d, RawClient(d.port) as c:
        assert produce(c, "nope", 0, make_batch([b"x"]))["error_code"] == 3
        assert produce(c, "bad/name", 0, make_batch([b"x"]))["error_code"] == 17


def test_bad_batches_are_refused_and_not_written(tmp_path: Path) -> None:
    with Moverd(tmp_path, props={"message.max.bytes": 2000}) as d, RawClient(d.port) as c:
        assert produce(c, "v", 0, make_batch([b"ok"]))["error_code"] == 0
        good = make_batch([b"payload"])
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF  # inside the CRC-covered records
        assert produce(c, "v", 0, bytes(corrupt))["error_code"] == 2  # CORRUPT_MESSAGE
        assert produce(c, "v", 0, good[:40])["error_code"] == 2  # shorter than a header
        assert produce(c, "v", 0, good[:-3])["error_code"] == 2  # partial batch
        old_magic = bytearray(good)
        old_magic[16] = 1
        assert produce(c, "v", 0, bytes(old_magic))["error_code"] == 87  # INVALID_RECORD, Kafka 2.6+
        assert produce(c, "v", 0, good + good)["error_code"] == 87  # v3+: exactly one batch
        assert produce(c, "v", 0, None)["error_code"] == 87
        zstd = bytearray(good)
        zstd[22] = (zstd[22] & ~0x07) | 4  # the attributes' codec bits: zstd (KIP-110), only from Produce v7
        assert produce(c, "v", 0, bytes(zstd), version=5)["error_code"] == 76
        assert produce(c, "v", 0, make_batch([b"x" * 3000]))["error_code"] == 10  # MESSAGE_TOO_LARGE
        assert [v for _, v in read_all(c, "v")] == [b"ok"]
        # The connection survived all of it.
        assert produce(c, "v", 0, good)["base_offset"] == 1


def test_acks_zero_gets_no_answer_and_a_failure_closes_the_connection(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        c.send(c.request_bytes(PRODUCE, 9, {
            "acks": 0, "timeout_ms": 1000,
            "topic_data": [{"name": "z", "partition_data": [{"index": 0, "records": make_batch([b"fire"])}]}]}))
        # The next request's answer is the first thing on the wire: acks=0 produced nothing to read.
        assert [v for _, v in read_all(c, "z")] == [b"fire"]
        bad = bytearray(make_batch([b"forget"]))
        bad[-1] ^= 1
        c.send(c.request_bytes(PRODUCE, 9, {"acks": 0, "timeout_ms": 1000, "topic_data": [
            {"name": "z", "partition_data": [{"index": 0, "records": bytes(bad)}]}]}))
        assert c.is_closed_by_peer()


def test_invalid_acks(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        assert produce(c, "a", 0, make_batch([b"x"]), acks=2)["error_code"] == 21


def test_idempotent_duplicate_is_written_once_with_its_original_offset(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        pid = init_producer_id(c)["producer_id"]
        assert produce(c, "i", 0, make_batch([b"n0"]))["base_offset"] == 0  # a non-idempotent batch first
        b0 = make_batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0)
        b1 = make_batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=2)
        assert produce(c, "i", 0, b0)["base_offset"] == 1
        assert produce(c, "i", 0, b1)["base_offset"] == 3
        # Retries of either of the last batches: success, original offsets, nothing written.
        r = produce(c, "i", 0, b0)
        assert (r["error_code"], r["base_offset"]) == (0, 1)
        assert produce(c, "i", 0, b1)["base_offset"] == 3
        assert [v for _, v in read_all(c, "i")] == [b"n0", b"a", b"b", b"c"]
        # A gap: OUT_OF_ORDER_SEQUENCE_NUMBER; the producer's next in-order batch still works.
        assert produce(c, "i", 0, make_batch([b"gap"], producer_id=pid, producer_epoch=0,
                                             base_sequence=5))["error_code"] == 45
        assert produce(c, "i", 0, make_batch([b"d"], producer_id=pid, producer_epoch=0,
                                             base_sequence=3))["base_offset"] == 4
        # A new epoch must start at 0; an older epoch is fenced.
        assert produce(c, "i", 0, make_batch([b"e1"], producer_id=pid, producer_epoch=1,
                                             base_sequence=4))["error_code"] == 45
        assert produce(c, "i", 0, make_batch([b"e1"], producer_id=pid, producer_epoch=1,
                                             base_sequence=0))["base_offset"] == 5
        assert produce(c, "i", 0, make_batch([b"old"], producer_id=pid, producer_epoch=0,
                                             base_sequence=4))["error_code"] == 47
        # A producer this partition never saw may start at any sequence (Kafka >= 2.5, KIP-360).
        other = init_producer_id(c)["producer_id"]
        assert other > pid
        assert produce(c, "i", 0, make_batch([b"late"], producer_id=other, producer_epoch=0,
                                             base_sequence=17))["error_code"] == 0
        assert [v for _, v in read_all(c, "i")] == [b"n0", b"a", b"b", b"c", b"d", b"e1", b"late"]


def test_only_the_last_five_batches_are_remembered(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        pid = init_producer_id(c)["producer_id"]
        batches = [make_batch([f"v{i}".encode()], producer_id=pid, producer_epoch=0, base_sequence=i) for i in range(7)]
        for i, b in enumerate(batches):
            assert produce(c, "five", 0, b)["base_offset"] == i
        for i in range(2, 7):
            assert produce(c, "five", 0, batches[i])["base_offset"] == i
        # Older than the last five: no longer recognisable, and out of sequence.
        assert produce(c, "five", 0, batches[1])["error_code"] == 45
        assert len(read_all(c, "five")) == 7


def test_producer_state_survives_restart_roll_and_moves(tmp_path: Path) -> None:
    # Small segments, so the log rolls and writes producer snapshots (Kafka's format) as it goes.
    with Moverd(tmp_path, props={"log.segment.bytes": 4096}) as d:
        with RawClient(d.port) as c:
            pid = init_producer_id(c)["producer_id"]
            sent = []
            for i in range(60):
                b = make_batch([f"r{i}".encode() * 20], producer_id=pid, producer_epoch=0, base_sequence=i)
                r = produce(c, "s", 0, b)
                assert r["error_code"] == 0 and r["base_offset"] == i
                sent.append(b)
        home = dir_of(d.dirs, "s", 0)
        assert sorted(home.joinpath("s-0").glob("*.snapshot")), "a rolled log keeps producer snapshots"
        d.restart()
        with RawClient(d.port) as c:
            assert produce(c, "s", 0, sent[-1])["base_offset"] == 59  # deduplicated after the restart
            assert produce(c, "s", 0, sent[-3])["base_offset"] == 57
            assert produce(c, "s", 0, make_batch([b"skip"], producer_id=pid, producer_epoch=0,
                                                 base_sequence=61))["error_code"] == 45
            other = next(p for p in d.dirs if p != home)
            move(c, d.dirs, "s", 0, other)
            assert produce(c, "s", 0, sent[-2])["base_offset"] == 58  # deduplicated after the swap
            assert produce(c, "s", 0, make_batch([b"next"], producer_id=pid, producer_epoch=0,
                                                 base_sequence=60))["base_offset"] == 60
            move(c, d.dirs, "s", 0, home)
        d.restart()  # restart after moves: the state is rebuilt from the moved copy's files
        with RawClient(d.port) as c:
            assert produce(c, "s", 0, make_batch([b"next"], producer_id=pid, producer_epoch=0,
                                                 base_sequence=60))["base_offset"] == 60
            values = [v for _, v in read_all(c, "s")]
            assert values == [f"r{i}".encode() * 20 for i in range(60)] + [b"next"]


def test_producer_state_ignores_a_snapshot_past_the_log_end(tmp_path: Path) -> None:
    """A snapshot from a history the log no longer has (lost unflushed appends) must not be trusted."""
    from mover.storage.names import SNAPSHOT_SUFFIX, segment_file_name
    from mover.storage.producer_state import BatchMetadata, ProducerEntry, encode_snapshot

    with Moverd(tmp_path) as d:
        with RawClient(d.port) as c:
            pid = init_producer_id(c)["producer_id"]
            first = make_batch([b"a"], producer_id=pid, producer_epoch=0, base_sequence=0)
            assert produce(c, "g", 0, first)["base_offset"] == 0
        d.stop()
        home = dir_of(d.dirs, "g", 0) / "g-0"
        ghost = ProducerEntry(pid, 0)
        ghost.batches.append(BatchMetadata(0, 9, 0, 9, 2**40))
        ghost.last_timestamp = 2**40
        (home / segment_file_name(50, SNAPSHOT_SUFFIX)).write_bytes(encode_snapshot([ghost]))
        d.start()
        with RawClient(d.port) as c:
            # Plain appends first, taking the log end past the ghost's offset: it must be gone before that.
            assert produce(c, "g", 0, make_batch([b"plain"] * 60))["base_offset"] == 1
            # Per the log, seq 1 follows seq 0; the ghost snapshot (seq 9) would call it out of order.
            assert produce(c, "g", 0, make_batch([b"b"], producer_id=pid, producer_epoch=0,
                                                 base_sequence=1))["base_offset"] == 61
        assert not (home / segment_file_name(50, SNAPSHOT_SUFFIX)).exists()


def test_init_producer_id_never_repeats_across_restarts(tmp_path: Path) -> None:
    with Moverd(tmp_path) as d:
        with RawClient(d.port) as c:
            ids = [init_producer_id(c, version=v)["producer_id"] for v in (0, 1, 2, 3, 4)]
            r = init_producer_id(c, transactional_id="txn")
            assert r["error_code"] == 15 and r["producer_id"] == -1
        assert ids == sorted(set(ids)) and all(r >= 0 for r in ids)
        d.kill()  # no clean shutdown: the reservation on disk must already cover what was handed out
        d.start()
        with RawClient(d.port) as c:
            after = init_producer_id(c)
        assert after["error_code"] == 0 and after["producer_epoch"] == 0
        assert after["producer_id"] > max(ids)


@pytest.mark.parametrize("version", [3, 9])
def test_one_request_many_partitions(tmp_path: Path, version: int) -> None:
    with Moverd(tmp_path, props={"num.partitions": 3}) as d, RawClient(d.port) as c:
        got = produce_many(c, [("m", p, make_batch([str(p).encode()])) for p in range(3)] + [("n", 0, b"junk" * 20)],
                           version=version)
        assert [got[("m", p)]["error_code"] for p in range(3)] == [0, 0, 0]
        assert got[("n", 0)]["error_code"] in (2, 87)


def test_a_dir_slow_on_the_loop_sends_its_appends_to_the_io_threads(tmp_path: Path) -> None:
    """QuickAppends: one slow inline append (the loop thread descheduled on a busy machine) changes nothing; a few
    within the penalty window (a disk that throttles or hangs) send that dir's appends to the pool, and only it."""
    from types import SimpleNamespace

    from mover.api.produce import QuickAppends

    quick = QuickAppends()
    a = SimpleNamespace(tp="t-0", log_dir=tmp_path / "a")
    b = SimpleNamespace(tp="t-1", log_dir=tmp_path / "b")
    assert quick.allowed(a, 100) and not quick.allowed(a, QuickAppends.MAX_BYTES + 1)
    quick.took(a, QuickAppends.SLOW_S * 2)
    assert quick.allowed(a, 100), "a single stall is not the disk's fault"
    for _ in range(QuickAppends.SLOW_COUNT - 1):
        quick.took(a, QuickAppends.SLOW_S / 2)
    assert quick.allowed(a, 100), "fast appends do not count"
    for _ in range(QuickAppends.SLOW_COUNT - 1):
        quick.took(a, QuickAppends.SLOW_S * 2)
    assert not quick.allowed(a, 100)
    assert quick.allowed(b, 100)


def test_rare_stalls_among_many_fast_appends_keep_the_loop(tmp_path: Path) -> None:
    """A busy machine stalls the loop thread now and then: SLOW_COUNT slow appends spread over thousands of fast
    ones within the penalty window are the scheduler's, not the disk's, and keep the appends on the loop."""
    from types import SimpleNamespace

    from mover.api.produce import QuickAppends

    quick = QuickAppends()
    a = SimpleNamespace(tp="t-0", log_dir=tmp_path / "a")
    for _ in range(QuickAppends.SLOW_COUNT):
        quick.took(a, QuickAppends.SLOW_S * 2)
        for _ in range(1000):
            quick.took(a, QuickAppends.SLOW_S / 10)
    assert quick.allowed(a, 100)


def test_pipelined_requests_in_one_read_are_answered_in_order_as_if_one_by_one(tmp_path: Path) -> None:
    """A burst of one-record requests read together goes through Produce's run path (one append for the run):
    every request still gets its own answer, in order, with its own offset; a bad batch, another partition and an
    acks=0 request in the middle end a run and are answered (or not) as alone; the log holds what it would."""
    from mover.wire import decode_response

    good = make_batch([b"g"])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    with Moverd(tmp_path) as d, RawClient(d.port) as c:
        assert produce(c, "p", 0, make_batch([b"first"]))["error_code"] == 0
        assert produce(c, "q", 0, make_batch([b"first"]))["error_code"] == 0
        plan: list[tuple[str, bytes, int]] = []  # (topic, records, acks)
        for i in range(120):
            plan.append(("p", make_batch([b"v%d" % i] * (1 + i % 3)), -1))
            if i in (30, 31):
                plan.append(("p", bytes(corrupt), -1))
            if i == 60:
                plan.append(("q", make_batch([b"other"]), 1))
            if i == 90:
                plan.append(("p", make_batch([b"zero"]), 0))
        data = b"".join(
            c.request_bytes(PRODUCE, 9, {"acks": acks, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": recs}]}]}, corr=1000 + n)
            for n, (topic, recs, acks) in enumerate(plan))
        c.send(data)
        answers = []
        for n, (_part, _recs, acks) in enumerate(plan):
            if acks == 0:
                continue
            frame = c.recv_frame()
            assert frame is not None
            header, body = decode_response(PRODUCE, 9, frame)
            assert header.correlation_id == 1000 + n
            answers.append(body["responses"][0]["partition_responses"][0])
        expected_offset = {"p": 1, "q": 1}
        k = 0
        for topic, recs, acks in plan:
            if acks == 0:
                expected_offset["p"] += 1
                continue
            a = answers[k]
            k += 1
            if recs == bytes(corrupt):
                assert a["error_code"] == 2
                continue
            assert (a["error_code"], a["base_offset"]) == (0, expected_offset[topic])
            expected_offset[topic] += len(records_of(recs))
        values = [v for _, v in read_all(c, "p")]
        assert values == [b"first"] + [v for topic, recs, _a in plan if topic == "p" and recs != bytes(corrupt)
                                       for _, v in records_of(recs)]
        assert [v for _, v in read_all(c, "q")] == [b"first", b"other"]
