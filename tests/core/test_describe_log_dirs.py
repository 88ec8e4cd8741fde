"""DescribeLogDirs (LogManager.describe_log_dirs) keeps the replicas' grouping between calls (the layout version,
mover/log/replica.py): after every kind of change of a replica's place or state, what it answers must equal a walk of
the replicas done afresh. A real LogManager on real files; each step describes once before the change, so that a
stale grouping would be the one answering."""

from __future__ import annotations

import dataclasses
import errno
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mover.log.describe_log_dirs as describe_log_dirs_module
from mover.config.broker import BrokerConfig
from mover.log.log_manager import LogManager
from mover.log.replica import Replica, ReplicaTable, layout_version
from mover.log.replica_layout import ReplicaLayout
from mover.storage.names import TopicPartition
from mover.testing.batches import make_batch
from mover.testing.log_manager import alter_replica_log_dir, set_throttle
from mover.testing.wait import wait_for

Rows = dict[str, dict[str, list[tuple[int, int, bool]]]]


def described(m: LogManager, topics: dict[str, list[int] | None] | None = None) -> Rows:
    """dir -> topic -> sorted (partition, size, is_future) as describe_log_dirs answers (online dirs only)."""
    return {str(info.path): {t: sorted((p, size, future) for p, size, _lag, future in rows)
                             for t, rows in info.topics.items()}
            for info in m.describe_log_dirs(topics) if info.error_code == 0}


def walked(m: LogManager, topics: dict[str, list[int] | None] | None = None) -> Rows:
    """The same, from the replicas as they are now."""
    out: Rows = {str(p): {} for p, s in m.dirs.items() if s.online}

    def wanted(tp: TopicPartition) -> bool:
        if topics is None:
            return True
        parts = topics.get(tp.topic, ())
        return parts is None or tp.partition in parts

    for r in list(m.replicas.values()):
        if r.log is None or not wanted(r.tp):
            continue
        if r.offline_reason is None and str(r.log_dir) in out:
            out[str(r.log_dir)].setdefault(r.tp.topic, []).append((r.tp.partition, r.log.size, False))
        move = r.move
        if move is not None and not move.state.done and str(move.destination_dir) in out:
            out[str(move.destination_dir)].setdefault(r.tp.topic, []).append(
                (r.tp.partition, move.bytes_copied, True))
    return {d: {t: sorted(rows) for t, rows in topics_.items()} for d, topics_ in out.items()}


