"""Executing recovery on real directories: renames happen and are durable, offline partitions stay untouched,
and an I/O error never escapes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mover.storage.names import DirKind, PartitionDirName, TopicPartition, parse_partition_dir
from recovery import (
    MarkOffline,
    MoveToResume,
    Plan,
    Promote,
    ScheduleDelete,
    execute,
    plan,
    recover,
    scan,
)

TP = TopicPartition("t", 0)
U1 = "0123456789abcdef0123456789abcdef"
LOG = logging.getLogger("test.recovery")


def copy(path: Path, data: bytes) -> Path:
    path.mkdir(parents=True)
    (path / "00000000000000000000.log").write_bytes(data)
    return path


def content(path: Path) -> bytes:
    return (path / "00000000000000000000.log").read_bytes()


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    ds = [tmp_path / "d1", tmp_path / "d2"]
    for d in ds:
        d.mkdir()
    return ds


def leo_by_size(path: Path) -> int:
    return len(content(path))


def test_rule2_promotes_the_move_and_schedules_the_delete(dirs: list[Path], caplog) -> None:  # type: ignore[no-untyped-def]
    d1, d2 = dirs
    copy(d1 / f"t-0.{U1}-delete", b"abc")
    copy(d2 / "t-0.move", b"abcd")
    scheduled: list[Path] = []
    with caplog.at_level(logging.INFO, logger=LOG.name):
        result = recover(dirs, leo_of=leo_by_size, schedule_delete=scheduled.append, logger=LOG)
    assert content(d2 / "t-0") == b"abcd"
    assert not (d2 / "t-0.move").exists()
    assert scheduled == [d1 / f"t-0.{U1}-delete"] == result.scheduled
    assert (d1 / f"t-0.{U1}-delete").exists()  # the daemon deletes it later, not recovery
    assert result.offline == {} and result.resume == [] and result.failed_dirs == {}
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("recovery: promote ") and "\n" not in line for line in lines)


def test_an_old_moverd_delete_takes_kafkas_name_before_it_is_scheduled(dirs: list[Path], caplog) -> None:  # type: ignore[no-untyped-def]
    # An older moverd's `.delete` may outlive this run (a stop before its delayed delete): a Kafka broker refuses to
    # start beside it, so recovery gives it Kafka's `-delete` form first.
    d1, _ = dirs
    copy(d1 / f"t-0.{U1}.delete", b"abc")
    scheduled: list[Path] = []
    with caplog.at_level(logging.INFO, logger=LOG.name):
        result = recover(dirs, leo_of=leo_by_size, schedule_delete=scheduled.append, logger=LOG)
    assert not (d1 / f"t-0.{U1}.delete").exists()
    (renamed,) = scheduled
    assert result.scheduled == [renamed] and renamed.parent == d1 and content(renamed) == b"abc"
    assert parse_partition_dir(renamed.name) == PartitionDirName(TP, DirKind.DELETE)
    assert renamed.name.startswith("t-0.") and renamed.name.endswith("-delete") and len(renamed.name) == 4 + 32 + 7
    assert any("renamed to Kafka's -delete form" in r.getMessage() for r in caplog.records)


def test_rule2_longer_delete_is_promoted_and_move_removed(dirs: list[Path]) -> None:
    d1, d2 = dirs
    copy(d1 / f"t-0.{U1}.delete", b"abcdef")
    copy(d2 / "t-0.move", b"abc")
    result = recover(dirs, leo_of=leo_by_size, schedule_delete=lambda p: None, logger=LOG)
    assert content(d1 / "t-0") == b"abcdef"
    assert sorted(p.name for p in d2.iterdir()) == []
    assert not result.failed_dirs


def test_kafka_future_becomes_our_move_and_is_resumed(dirs: list[Path]) -> None:
    d1, d2 = dirs
    copy(d1 / "t-0", b"abcdef")
    copy(d2 / f"t-0.{U1}-future", b"abc")
    result = recover(dirs, leo_of=leo_by_size, schedule_delete=lambda p: None, logger=LOG)
    assert content(d2 / "t-0.move") == b"abc"
    assert result.resume == [MoveToResume(TP, d1, d2 / "t-0.move")]
    tp, source_dir, move_path = result.resume[0]  # the daemon unpacks it this way
    assert (tp, source_dir, move_path) == (TP, d1, d2 / "t-0.move")


def test_move_next_to_live_copy_is_removed(dirs: list[Path]) -> None:
    d1, _ = dirs
    copy(d1 / "t-0", b"abcdef")
    copy(d1 / "t-0.move", b"ab")
    result = recover(dirs, leo_of=leo_by_size, schedule_delete=lambda p: None, logger=LOG)
    assert sorted(p.name for p in d1.iterdir()) == ["t-0"]
    assert result.resume == []


def test_offline_partitions_are_untouched(tmp_path: Path, dirs: list[Path]) -> None:
    d1, d2 = dirs
    bad = tmp_path / "d3"  # configured but missing: a bad dir
    copy(d1 / f"t-0.{U1}.delete", b"abc")
    copy(d2 / "t-0.move", b"abcd")
    copy(d1 / "u-0", b"x")
    copy(d2 / "u-0", b"y")
    scheduled: list[Path] = []
    result = recover([d1, d2, bad], leo_of=leo_by_size, schedule_delete=scheduled.append, logger=LOG)
    assert (d1 / f"t-0.{U1}.delete").exists() and (d2 / "t-0.move").exists() and not (d2 / "t-0").exists()
    assert content(d1 / "u-0") == b"x" and content(d2 / "u-0") == b"y"
    assert scheduled == []
    assert set(result.offline) == {TP, TopicPartition("u", 0)}
    paths, reason = result.offline[TP]
    assert set(paths) == {d1 / f"t-0.{U1}.delete", d2 / "t-0.move"} and "rule 3" in reason
    assert set(result.offline[TopicPartition("u", 0)].paths) == {d1 / "u-0", d2 / "u-0"}
    assert bad in result.failed_dirs


def test_os_error_marks_the_dir_failed_and_is_not_raised(dirs: list[Path], caplog) -> None:  # type: ignore[no-untyped-def]
    d1, d2 = dirs
    copy(d2 / "t-0.move", b"abcd")
    copy(d2 / "t-0", b"in the way")  # appeared after planning: the rename must not replace it
    other = copy(d2 / f"v-0.{U1}.delete", b"z")
    p = Plan((Promote(TP, d2 / "t-0.move", d2 / "t-0"),
              ScheduleDelete(TopicPartition("v", 0), other),
              MarkOffline(TopicPartition("w", 0), (d1 / "w-0",), "test")))
    scheduled: list[Path] = []
    with caplog.at_level(logging.INFO, logger=LOG.name):
        result = execute(p, schedule_delete=scheduled.append, logger=LOG)
    assert content(d2 / "t-0") == b"in the way" and content(d2 / "t-0.move") == b"abcd"
    assert result.failed_dirs.keys() == {d2} and "FileExistsError" in result.failed_dirs[d2]
    assert scheduled == []  # later actions in the failed dir are skipped
    assert set(result.offline) == {TP, TopicPartition("w", 0)}
    assert any("skipped" in r.getMessage() for r in caplog.records)


def test_failure_of_the_move_dir_drops_the_resume_only(dirs: list[Path]) -> None:
    d1, d2 = dirs
    copy(d1 / "t-0", b"abc")
    copy(d2 / "t-0.move", b"ab")
    copy(d2 / "x-0.move", b"q")
    p = plan(scan(dirs, leo_by_size))
    (d2 / "x-0.move").rename(d2 / "gone")  # x-0's promotion will fail after t-0's resume was decided
    result = execute(p, schedule_delete=lambda p: None, logger=LOG)
    assert result.resume == []
    assert TP not in result.offline  # the live copy in d1 is fine
    assert TopicPartition("x", 0) in result.offline and d2 in result.failed_dirs


def test_one_info_line_per_action(dirs: list[Path], caplog) -> None:  # type: ignore[no-untyped-def]
    d1, d2 = dirs
    copy(d1 / "t-0", b"abc")
    copy(d2 / "t-0.move", b"ab")
    copy(d1 / f"s-0.{U1}-stray", b"s")
    copy(d2 / f"s-0.{U1}-delete", b"s")
    p = plan(scan(dirs, leo_by_size))
    with caplog.at_level(logging.INFO, logger=LOG.name):
        execute(p, schedule_delete=lambda p: None, logger=LOG)
    lines = [r for r in caplog.records if r.getMessage().startswith("recovery: ")]
    assert len(lines) == len(p) == 3
    assert [r.levelname for r in lines] == ["INFO", "WARNING", "INFO"]  # delete, stray, resume


def test_each_rename_is_followed_by_an_fsync_of_its_dir(dirs: list[Path], monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import importlib
    import os

    # The package exports the function `execute`, which shadows the submodule's attribute name.
    ex = importlib.import_module("recovery.execute")

    d1, d2 = dirs
    copy(d1 / "t-0", b"abc")
    copy(d1 / "t-0.move", b"a")  # deleted: renamed to a -delete name first
    copy(d2 / f"t-0.{U1}-future", b"ab")  # renamed to t-0.move
    events: list[tuple[str, Path]] = []
    real_rename, real_fsync_dir = os.rename, ex.fsync_dir
    monkeypatch.setattr(ex.os, "rename", lambda a, b: (events.append(("rename", Path(b).parent)), real_rename(a, b)))
    monkeypatch.setattr(ex, "fsync_dir", lambda p: (events.append(("fsync", Path(p))), real_fsync_dir(p)))
    recover(dirs, leo_of=leo_by_size, schedule_delete=lambda p: None, logger=LOG)
    assert events == [("rename", d1), ("fsync", d1), ("rename", d2), ("fsync", d2)]
