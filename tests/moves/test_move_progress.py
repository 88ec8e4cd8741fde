"""A move's progress as DescribeLogDirs reports it while the copy runs (issue 34): the future replica's offset lag
falls with each chunk copied inside a segment, and its size grows with the bytes copied. A throttled move of one
segment of many batches, through the LogManager's DescribeLogDirs, polled until the move ends."""

from __future__ import annotations

from pathlib import Path

from mover.log.log_manager import LogManager
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.testing.records import segment_logs
from mover.testing.wait import wait_for
from tests.moves.test_batch_end import batch_ends, expected
from throttle.token_bucket import TokenBucket


def future_row(m: LogManager, tp: TopicPartition, dest: Path) -> tuple[int, int] | None:
    """(size, offset lag) of the partition's future replica in `dest`, as DescribeLogDirs answers; None if none."""
    for info in m.describe_log_dirs({tp.topic: [tp.partition]}):
        if info.path == dest:
            for partition, size, lag, is_future in info.topics.get(tp.topic, []):
                if partition == tp.partition and is_future:
                    return size, lag
    return None


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

    sizes, lags = [s for s, _ in seen], [lag for _, lag in seen]
    assert sizes == sorted(sizes), f"the future replica's size shrank: {seen}"
    assert lags == sorted(lags, reverse=True), f"the offset lag rose: {seen}"
    mid = [(s, lag) for s, lag in seen if 0 < s < total]
    assert len(mid) >= 3, f"too few observations mid-copy: {seen}"
    assert any(0 < lag < leo for _, lag in mid), f"the lag never fell inside the segment: {seen}"
    for size, lag in mid:
        # The lag is read just before the size (and the copy thread moves the size first): it matches the last whole
        # batch at the size reported, or one chunk earlier.
        assert leo - expected(ends, size)[1] <= lag <= leo - expected(ends, max(0, size - chunk))[1], (size, lag)