def test_describe_follows_every_change_of_place(make_config: Callable[..., BrokerConfig],
                                                 manager_of: Callable[[BrokerConfig], LogManager],
                                                 tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    m = manager_of(make_config([d1, d2]))
    a0 = TopicPartition("a", 0)
    m.remembered[a0] = d1

    def same(topics: dict[str, list[int] | None] | None = None) -> Rows:
        now = described(m, topics)
        assert now == walked(m, topics)
        return now

    same()  # an empty broker, and the grouping built for it
    m.create_topic("a", 3)
    m.create_topic("b", 2)
    assert sum(len(t.get("a", ())) for t in same().values()) == 3, "new replicas appear"
    m.append(a0, make_batch([b"x" * 1000] * 50))
    assert same()[str(d1)]["a"][0][1] > 0, "sizes are read live, with no change of place"
    assert same({"a": [0], "b": None}) == walked(m, {"a": [0], "b": None})

    set_throttle(m, 1)  # the move stays in flight: a future row in d2
    assert alter_replica_log_dir(m, a0, str(d2)) == 0
    wait_for(lambda: m.replicas[a0].move is not None)
    assert (0, 0, True) in same()[str(d2)]["a"]
    set_throttle(m, None)
    move = m.replicas[a0].move
    assert move is not None
    move.wait()
    wait_for(lambda: m.replicas[a0].move is None)
    rows = same()
    assert [p for p, _, _ in rows[str(d2)].get("a", [])].count(0) == 1, "the partition now lives in d2"
    assert all(p != 0 for p, _, _ in rows[str(d1)].get("a", []))

    m.delete_topic("b")
    assert all("b" not in t for t in same().values()), "a deleted topic is gone"

    m.dir_failed(d1, OSError(errno.EIO, "test: the disk died"))
    assert str(d1) not in same(), "an offline dir's replicas are not listed"


def test_the_layout_version_moves_on_every_change_and_not_on_reads(tmp_path: Path) -> None:
    table = ReplicaTable()
    r = Replica(TopicPartition("t", 0), None, tmp_path / "d1")
    changes: list[Callable[[], object]] = [
        lambda: table.__setitem__(r.tp, r), lambda: table.__delitem__(r.tp), lambda: table.update({r.tp: r}),
        lambda: table.pop(r.tp), lambda: table.setdefault(r.tp, r), lambda: table.popitem(),
        lambda: table.update({r.tp: r}), lambda: table.clear(),
        lambda: setattr(r, "log_dir", tmp_path / "d2"), lambda: setattr(r, "offline_reason", "gone"),
        lambda: setattr(r, "move", None), lambda: setattr(r, "log", None)]
    for change in changes:
        before = layout_version()
        change()
        assert layout_version() != before
    before = layout_version()
    assert (r.log, r.log_dir, r.move, r.offline_reason, dict(table)) == (None, tmp_path / "d2", None, "gone", {})
    assert layout_version() == before


def test_rows_follow_every_size_change_and_are_kept_while_none_happens(
        make_config: Callable[..., BrokerConfig], manager_of: Callable[[BrokerConfig], LogManager],
        tmp_path: Path) -> None:
    # The layout never changes here: only sizes do, through an append and through retention, and each must show in
    # the next answer although the rows of a topic are kept between calls (mover/log/replica_layout.py).
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    m = manager_of(make_config([d1, d2]))
    m.create_topic("a", 2)
    a0 = TopicPartition("a", 0)
    first = m.describe_log_dirs()
    second = m.describe_log_dirs()
    kept = [(f.topics.get("a"), s.topics.get("a")) for f, s in zip(first, second, strict=True)]
    assert all(x is y for x, y in kept if x is not None), "no size changed: the same rows answer"
    version = layout_version()
    for _ in range(30):
        m.append(a0, make_batch([b"x" * 1000] * 20))
        assert described(m) == walked(m)
    log = m.replicas[a0].log
    assert log is not None
    before = log.size
    log.config = dataclasses.replace(log.config, retention_bytes=0, segment_bytes=1000)
    m.append(a0, make_batch([b"y" * 100]))  # rolls: the batches before sit in closed segments now
    assert log.delete_retained_segments() > 0
    assert log.size < before
    assert described(m) == walked(m), "retention's deletes show"
    assert layout_version() == version, "the layout never changed: only the rows' watch told the sizes apart"


def test_rows_stay_true_under_racing_appends_and_layout_builds(
        make_config: Callable[..., BrokerConfig], manager_of: Callable[[BrokerConfig], LogManager],
        tmp_path: Path) -> None:
    # Appenders, describers and creates (each a new layout) race; once they stop, one answer must equal the walk.
    # Two layouts built at once, each pointing the Logs at its own watches, would leave a group that never rebuilds.
    m = manager_of(make_config([tmp_path / "d1", tmp_path / "d2"]))
    m.create_topic("r", 4)
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                while not stop.is_set():
                    fn()
            except BaseException as e:  # noqa: BLE001 - reported by the test below
                errors.append(e)
        return run

    created = iter(range(10**6))
    threads = [threading.Thread(target=guarded(lambda p=p: m.append(TopicPartition("r", p), make_batch([b"z"]))))
               for p in range(4)]
    threads += [threading.Thread(target=guarded(lambda: m.describe_log_dirs())) for _ in range(3)]
    threads.append(threading.Thread(target=guarded(lambda: m.create_topic(f"c{next(created)}", 1) and None)))
    for t in threads:
        t.start()
    wait_for(lambda: next(created) > 20 or bool(errors), 60, "creates to race the describes")
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert described(m) == walked(m)


def test_two_describes_that_find_the_layout_stale_build_it_once(
        make_config: Callable[..., BrokerConfig], manager_of: Callable[[BrokerConfig], LogManager],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The interleaving that loses: build A points the Logs at its watches, build B at its own, B's layout is stored,
    # then A's. The Logs tick B's watches while A's groups answer, so an append would never show. The first build
    # here waits (at most 2 s) for a second one to finish building before it returns.
    m = manager_of(make_config([tmp_path / "d1"]))
    m.create_topic("w", 1)
    m.describe_log_dirs()
    first_built, second_built = threading.Event(), threading.Event()

    class Racing(ReplicaLayout):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            if not first_built.is_set():
                first_built.set()
                second_built.wait(2)
            else:
                second_built.set()

    monkeypatch.setattr(describe_log_dirs_module, "ReplicaLayout", Racing)
    m.create_topic("v", 1)  # the layout is stale now
    a = threading.Thread(target=m.describe_log_dirs)
    a.start()
    assert first_built.wait(30)
    m.describe_log_dirs()
    a.join()
    m.append(TopicPartition("w", 0), make_batch([b"x" * 100]))
    assert described(m) == walked(m)
