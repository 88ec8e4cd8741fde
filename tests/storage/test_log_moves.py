"""Log in a move: reloaded after its copy, its dir renamed, and a roll, an index load or a rename racing the rename
window (the PathGuard)."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from mover.storage import log as log_module
from mover.storage.log import Log, LogConfig
from mover.testing.batches import make_batch
from mover.testing.log_records import TP, fill, read_all, seg_names, values
from mover.testing.wait import wait_for


def test_reload_after_copy(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=300)
    src = Log.open(tmp_path / "d1" / "topic-0", TP, cfg)
    written = fill(src, 10)
    (src.dir / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
    shutil.copytree(src.dir, tmp_path / "d2" / "topic-0.move")
    # The copy is opened early (as a move does), then the source grows and rolls, then the rest is copied.
    future = Log.open(tmp_path / "d2" / "topic-0.move", TP, cfg)
    written += [b"more-%d" % i for i in range(36)]
    for i in range(12):
        src.append(make_batch(written[50 + 3 * i:53 + 3 * i]))
    for name in os.listdir(src.dir):
        shutil.copyfile(src.dir / name, future.dir / name)
    (tmp_path / "d2" / "topic-0.move").rename(tmp_path / "d2" / "topic-0")
    future.rename_dir(tmp_path / "d2" / "topic-0")
    future.reload_after_copy(src)
    assert (future.log_end_offset, future.size, future.log_start_offset, future.recovery_point) == (
        src.log_end_offset, src.size, src.log_start_offset, src.recovery_point)
    assert [(s.base_offset, s.size) for s in future.segment_files()] == [
        (s.base_offset, s.size) for s in src.segment_files()]
    assert future.segment_files()[0].log_path.parent == tmp_path / "d2" / "topic-0"
    assert read_all(future) == list(enumerate(written))
    more = make_batch([b"after"])
    future.append(more)
    src.append(more)
    for s, f in zip(src.segment_files(), future.segment_files(), strict=True):
        assert s.log_path.read_bytes() == f.log_path.read_bytes()
    src.close()
    future.close()
    reopened = Log.open(tmp_path / "d2" / "topic-0", TP, cfg)
    assert reopened.log_end_offset == src.log_end_offset
    assert (reopened.dir / "partition.metadata").exists()
    reopened.close()


def test_rename_dir_keeps_working(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=1000))
    fill(log, 5)
    new = tmp_path / "topic-0.0123456789abcdef0123456789abcdef.delete"
    os.rename(log.dir, new)
    log.rename_dir(new)
    assert all(s.log_path.parent == new for s in log.segment_files())
    fill(log, 5)
    assert [o for o, _ in read_all(log)] == list(range(50))
    log.close()


def _race_inside_rename(monkeypatch: pytest.MonkeyPatch, log: Log, new_dir: Path, work: Callable[[], object]) -> dict:
    """Rename `log`'s dir with `rename_to`, and run `work` on another thread inside the window between the rename on
    disk and the paths updated in memory; wait there until `work` either finished or blocked on the PathGuard.
    Returns {"result": ...} or {"error": ...}. Without the guard, a path-based `work` finishes inside the window,
    using the old name."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = work()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out["error"] = e

    t = threading.Thread(target=run)

    def rename_then_race(src: Path, dst: Path) -> None:
        os.rename(src, dst)
        t.start()
        wait_for(lambda: log.path_guard.waiting or not t.is_alive(), message="the racing operation to block or end")
        out["finished_inside_window"] = not t.is_alive()

    monkeypatch.setattr(log_module, "_rename", rename_then_race)
    log.rename_to(new_dir)
    t.join(30)
    assert not t.is_alive()
    return out


def test_a_roll_inside_a_rename_window_waits_and_lands_in_the_new_dir(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A swap renames a dir outside the replica lock while appends go on: an append that rolls (a new segment
    file and a dir fsync, by path) in that window must wait for the rename and create its file by the new name."""
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=2000))
    written = fill(log, 3)
    old_dir, new_dir = log.dir, tmp_path / "topic-0.0123456789abcdef0123456789abcdef-delete"
    big = values(10, 100, 150)  # does not fit what is left of the active segment: this append rolls
    out = _race_inside_rename(monkeypatch, log, new_dir, lambda: log.append(make_batch(big)))
    assert "error" not in out, out.get("error")
    assert not out["finished_inside_window"], "the roll did not wait for the rename"
    assert not old_dir.exists()
    assert len(seg_names(new_dir)) == 2 and log.active_segment.log_path.parent == new_dir
    assert [v for _, v in read_all(log)] == written + big
    log.close()


def test_a_rename_right_after_a_roll_takes_the_new_segment_along(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A roll fsyncs the dir for its new segment outside the PathGuard: a rename may come right then, and must find
    the new segment in the list (it joins under the guard), or its paths stay stale and its first index entry is
    created by the old name."""
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=2000, index_interval_bytes=1))
    written = fill(log, 3)
    new_dir = tmp_path / "topic-0-moved"
    real_fsync = os.fsync

    def fsync_then_rename(fd: int) -> None:
        real_fsync(fd)
        if stat.S_ISDIR(os.fstat(fd).st_mode) and not new_dir.exists():
            log.rename_to(new_dir)  # the roll's dir fsync: the guard is free, the segment made

    monkeypatch.setattr(os, "fsync", fsync_then_rename)
    big = values(10, 100, 150)
    log.append(make_batch(big))  # rolls
    monkeypatch.undo()
    assert new_dir.exists() and log.active_segment.log_path.parent == new_dir
    more = fill(log, 3)  # index entries for the new segment: its index file is created by path
    assert [v for _, v in read_all(log)] == written + big + more
    assert len(seg_names(new_dir, ".index")) == len(log.segments()) >= 2
    log.close()


def test_an_index_load_inside_a_rename_window_reads_the_renamed_file(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch's lazy index load reads the file by path: inside a rename window it waits and reads the renamed
    file, instead of taking a missing file for an empty index (which the next append would then overwrite)."""
    log = Log.open(tmp_path / "topic-0", TP, LogConfig(segment_bytes=4000, index_interval_bytes=100))
    fill(log, 20)
    assert len(log.segments()) > 2
    index = log.segments()[0].offset_index  # a rolled segment's, as a fetch of older records loads it
    entries = index.entries()
    assert len(entries) >= 3
    index.forget()  # as a swap's copy or a restart leaves it: loaded again on first use
    out = _race_inside_rename(monkeypatch, log, tmp_path / "topic-0-moved", index.entries)
    assert "error" not in out, out.get("error")
    assert not out["finished_inside_window"], "the index load did not wait for the rename"
    assert out["result"] == entries
    log.close()
