"""A move's progress as DescribeLogDirs reports it while the copy runs (issue 34): the future replica's offset lag
falls with each chunk copied inside a segment, and its size grows with the bytes copied. A throttled move of one
segment of many batches, DescribeLogDirs polled until the move ends: the LogManager's, and a real moverd's through
the admin library."""

from __future__ import annotations

from pathlib import Path

from mover.admin.alter_log_dirs import alter_log_dirs
from mover.admin.client import Client
from mover.admin.common import TopicPartitionReplica
from mover.admin.log_dir_state import describe_broker
from mover.log.log_manager import LogManager
from mover.moves.future_log_copy import FutureLogCopy
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.testing.moverd import Moverd
from mover.testing.records import batch_ends, last_whole_batch_end, segment_logs, write_partition
from mover.testing.wait import wait_for
from throttle.token_bucket import TokenBucket


def future_row(m: LogManager, tp: TopicPartition, dest: Path) -> tuple[int, int] | None:
    """(size, offset lag) of the partition's future replica in `dest`, as DescribeLogDirs answers; None if none."""
    for info in m.describe_log_dirs({tp.topic: [tp.partition]}):
        if info.path == dest:
            for partition, size, lag, is_future in info.topics.get(tp.topic, []):
                if partition == tp.partition and is_future:
                    return size, lag
    return None


def check_progress(seen: list[tuple[int, int]], ends: list[tuple[int, int]], chunk: int) -> None:
    """`seen`: the future replica's (size, offset lag) as observed, each change once, over a move of one segment
    whose batches end as `ends` says (mover.testing.records.batch_ends), copied in chunks of `chunk` bytes."""
    total, leo = ends[-1]
    sizes, lags = [s for s, _ in seen], [lag for _, lag in seen]
    assert sizes == sorted(sizes), f"the future replica's size shrank: {seen}"
    assert lags == sorted(lags, reverse=True), f"the offset lag rose: {seen}"
    mid = [(s, lag) for s, lag in seen if 0 < s < total]
    assert len(mid) >= 3, f"too few observations mid-copy: {seen}"
    assert any(0 < lag < leo for _, lag in mid), f"the lag never fell inside the segment: {seen}"
    for size, lag in mid:
        # The lag is read just before the size (and the copy thread moves the size first): it matches the last whole
        # batch at the size reported, or one chunk earlier.
        assert (leo - last_whole_batch_end(ends, size)[1] <= lag
                <= leo - last_whole_batch_end(ends, max(0, size - chunk))[1]), (size, lag)


def test_offset_lag_falls_while_one_segment_is_copied(make_config, manager_of) -> None:
    rate = 256 * 1024
    m = manager_of(make_config(**{"intra.broker.throttled.rate": rate}))  # 1 GiB segments: all in one
    d1, d2 = m.config.log_dirs
    m.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    src = m.replicas[tp].log_dir
    dst = d2 if src == d1 else d1
    batch = make_batch([b"r" * 200] * 8)
    for _ in range(300):
        m.append(tp, batch)
    (segment,) = segment_logs(src / "t-0")
    ends = batch_ends(segment, 0)
    total, leo = ends[-1]
    assert leo == m.replicas[tp].log.log_end_offset == 2400
    chunk = TokenBucket(rate).chunk_size()
    assert total > 6 * chunk, "the copy should take several of the throttle's chunks"

    codes, _ = m.alter_replica_log_dirs([(tp, str(dst))])
    assert codes[tp] == 0
    seen: list[tuple[int, int]] = []

    def observe() -> bool:
        row = future_row(m, tp, dst)
        if row is not None and (not seen or seen[-1] != row):
            seen.append(row)
        return m.replicas[tp].move is None

    wait_for(observe, message="the move")
    assert m.replicas[tp].log_dir == dst

    check_progress(seen, ends, chunk)


def test_offset_lag_from_moverd_through_the_admin_library(tmp_path: Path) -> None:
    rate = 400_000
    tp = TopicPartition("big", 0)
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    written = write_partition(d1, tp, 120, segment_bytes=1 << 30)  # ~1.2 MB in one segment: ~3 s at the throttle
    (segment,) = segment_logs(written.path)
    ends = batch_ends(segment, 0)
    chunk = TokenBucket(rate).chunk_size()
    seen: list[tuple[int, int]] = []
    with Moverd(tmp_path, props={"intra.broker.throttled.rate": rate}) as d, Client(d.bootstrap, timeout=10) as client:
        alter_log_dirs(client, {TopicPartitionReplica("big", 0, 0): str(d2)}, 10)

        def observe() -> bool:
            rows = {(info.path, p.is_future): p for info in describe_broker(client, 0, {"big": [0]})
                    for p in info.partitions}
            future = rows.get((str(d2), True))
            if future is not None and (not seen or seen[-1] != (future.size, future.offset_lag)):
                seen.append((future.size, future.offset_lag))
            return future is None and (str(d2), False) in rows

        wait_for(observe, message="the move")
    check_progress(seen, ends, chunk)


def test_the_copy_end_never_counts_appends_not_copied(make_config, manager_of, monkeypatch) -> None:
    """A producer appends after a round copied the last segment and before the move works out the copy's log end
    offset: that offset (also how far an fsync makes the copy durable, against the source's recovery point) stays at
    the last batch copied. It read the source's log end offset there, appends included."""
    m = manager_of(make_config())
    d1, d2 = m.config.log_dirs
    m.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    dst = d2 if m.replicas[tp].log_dir == d1 else d1
    batch = make_batch([b"r" * 100] * 4)
    for _ in range(50):
        m.append(tp, batch)
    real_copy, real_update = FutureLogCopy._copy_file, FutureLogCopy._update_copied_leo
    appended = 0
    checked: list[tuple[int, int]] = []  # (the copy's end offset, the offset after the bytes copied)

    def copy_then_append(self: FutureLogCopy, src: Path, dst: Path, state: object, size: int, *, locked: bool,
                         **kw: object) -> int:
        nonlocal appended
        moved = real_copy(self, src, dst, state, size, locked=locked, **kw)
        if not locked and appended < 3:
            appended += 1
            m.append(tp, batch)
        return moved

    def update(self: FutureLogCopy, source: object, segments: list, i: int, **kw: object) -> None:
        real_update(self, source, segments, i, **kw)
        if i == len(segments) - 1 and not kw.get("locked"):
            copied = self.segments[segments[i].base_offset].copied
            ends = batch_ends(segments[i].log_path, segments[i].base_offset)
            checked.append((self.copied_leo, last_whole_batch_end(ends, copied)[1]))

    monkeypatch.setattr(FutureLogCopy, "_copy_file", copy_then_append)
    monkeypatch.setattr(FutureLogCopy, "_update_copied_leo", update)
    codes, _ = m.alter_replica_log_dirs([(tp, str(dst))])
    assert codes[tp] == 0
    wait_for(lambda: m.replicas[tp].move is None, message="the move")
    assert m.replicas[tp].log_dir == dst and appended == 3
    assert checked and all(end == at for end, at in checked), checked
